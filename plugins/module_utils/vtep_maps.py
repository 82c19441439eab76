# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP's maps: their layouts (declared once, checked against bpf/vtep/vtep.h through BTF), the desired
contents compiled from a validated configuration, what the pinned maps hold now, and the difference.

Following a VNI from the inventory: vtep_config.validate() gives Vni(vni=100, access_ports=("acc100",), ...);
compile_desired() turns it into port_vnis[{100, ifindex(acc100)}], vni_flood[100] = {ifindex(acc100): ...} and
so on; diff() compares that with read_current(); apply() writes the difference, members added before others are
removed, and words() says it the way a network engineer reads it.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.btf_layout import MapLayout, TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep_config import VtepConfig

PORT_ACCESS, PORT_TRUNK, PORT_TUNNEL = 1, 2, 3
PORT_KINDS = {PORT_ACCESS: "access", PORT_TRUNK: "trunk", PORT_TUNNEL: "tunnel"}
VTEP_MAX_MEMBERS = 256
PEER_MEMBER_BIT = 1 << 31
DROP_REASONS = (
    "malformed",
    "untagged",
    "vid_reserved",
    "vid_unknown",
    "qinq",
    "not_admitted",
    "not_peer",
    "no_group",
    "vid_mismatch",
    "mtu",
    "no_peer",
    "not_member",
    "bad_command",
    "split_horizon",
)
BPF_MAP_TYPE_DEVMAP_HASH = 25


class PortConfig(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("vni", ctypes.c_uint32),
        ("local_ip", ctypes.c_uint32),  # network order
        ("mtu", ctypes.c_uint16),
        ("mac", ctypes.c_uint8 * 6),
    ]


class VlanKey(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("vid", ctypes.c_uint16), ("pad", ctypes.c_uint16)]


class PortVniKey(ctypes.Structure):
    _fields_ = [("vni", ctypes.c_uint32), ("ifindex", ctypes.c_uint32)]


class PortVni(ctypes.Structure):
    _fields_ = [("vid", ctypes.c_uint16), ("pad", ctypes.c_uint16)]


class PeerKey(ctypes.Structure):
    _fields_ = [("vni", ctypes.c_uint32), ("ifindex", ctypes.c_uint32), ("copy", ctypes.c_uint32)]


class PeerValue(ctypes.Structure):
    _fields_ = [("remote_ip", ctypes.c_uint32), ("mac", ctypes.c_uint8 * 6), ("pad", ctypes.c_uint16)]


class PeerAddrKey(ctypes.Structure):
    _fields_ = [("vni", ctypes.c_uint32), ("addr", ctypes.c_uint32)]


class TrafficStats(ctypes.Structure):
    _fields_ = [
        ("rx_packets", ctypes.c_uint64),
        ("rx_bytes", ctypes.c_uint64),
        ("tx_packets", ctypes.c_uint64),
        ("tx_bytes", ctypes.c_uint64),
        ("drops", ctypes.c_uint64 * len(DROP_REASONS)),
    ]


class DevmapVal(ctypes.Structure):
    """struct bpf_devmap_val: the kernel takes a program fd on update and returns its id on lookup."""

    _fields_ = [("ifindex", ctypes.c_uint32), ("prog", ctypes.c_uint32)]


LAYOUTS = {
    layout.map_name: layout
    for layout in (
        MapLayout("port_config", ctypes.c_uint32, PortConfig),
        MapLayout("vlan_bindings", VlanKey, ctypes.c_uint32),
        MapLayout("port_vnis", PortVniKey, PortVni),
        MapLayout("tunnel_peers", PeerKey, PeerValue),
        MapLayout("peer_admission", PeerAddrKey, ctypes.c_uint32),
        MapLayout("vni_stats", ctypes.c_uint32, TrafficStats),
        MapLayout("port_stats", ctypes.c_uint32, TrafficStats),
    )
}
GROUP_MAPS = ("vni_flood", "vni_local")  # HASH_OF_MAPS: VNI -> DEVMAP_HASH of members (sizes only, no BTF)


def ip_be(address: str) -> int:
    """An IPv4 address as the u32 whose bytes in memory are in network order."""
    return int.from_bytes(socket.inet_aton(address), "little")


def ip_str(value: int) -> str:
    return socket.inet_ntoa(value.to_bytes(4, "little"))


def mac_bytes(mac: str) -> bytes:
    return bytes(int(part, 16) for part in mac.split(":"))


def mac_str(raw) -> str:
    return ":".join(f"{b:02x}" for b in bytes(raw))


