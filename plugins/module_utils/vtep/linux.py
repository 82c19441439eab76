# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP configuration document realised with the Linux kernel's own VXLAN: the interop peer and baseline.

Per VNI the host gets a bridge ``xbr<vni>`` and a vxlan device ``xvx<vni>`` (VNI, UDP port 4789, local = the
tunnel port's local_ip, dev = the tunnel port, learning on, MTU = tunnel MTU - 50) enslaved to it together with
the VNI's access ports. BUM frames reach the peers by head-end replication: one all-zeros FDB entry per peer on the
vxlan device (``bridge fdb append 00:00:00:00:00:00 dev xvx<vni> dst <peer> via <tunnel port>``).

Learning, as the XDP VTEP does it: the bridge learns which port (an access port, or the vxlan device) a MAC is
behind, and the vxlan device learns which remote VTEP; both forget a MAC after the document's fdb_aging (the
bridge's ageing_time, the vxlan device's ageing). A unicast frame to a known MAC goes to that one place; anything
else is flooded. The document's static entries (`fdb`) are sticky static bridge entries (learning never moves
them): at the access port, or at the vxlan device together with a static entry there that names the peer
(``bridge fdb replace <mac> dev xvx<vni> dst <peer> via <tunnel port>``). The kernel drops a decapsulated frame
whose source MAC a static vxlan entry puts at another VTEP (the XDP VTEP forwards it, counted as static_conflict).

No frame from the overlay reaches this host's own IP stack: the host accepts packets for any of its addresses on any
interface, and its vxlan socket (UDP 4789, every address) decapsulates whatever reaches it, so a VXLAN packet that
an endpoint of one VNI sends to the host inside its frames would come out in another VNI. A bridge hands frames up
to the host in two ways: through the bridge device (broadcast, multicast, its own MAC), and, for the reserved
802.1 group addresses 01:80:c2:00:00:01-0f that it does not forward, through the port they came in on. So every
bridge gets a tc ingress filter that drops all it hands up (``xdpfleet_bridge``), and every port of a bridge
(the vxlan device, the access ports) one that drops those group addresses (``xdpfleet_port``): tiny BPF
programs built here from raw instructions, kept by their filters after the module exits, repaired when missing.
The bridges' own forwarding is untouched (ingress of the bridge device sees only what goes up to the host).

The names fit IFNAMSIZ for every 24-bit VNI (``xbr16777215`` is 11 characters) and are how the module recognises
its own devices; it also records them in a state file. Only the devices it makes are ever created or deleted; access
ports are enslaved and released, and brought up, never deleted; underlay addresses are checked, never added.

Flow of `deploy` (every step before `apply` only reads): `read_host` -> validate -> `check` (the Linux-specific
rules on the validated VtepConfig; it gives the desired VNIs) -> `plan` (steps: additions first, then removals) ->
`apply` -> the state file. `remove` plans and applies the removal of every device the module made.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import management as host_management
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.probe import BPF_EXIT, BPF_MOV64_IMM, bpf_insn
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import FDB_SIZE_DEFAULT, VXLAN_PORT

try:
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    HAS_PYROUTE2 = True
except ImportError:  # the module reports this with missing_required_lib
    HAS_PYROUTE2 = False

    class NetlinkError(OSError):  # placeholder so `except NetlinkError` stays valid
        pass


ZERO_MAC = "00:00:00:00:00:00"
# The guards: tc filters on the ingress of clsact (TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)), first there (prio 1).
TC_INGRESS = 0xFFFFFFF2
TCA_BPF_FLAG_ACT_DIRECT = 1
GUARD_PRIO = 1
GUARD_HANDLE = 1
BRIDGE_GUARD = "xdpfleet_bridge"
PORT_GUARD = "xdpfleet_port"
GUARD_TEXT = {
    BRIDGE_GUARD: "drops every frame the bridge hands up to this host",
    PORT_GUARD: "drops 01:80:c2:00:00:01-0f, which the bridge hands up to this host instead of forwarding",
}
BRIDGE_PREFIX = "xbr"
VXLAN_PREFIX = "xvx"
STATE_FILE = "linux_vtep.json"
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


