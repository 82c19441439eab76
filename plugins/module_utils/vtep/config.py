# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP configuration document: its JSON Schema, the checks a schema cannot express, and the validated model.

One document per host. Tunnel ports carry VXLAN; each VNI lists its local members (fixed-VNI access ports, or
VLAN-aware trunk bindings) and its remote peers:

    vlan_mode: translate                      # the default; or preserve, also per VNI
    fdb_aging: 300                            # seconds a learned MAC lives without a frame from it
    fdb_size: 65536                           # learned MACs, all VNIs together (an LRU table)
    tunnel_ports:
      - {port: uplink0, local_ip: 198.51.100.129}
    vnis:
      - vni: 100
        access_ports: [acc100]
        trunks: [{port: trunk0, vid: 10}]
        peers:
          - {ip: 198.51.100.130, via: uplink0}  # next-hop MAC from the neighbour table
          - {ip: 198.51.100.134, via: uplink0, mac: "02:00:00:00:01:34"}
        fdb:                                    # static entries: never aged, never overridden by learning
          - {mac: "02:00:00:00:64:01", port: acc100}
          - {mac: "02:00:00:00:64:02", remote: 198.51.100.130}

VLAN handling (vlan_mode, per VTEP or per VNI): `translate` removes a trunk's tag once it selected the VNI, the
tunnelled frame carries no tag, and a frame leaving through a trunk gets that trunk's VID for its VNI; so a VNI may
mix access ports and trunks, and trunks may carry one VNI on different VIDs. An access port carries frames as they
are, tags included (the tags are payload, as on an 802.1Q tunnel port): a tagged frame from an access port leaves a
trunk with the trunk's VID outside its own tags. `preserve` keeps the tag inside the tunnelled frame:
a VNI has one kind of local port and one VID on all its trunks.

validate() returns a VtepConfig or raises ConfigError with every problem found, each naming the field
(a JSON path such as vnis[0].trunks[1].vid) and the rule it breaks. It runs in two passes: the JSON Schema
(shape, types, ranges, unknown keys), then, only when the shape is right, the rules a schema cannot express
(duplicates, one role per port, preserve mode's one-kind-per-VNI and one-VID-per-VNI rules, peers, static FDB
entries, interfaces that exist, MTU, data plane limits). validate() does no I/O: the caller gathers the host's
InterfaceFacts.

The underlay is IPv4 only (the data plane writes a 50-byte Ethernet/IPv4/UDP/VXLAN outer header); IPv6 tunnel
addresses are rejected with a message saying so.
"""

from __future__ import annotations

import difflib
import functools
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import schema as schema_words
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.names import IFNAME_RULE
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import (
    FDB_AGING_DEFAULT,
    FDB_AGING_MAX,
    FDB_SIZE_DEFAULT,
    FDB_SIZE_MAX,
    FDB_SIZE_MIN,
    VTEP_MAX_IFINDEX,
    VTEP_MAX_MEMBERS,
    VTEP_MAX_PEERS,
    VTEP_MAX_PORT_VNIS,
    VTEP_MAX_PORTS,
    VTEP_MAX_STATIC_FDB,
    VTEP_MAX_VLAN_BINDINGS,
    VTEP_MAX_VNIS,
    VXLAN_OVERHEAD,
)

VLAN_TAG_LEN = 4
VNI_MIN, VNI_MAX = 1, 16777215
VID_MIN, VID_MAX = 1, 4094
VLAN_MODES = ("translate", "preserve")


class ConfigError(ValueError):
    """The document breaks one or more rules; .problems lists them, each starting with the field's path."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid VTEP configuration:\n" + "\n".join(f"- {p}" for p in problems))


# Every item of the model knows where it is in the document (`path`, such as "vnis[2].peers[0]"), so that a
# problem found after validation (a neighbour that does not answer, a rule of the Linux baseline, a map the kernel
# refuses) names the entry the user wrote, in the document's own order. The path is not part of an item's value:
# the same configuration written in another order is the same model. Items built by hand have no path ("").


@dataclass(frozen=True)
class TunnelPort:
    port: str
    local_ip: str
    path: str = field(default="", compare=False)


@dataclass(frozen=True)
class AccessPort:
    port: str
    path: str = field(default="", compare=False)


@dataclass(frozen=True)
class TrunkBinding:
    port: str
    vid: int
    path: str = field(default="", compare=False)


