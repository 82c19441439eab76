# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The difference between what the host has and what the document asks, as steps: each one netlink change (or none:
"noop", a line of the report that a step before it does), with the words the report and --diff show.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import VXLAN_PORT
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_desired import DesiredVni
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_guards import (
    BRIDGE_GUARD,
    GUARD_TEXT,
    PORT_GUARD,
    Guard,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_host import HostState, Link, Remote, own_device


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