class MissingLibrary(Exception):
    """A Python library the host needs is not installed (the module says how to get it)."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(name)


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


# --------------------------------------------------------------------------------------------------------------
# What the host has now


@dataclass(frozen=True)
class Guard:
    """One of this module's filters (by name) on a device's ingress, where it sits and how it runs."""

    name: str
    prio: int = GUARD_PRIO
    handle: int = GUARD_HANDLE
    direct_action: bool = True


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


def _nested(msg, *path):
    for name in path:
        if msg is None:
            return None
        msg = msg.get_attr(name)
    return msg


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


# --------------------------------------------------------------------------------------------------------------
# What the document asks for


@dataclass(frozen=True)
class DesiredVni:
    vni: int
    tunnel_port: str
    local_ip: str
    mtu: int
    access_ports: tuple[str, ...]
    peers: tuple[tuple[str, str], ...]  # (ip, via)
    fdb: tuple[vc.FdbEntry, ...]  # static entries, by MAC
    aging: int  # seconds a learned MAC lives, on the bridge and on the vxlan device

    @property
    def bridge(self) -> str:
        return bridge_name(self.vni)

    @property
    def vxlan(self) -> str:
        return vxlan_name(self.vni)

    def static_where(self, entry: vc.FdbEntry) -> str:
        """Where a static entry sends its MAC, in the words _static_entries() uses for what the host has."""
        return entry.port if entry.port is not None else f"remote {entry.remote} via {self.tunnel_port}"

    def report(self) -> dict:
        """The same shape as `report()` gives for what the host has."""
        return {
            "devices": {"bridge": self.bridge, "vxlan": self.vxlan},
            "members": sorted([self.vxlan, *self.access_ports]),
            "peers": [{"ip": ip, "via": via} for ip, via in sorted(self.peers, key=_ip_key)],
            "fdb": [
                {"mac": e.mac, "port": e.port} if e.port is not None else {"mac": e.mac, "remote": e.remote}
                for e in self.fdb
            ],
        }

    def record(self) -> dict:
        """What the state file keeps of this VNI."""
        return {
            **self.report(),
            "tunnel_port": self.tunnel_port,
            "local_ip": self.local_ip,
            "mtu": self.mtu,
            "fdb_aging": self.aging,
        }


def _ip_key(item) -> tuple:
    ip = item[0] if isinstance(item, tuple) else item
    return (ipaddress.ip_address(ip).version, int(ipaddress.ip_address(ip)))


def check(config: vc.VtepConfig, host: HostState, management: dict[str, str] | None = None) -> list[DesiredVni]:
    """The rules of the Linux realisation on top of validate(); raises LinuxVtepError listing every problem, each
    naming the item's path in the document. management: the interfaces the host is managed through, which no port
    may be (host/management.py: management_interfaces(); None: allowed)."""
    problems: list[str] = []
    tunnels = {t.port: t for t in config.tunnel_ports}
    for t in config.tunnel_ports:
        if t.port not in host.links:
            problems.append(f"{t.path}.port: no interface {t.port} on this host")
    addresses = {name: host.addresses.get(link.index, set()) for name, link in host.links.items()}
    problems += vc.tunnel_address_problems(config, addresses)
    problems += vc.management_port_problems(config, management or {})
    if config.fdb_size != FDB_SIZE_DEFAULT:
        problems.append(
            f"fdb_size: the Linux baseline cannot bound its learned MACs to {config.fdb_size} (each VNI's bridge "
            "and vxlan device learn into tables of their own, without a shared limit); leave fdb_size out"
        )
    desired: list[DesiredVni] = []
    for v in config.vnis:
        if v.trunks:
            problems.append(
                f"{v.path}.trunks: the Linux baseline needs bridge VLAN filtering (and 802.1Q) for trunk "
                "bindings, which it does not configure and this lab's kernel lacks; use access_ports"
            )
        first = v.first_peer()
        first_via = first.via if first else None
        for p in v.peers:
            if p.via not in tunnels:
                problems.append(f"{p.path}.via: {p.via} is not one of tunnel_ports")
            elif p.via != first_via:
                problems.append(
                    f"{p.path}.via: {p.via}, but peers[0] is via {first_via}: the Linux baseline has one "
                    "vxlan device per VNI with one local address, so all peers of a VNI go via one tunnel port"
                )
        for access in v.access_ports:
            port = access.port
            link = host.links.get(port)
            if link is None:
                problems.append(f"{access.path}: no interface {port} on this host")
                continue
            if own_device(port, link.kind) is not None:
                problems.append(f"{access.path}: {port} is a device this module makes")
            master = host.by_index(link.master) if link.master else None
            if master is not None and own_device(master.name, master.kind) is None:
                problems.append(
                    f"{access.path}: {port} is already a port of {master.name} "
                    f"({master.kind or 'unknown kind'}), which this module did not make"
                )
        for name, kind in ((bridge_name(v.vni), "bridge"), (vxlan_name(v.vni), "vxlan")):
            link = host.links.get(name)
            if link is not None and link.kind != kind:
                problems.append(f"{v.path}.vni: a device named {name} exists and is not a {kind}; remove or rename it")
        if not config.tunnel_ports:
            continue
        tunnel = tunnels.get(first_via, config.tunnel_ports[0])
        tunnel_link = host.links.get(tunnel.port)
        desired.append(
            DesiredVni(
                vni=v.vni,
                tunnel_port=tunnel.port,
                local_ip=tunnel.local_ip,
                mtu=(tunnel_link.mtu - vc.VXLAN_OVERHEAD) if tunnel_link else 0,
                access_ports=tuple(a.port for a in v.access_ports),
                peers=tuple((p.ip, p.via) for p in v.peers),
                fdb=v.fdb,
                aging=config.fdb_aging,
            )
        )
    if problems:
        message = "invalid VTEP configuration for the Linux baseline:\n" + "\n".join(f"- {x}" for x in problems)
        raise LinuxVtepError(problems, msg=message)
    return desired


# --------------------------------------------------------------------------------------------------------------
# The difference, as steps


@dataclass
class Step:
    vni: int | None
    text: str  # what a network engineer reads in `changes`, after "VNI <n>: " (or "host: ")
    op: str
    args: dict = field(default_factory=dict)
    before: str | None = None  # the item before the step, for --diff (None: it was not there)
    after: str | None = None  # the item after the step (None: it is gone)

    @property
    def scope(self) -> str:
        """What the step belongs to: its VNI, or the host (a guard left on a device that is in no VNI)."""
        return "host" if self.vni is None else f"VNI {self.vni}"

    @property
    def line(self) -> str:
        return f"{self.scope}: {self.text}"


def _added(vni: int | None, item: str, op: str, args: dict | None = None, text: str | None = None) -> Step:
    return Step(vni, text or f"+ {item}", op, args or {}, after=item)


def _removed(vni: int | None, item: str, op: str, args: dict | None = None, note: str = "") -> Step:
    return Step(vni, f"- {item}{note}", op, args or {}, before=item)


def _changed(vni: int, item: str, now: str, new: str, op: str, args: dict | None = None) -> Step:
    return Step(vni, f"~ {item} {now} -> {new}", op, args or {}, before=f"{item} {now}", after=f"{item} {new}")


def _vxlan_text(d: DesiredVni) -> str:
    return (
        f"local {d.local_ip}, dev {d.tunnel_port}, dstport {VXLAN_PORT}, MTU {d.mtu}, learning on, ageing {d.aging} s"
    )


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:g} s"


def _vxlan_changes(d: DesiredVni, link: Link, host: HostState) -> tuple[bool, list[tuple[str, str, str]]]:
    """(must re-create, [(attribute, now, wanted)]): VNI and dstport cannot change on a live vxlan device."""
    x = link.vxlan
    tunnel = host.links[d.tunnel_port]
    recreate = x.get("id") != d.vni or x.get("port") != VXLAN_PORT
    changes = []
    if x.get("local") != d.local_ip:
        changes.append(("local", str(x.get("local")), d.local_ip))
    if x.get("link") != tunnel.index:
        now = host.by_index(x.get("link") or 0)
        changes.append(("dev", now.name if now else "none", d.tunnel_port))
    if not x.get("learning"):
        changes.append(("learning", "off", "on"))
    if x.get("ageing") != d.aging:
        changes.append(("ageing", _seconds(x.get("ageing")), _seconds(d.aging)))
    if link.mtu != d.mtu:
        changes.append(("MTU", str(link.mtu), str(d.mtu)))
    if recreate:
        return True, [("VNI", str(x.get("id")), str(d.vni)), ("dstport", str(x.get("port")), str(VXLAN_PORT))]
    return False, changes


def plan(desired: list[DesiredVni], host: HostState) -> list[Step]:
    """Steps to go from `host` to `desired`: every addition and change first, then every removal (static entries
    before the ports they are at leave their bridge)."""
    adds: list[Step] = []
    static_removes: list[Step] = []
    removes: list[Step] = []
    wanted = {d.vni for d in desired}
    for d in sorted(desired, key=lambda d: d.vni):
        tunnel = host.links[d.tunnel_port]
        bridge = host.links.get(d.bridge)
        vx = host.links.get(d.vxlan)
        bridge_args = {"name": d.bridge, "ageing": d.aging}
        if bridge is None:
            adds.append(_added(d.vni, f"bridge {d.bridge} (ageing {d.aging} s)", "bridge_add", bridge_args))
        else:
            bridge_changes = []
            if bridge.mcast_snooping:
                bridge_changes.append(("multicast snooping", "on", "off"))
            if bridge.ageing_time != d.aging:
                bridge_changes.append(("ageing", _seconds(bridge.ageing_time), _seconds(d.aging)))
            for n, (attr, now, new) in enumerate(bridge_changes):  # one netlink change sets them all
                op = "bridge_set" if n == 0 else "noop"
                adds.append(_changed(d.vni, f"bridge {d.bridge} {attr}", now, new, op, bridge_args))
            if not bridge.up:
                adds.append(_changed(d.vni, f"bridge {d.bridge}", "down", "up", "up", {"name": d.bridge}))
        adds += _guard_steps(d.vni, d.bridge, bridge, BRIDGE_GUARD)
        vx_args = {
            "name": d.vxlan,
            "vni": d.vni,
            "local": d.local_ip,
            "link": d.tunnel_port,
            "mtu": d.mtu,
            "ageing": d.aging,
        }
        current_remotes: set[Remote] = set()
        recreate = False
        if vx is None:
            adds.append(_added(d.vni, f"vxlan {d.vxlan} ({_vxlan_text(d)})", "vxlan_add", vx_args))
        else:
            recreate, changes = _vxlan_changes(d, vx, host)
            if recreate:
                what = ", ".join(f"{a} {now} -> {new}" for a, now, new in changes)
                text = f"~ vxlan {d.vxlan} re-created ({what}; these cannot change in place): {_vxlan_text(d)}"
                was = ", ".join(f"{a} {now}" for a, now, _new in changes)
                adds.append(
                    Step(
                        d.vni,
                        text,
                        "vxlan_recreate",
                        vx_args,
                        before=f"vxlan {d.vxlan} ({was})",
                        after=f"vxlan {d.vxlan} ({_vxlan_text(d)})",
                    )
                )
            else:
                current_remotes = host.remotes.get(vx.index, set())
                for n, (attr, now, new) in enumerate(changes):  # one netlink change sets them all
                    op = "vxlan_set" if n == 0 else "noop"
                    adds.append(_changed(d.vni, f"vxlan {d.vxlan} {attr}", now, new, op, vx_args))
                if not vx.up:
                    adds.append(_changed(d.vni, f"vxlan {d.vxlan}", "down", "up", "up", {"name": d.vxlan}))
        adds += _guard_steps(d.vni, d.vxlan, None if recreate else vx, PORT_GUARD)
        if vx is None or recreate or vx.master != (bridge.index if bridge else -1):
            adds.append(
                _added(
                    d.vni,
                    f"vxlan {d.vxlan} in bridge {d.bridge}",
                    "enslave",
                    {"port": d.vxlan, "vni": d.vni},
                    text=f"+ vxlan {d.vxlan} into bridge {d.bridge}",
                )
            )
        elif vx.port_learning is False:
            adds.append(_port_learning(d.vni, d.vxlan))
        # access ports
        for port in d.access_ports:
            link = host.links[port]
            adds += _guard_steps(d.vni, port, link, PORT_GUARD)
            if bridge is None or link.master != bridge.index:
                adds.append(_added(d.vni, f"access port {port}", "enslave", {"port": port, "vni": d.vni}))
                continue
            if not link.up:
                adds.append(_changed(d.vni, f"access port {port}", "down", "up", "up", {"name": port}))
            if link.port_learning is False:
                adds.append(_port_learning(d.vni, port))
        if bridge is not None:
            for link in host.ports_of(bridge):
                if link.name != d.vxlan and link.name not in d.access_ports:
                    if own_device(link.name, link.kind) == d.vni:
                        continue  # a stray own vxlan under its own bridge is handled above
                    moved = next((o.vni for o in desired if link.name in o.access_ports), None)
                    if moved is None:
                        removes.append(_removed(d.vni, f"access port {link.name}", "release", {"port": link.name}))
                    else:  # enslaving it to its new bridge (an addition) moves it
                        removes.append(
                            _removed(d.vni, f"access port {link.name}", "noop", note=f" (moved to VNI {moved})")
                        )
        # peers
        for ip, via in d.peers:
            if not any(_remote_matches(r, ip, tunnel.index, d.vni) for r in current_remotes):
                args = {"vxlan": d.vxlan, "ip": ip, "via": via}
                adds.append(_added(d.vni, f"peer {ip} via {via}", "peer_add", args))
        for r in sorted(current_remotes, key=lambda r: (r.dst, r.ifindex)):
            if not any(_remote_matches(r, ip, tunnel.index, d.vni) for ip, _via in d.peers):
                removes.append(_removed(d.vni, f"peer {_remote_text(r, host)}", "peer_del", {"vxlan": d.vxlan, "r": r}))
        # static entries (a re-created vxlan device starts without any, and the bridge forgets its entries for it)
        current = _static_entries(bridge, None if recreate else vx, host, vx.index if recreate and vx else None)
        for entry in d.fdb:
            where, now = d.static_where(entry), current.get(entry.mac)
            if now == where:
                continue
            args = {
                "vni": d.vni,
                "mac": entry.mac,
                "port": entry.port or d.vxlan,
                "remote": entry.remote,
                "via": d.tunnel_port,
                "stale": _stale_remotes(entry, d, vx, host, recreate),
            }
            item = f"static MAC {entry.mac} at"
            if now is None:
                adds.append(_added(d.vni, f"{item} {where}", "static_set", args))
            else:
                adds.append(_changed(d.vni, item, now, where, "static_set", args))
        kept = {entry.mac for entry in d.fdb}
        for mac, now in current.items():
            if mac not in kept:
                args = _static_del_args(mac, bridge, vx, host)
                static_removes.append(_removed(d.vni, f"static MAC {mac} at {now}", "static_del", args))
    # VNIs this module made that the document no longer has
    stale: dict[int, dict[str, Link]] = {}
    for link in host.links.values():
        vni = own_device(link.name, link.kind)
        if vni is not None and vni not in wanted:
            stale.setdefault(vni, {})[link.kind] = link
    for vni in sorted(stale):
        devices = stale[vni]
        if "vxlan" in devices:
            for r in sorted(host.remotes.get(devices["vxlan"].index, set()), key=lambda r: (r.dst, r.ifindex)):
                removes.append(_removed(vni, f"peer {_remote_text(r, host)}", "noop"))
        for mac, now in _static_entries(devices.get("bridge"), devices.get("vxlan"), host).items():
            removes.append(_removed(vni, f"static MAC {mac} at {now}", "noop"))
        if "bridge" in devices:
            for link in host.ports_of(devices["bridge"]):
                if own_device(link.name, link.kind) is None:
                    moved = next((o.vni for o in desired if link.name in o.access_ports), None)
                    where = f" (moved to VNI {moved})" if moved is not None else ""
                    removes.append(_removed(vni, f"access port {link.name}", "noop", note=where))
        for kind in ("vxlan", "bridge"):
            if kind in devices:
                name = devices[kind].name
                removes.append(_removed(vni, f"{kind} {name}", "delete", {"name": name}))
    # guards on devices that are no longer a bridge or port of this module's (its stale devices go with their guards)
    guarded = {d.bridge for d in desired} | {d.vxlan for d in desired}
    guarded |= {port for d in desired for port in d.access_ports}
    for link in sorted(host.links.values(), key=lambda lk: lk.name):
        own = own_device(link.name, link.kind)
        if link.name in guarded or (own is not None and own not in wanted):
            continue  # guarded above, or deleted together with its guards
        master = host.by_index(link.master) if link.master else None
        removes += _guard_steps(own_device(master.name, master.kind) if master else None, link.name, link, None)
    return adds + static_removes + removes


def _guard_steps(vni: int | None, name: str, link: Link | None, wanted: str | None) -> list[Step]:
    """Steps that leave exactly the guard `wanted` (or none) on the ingress of device `name` (`link`: as the host has
    it, None when this run makes the device): any other filter of this module's there goes first."""
    steps = []
    for g in link.guards if link else []:
        if g != Guard(wanted or ""):
            steps.append(_removed(vni, f"filter {g.name} on {name}", "guard_del", {"name": name, "guard": g}))
    if wanted and (link is None or Guard(wanted) not in link.guards):
        item = f"filter {wanted} on {name} ({GUARD_TEXT[wanted]})"
        steps.append(_added(vni, item, "guard_set", {"name": name, "guard": wanted}))
    return steps