@dataclass(frozen=True)
class Peer:
    ip: str
    via: str
    mac: str | None  # None: resolve from the neighbour table on the host
    path: str = field(default="", compare=False)


@dataclass(frozen=True)
class FdbEntry:
    """A static FDB entry: the MAC is behind a local port of the VNI (port) or behind a peer (remote)."""

    mac: str
    port: str | None
    remote: str | None
    path: str = field(default="", compare=False)

    @property
    def where(self) -> str:
        return self.port if self.port is not None else f"remote {self.remote}"


@dataclass(frozen=True)
class Vni:
    vni: int
    access_ports: tuple[AccessPort, ...]
    trunks: tuple[TrunkBinding, ...]
    peers: tuple[Peer, ...]
    path: str = field(default="", compare=False)
    vlan_mode: str = "translate"
    fdb: tuple[FdbEntry, ...] = ()

    def first_peer(self) -> Peer | None:
        """The peer listed first in the document (the model sorts peers by via and address)."""
        return next((p for p in self.peers if p.path == f"{self.path}.peers[0]"), None)


@dataclass(frozen=True)
class VtepConfig:
    tunnel_ports: tuple[TunnelPort, ...]
    vnis: tuple[Vni, ...]
    fdb_aging: int = FDB_AGING_DEFAULT
    fdb_size: int = FDB_SIZE_DEFAULT

    def ports(self) -> list[str]:
        """Every port the configuration uses (tunnel, access and trunk), sorted by name, each once."""
        names = {t.port for t in self.tunnel_ports}
        for vni in self.vnis:
            names.update(a.port for a in vni.access_ports)
            names.update(t.port for t in vni.trunks)
        return sorted(names)


@dataclass(frozen=True)
class InterfaceFacts:
    """What validation needs to know of a host interface."""

    ifindex: int
    mtu: int
    mac: str


# --- The JSON Schema --------------------------------------------------------------------------------------------
# Each leaf carries a `title` (what it is) and a `description` (its rule in plain words); error messages quote them.