def peer_member_key(ifindex: int, copy: int) -> int:
    """The devmap key of a remote peer's entry: one entry per copy a tunnel port sends of each frame."""
    return PEER_MEMBER_BIT | (ifindex << 16) | copy


@dataclass(frozen=True)
class Port:
    """A host interface as the VTEP uses it."""

    name: str
    ifindex: int
    mtu: int
    mac: str


@dataclass
class MapContents:
    """Map name -> {key bytes: value bytes} for plain maps; group name -> {vni: {member key: ifindex}}."""

    entries: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    groups: dict[str, dict[int, dict[int, int]]] = field(default_factory=dict)


def compile_desired(config: VtepConfig, ports: dict[str, Port], peer_macs: dict[tuple[int, str], str]) -> MapContents:
    """The map contents that realise a configuration. peer_macs: (vni, peer ip) -> next-hop MAC."""
    out = MapContents(
        entries={name: {} for name in ("port_config", "vlan_bindings", "port_vnis", "tunnel_peers", "peer_admission")},
        groups={name: {} for name in GROUP_MAPS},
    )

    def put(map_name: str, key, value) -> None:
        out.entries[map_name][bytes(key)] = bytes(value)

    local_ip = {}
    for tunnel in config.tunnel_ports:
        port = ports[tunnel.port]
        local_ip[tunnel.port] = tunnel.local_ip
        put(
            "port_config",
            ctypes.c_uint32(port.ifindex),
            PortConfig(
                kind=PORT_TUNNEL,
                local_ip=ip_be(tunnel.local_ip),
                mtu=port.mtu,
                mac=(ctypes.c_uint8 * 6)(*mac_bytes(port.mac)),
            ),
        )
    for vni in config.vnis:
        flood = out.groups["vni_flood"].setdefault(vni.vni, {})
        local = out.groups["vni_local"].setdefault(vni.vni, {})
        for name in vni.access_ports:
            port = ports[name]
            put("port_config", ctypes.c_uint32(port.ifindex), PortConfig(kind=PORT_ACCESS, vni=vni.vni, mtu=port.mtu))
            put("port_vnis", PortVniKey(vni.vni, port.ifindex), PortVni())
            flood[port.ifindex] = local[port.ifindex] = port.ifindex
        for trunk in vni.trunks:
            port = ports[trunk.port]
            put("port_config", ctypes.c_uint32(port.ifindex), PortConfig(kind=PORT_TRUNK, mtu=port.mtu))
            put("vlan_bindings", VlanKey(port.ifindex, trunk.vid), ctypes.c_uint32(vni.vni))
            put("port_vnis", PortVniKey(vni.vni, port.ifindex), PortVni(vid=trunk.vid))
            flood[port.ifindex] = local[port.ifindex] = port.ifindex
        copies: dict[str, int] = {}
        for peer in vni.peers:  # validated order: by (via, ip), so copy numbers are stable between runs
            port = ports[peer.via]
            copy = copies.get(peer.via, 0)
            copies[peer.via] = copy + 1
            mac = peer.mac or peer_macs[(vni.vni, peer.ip)]
            put("port_vnis", PortVniKey(vni.vni, port.ifindex), PortVni())  # admits the VNI on the tunnel port
            put(
                "tunnel_peers",
                PeerKey(vni.vni, port.ifindex, copy),
                PeerValue(remote_ip=ip_be(peer.ip), mac=(ctypes.c_uint8 * 6)(*mac_bytes(mac))),
            )
            put("peer_admission", PeerAddrKey(vni.vni, ip_be(peer.ip)), ctypes.c_uint32(1))
            flood[peer_member_key(port.ifindex, copy)] = port.ifindex
    return out


class VtepMaps:
    """The VTEP instance's maps by name (the loaded object's, which are the pinned ones when reused)."""

    def __init__(self, maps: dict[str, libbpf.Map]):
        self.maps = maps

    def read(self) -> MapContents:
        out = MapContents()
        for name in ("port_config", "vlan_bindings", "port_vnis", "tunnel_peers", "peer_admission"):
            out.entries[name] = dict(self.maps[name].dump())
        for name in GROUP_MAPS:
            out.groups[name] = {}
            for raw_vni, raw_inner in self.maps[name].dump():
                vni = int.from_bytes(raw_vni, "little")
                inner_fd = libbpf.map_fd_by_id(int.from_bytes(raw_inner, "little"))
                try:
                    inner = libbpf.Map.from_fd(inner_fd)
                    out.groups[name][vni] = {
                        int.from_bytes(k, "little"): DevmapVal.from_buffer_copy(v).ifindex for k, v in inner.dump()
                    }
                finally:
                    libbpf.close_fd(inner_fd)
        return out

    def egress_prog_ids(self) -> set[int]:
        """Ids of the egress programs the members run now."""
        ids = set()
        for name in GROUP_MAPS:
            for _, raw_inner in self.maps[name].dump():
                inner_fd = libbpf.map_fd_by_id(int.from_bytes(raw_inner, "little"))
                try:
                    ids.update(DevmapVal.from_buffer_copy(v).prog for _, v in libbpf.Map.from_fd(inner_fd).dump())
                finally:
                    libbpf.close_fd(inner_fd)
        return ids