def _port_learning(vni: int, port: str) -> Step:
    return _changed(vni, f"bridge port {port} learning", "off", "on", "port_learning", {"port": port})


def _static_entries(
    bridge: Link | None, vx: Link | None, host: HostState, gone_port: int | None = None
) -> dict[str, str]:
    """A VNI's static entries as the host has them, by MAC: where each sends its MAC, in the words of
    DesiredVni.static_where ("acc100", "remote 198.51.100.130 via ul-a"), with what is odd about it in
    parentheses. `gone_port`: a port whose bridge entries do not count (a vxlan device about to be re-created)."""
    entries = {
        mac: e
        for mac, e in (host.bridge_statics.get(bridge.index, {}) if bridge else {}).items()
        if e.port != gone_port
    }
    remotes = host.vxlan_statics.get(vx.index, {}) if vx else {}
    out = {}
    for mac in sorted(set(entries) | set(remotes)):
        entry = entries.get(mac)
        dsts = ", ".join(_remote_text(r, host) for r in sorted(remotes.get(mac, ()), key=lambda r: (r.dst, r.ifindex)))
        if entry is None:
            where = f"remote {dsts} (no bridge entry)"
        elif vx is not None and entry.port == vx.index:
            where = f"remote {dsts}" if dsts else f"{vx.name} (no remote)"
        else:
            port = host.by_index(entry.port)
            where = port.name if port else f"ifindex {entry.port}"
            if dsts:
                where += f" (and remote {dsts} on {vx.name})"
        if entry is not None and not entry.sticky:
            where += " (not sticky)"
        out[mac] = where
    return out