_IFNAME = {
    "title": "interface name",
    "description": IFNAME_RULE,
    "type": "string",
    "format": "ifname",  # common/schema.py's format checker applies the kernel's rules (names.ifname_problem)
}
_IPV4 = {
    "title": "IPv4 address",
    "description": "dotted quad such as 198.51.100.1; IPv6 underlay is not supported yet",
    "type": "string",
    "format": "ipv4",
}
_MAC = {
    "title": "MAC address",
    "description": "six hex octets separated by ':', such as 02:00:00:00:01:34",
    "type": "string",
    "pattern": r"^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$",
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://xdpfleet.invalid/schemas/vtep-config.json",
    "title": "VTEP configuration",
    "description": "a document has vnis and optionally tunnel_ports, vlan_mode, fdb_aging and fdb_size",
    "type": "object",
    "additionalProperties": False,
    "required": ["vnis"],
    "properties": {
        "vlan_mode": {"$ref": "#/$defs/vlan_mode"},
        "fdb_aging": {
            "title": "FDB aging time",
            "description": f"seconds a learned MAC stays without a frame from it, 1..{FDB_AGING_MAX}",
            "type": "integer",
            "minimum": 1,
            "maximum": FDB_AGING_MAX,
        },
        "fdb_size": {
            "title": "FDB size",
            "description": f"learned MACs of all VNIs together, {FDB_SIZE_MIN}..{FDB_SIZE_MAX}; the least recently "
            "seen make room",
            "type": "integer",
            "minimum": FDB_SIZE_MIN,
            "maximum": FDB_SIZE_MAX,
        },
        "tunnel_ports": {
            "title": "tunnel ports",
            "description": "the VXLAN underlay ports, each with its local IPv4 address",
            "type": "array",
            "maxItems": VTEP_MAX_PORTS,
            "items": {"$ref": "#/$defs/tunnel_port"},
        },
        "vnis": {
            "title": "VNIs",
            "description": f"1 to {VTEP_MAX_VNIS} VNIs, the data plane's VTEP_MAX_VNIS",
            "type": "array",
            "minItems": 1,
            "maxItems": VTEP_MAX_VNIS,
            "items": {"$ref": "#/$defs/vni"},
        },
    },
    "$defs": {
        "ifname": _IFNAME,
        "vlan_mode": {
            "title": "VLAN mode",
            "description": "translate (a trunk's tag selects the VNI and is removed; the default) or preserve (the "
            "tag stays inside the tunnelled frame)",
            "enum": list(VLAN_MODES),
        },
        "fdb_entry": {
            "title": "static FDB entry",
            "description": "a static FDB entry has a mac and either a port (a local port of the VNI) or a remote "
            "(a peer of the VNI)",
            "type": "object",
            "additionalProperties": False,
            "required": ["mac"],
            "properties": {
                "mac": {"$ref": "#/$defs/mac"},
                "port": {"$ref": "#/$defs/ifname"},
                "remote": {"$ref": "#/$defs/ipv4"},
            },
        },
        "ipv4": _IPV4,
        "mac": _MAC,
        "tunnel_port": {
            "title": "tunnel port",
            "description": "a tunnel port has a port and a local_ip",
            "type": "object",
            "additionalProperties": False,
            "required": ["port", "local_ip"],
            "properties": {
                "port": {"$ref": "#/$defs/ifname"},
                "local_ip": {"$ref": "#/$defs/ipv4"},
            },
        },
        "trunk": {
            "title": "trunk binding",
            "description": "a trunk binding has a port and a vid",
            "type": "object",
            "additionalProperties": False,
            "required": ["port", "vid"],
            "properties": {
                "port": {"$ref": "#/$defs/ifname"},
                "vid": {
                    "title": "VID",
                    "description": f"VID {VID_MIN}..{VID_MAX}",
                    "type": "integer",
                    "minimum": VID_MIN,
                    "maximum": VID_MAX,
                },
            },
        },
        "peer": {
            "title": "peer",
            "description": "a peer has an ip and a via (tunnel port), and optionally the next-hop mac",
            "type": "object",
            "additionalProperties": False,
            "required": ["ip", "via"],
            "properties": {
                "ip": {"$ref": "#/$defs/ipv4"},
                "via": {"$ref": "#/$defs/ifname"},
                "mac": {"$ref": "#/$defs/mac"},
            },
        },
        "vni": {
            "title": "VNI entry",
            "description": "a VNI entry has a vni and optionally access_ports, trunks, peers, fdb and vlan_mode",
            "type": "object",
            "additionalProperties": False,
            "required": ["vni"],
            "properties": {
                "vni": {
                    "title": "VNI",
                    "description": f"VNI {VNI_MIN}..{VNI_MAX}",
                    "type": "integer",
                    "minimum": VNI_MIN,
                    "maximum": VNI_MAX,
                },
                "access_ports": {
                    "title": "access ports",
                    "description": "fixed-VNI ports of this VNI",
                    "type": "array",
                    "items": {"$ref": "#/$defs/ifname"},
                },
                "trunks": {
                    "title": "trunk bindings",
                    "description": "VLAN-aware ports of this VNI, each with the VID that selects it",
                    "type": "array",
                    "items": {"$ref": "#/$defs/trunk"},
                },
                "peers": {
                    "title": "peers",
                    "description": "the remote VTEPs of this VNI",
                    "type": "array",
                    "items": {"$ref": "#/$defs/peer"},
                },
                "fdb": {
                    "title": "static FDB entries",
                    "description": "MACs this VNI reaches at a fixed place, never aged or overridden by learning",
                    "type": "array",
                    "items": {"$ref": "#/$defs/fdb_entry"},
                },
                "vlan_mode": {"$ref": "#/$defs/vlan_mode"},
            },
        },
    },
}


def ipv6_underlay(error, where: str) -> list[str] | None:
    if error.validator == "format" and error.validator_value == "ipv4" and schema_words.is_ipv6(error.instance):
        address = schema_words.quote(error.instance)
        return [f"{where}: {address} is an IPv6 address; IPv6 underlay is not supported yet (IPv4 only)"]
    return None


def check_schema(document: Any) -> list[str]:
    """The schema pass alone: every problem, "<path>: <rule>", in document order of the paths. Needs jsonschema
    (imported when called, so that the dataclasses can be imported on a host without it)."""
    return schema_words.problems(SCHEMA, document, special=ipv6_underlay)


# --- The checks a schema cannot express -------------------------------------------------------------------------

_ROLE_WORDS = {"tunnel": "a tunnel port", "access": "an access port", "trunk": "a trunk"}


