# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Each VTEP's document from the fabric model: its peers derived, none written by hand.

The peers of a VNI on host H are every other VTEP that serves the VNI, sorted by address. For each pair (H, P),
H's port towards an address of P is the one on whose connected subnet the address is (the lab's hub), else the
one H's routes pick (the longest prefix; for a hand-written document, the port of its own peer entry for that
address), else H's only tunnel port. P is listed at the address it sends from towards H, which is the address of
its port towards H: the pair of addresses is the one where each side's port towards the other is the port of its
own address (the lowest of P's addresses when several fit). With one tunnel port each, that is P's only address
through H's only port.

Addresses are kept as integers: a fleet of a thousand VTEPs resolves its pairs by arithmetic, not by ipaddress
objects.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TunnelAddress:
    port: str
    ip: str
    value: int
    mask: int  # of the connected subnet; all ones when the address was given without a prefix length
    path: str  # where the user wrote it, such as fabric_vtep.tunnel_ports[0].local_ip

    def reaches(self, value: int) -> bool:
        """Whether `value` is on this address's connected subnet (not the address itself)."""
        return value != self.value and (value & self.mask) == (self.value & self.mask)


@dataclass(frozen=True)
class Route:
    network: int
    mask: int
    prefixlen: int
    via: str


@dataclass
class Vtep:
    """One VTEP of the fleet: its model (source "model", spec is fabric_vtep) or its hand-written document
    (source "vtep_config", spec is the document)."""

    host: str
    source: str
    backend: str
    spec: dict
    addresses: list[TunnelAddress]
    routes: list[Route] = field(default_factory=list)  # longest prefix first
    # hand-written documents: a peer's address -> the port this VTEP sends to it through
    sends_via: dict[int, str] = field(default_factory=dict)

    @property
    def root(self) -> str:
        return "fabric_vtep" if self.source == "model" else "vtep_config"

    @functools.cached_property
    def vni_index(self) -> dict[int, int]:
        """VNI -> index of its entry in spec's vnis (a derived document keeps that order). Worked out once: the
        fleet check looks it up for every VNI of every VTEP."""
        index: dict[int, int] = {}
        for i, entry in enumerate(self.spec["vnis"]):
            index.setdefault(entry["vni"], i)
        return index

    def route(self, value: int) -> Route | None:
        return next((r for r in self.routes if (value & r.mask) == r.network), None)

    def address_on(self, port: str) -> TunnelAddress | None:
        return next((a for a in self.addresses if a.port == port), None)


def address_value(address: str) -> int:
    return int(ipaddress.IPv4Address(address))


def from_model(host: str, spec: dict, backend: str) -> Vtep:
    """A VTEP of the model, from its fabric_vtep (already validated by model.fabric_vtep_problems)."""
    addresses = []
    for i, tunnel in enumerate(spec["tunnel_ports"]):
        interface = ipaddress.IPv4Interface(tunnel["local_ip"])
        addresses.append(
            TunnelAddress(
                tunnel["port"],
                str(interface.ip),
                int(interface.ip),
                int(interface.netmask),
                f"fabric_vtep.tunnel_ports[{i}].local_ip",
            )
        )
    routes = []
    for route in spec.get("routes", []):
        network = ipaddress.IPv4Network(route["to"])
        routes.append(Route(int(network.network_address), int(network.netmask), network.prefixlen, route["via"]))
    routes.sort(key=lambda r: -r.prefixlen)
    return Vtep(host, "model", backend, spec, addresses, routes)


def from_document(host: str, document: dict, backend: str) -> Vtep:
    """A VTEP with a hand-written document (already validated by the VTEP's own rules)."""
    addresses = [
        TunnelAddress(
            t["port"],
            str(ipaddress.IPv4Address(t["local_ip"])),
            address_value(t["local_ip"]),
            0xFFFFFFFF,  # a document's tunnel address has no prefix length: no connected subnet is known
            f"vtep_config.tunnel_ports[{i}].local_ip",
        )
        for i, t in enumerate(document.get("tunnel_ports", []))
    ]
    sends_via = {address_value(p["ip"]): p["via"] for entry in document["vnis"] for p in entry.get("peers", [])}
    return Vtep(host, "vtep_config", backend, document, addresses, sends_via=sends_via)


class Underlay:
    """Which port H sends through, and to which address of P, for every pair (H, P) that shares a VNI; a pair is
    resolved once, however many VNIs it shares."""

    def __init__(self):
        self._pairs: dict[tuple[str, str], tuple[int, str, str] | str] = {}
        self._by_address: dict[int, list[tuple[str, Vtep]] | None] = {}

    def by_address(self, vni: int, members: list[Vtep]) -> list[tuple[str, Vtep]] | None:
        """A VNI's VTEPs sorted by address, when each has one (then every VTEP with one tunnel port peers with
        them in this order, through that port); None when some VTEP has several."""
        if vni not in self._by_address:
            ordered = None
            if all(len(p.addresses) == 1 for p in members):
                ordered = [(p.addresses[0].ip, p) for p in sorted(members, key=lambda p: p.addresses[0].value)]
            self._by_address[vni] = ordered
        return self._by_address[vni]

    def peer(self, h: Vtep, p: Vtep) -> tuple[int, str, str] | str:
        """(P's address as an integer, as text, H's port towards it), or why none can be derived."""
        if len(h.addresses) == 1 and len(p.addresses) == 1:  # the common case: one port, one address each
            return p.addresses[0].value, p.addresses[0].ip, h.addresses[0].port
        key = (h.host, p.host)
        found = self._pairs.get(key)
        if found is None:
            found = self._pairs[key] = self._resolve(h, p)
        return found

    @staticmethod
    def _resolve(h: Vtep, p: Vtep) -> tuple[int, str, str] | str:
        """The pair of addresses (H's, P's) where each side's port towards the other's address is the one that
        address is on: H sends from the address P lists it by, and P from the one H lists. Lowest P address first
        when several pairs fit."""
        fitting = []
        for theirs in p.addresses:
            port, why = _port_towards(h, theirs.value, theirs.ip, p.host)
            if why:
                return why
            for mine in h.addresses:
                if mine.port != port:
                    continue
                back, why = _port_towards(p, mine.value, mine.ip, h.host)
                if why:
                    return why
                if back == theirs.port:
                    fitting.append((theirs.value, theirs.ip, port))
        if fitting:
            return min(fitting)
        return (
            f"no address pair fits: {h.host} sends to {p.host} from an address {p.host} does not send back to (or "
            f"knows no port for), given their tunnel ports' subnets and routes: make the routes of {h.host} and "
            f"{p.host} agree"
        )


def _port_towards(x: Vtep, value: int, ip: str, other: str) -> tuple[str | None, str | None]:
    """(X's port towards the address, None) or (None, why not): the port on whose connected subnet the address is,
    else X's routes (longest prefix; a hand-written document: the port of its peer entry for the address), else
    X's only tunnel port."""
    connected = {a.port for a in x.addresses if a.reaches(value)}
    if len(connected) > 1:
        return None, (
            f"the connected subnets of {x.host}'s {', '.join(sorted(connected))} overlap and each holds {other}'s "
            f"address {ip}, so the port towards {other} cannot be chosen; give the tunnel addresses subnets that "
            "do not overlap"
        )
    if connected:
        return connected.pop(), None
    if x.source == "model":
        route = x.route(value)
        if route is not None:
            return route.via, None
    elif value in x.sends_via:
        return x.sends_via[value], None
    if len(x.addresses) == 1:
        return x.addresses[0].port, None
    how = f"no route in {x.root}.routes covers it" if x.source == "model" else "no peer entry in vtep_config names it"
    ports = ", ".join(a.port for a in x.addresses)
    return None, f"{x.host} has several tunnel ports ({ports}), none on a subnet of {other}'s address {ip}, and {how}"


def document(h: Vtep, members: dict[int, list[Vtep]], vlan_modes: dict[int, str], underlay: Underlay):
    """H's VTEP document, and the problems of the pairs whose port cannot be derived: [(peer host, why)].

    Everything but the derived peers is the user's, in the user's order (so a document path such as
    vnis[1].trunks[0] is fabric_vtep's path too); a VNI's peers written by hand are kept as written."""
    spec = h.spec
    problems: list[tuple[str, str]] = []
    doc: dict = {"tunnel_ports": [{"port": a.port, "local_ip": a.ip} for a in h.addresses]}
    for key in ("fdb_aging", "fdb_size"):
        if key in spec:
            doc[key] = spec[key]
    vnis = []
    for entry in spec["vnis"]:
        vni = entry["vni"]
        out = {"vni": vni}
        if vni in vlan_modes:
            out["vlan_mode"] = vlan_modes[vni]
        for key in ("access_ports", "trunks"):
            if key in entry:
                out[key] = [dict(item) if isinstance(item, dict) else item for item in entry[key]]
        if "peers" in entry:
            out["peers"] = [dict(peer) for peer in entry["peers"]]
        elif len(h.addresses) == 1 and underlay.by_address(vni, members[vni]) is not None:
            port = h.addresses[0].port
            peers = [{"ip": ip, "via": port} for ip, p in underlay.by_address(vni, members[vni]) if p is not h]
            if peers:
                out["peers"] = peers
        else:
            peers = []
            for p in members.get(vni, ()):
                if p is h:
                    continue
                found = underlay.peer(h, p)
                if isinstance(found, str):
                    problems.append((p.host, found))
                else:
                    peers.append(found)
            peers.sort()
            if peers:
                out["peers"] = [{"ip": ip, "via": via} for _value, ip, via in peers]
        if "fdb" in entry:
            out["fdb"] = [dict(item) for item in entry["fdb"]]
        vnis.append(out)
    doc["vnis"] = vnis
    return doc, problems