def _stale_remotes(entry: vc.FdbEntry, d: DesiredVni, vx: Link | None, host: HostState, recreate: bool) -> list:
    """The vxlan device's static destinations for the entry's MAC that the entry does not want."""
    if vx is None or recreate:
        return []
    tunnel = host.links[d.tunnel_port].index
    found = host.vxlan_statics.get(vx.index, {}).get(entry.mac, set())
    return sorted(
        (r for r in found if entry.remote is None or not _remote_matches(r, entry.remote, tunnel, d.vni)),
        key=lambda r: (r.dst, r.ifindex),
    )


def _static_del_args(mac: str, bridge: Link | None, vx: Link | None, host: HostState) -> dict:
    entry = host.bridge_statics.get(bridge.index, {}).get(mac) if bridge else None
    remotes = host.vxlan_statics.get(vx.index, {}).get(mac, set()) if vx else set()
    return {
        "mac": mac,
        "bridge": bridge.name if bridge else None,
        "port": entry.port if entry else None,
        "vxlan": vx.name if vx else None,
        "stale": sorted(remotes, key=lambda r: (r.dst, r.ifindex)),
    }


def _remote_matches(r: Remote, ip: str, via_index: int, vni: int) -> bool:
    return r.dst == ip and r.ifindex == via_index and r.port in (None, VXLAN_PORT) and r.vni in (None, vni)