def _address_problem(address: ipaddress.IPv4Address) -> str | None:
    if address.is_unspecified:
        return "is the unspecified address"
    if address.is_multicast:
        return "is a multicast address (peers are reached by unicast head-end replication)"
    if address == ipaddress.IPv4Address("255.255.255.255"):
        return "is the broadcast address"
    if address.is_loopback:
        return "is a loopback address"
    return None


@functools.lru_cache(maxsize=65536)
def _unicast(text: str) -> tuple[ipaddress.IPv4Address, str | None]:
    """An address of the document and why it cannot be a tunnel's or a peer's (None: it can). Cached: a fleet's
    documents name the same few thousand addresses hundreds of thousands of times."""
    address = ipaddress.IPv4Address(text)
    return address, _address_problem(address)


def _mac_problem(mac: str) -> str | None:
    if int(mac[:2], 16) & 1:
        return "is a multicast MAC address"
    if mac == "00:00:00:00:00:00":
        return "is the all-zero MAC address"
    return None


def _names(items) -> str:
    return ", ".join(items)


def _interfaces_hint(name: str, interfaces: dict[str, InterfaceFacts]) -> str:
    if not interfaces:
        return "the host reported no interfaces"
    known = sorted(interfaces)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = "it has: " + _names(known) if len(known) <= 12 else f"it has {len(known)} interfaces"
    if close:
        hint = "did you mean " + " or ".join(close) + "? " + hint
    return hint


def vlan_mode(document: dict, entry: dict) -> str:
    """A VNI's VLAN mode: its own, else the document's, else translate."""
    return entry.get("vlan_mode", document.get("vlan_mode", "translate"))


def _fdb_problems(path: str, entry: dict, peer_path: dict) -> list[str]:
    """A VNI's static entries: unicast MACs, each once, each at one place of the VNI (a local port or a peer)."""
    problems = []
    local = {*entry.get("access_ports", []), *(t["port"] for t in entry.get("trunks", []))}
    seen: dict[str, str] = {}
    for j, item in enumerate(entry.get("fdb", [])):
        fpath, mac = f"{path}.fdb[{j}]", item["mac"].lower()
        bad = _mac_problem(mac)
        if bad:
            problems.append(f"{fpath}.mac: {mac} {bad}; a static FDB entry is for a unicast MAC")
        elif mac in seen:
            problems.append(
                f"{fpath}.mac: {mac} is listed twice in VNI {entry['vni']} (also {seen[mac]}); a MAC is at one place"
            )
        else:
            seen[mac] = fpath
        if ("port" in item) == ("remote" in item):
            problems.append(f"{fpath}: give either port (a local port of the VNI) or remote (a peer of the VNI)")
        elif "port" in item and item["port"] not in local:
            problems.append(
                f"{fpath}.port: {item['port']} is not a local port of VNI {entry['vni']} "
                f"(its access ports and trunks: {_names(sorted(local)) or 'none'})"
            )
        elif "remote" in item and int(ipaddress.IPv4Address(item["remote"])) not in peer_path:
            peers = _names(p["ip"] for p in entry.get("peers", [])) or "none"
            problems.append(
                f"{fpath}.remote: {item['remote']} is not a peer of VNI {entry['vni']} (its peers: {peers})"
            )
    return problems


def _map_problems(name: str, entry: str, keys: list[tuple[tuple, str]], limit: int) -> list[str]:
    """A map of the data plane that holds one entry per distinct key (keys: (key, the item it comes from), in
    document order) and at most `limit`: the item whose entry is the first that does not fit, if any. Checked here
    so that a document the map cannot hold is refused before anything on the host changes (the controller too)."""
    seen: set[tuple] = set()
    beyond = None
    for key, path in keys:
        if key not in seen:
            seen.add(key)
            if len(seen) == limit + 1:
                beyond = path
    if beyond is None:
        return []
    return [
        f"{beyond}: the document needs {len(seen)} entries of {name} (one per {entry}), above the data plane's limit "
        f"of {limit} (VTEP_MAX_{name.upper()}); this is the first that does not fit"
    ]


