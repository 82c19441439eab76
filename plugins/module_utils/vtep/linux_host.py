# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the host has, as the Linux VTEP reads it through netlink: links (its own bridges and vxlan devices known by
name and kind), addresses, the vxlan devices' remotes, the static FDB entries and the guards; and the report of it
per VNI. Also the error every part of the Linux VTEP raises.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_guards import (
    GUARD_TEXT,
    TC_INGRESS,
    TCA_BPF_FLAG_ACT_DIRECT,
    Guard,
)

ZERO_MAC = "00:00:00:00:00:00"
BRIDGE_PREFIX = "xbr"
VXLAN_PREFIX = "xvx"
IFF_UP = 0x1
NUD_NOARP = 0x40  # a static entry (on a bridge: forwarded to its port, never aged)
NUD_PERMANENT = 0x80  # on a bridge: the bridge's own address; on a vxlan device: static, as NUD_NOARP
NTF_SELF = 0x02
NTF_MASTER = 0x04
NTF_STICKY = 0x40  # a bridge entry that learning never moves to another port
USER_HZ = 100  # the bridge's ageing_time is in clock ticks of 1/USER_HZ seconds

_OWN_NAME = re.compile(rf"({BRIDGE_PREFIX}|{VXLAN_PREFIX})([1-9][0-9]{{0,7}})")