def _remote_text(r: Remote, host: HostState) -> str:
    text = r.dst
    if r.ifindex:
        via = host.by_index(r.ifindex)
        text += f" via {via.name if via else f'ifindex {r.ifindex}'}"
    if r.port not in (None, VXLAN_PORT):
        text += f" port {r.port}"
    if r.vni is not None:
        text += f" vni {r.vni}"
    return text


# --------------------------------------------------------------------------------------------------------------
# Applying the steps


def _index(ipr, name: str) -> int:
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise LinuxVtepError(f"{name}: the device disappeared while being configured")
    return found[0]


def _no_ipv6(name: str) -> None:
    """IPv6 off on a device the module made, before it comes up: otherwise the host gives it a link-local address and
    its own stack sends into the VNI (duplicate address detection, MLD reports, and router solicitations with no end:
    router_solicitations is -1 by default, every 4 s doubling up to an hour), frames the endpoints never asked for
    and a VTEP floods. A host without IPv6 (ipv6.disable=1) has no such setting and nothing to turn off."""
    path = f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6"
    if os.path.exists(path):
        with open(path, "w") as f:
            f.write("1")


def _vxlan_add(ipr, a: dict) -> None:
    ipr.link(
        "add",
        ifname=a["name"],
        kind="vxlan",
        vxlan_id=a["vni"],
        vxlan_port=VXLAN_PORT,
        vxlan_local=a["local"],
        vxlan_link=_index(ipr, a["link"]),
        vxlan_learning=1,
        vxlan_ageing=a["ageing"],
        mtu=a["mtu"],
    )  # down until it is a port of its bridge, with its guard (enslave brings it up): a vxlan device of its own
    # would hand every frame it decapsulates up to this host
    _no_ipv6(a["name"])