def semantic_problems(document: dict, interfaces: dict[str, InterfaceFacts] | None) -> list[str]:
    """The rules a schema cannot express, for a document that passed the schema. Every problem, none raised.

    interfaces None: the document's own rules alone, without the host's (interfaces that exist, their ifindex and
    MTU), as the controller checks a fleet's documents before any host is reached."""
    problems: list[str] = []
    tunnels = document.get("tunnel_ports", [])
    vnis = document["vnis"]

    # Where each port is used first and in which role; every use of a port name, for the existence check.
    first_use: dict[str, tuple[str, str, int | None]] = {}  # name -> (role, path, vni)
    uses: list[tuple[str, str]] = []  # (name, path), in document order

    def use(name: str, role: str, path: str, vni: int | None) -> bool:
        """Record a use; report a second role. Returns False when the use conflicts with the port's role."""
        uses.append((name, path))
        if name not in first_use:
            first_use[name] = (role, path, vni)
            return True
        first_role, first_path, first_vni = first_use[name]
        if first_role == role:
            return True
        where = f" of VNI {first_vni}" if first_vni is not None else ""
        if "tunnel" in (role, first_role):
            rule = "a tunnel port carries VXLAN only"
        else:
            rule = "a port is either fixed-VNI (access) or VLAN-aware (trunk)"
        problems.append(
            f"{path}: {name} is {_ROLE_WORDS[first_role]}{where} ({first_path}) and cannot also be "
            f"{_ROLE_WORDS[role]}; {rule}"
        )
        return False

    # Tunnel ports.
    tunnel_path: dict[str, str] = {}
    # Addresses as integers in these tables: an IPv4Address hashes slowly, and a fleet's documents hold a million.
    local_ips: dict[int, tuple[str, str]] = {}  # address -> (tunnel port, path)
    for i, tunnel in enumerate(tunnels):
        path, name = f"tunnel_ports[{i}]", tunnel["port"]
        if name in tunnel_path:
            problems.append(
                f"{path}.port: tunnel port {name} is declared twice (also {tunnel_path[name]}); "
                "each tunnel port is declared once"
            )
        else:
            tunnel_path[name] = path
            use(name, "tunnel", f"{path}.port", None)
        address, bad = _unicast(tunnel["local_ip"])
        if bad:
            problems.append(f"{path}.local_ip: {address} {bad}; a tunnel's local IP must be a unicast address")
        elif int(address) in local_ips:
            problems.append(
                f"{path}.local_ip: {address} is already the local IP of {local_ips[int(address)][0]} "
                f"({local_ips[int(address)][1]}); "
                "each tunnel port has its own local IP"
            )
        else:
            local_ips[int(address)] = (name, f"{path}.local_ip")

    # VNIs.
    vni_path: dict[int, str] = {}
    access_owner: dict[str, tuple[int, str]] = {}  # access port -> (VNI, path)
    vid_owner: dict[tuple[str, int], tuple[int, str]] = {}  # (trunk, VID) -> (VNI, path)
    declared = _names(sorted(tunnel_path)) or "none"
    static_entries = 0
    peer_entries = 0
    # The keys of the hash maps the document fills, with the item each comes from, in document order.
    bindings: list[tuple[tuple[str, int], str]] = []  # vlan_bindings: (trunk, VID)
    memberships: list[tuple[tuple[int, str], str]] = []  # port_vnis: (VNI, port)
    for i, entry in enumerate(vnis):
        path, vni = f"vnis[{i}]", entry["vni"]
        access, trunks, peers = entry.get("access_ports", []), entry.get("trunks", []), entry.get("peers", [])
        mode = vlan_mode(document, entry)
        if vni in vni_path:
            problems.append(f"{path}.vni: VNI {vni} is listed twice (also {vni_path[vni]}); each VNI is listed once")
        else:
            vni_path[vni] = path

        for j, name in enumerate(access):
            apath = f"{path}.access_ports[{j}]"
            if not use(name, "access", apath, vni):
                continue
            memberships.append(((vni, name), apath))
            if name in access_owner:
                other_vni, other_path = access_owner[name]
                if other_vni == vni:
                    problems.append(f"{apath}: {name} is listed twice in VNI {vni} (also {other_path})")
                else:
                    problems.append(
                        f"{apath}: {name} is already an access port of VNI {other_vni} ({other_path}); "
                        "an access port belongs to one VNI"
                    )
            else:
                access_owner[name] = (vni, apath)

        port_vid: dict[str, tuple[int, str]] = {}  # this VNI's trunks: port -> (VID, path)
        vni_vid: tuple[int, str, str] | None = None  # this VNI's VID: (VID, port, path)
        for j, trunk in enumerate(trunks):
            tpath, name, vid = f"{path}.trunks[{j}]", trunk["port"], trunk["vid"]
            if not use(name, "trunk", f"{tpath}.port", vni):
                continue
            bindings.append(((name, vid), tpath))
            memberships.append(((vni, name), tpath))
            if name in port_vid:
                other_vid, other_path = port_vid[name]
                if other_vid == vid:
                    problems.append(f"{tpath}: {name} VID {vid} is listed twice in VNI {vni} (also {other_path})")
                else:
                    problems.append(
                        f"{tpath}.vid: {name} is bound to VNI {vni} twice, with VID {other_vid} ({other_path}) "
                        f"and VID {vid}; a trunk joins a VNI with one VID"
                    )
                continue
            port_vid[name] = (vid, tpath)
            owner = vid_owner.get((name, vid))
            if owner is not None and owner[0] != vni:
                problems.append(
                    f"{tpath}.vid: VID {vid} on {name} is already bound to VNI {owner[0]} ({owner[1]}), "
                    f"cannot also select VNI {vni}; a VID is bound once per trunk"
                )
            elif owner is None:
                vid_owner[(name, vid)] = (vni, tpath)
            if vni_vid is None:
                vni_vid = (vid, name, tpath)
            elif vid != vni_vid[0] and mode == "preserve":
                problems.append(
                    f"{tpath}.vid: VNI {vni} uses VID {vid} on {name} but VID {vni_vid[0]} on {vni_vid[1]} "
                    f"({vni_vid[2]}); in vlan_mode preserve all trunk bindings of a VNI use the same VID (the tag "
                    "stays inside the tunnelled frame; vlan_mode translate maps each trunk's VID)"
                )

        if access and trunks and mode == "preserve":
            problems.append(
                f"{path}: VNI {vni} mixes fixed-VNI access ports ({_names(access)}) and VLAN-aware trunk ports "
                f"({_names(t['port'] for t in trunks)}); in vlan_mode preserve a VNI has one kind of local port, "
                "because the tag stays inside the tunnelled frame (vlan_mode translate removes and adds tags)"
            )

        peer_path: dict[int, str] = {}
        for j, peer in enumerate(peers):
            ppath, via = f"{path}.peers[{j}]", peer["via"]
            address, bad = _unicast(peer["ip"])
            key = int(address)
            if via not in tunnel_path:
                problems.append(f"{ppath}.via: {via} is not a declared tunnel port (declared: {declared})")
            else:
                memberships.append(((vni, via), f"{ppath}.via"))
            if bad:
                problems.append(f"{ppath}.ip: {address} {bad}; a peer must be a unicast address")
            elif key in local_ips:
                problems.append(
                    f"{ppath}.ip: {address} is this host's own tunnel address on {local_ips[key][0]} "
                    f"({local_ips[key][1]}); "
                    "a peer is a remote VTEP"
                )
            if key in peer_path:
                problems.append(
                    f"{ppath}.ip: peer {address} is listed twice in VNI {vni} (also {peer_path[key]}); "
                    "a remote VTEP is a peer of a VNI once"
                )
            else:
                peer_path[key] = ppath
            mac = peer.get("mac")
            bad = _mac_problem(mac.lower()) if mac is not None else None
            if bad:
                problems.append(f"{ppath}.mac: {mac.lower()} {bad}; a next-hop MAC must be a unicast address")

        problems.extend(_fdb_problems(path, entry, peer_path))
        static_entries += len(entry.get("fdb", []))
        peer_entries += len(peers)

        members = len(access) + len(trunks) + len(peers)
        if members == 0:
            problems.append(f"{path}: VNI {vni} has no members (no access ports, trunks or peers)")
        elif members > VTEP_MAX_MEMBERS:
            problems.append(
                f"{path}: VNI {vni} has {members} members ({len(access) + len(trunks)} local ports + "
                f"{len(peers)} peers), above the data plane's limit of {VTEP_MAX_MEMBERS} (VTEP_MAX_MEMBERS)"
            )

    if peer_entries > VTEP_MAX_PEERS:
        problems.append(
            f"document: has {peer_entries} peers over all VNIs, above the data plane's limit of {VTEP_MAX_PEERS} "
            "(VTEP_MAX_PEERS: one tunnel_peers entry per peer of each VNI)"
        )
    if static_entries > VTEP_MAX_STATIC_FDB:
        problems.append(
            f"document: has {static_entries} static FDB entries, above the data plane's limit of "
            f"{VTEP_MAX_STATIC_FDB} (VTEP_MAX_STATIC_FDB)"
        )
    problems += _map_problems("vlan_bindings", "(trunk, VID) pair", bindings, VTEP_MAX_VLAN_BINDINGS)
    problems += _map_problems(
        "port_vnis",
        "(VNI, port) pair: access ports, trunks and the tunnel ports of peers",
        memberships,
        VTEP_MAX_PORT_VNIS,
    )
    if len(first_use) > VTEP_MAX_PORTS:
        problems.append(
            f"document: uses {len(first_use)} ports, above the data plane's limit of {VTEP_MAX_PORTS} (VTEP_MAX_PORTS)"
        )

    if interfaces is None:
        return problems

    # Interfaces that exist, with an ifindex the data plane can index: each problem once, at the first use.
    reported: set[str] = set()
    for name, path in uses:
        if name in reported:
            continue
        if name not in interfaces:
            reported.add(name)
            problems.append(
                f"{path}: interface {name} does not exist on this host ({_interfaces_hint(name, interfaces)})"
            )
        elif interfaces[name].ifindex >= VTEP_MAX_IFINDEX:
            reported.add(name)
            problems.append(
                f"{path}: interface {name} has ifindex {interfaces[name].ifindex}, above the data plane's limit of "
                f"{VTEP_MAX_IFINDEX - 1} (VTEP_MAX_IFINDEX)"
            )

    problems.extend(_mtu_problems(document, interfaces))
    return problems