@dataclass
class MapDiff:
    """Entries to write and to delete per map; group members to add and remove per VNI."""

    upserts: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    deletes: dict[str, list[bytes]] = field(default_factory=dict)
    member_adds: dict[str, dict[int, dict[int, int]]] = field(default_factory=dict)
    member_removes: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    groups_removed: dict[str, list[int]] = field(default_factory=dict)
    rewire_egress: bool = False  # every member must move to a new egress program

    @property
    def empty(self) -> bool:
        return not (
            any(self.upserts.values())
            or any(self.deletes.values())
            or any(self.member_adds.values())
            or any(self.member_removes.values())
            or any(self.groups_removed.values())
            or self.rewire_egress
        )


def diff(current: MapContents, desired: MapContents) -> MapDiff:
    d = MapDiff()
    for name, want in desired.entries.items():
        have = current.entries.get(name, {})
        d.upserts[name] = {k: v for k, v in want.items() if have.get(k) != v}
        d.deletes[name] = [k for k in have if k not in want]
    for name, want_groups in desired.groups.items():
        have_groups = current.groups.get(name, {})
        d.member_adds[name] = {}
        d.member_removes[name] = {}
        for vni, members in want_groups.items():
            have = have_groups.get(vni, {})
            adds = {k: v for k, v in members.items() if have.get(k) != v}
            removes = [k for k in have if k not in members]
            if adds or vni not in have_groups:
                d.member_adds[name][vni] = adds
            if removes:
                d.member_removes[name][vni] = removes
        d.groups_removed[name] = [vni for vni in have_groups if vni not in want_groups]
    return d


class Writer:
    """Applies a MapDiff; remembers how to undo each step, so a failure half-way restores the previous state."""

    def __init__(self, maps: dict[str, libbpf.Map], current: MapContents, egress_fd: int):
        self.maps = maps
        self.current = current
        self.egress_fd = egress_fd
        self.undo: list = []
        self._open: list[int] = []

    def _put(self, name: str, key: bytes, value: bytes) -> None:
        old = self.current.entries.get(name, {}).get(key)
        self.maps[name].update(key, value)
        m = self.maps[name]
        self.undo.append(lambda: m.update(key, old) if old is not None else m.delete(key))

    def _delete(self, name: str, key: bytes) -> None:
        old = self.current.entries[name][key]
        m = self.maps[name]
        m.delete(key)
        self.undo.append(lambda: m.update(key, old))

    def _group(self, name: str, vni: int) -> libbpf.Map:
        """The VNI's member devmap, created and inserted into the outer map when missing."""
        outer = self.maps[name]
        key = vni.to_bytes(4, "little")
        found = outer.lookup(key)
        if found is not None:
            fd = libbpf.map_fd_by_id(int.from_bytes(found, "little"))
        else:
            fd = libbpf.map_create(BPF_MAP_TYPE_DEVMAP_HASH, f"vni{vni}", 4, 8, VTEP_MAX_MEMBERS)
            outer.update(key, fd.to_bytes(4, "little"))
            self.undo.append(lambda: outer.delete(key))
        self._open.append(fd)
        return libbpf.Map.from_fd(fd)

    def _member(self, group: libbpf.Map, member: int, ifindex: int) -> None:
        key = member.to_bytes(4, "little")
        old = group.lookup(key)
        group.update(key, bytes(DevmapVal(ifindex, self.egress_fd)))
        if old is None:
            self.undo.append(lambda: group.delete(key))
        # An old entry's program is referenced by id in what the kernel returns; it cannot be written back by fd,
        # so undoing a changed member leaves it on the new egress program, which serves the old entries as well.

    def apply(self, d: MapDiff, desired: MapContents) -> None:
        try:
            # Make before break: configuration entries first, then members in, then members out, then removals.
            for name, entries in d.upserts.items():
                for key, value in entries.items():
                    self._put(name, key, value)
            for name in GROUP_MAPS:
                vnis = desired.groups[name] if d.rewire_egress else d.member_adds[name]
                for vni, members in vnis.items():
                    group = self._group(name, vni)
                    for member, ifindex in members.items():
                        self._member(group, member, ifindex)
            for name in GROUP_MAPS:
                for vni, members in d.member_removes[name].items():
                    group = self._group(name, vni)
                    for member in members:
                        key = member.to_bytes(4, "little")
                        ifindex = self.current.groups[name][vni][member]
                        group.delete(key)
                        readd = bytes(DevmapVal(ifindex, self.egress_fd))
                        self.undo.append(lambda g=group, k=key, v=readd: g.update(k, v))
                for vni in d.groups_removed[name]:
                    self.maps[name].delete(vni.to_bytes(4, "little"))
            for name, keys in d.deletes.items():
                for key in keys:
                    self._delete(name, key)
        except (libbpf.LibbpfError, ValueError):
            self.rollback()
            raise
        finally:
            for fd in self._open:
                libbpf.close_fd(fd)

    def rollback(self) -> None:
        for step in reversed(self.undo):
            with contextlib.suppress(libbpf.LibbpfError):  # best effort: the error that made us roll back is reported
                step()
        self.undo.clear()