def _vxlan_fdb(ipr, command: str, vxlan: str, mac: str, r: Remote) -> None:
    """Add or delete one destination of a static entry (or of the all-zeros entry) on a vxlan device."""
    extra = {}
    if r.ifindex:
        extra["NDA_IFINDEX"] = r.ifindex
    if r.port is not None:
        extra["NDA_PORT"] = r.port
    if r.vni is not None:
        extra["NDA_VNI"] = r.vni
    ipr.fdb(
        command,
        ifindex=_index(ipr, vxlan),
        lladdr=mac,
        dst=r.dst,
        state=NUD_PERMANENT | NUD_NOARP,
        flags=NTF_SELF,
        **extra,
    )


def _netlink_code(exc: NetlinkError):
    """The errno a netlink request failed with."""
    return exc.code if hasattr(exc, "code") else exc.args[0]


def _static_set(ipr, a: dict) -> None:
    """A static entry: the vxlan device's destination first (for a remote), then the bridge entry that sends the
    MAC there; each replaces whatever the kernel had learned for the MAC."""
    for r in a["stale"]:
        _vxlan_fdb(ipr, "del", vxlan_name(a["vni"]), a["mac"], r)
    if a["remote"] is not None:
        remote = Remote(dst=a["remote"], ifindex=_index(ipr, a["via"]))
        _vxlan_fdb(ipr, "replace", vxlan_name(a["vni"]), a["mac"], remote)
    ipr.fdb(
        "replace",
        ifindex=_index(ipr, a["port"]),
        lladdr=a["mac"],
        master=_index(ipr, bridge_name(a["vni"])),
        state=NUD_NOARP,
        flags=NTF_MASTER | NTF_STICKY,
    )


def _static_del(ipr, a: dict) -> None:
    try:
        if a["port"] is not None:
            ipr.fdb("del", ifindex=a["port"], lladdr=a["mac"], master=_index(ipr, a["bridge"]), flags=NTF_MASTER)
    except NetlinkError as exc:
        if _netlink_code(exc) != errno.ENOENT:  # gone: its port left the bridge earlier in this run
            raise
    for r in a["stale"]:
        _vxlan_fdb(ipr, "del", a["vxlan"], a["mac"], r)


# BPF instructions for the guards (struct bpf_insn opcodes).
BPF_PROG_TYPE_SCHED_CLS = 3
BPF_MOV64_REG = 0xBF  # BPF_ALU64 | BPF_MOV | BPF_X
BPF_LD_ABS_W = 0x20  # BPF_LD | BPF_ABS | BPF_W: r0 = the 4 bytes at the offset, network order
BPF_LD_ABS_H = 0x28  # ... BPF_H: 2 bytes
BPF_JNE_IMM = 0x55  # BPF_JMP | BPF_JNE | BPF_K
BPF_JEQ_IMM = 0x15
BPF_JGT_IMM = 0x25
TC_ACT_UNSPEC, TC_ACT_SHOT = -1, 2