def _mtu_problems(document: dict, interfaces: dict[str, InterfaceFacts]) -> list[str]:
    """A tunnel port's MTU must hold the largest inner frame of every VNI it carries, plus the outer headers
    (and the tag when a VNI keeps its trunks' tags). One problem per tunnel port, naming the VNI that needs the most."""
    tunnels, vnis = document.get("tunnel_ports", []), document["vnis"]
    problems = []
    seen: set[str] = set()
    tunnel_names = {tunnel["port"] for tunnel in tunnels}
    for i, tunnel in enumerate(tunnels):
        name = tunnel["port"]
        if name in seen or name not in interfaces:
            continue
        seen.add(name)
        mtu = interfaces[name].mtu
        short = []  # (needed, vni, explanation)
        for entry in vnis:
            if not any(peer["via"] == name for peer in entry.get("peers", [])):
                continue
            trunks = entry.get("trunks", [])
            tagged = bool(trunks) and vlan_mode(document, entry) == "preserve"  # the tag travels in the tunnel
            ports = (*entry.get("access_ports", []), *(t["port"] for t in trunks))
            local = [p for p in ports if p in interfaces and p not in tunnel_names]  # misuse is reported elsewhere
            if not local:
                continue
            inner_port = min(local, key=lambda p: (-interfaces[p].mtu, p))
            inner = interfaces[inner_port].mtu
            needed = inner + VXLAN_OVERHEAD + (VLAN_TAG_LEN if tagged else 0)
            if mtu < needed:
                tag = f" + {VLAN_TAG_LEN} VLAN tag" if tagged else ""
                why = f"inner MTU {inner} of {inner_port} + {VXLAN_OVERHEAD} VXLAN{tag}"
                short.append((needed, entry["vni"], why))
        if short:
            short.sort(key=lambda s: (-s[0], s[1]))
            needed, vni, why = short[0]
            also = sorted({s[1] for s in short[1:]} - {vni})
            more = f"; also too small for VNI {', '.join(map(str, also))}" if also else ""
            problems.append(
                f"tunnel_ports[{i}].port: {name} has MTU {mtu}, below {needed} needed for VNI {vni} ({why}){more}"
            )
    return problems


