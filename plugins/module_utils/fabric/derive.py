# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Each VTEP's document from the fabric model: its peers derived, none written by hand.

The peers of a VNI on host H are every other VTEP that serves the VNI, sorted by address. For each pair (H, P):
when a tunnel port of H and an address of P share H's connected subnet, H sends through that port to that address
(the lab's hub); otherwise H's routes (the longest prefix) or H's only tunnel port pick the port, and P's address
is the one P sends from towards H: its only one, the one its routes pick, or, for a hand-written document, the
local address of the port its own peer entry for H goes through.

Addresses are kept as integers: a fleet of a thousand VTEPs resolves its pairs by arithmetic, not by ipaddress
objects.
"""

from __future__ import annotations

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
        shared = {(mine.port, theirs) for mine in h.addresses for theirs in p.addresses if mine.reaches(theirs.value)}
        if len({port for port, _ in shared}) > 1:
            ports = ", ".join(sorted({port for port, _ in shared}))
            return (
                f"the connected subnets of {ports} overlap and each holds an address of {p.host}, so the port "
                f"towards {p.host} cannot be chosen; give the tunnel addresses subnets that do not overlap"
            )
        if shared:
            port, theirs = min(shared, key=lambda pair: pair[1].value)
            return theirs.value, theirs.ip, port
        theirs = _source_towards(p, h)
        if isinstance(theirs, str):
            return theirs
        if len(h.addresses) == 1:
            return theirs.value, theirs.ip, h.addresses[0].port
        route = h.route(theirs.value)
        if route is None:
            return (
                f"{h.host} has several tunnel ports ({', '.join(a.port for a in h.addresses)}), none on a subnet of "
                f"{p.host}'s address {theirs.ip}, and no route in {h.root}.routes covers it: add one"
            )
        return theirs.value, theirs.ip, route.via


def _source_towards(p: Vtep, h: Vtep) -> TunnelAddress | str:
    """The address P sends from towards H: its only one, the one its routes pick, or (a hand-written document) the
    local address of the port its own peer entry for H goes through."""
    if len(p.addresses) == 1:
        return p.addresses[0]
    for mine in h.addresses:
        if p.source == "model":
            route = p.route(mine.value)
            port = route.via if route else None
        else:
            port = p.sends_via.get(mine.value)
        if port is not None and p.address_on(port) is not None:
            return p.address_on(port)
    how = "no route in fabric_vtep.routes" if p.source == "model" else "no peer entry in vtep_config"
    return (
        f"{p.host} has several tunnel ports ({', '.join(a.port for a in p.addresses)}) and {how} covers "
        f"{h.host}'s tunnel address, so the address {p.host} sends from towards {h.host} is unknown"
    )


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
                out["peers"] = [{"ip": ip, "via": via} for _, ip, via in peers]
        if "fdb" in entry:
            out["fdb"] = [dict(item) for item in entry["fdb"]]
        vnis.append(out)
    doc["vnis"] = vnis
    return doc, problems