def guard_program(guard: str) -> bytes:
    """The guard's instructions. The bridge's drops everything; a port's drops frames to 01:80:c2:00:00:01-0f and
    leaves the rest to the device's other filters and the bridge (00, the bridge group address, is forwarded with STP
    off, as on the module's bridges, and so reaches the host only through the bridge device). At tc ingress the frame
    starts at its Ethernet header."""
    if guard == BRIDGE_GUARD:
        return bpf_insn(BPF_MOV64_IMM, dst=0, imm=TC_ACT_SHOT) + bpf_insn(BPF_EXIT)
    return b"".join(
        [
            bpf_insn(BPF_MOV64_REG, dst=6, src=1),  # LD_ABS reads the packet of the context in r6
            bpf_insn(BPF_LD_ABS_W, imm=0),
            bpf_insn(BPF_JNE_IMM, dst=0, off=5, imm=0x0180C200),
            bpf_insn(BPF_LD_ABS_H, imm=4),
            bpf_insn(BPF_JEQ_IMM, dst=0, off=3, imm=0),
            bpf_insn(BPF_JGT_IMM, dst=0, off=2, imm=0x0F),
            bpf_insn(BPF_MOV64_IMM, dst=0, imm=TC_ACT_SHOT),
            bpf_insn(BPF_EXIT),
            bpf_insn(BPF_MOV64_IMM, dst=0, imm=TC_ACT_UNSPEC),
            bpf_insn(BPF_EXIT),
        ]
    )


def _guard_set(ipr, name: str, guard: str) -> None:
    """The guard first on the device's ingress (clsact made when missing); the filter keeps the program loaded."""
    index = _index(ipr, name)
    try:
        ipr.tc("add", "clsact", index)
    except NetlinkError as exc:
        if _netlink_code(exc) != errno.EEXIST:
            raise
    fd = libbpf.prog_load(BPF_PROG_TYPE_SCHED_CLS, guard_program(guard), guard)
    try:
        ipr.tc(
            "add-filter",
            "bpf",
            index,
            GUARD_HANDLE,
            parent=TC_INGRESS,
            prio=GUARD_PRIO,
            fd=fd,
            name=guard,
            direct_action=True,
        )
    finally:
        os.close(fd)


def _run_step(ipr, step: Step) -> None:
    a = step.args
    if step.op == "bridge_add":
        ipr.link("add", ifname=a["name"], kind="bridge", br_mcast_snooping=0, br_ageing_time=a["ageing"] * USER_HZ)
        _no_ipv6(a["name"])
        ipr.link("set", index=_index(ipr, a["name"]), state="up")
    elif step.op == "bridge_set":
        index = _index(ipr, a["name"])
        ipr.link("set", index=index, kind="bridge", br_mcast_snooping=0, br_ageing_time=a["ageing"] * USER_HZ)
    elif step.op == "up":
        ipr.link("set", index=_index(ipr, a["name"]), state="up")
    elif step.op == "vxlan_add":
        _vxlan_add(ipr, a)
    elif step.op == "vxlan_recreate":
        ipr.link("del", index=_index(ipr, a["name"]))
        _vxlan_add(ipr, a)
    elif step.op == "vxlan_set":
        index = _index(ipr, a["name"])
        ipr.link(
            "set",
            index=index,
            kind="vxlan",
            vxlan_local=a["local"],
            vxlan_link=_index(ipr, a["link"]),
            vxlan_learning=1,
            vxlan_ageing=a["ageing"],
        )
        ipr.link("set", index=index, mtu=a["mtu"])
    elif step.op == "enslave":
        index = _index(ipr, a["port"])
        ipr.link("set", index=index, master=_index(ipr, bridge_name(a["vni"])))
        ipr.link("set", index=index, state="up")
    elif step.op == "release":
        ipr.link("set", index=_index(ipr, a["port"]), master=0)
    elif step.op == "port_learning":
        ipr.brport("set", index=_index(ipr, a["port"]), learning=1)
    elif step.op == "peer_add":
        _vxlan_fdb(ipr, "append", a["vxlan"], ZERO_MAC, Remote(dst=a["ip"], ifindex=_index(ipr, a["via"])))
    elif step.op == "peer_del":
        _vxlan_fdb(ipr, "del", a["vxlan"], ZERO_MAC, a["r"])
    elif step.op == "static_set":
        _static_set(ipr, a)
    elif step.op == "static_del":
        _static_del(ipr, a)
    elif step.op == "guard_set":
        _guard_set(ipr, a["name"], a["guard"])
    elif step.op == "guard_del":
        g = a["guard"]
        ipr.tc("del-filter", "bpf", _index(ipr, a["name"]), g.handle, parent=TC_INGRESS, prio=g.prio)
    elif step.op == "delete":
        found = ipr.link_lookup(ifname=a["name"])
        if found:
            ipr.link("del", index=found[0])
    elif step.op != "noop":
        raise ValueError(f"unknown step {step.op}")