# --- Rules against the host's addresses (both backends, after validate()) ---------------------------------------

ALLOW_MANAGEMENT_PORT = "allow_management_port"  # the modules' option that lifts management_port_problems


def tunnel_address_problems(config: VtepConfig, addresses: dict[str, set[str]]) -> list[str]:
    """A tunnel port sends VXLAN from its local_ip, so the port must have it (addresses: interface -> its
    addresses; a port not in it is not on the host, which is another problem). Neither backend adds underlay
    addresses."""
    return [
        f"{t.path}.local_ip: {t.local_ip} is not an address of {t.port} "
        "(this module does not add underlay addresses: configure them first)"
        for t in config.tunnel_ports
        if t.port in addresses and t.local_ip not in addresses[t.port]
    ]


def management_port_problems(config: VtepConfig, management: dict[str, str]) -> list[str]:
    """A VTEP port takes over its interface's traffic, so the interface the host is managed through (management:
    interface -> why it is that one) is not one unless the user says so; one problem per port, at its first use."""
    uses = [(t.port, f"{t.path}.port") for t in config.tunnel_ports]
    for vni in config.vnis:
        uses += [(a.port, a.path) for a in vni.access_ports] + [(t.port, f"{t.path}.port") for t in vni.trunks]
    problems, seen = [], set()
    for port, path in sorted(uses, key=lambda use: _document_order_of(use[1])):
        if port in management and port not in seen:
            seen.add(port)
            problems.append(
                f"{path}: {port} {management[port]}: a VTEP port takes over its traffic, which could cut this host "
                f"off; set {ALLOW_MANAGEMENT_PORT}: true to use it anyway"
            )
    return problems