class LinuxVtepError(Exception):
    """A refusal before anything changed (problems: each naming the field), or a netlink failure part-way through
    a run (changes: that run's steps, those before the failure done)."""

    def __init__(self, problems: list[str] | str, msg: str | None = None, changes: list[str] | None = None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.changes = changes
        super().__init__(msg or "\n".join(self.problems))

    def result(self) -> dict:
        """What the failed module reports besides the message."""
        if self.changes is not None:
            return {"changed": True, "changes": self.changes}
        return {"changed": False, "problems": self.problems}


def bridge_name(vni: int) -> str:
    return f"{BRIDGE_PREFIX}{vni}"


def vxlan_name(vni: int) -> str:
    return f"{VXLAN_PREFIX}{vni}"


def own_device(name: str, kind: str | None) -> int | None:
    """The VNI of a device this module makes (by name and kind), else None."""
    m = _OWN_NAME.fullmatch(name)
    if not m:
        return None
    want = "bridge" if m.group(1) == BRIDGE_PREFIX else "vxlan"
    return int(m.group(2)) if kind == want else None


@dataclass
class Link:
    name: str
    index: int
    kind: str | None
    mtu: int
    mac: str | None
    up: bool
    master: int  # ifindex of the master device, 0 when none
    vxlan: dict = field(default_factory=dict)  # id, port, local, link, learning, ageing (seconds)
    mcast_snooping: int | None = None  # bridges
    ageing_time: float | None = None  # bridges: seconds a learned MAC lives
    port_learning: bool | None = None  # bridge ports: learning on the port; None: not a bridge port
    guards: list[Guard] = field(default_factory=list)  # this module's tc filters on the device's ingress


@dataclass(frozen=True)
class Remote:
    """One destination of a vxlan device's all-zeros FDB entry, with the attributes the kernel reports."""

    dst: str
    ifindex: int = 0  # NDA_IFINDEX (`via`), 0 when not given
    port: int | None = None  # NDA_PORT, only reported when it differs from the device's dstport
    vni: int | None = None  # NDA_VNI, only reported when it differs from the device's VNI


@dataclass(frozen=True)
class BridgeStatic:
    """A static entry of a bridge's FDB: the MAC forwarded to one port."""

    port: int  # ifindex
    sticky: bool


@dataclass
class HostState:
    links: dict[str, Link]
    addresses: dict[int, set[str]]  # ifindex -> IPv4 addresses
    remotes: dict[int, set[Remote]]  # vxlan ifindex -> all-zeros FDB destinations
    bridge_statics: dict[int, dict[str, BridgeStatic]] = field(default_factory=dict)  # bridge ifindex -> {MAC: ...}
    vxlan_statics: dict[int, dict[str, set[Remote]]] = field(default_factory=dict)  # vxlan ifindex -> {MAC: dsts}

    def by_index(self, index: int) -> Link | None:
        return next((lk for lk in self.links.values() if lk.index == index), None)

    def ports_of(self, bridge: Link) -> list[Link]:
        return sorted((lk for lk in self.links.values() if lk.master == bridge.index), key=lambda lk: lk.name)

    def interface_facts(self) -> dict[str, vc.InterfaceFacts]:
        return {n: vc.InterfaceFacts(ifindex=lk.index, mtu=lk.mtu, mac=lk.mac or "") for n, lk in self.links.items()}


def read_host(ipr) -> HostState:
    links: dict[str, Link] = {}
    for msg in ipr.get_links():
        info = msg.get_attr("IFLA_LINKINFO")
        kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
        data = info.get_attr("IFLA_INFO_DATA") if info is not None else None
        link = Link(
            name=msg.get_attr("IFLA_IFNAME"),
            index=msg["index"],
            kind=kind,
            mtu=msg.get_attr("IFLA_MTU"),
            mac=msg.get_attr("IFLA_ADDRESS"),
            up=bool(msg["flags"] & IFF_UP),
            master=msg.get_attr("IFLA_MASTER") or 0,
        )
        if kind == "vxlan" and data is not None:
            link.vxlan = {
                "id": data.get_attr("IFLA_VXLAN_ID"),
                "port": data.get_attr("IFLA_VXLAN_PORT"),
                "local": data.get_attr("IFLA_VXLAN_LOCAL"),
                "link": data.get_attr("IFLA_VXLAN_LINK") or 0,
                "learning": data.get_attr("IFLA_VXLAN_LEARNING"),
                "ageing": data.get_attr("IFLA_VXLAN_AGEING"),
            }
        elif kind == "bridge" and data is not None:
            link.mcast_snooping = data.get_attr("IFLA_BR_MCAST_SNOOPING")
            ageing = data.get_attr("IFLA_BR_AGEING_TIME")
            link.ageing_time = None if ageing is None else ageing / USER_HZ
        if info is not None and info.get_attr("IFLA_INFO_SLAVE_KIND") == "bridge":
            port = info.get_attr("IFLA_INFO_SLAVE_DATA")
            learning = port.get_attr("IFLA_BRPORT_LEARNING") if port is not None else None
            link.port_learning = None if learning is None else bool(learning)
        links[link.name] = link
    by_index = {lk.index: lk for lk in links.values()}
    for index in sorted({q["index"] for q in ipr.get_qdiscs() if q.get_attr("TCA_KIND") == "clsact"} & set(by_index)):
        for msg in ipr.get_filters(index=index, parent=TC_INGRESS):
            options = msg.get_attr("TCA_OPTIONS") if msg.get_attr("TCA_KIND") == "bpf" else None
            name = options.get_attr("TCA_BPF_NAME") if options is not None else None
            if name in GUARD_TEXT:
                direct = bool((options.get_attr("TCA_BPF_FLAGS") or 0) & TCA_BPF_FLAG_ACT_DIRECT)
                by_index[index].guards.append(Guard(name, msg["info"] >> 16, msg["handle"], direct))
    addresses: dict[int, set[str]] = {}
    for msg in ipr.get_addr(family=socket.AF_INET):
        addresses.setdefault(msg["index"], set()).add(msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS"))
    vxlans = {lk.index for lk in links.values() if lk.kind == "vxlan"}
    bridges = {lk.index for lk in links.values() if lk.kind == "bridge"}
    remotes: dict[int, set[Remote]] = {i: set() for i in vxlans}
    bridge_statics: dict[int, dict[str, BridgeStatic]] = {i: {} for i in bridges}
    vxlan_statics: dict[int, dict[str, set[Remote]]] = {i: {} for i in vxlans}
    # Dump everything and filter here: pyroute2's ifindex filter also matches NDA_IFINDEX (an entry's `via`).
    # Learned entries (neither NUD_NOARP nor NUD_PERMANENT) are the kernel's business: never read, never touched.
    for msg in ipr.fdb("dump"):
        mac, master, state = msg.get_attr("NDA_LLADDR"), msg.get_attr("NDA_MASTER"), msg["state"]
        if master in bridges:
            if state & NUD_NOARP and not state & NUD_PERMANENT:  # NUD_PERMANENT: the bridge's own addresses
                sticky = bool(msg["flags"] & NTF_STICKY)
                bridge_statics[master][mac] = BridgeStatic(port=msg["ifindex"], sticky=sticky)
            continue
        if msg["ifindex"] not in vxlans or master is not None or not msg.get_attr("NDA_DST"):
            continue
        remote = Remote(
            dst=msg.get_attr("NDA_DST"),
            ifindex=msg.get_attr("NDA_IFINDEX") or 0,
            port=msg.get_attr("NDA_PORT"),
            vni=msg.get_attr("NDA_VNI"),
        )
        if mac == ZERO_MAC:
            remotes[msg["ifindex"]].add(remote)
        elif state & (NUD_NOARP | NUD_PERMANENT):
            vxlan_statics[msg["ifindex"]].setdefault(mac, set()).add(remote)
    return HostState(links, addresses, remotes, bridge_statics, vxlan_statics)


def ip_key(item) -> tuple:
    ip = item[0] if isinstance(item, tuple) else item
    return (ipaddress.ip_address(ip).version, int(ipaddress.ip_address(ip)))


def report(host: HostState) -> dict[str, dict]:
    """Per VNI, what the host has now (its devices, bridge members, peers and static entries), keyed by the VNI as
    a string."""
    result: dict[str, dict] = {}
    for link in sorted(host.links.values(), key=lambda lk: lk.name):
        vni = own_device(link.name, link.kind)
        if vni is None:
            continue
        entry = result.setdefault(str(vni), {"devices": {}, "members": [], "peers": [], "fdb": []})
        entry["devices"][link.kind] = link.name
        if link.kind == "bridge":
            entry["members"] = [p.name for p in host.ports_of(link)]
        else:
            entry["peers"] = [
                {"ip": r.dst, "via": (host.by_index(r.ifindex).name if host.by_index(r.ifindex) else None)}
                for r in sorted(host.remotes.get(link.index, set()), key=lambda r: (ip_key(r.dst), r.ifindex))
            ]
    for entry in result.values():
        bridge = host.links.get(entry["devices"].get("bridge", ""))
        vx = host.links.get(entry["devices"].get("vxlan", ""))
        statics = host.bridge_statics.get(bridge.index, {}) if bridge else {}
        dsts = host.vxlan_statics.get(vx.index, {}) if vx else {}
        for mac in sorted(statics):
            if vx is not None and statics[mac].port == vx.index:
                remote = min((r.dst for r in dsts.get(mac, ())), key=ip_key, default=None)
                entry["fdb"].append({"mac": mac, "remote": remote})
            else:
                port = host.by_index(statics[mac].port)
                entry["fdb"].append({"mac": mac, "port": port.name if port else None})
    return dict(sorted(result.items(), key=lambda kv: int(kv[0])))