def _failure(step: Step, exc: Exception) -> str:
    if isinstance(exc, NetlinkError):
        code = _netlink_code(exc)
        return f"{step.line}: netlink failed: {os.strerror(code) if isinstance(code, int) else exc}"
    return str(exc)


def apply(ipr, steps: list[Step]) -> None:
    """Run the steps in order; the first failure stops them (the steps before it stay done) and raises
    LinuxVtepError with every step of the run."""
    for step in steps:
        try:
            _run_step(ipr, step)
        except (NetlinkError, LinuxVtepError) as exc:
            raise LinuxVtepError(_failure(step, exc), changes=[s.line for s in steps]) from None


# --------------------------------------------------------------------------------------------------------------
# Reports and the state file


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
                for r in sorted(host.remotes.get(link.index, set()), key=lambda r: (_ip_key(r.dst), r.ifindex))
            ]
    for entry in result.values():
        bridge = host.links.get(entry["devices"].get("bridge", ""))
        vx = host.links.get(entry["devices"].get("vxlan", ""))
        statics = host.bridge_statics.get(bridge.index, {}) if bridge else {}
        dsts = host.vxlan_statics.get(vx.index, {}) if vx else {}
        for mac in sorted(statics):
            if vx is not None and statics[mac].port == vx.index:
                remote = min((r.dst for r in dsts.get(mac, ())), key=_ip_key, default=None)
                entry["fdb"].append({"mac": mac, "remote": remote})
            else:
                port = host.by_index(statics[mac].port)
                entry["fdb"].append({"mac": mac, "port": port.name if port else None})
    return dict(sorted(result.items(), key=lambda kv: int(kv[0])))


def check_state_dir(state_dir: str) -> None:
    try:
        files.check_trusted("state_dir", state_dir)
    except files.UntrustedPath as exc:
        raise LinuxVtepError([str(exc)]) from None


def record_devices(state_dir: str, vnis: dict) -> None:
    """Keep the record of the devices made, rewritten whole when it differs (an unreadable one is replaced)."""
    store = records.Record(state_dir, STATE_FILE)
    try:
        held = store.load() or {}
    except records.RecordError:
        held = {}
    if held.get("vnis") != vnis:
        store.save({"version": 1, "vnis": vnis})


# --------------------------------------------------------------------------------------------------------------
# The module's two entry points


def changes(steps: list[Step]) -> Changes:
    """The steps as the module reports them: one line each, and the items before and after for --diff."""
    out = Changes("linux_vtep")
    for s in steps:
        out.add(
            s.line,
            before=None if s.before is None else f"{s.scope}: {s.before}",
            after=None if s.after is None else f"{s.scope}: {s.after}",
        )
    return out


def deploy(ipr, document, state_dir: str, check_mode: bool, allow_management_port: bool) -> dict:
    """Make the host match `document` (state=present): validate, check, plan, apply (not in check mode) and record
    the devices. Returns the module result: changed, changes, diff, vnis (what the host has afterwards; in check
    mode, what it would have) and state_file.

    Raises MissingLibrary, or LinuxVtepError: a refusal before anything changed, or a failure part-way."""
    check_state_dir(state_dir)
    host = read_host(ipr)
    try:
        config = vc.validate(document, host.interface_facts())
    except vc.ConfigError as exc:
        raise LinuxVtepError(exc.problems, msg=str(exc)) from None
    except ImportError:
        raise MissingLibrary("jsonschema") from None
    if allow_management_port:
        management = None
    else:
        management = host_management.management_interfaces(ipr, os.environ, host_management.interface_addresses(ipr))
    desired = check(config, host, management)
    steps = plan(desired, host)
    if steps and not check_mode:
        apply(ipr, steps)
        host = read_host(ipr)
    if check_mode:
        vnis = {str(d.vni): d.report() for d in desired}
    else:
        vnis = report(host)
        record_devices(state_dir, {str(d.vni): d.record() for d in desired})
    return {**changes(steps).result(), "vnis": vnis, "state_file": os.path.join(state_dir, STATE_FILE)}


def remove(ipr, state_dir: str, check_mode: bool) -> dict:
    """Remove every device this module made, recognised by name and kind, and only those, and its state file
    (state=absent). Returns the module result as deploy() does. Raises LinuxVtepError on a failure part-way."""
    check_state_dir(state_dir)
    steps = plan([], read_host(ipr))
    if not check_mode:
        if steps:
            apply(ipr, steps)
        records.Record(state_dir, STATE_FILE).remove()
    return {**changes(steps).result(), "vnis": {}, "state_file": os.path.join(state_dir, STATE_FILE)}


def open_ipr():
    return IPRoute()