def _document_order_of(path: str) -> list:
    """A model item's path (vnis[2].trunks[0]) as a sort key in document order."""
    return [int(part) if part.isdigit() else part for part in path.replace("]", "").replace("[", ".").split(".")]


# --- The model --------------------------------------------------------------------------------------------------


def _by_port(item: TunnelPort | AccessPort | TrunkBinding) -> str:
    return item.port


def _model(document: dict) -> VtepConfig:
    tunnel_ports = tuple(
        sorted(
            (
                TunnelPort(t["port"], str(ipaddress.IPv4Address(t["local_ip"])), f"tunnel_ports[{i}]")
                for i, t in enumerate(document.get("tunnel_ports", []))
            ),
            key=_by_port,
        )
    )
    vnis = []
    for i, entry in enumerate(document["vnis"]):
        path = f"vnis[{i}]"
        peers = sorted(
            (
                Peer(
                    str(ipaddress.IPv4Address(p["ip"])),
                    p["via"],
                    p["mac"].lower() if "mac" in p else None,
                    f"{path}.peers[{j}]",
                )
                for j, p in enumerate(entry.get("peers", []))
            ),
            key=lambda p: (p.via, ipaddress.IPv4Address(p.ip)),
        )
        access_ports = sorted(
            (AccessPort(name, f"{path}.access_ports[{j}]") for j, name in enumerate(entry.get("access_ports", []))),
            key=_by_port,
        )
        trunks = sorted(
            (
                TrunkBinding(t["port"], int(t["vid"]), f"{path}.trunks[{j}]")
                for j, t in enumerate(entry.get("trunks", []))
            ),
            key=_by_port,
        )
        fdb = sorted(
            (
                FdbEntry(
                    f["mac"].lower(),
                    f.get("port"),
                    str(ipaddress.IPv4Address(f["remote"])) if "remote" in f else None,
                    f"{path}.fdb[{j}]",
                )
                for j, f in enumerate(entry.get("fdb", []))
            ),
            key=lambda f: f.mac,
        )
        vnis.append(
            Vni(
                vni=int(entry["vni"]),  # JSON Schema's integer admits 100.0
                access_ports=tuple(access_ports),
                trunks=tuple(trunks),
                peers=tuple(peers),
                path=path,
                vlan_mode=vlan_mode(document, entry),
                fdb=tuple(fdb),
            )
        )
    vnis.sort(key=lambda v: v.vni)
    return VtepConfig(
        tunnel_ports=tunnel_ports,
        vnis=tuple(vnis),
        fdb_aging=int(document.get("fdb_aging", FDB_AGING_DEFAULT)),
        fdb_size=int(document.get("fdb_size", FDB_SIZE_DEFAULT)),
    )


def validate(document: Any, interfaces: dict[str, InterfaceFacts]) -> VtepConfig:
    """Check the document against the schema and then against the rules a schema cannot express (only when the
    schema passed: those rules assume the shape). Pure: the host's interfaces are given, nothing is read.

    Returns the VtepConfig: tuples, VNIs by number, ports by name, peers by (via, ip), MACs in lowercase; each
    item with its path in the document. Raises ConfigError listing every problem, each "<path>: <rule>"."""
    problems = check_schema(document)
    if not problems:
        problems = semantic_problems(document, interfaces)
    if problems:
        raise ConfigError(problems)
    return _model(document)