def describe(contents: MapContents, names: dict[int, str]) -> dict[int, set[str]]:
    """What a VTEP's maps say, per VNI, in words: members and peers."""

    def name(ifindex: int) -> str:
        return names.get(ifindex, f"ifindex {ifindex}")

    ports = {
        int.from_bytes(k, "little"): PortConfig.from_buffer_copy(v) for k, v in contents.entries["port_config"].items()
    }
    out: dict[int, set[str]] = {}
    for raw_key, raw_value in contents.entries["port_vnis"].items():
        key = PortVniKey.from_buffer_copy(raw_key)
        port = ports.get(key.ifindex)
        kind = PORT_KINDS.get(port.kind, "?") if port else "?"
        if kind == "tunnel":
            continue  # said through its peers
        vid = PortVni.from_buffer_copy(raw_value).vid
        words = f"trunk {name(key.ifindex)} VID {vid}" if kind == "trunk" else f"access port {name(key.ifindex)}"
        out.setdefault(key.vni, set()).add(words)
    for raw_key, raw_value in contents.entries["tunnel_peers"].items():
        key = PeerKey.from_buffer_copy(raw_key)
        peer = PeerValue.from_buffer_copy(raw_value)
        said = f"peer {ip_str(peer.remote_ip)} via {name(key.ifindex)} ({mac_str(peer.mac)})"
        out.setdefault(key.vni, set()).add(said)
    for raw_key, raw_value in contents.entries["port_config"].items():
        port = PortConfig.from_buffer_copy(raw_value)
        if port.kind == PORT_TUNNEL:
            ifindex = int.from_bytes(raw_key, "little")
            out.setdefault(0, set()).add(f"tunnel port {name(ifindex)} local {ip_str(port.local_ip)} MTU {port.mtu}")
    return out


def words(current: MapContents, desired: MapContents, names: dict[int, str]) -> list[str]:
    """The difference as a network engineer reads it: "VNI 100: + peer 198.51.100.34 via ul-b (02:..)"."""
    before, after = describe(current, names), describe(desired, names)
    lines = []
    for vni in sorted(set(before) | set(after)):
        label = f"VNI {vni}" if vni else "VTEP"
        lines += [f"{label}: - {w}" for w in sorted(before.get(vni, set()) - after.get(vni, set()))]
        lines += [f"{label}: + {w}" for w in sorted(after.get(vni, set()) - before.get(vni, set()))]
    return lines


def counters(maps: dict[str, libbpf.Map], names: dict[int, str]) -> dict:
    """The per-VNI and per-port counters, summed over CPUs, with drops by reason (non-zero only)."""

    def total(stats: list[TrafficStats]) -> dict:
        out = {f: sum(getattr(s, f) for s in stats) for f in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")}
        out["drops"] = {reason: n for i, reason in enumerate(DROP_REASONS) if (n := sum(s.drops[i] for s in stats))}
        return out

    result = {"vnis": {}, "ports": {}}
    for key, stats in TypedMap(maps["vni_stats"], LAYOUTS["vni_stats"]).items():
        result["vnis"][key.value] = total(stats)
    for key, stats in TypedMap(maps["port_stats"], LAYOUTS["port_stats"]).items():
        result["ports"][names.get(key.value, str(key.value))] = total(stats)
    return result
