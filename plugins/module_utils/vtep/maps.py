# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP's maps: their layouts (declared once, checked against bpf/vtep/vtep.h through BTF), the desired
contents compiled from a validated configuration, what the pinned maps hold now, and the difference.

Following a VNI from the inventory: vtep_config.validate() gives Vni(vni=100, access_ports=("acc100",), ...);
compile_desired() turns it into port_vnis[{100, ifindex(acc100)}], the flood group of VNI 100 = {ifindex(acc100):
...} and so on; diff() compares that with VtepMaps.read(); Writer.apply() writes the difference, members added
before others are removed, and words() says it the way a network engineer reads it.
"""

from __future__ import annotations

import contextlib
import ctypes
import socket
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout, TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.libbpf import BPF_MAP_TYPE_DEVMAP_HASH
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import (
    ABI,
    DROP_REASONS,
    PORT_ACCESS,
    PORT_KINDS,
    PORT_TRUNK,
    PORT_TUNNEL,
    VTEP_MAX_MEMBERS,
    VTEP_MAX_PEERS,
    VTEP_MAX_PORTS,
    VTEP_MAX_VNIS,
    VTEP_SMALL_GROUP,
    peer_member_key,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import VtepConfig


class PortConfig(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_uint32),
        ("vni", ctypes.c_uint32),
        ("local_ip", ctypes.c_uint32),  # network order
        ("mtu", ctypes.c_uint16),
        ("mac", ctypes.c_uint8 * 6),
        ("slot", ctypes.c_uint16),
        ("vni_slot", ctypes.c_uint16),
    ]


class VniRef(ctypes.Structure):
    _fields_ = [("vni", ctypes.c_uint32), ("vni_slot", ctypes.c_uint32)]


class VlanKey(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("vid", ctypes.c_uint16), ("pad", ctypes.c_uint16)]


class PortVniKey(ctypes.Structure):
    _fields_ = [("vni", ctypes.c_uint32), ("ifindex", ctypes.c_uint32)]


class PortVni(ctypes.Structure):
    _fields_ = [
        ("vid", ctypes.c_uint16),
        ("vni_slot", ctypes.c_uint16),
        ("peers", ctypes.c_uint16),
        ("pad", ctypes.c_uint16),
        ("first_peer", ctypes.c_uint32),
    ]


class PeerValue(ctypes.Structure):
    _fields_ = [("remote_ip", ctypes.c_uint32), ("mac", ctypes.c_uint8 * 6), ("pad", ctypes.c_uint16)]


class VniTunnel(ctypes.Structure):
    _fields_ = [
        ("vni", ctypes.c_uint32),
        ("ifindex", ctypes.c_uint32),
        ("first_peer", ctypes.c_uint32),
        ("peers", ctypes.c_uint32),
    ]


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


# The maps whose contents are read by the ABI's enums (port kinds, drop reasons) check its numbers with them.
LAYOUTS = {
    layout.map_name: layout
    for layout in (
        MapLayout("port_config", ctypes.c_uint32, PortConfig, ABI),
        MapLayout("vlan_bindings", VlanKey, VniRef),
        MapLayout("port_vnis", PortVniKey, PortVni),
        MapLayout("tunnel_peers", ctypes.c_uint32, PeerValue),
        MapLayout("vni_tunnels", ctypes.c_uint32, VniTunnel),
        MapLayout("peer_admission", PeerAddrKey, ctypes.c_uint32),
        MapLayout("vni_stats", ctypes.c_uint32, TrafficStats, ABI),
        MapLayout("port_stats", ctypes.c_uint32, TrafficStats, ABI),
    )
}
# In the order they are written: a row of peers is in tunnel_peers before port_vnis and vni_tunnels point at it.
CONFIG_MAPS = ("port_config", "vlan_bindings", "tunnel_peers", "port_vnis", "vni_tunnels", "peer_admission")
# Arrays among them: every index exists, an all-zero value is an absent entry and removing one writes zeros.
ARRAY_MAPS = ("port_config", "tunnel_peers", "vni_tunnels")
# HASH_OF_MAPS: VNI -> DEVMAP_HASH of members (sizes only, no BTF). "flood" groups serve frames from local ports,
# "local" groups (local members only: split horizon) decapsulated ones. Broadcast walks every bucket of a group,
# so groups of up to VTEP_SMALL_GROUP members live in the small maps.
GROUP_MAPS = {
    ("flood", "small"): "vni_flood",
    ("flood", "large"): "vni_flood_large",
    ("local", "small"): "vni_local",
    ("local", "large"): "vni_local_large",
}
GROUP_CAPACITY = {"small": VTEP_SMALL_GROUP, "large": VTEP_MAX_MEMBERS}
MAP_NAMES = (*LAYOUTS, *GROUP_MAPS.values())


def group_class(members: dict) -> str:
    return "small" if len(members) <= VTEP_SMALL_GROUP else "large"


def ip_be(address: str) -> int:
    """An IPv4 address as the u32 whose bytes in memory are in network order."""
    return int.from_bytes(socket.inet_aton(address), "little")


def ip_str(value: int) -> str:
    return socket.inet_ntoa(value.to_bytes(4, "little"))


def mac_bytes(mac: str) -> bytes:
    return bytes(int(part, 16) for part in mac.split(":"))


def mac_str(raw) -> str:
    return ":".join(f"{b:02x}" for b in bytes(raw))


def u32(value: int) -> bytes:
    return value.to_bytes(4, "little")


@dataclass(frozen=True)
class Port:
    """A host interface as the VTEP uses it."""

    name: str
    ifindex: int
    mtu: int
    mac: str


@dataclass
class MapContents:
    """Config map name -> {key bytes: value bytes}; groups: "flood"/"local" -> {vni: {member key: ifindex}};
    where: (group kind, vni) -> "small"/"large", the map a group lives in; egress_prog_ids: what members run."""

    entries: dict[str, dict[bytes, bytes]] = field(default_factory=lambda: {name: {} for name in CONFIG_MAPS})
    groups: dict[str, dict[int, dict[int, int]]] = field(default_factory=lambda: {"flood": {}, "local": {}})
    where: dict[tuple[str, int], str] = field(default_factory=dict)
    egress_prog_ids: set[int] = field(default_factory=set)  # the egress programs the members run (read only)

    def port_slots(self) -> dict[int, int]:
        return {
            int.from_bytes(k, "little"): PortConfig.from_buffer_copy(v).slot
            for k, v in self.entries["port_config"].items()
        }

    def vni_slots(self) -> dict[int, int]:
        return {
            PortVniKey.from_buffer_copy(k).vni: PortVni.from_buffer_copy(v).vni_slot
            for k, v in self.entries["port_vnis"].items()
        }

    def peer_rows(self) -> dict[tuple[int, int], tuple[int, int]]:
        """(vni, tunnel port ifindex) -> (first_peer, peers): where a VNI's peers behind a port are in tunnel_peers."""
        rows = {}
        for k, v in self.entries["port_vnis"].items():
            value = PortVni.from_buffer_copy(v)
            if value.peers:
                key = PortVniKey.from_buffer_copy(k)
                rows[(key.vni, key.ifindex)] = (value.first_peer, value.peers)
        return rows


def assign_slots(wanted, current: dict[int, int], capacity: int) -> dict[int, int]:
    """Slots for the wanted keys: the ones they have now, the smallest free ones for newcomers."""
    slots = {key: slot for key, slot in current.items() if key in wanted}
    free = iter(sorted(set(range(capacity)) - set(slots.values())))
    for key in sorted(wanted):
        if key not in slots:
            slots[key] = next(free)
    return slots


def _free_run(taken: set[int], count: int, start: int, capacity: int) -> int | None:
    """The first index from start on where count indexes in a row are free."""
    run = 0
    for index in range(start, capacity):
        run = 0 if index in taken else run + 1
        if run == count:
            return index - count + 1
    return None


def place_rows(wanted: dict, current: dict[tuple, tuple[int, int]], capacity: int) -> dict:
    """The first tunnel_peers index of each wanted row (row -> number of peers). A row stays where it is when it
    shrinks or keeps its size, or grows into free indexes; otherwise it moves to indexes that no current row
    uses, so the peers it moves to are written before port_vnis points at them and the old ones still serve
    until then."""
    taken: set[int] = set()
    for first, count in current.values():
        taken.update(range(first, first + count))
    placed = {}
    for row, count in sorted(wanted.items()):
        if row in current:
            first, had = current[row]
            if count <= had or taken.isdisjoint(range(first + had, first + count)):
                placed[row] = first
                taken.update(range(first, first + count))
    hint = 0  # where the last new row ended: new rows mostly go one after another
    for row, count in sorted(wanted.items()):
        if row in placed:
            continue
        first = _free_run(taken, count, hint, capacity)
        if first is None:
            first = _free_run(taken, count, 0, capacity)
        if first is None:
            raise ValueError(
                f"VNI {row[0]}: no room for {count} more peers in tunnel_peers, the data plane's limit of "
                f"{capacity} (VTEP_MAX_PEERS)"
            )
        placed[row] = first
        taken.update(range(first, first + count))
        hint = first + count
    return placed


def compile_desired(
    config: VtepConfig, ports: dict[str, Port], peer_macs: dict[tuple[int, str], str], current: MapContents
) -> MapContents:
    """The map contents that realise a configuration. peer_macs: (vni, peer ip) -> next-hop MAC. Ports and VNIs
    keep the counter slots they have in `current`."""
    out = MapContents()
    used_ports = {t.port for t in config.tunnel_ports}
    for vni in config.vnis:
        used_ports.update(vni.access_ports, (t.port for t in vni.trunks))
    port_slot = assign_slots({ports[n].ifindex for n in used_ports}, current.port_slots(), VTEP_MAX_PORTS)
    vni_slot = assign_slots({v.vni for v in config.vnis}, current.vni_slots(), VTEP_MAX_VNIS)

    def put(map_name: str, key, value) -> None:
        out.entries[map_name][bytes(key)] = bytes(value)

    def port_config(port: Port, **fields) -> PortConfig:
        return PortConfig(mtu=port.mtu, slot=port_slot[port.ifindex], **fields)

    rows: dict[tuple[int, int], list[PeerValue]] = {}  # (vni, tunnel port ifindex) -> peers in copy order
    for tunnel in config.tunnel_ports:
        port = ports[tunnel.port]
        mac = (ctypes.c_uint8 * 6)(*mac_bytes(port.mac))
        put(
            "port_config",
            ctypes.c_uint32(port.ifindex),
            port_config(port, kind=PORT_TUNNEL, local_ip=ip_be(tunnel.local_ip), mac=mac),
        )
    for vni in config.vnis:
        slot = vni_slot[vni.vni]
        flood = out.groups["flood"].setdefault(vni.vni, {})
        local = out.groups["local"].setdefault(vni.vni, {})
        for name in vni.access_ports:
            port = ports[name]
            put(
                "port_config",
                ctypes.c_uint32(port.ifindex),
                port_config(port, kind=PORT_ACCESS, vni=vni.vni, vni_slot=slot),
            )
            put("port_vnis", PortVniKey(vni.vni, port.ifindex), PortVni(vni_slot=slot))
            flood[port.ifindex] = local[port.ifindex] = port.ifindex
        for trunk in vni.trunks:
            port = ports[trunk.port]
            put("port_config", ctypes.c_uint32(port.ifindex), port_config(port, kind=PORT_TRUNK))
            put("vlan_bindings", VlanKey(port.ifindex, trunk.vid), VniRef(vni.vni, slot))
            put("port_vnis", PortVniKey(vni.vni, port.ifindex), PortVni(vid=trunk.vid, vni_slot=slot))
            flood[port.ifindex] = local[port.ifindex] = port.ifindex
        copies: dict[str, int] = {}
        for peer in vni.peers:  # validated order: by (via, ip), so copy numbers are stable between runs
            port = ports[peer.via]
            copy = copies.get(peer.via, 0)
            copies[peer.via] = copy + 1
            mac = peer.mac or peer_macs[(vni.vni, peer.ip)]
            value = PeerValue(remote_ip=ip_be(peer.ip), mac=(ctypes.c_uint8 * 6)(*mac_bytes(mac)))
            rows.setdefault((vni.vni, port.ifindex), []).append(value)
            put("peer_admission", PeerAddrKey(vni.vni, ip_be(peer.ip)), ctypes.c_uint32(1))
            flood[peer_member_key(port.ifindex, copy)] = port.ifindex
        if not local:
            del out.groups["local"][vni.vni]
    first = place_rows({row: len(peers) for row, peers in rows.items()}, current.peer_rows(), VTEP_MAX_PEERS)
    for (vni, ifindex), peers in sorted(rows.items()):
        for copy, value in enumerate(peers):
            put("tunnel_peers", ctypes.c_uint32(first[(vni, ifindex)] + copy), value)
        # Also admits the VNI on the port.
        row = PortVni(vni_slot=vni_slot[vni], peers=len(peers), first_peer=first[(vni, ifindex)])
        put("port_vnis", PortVniKey(vni, ifindex), row)
        key = ctypes.c_uint32(vni_slot[vni])
        if bytes(key) not in out.entries["vni_tunnels"]:  # sorted: the VNI's first tunnel port
            put("vni_tunnels", key, VniTunnel(vni, ifindex, row.first_peer, row.peers))
    return out


def _inner(group_ref: bytes) -> libbpf.Map:
    """A member group by the id the outer map returns; the caller closes its fd."""
    return libbpf.Map.from_fd(libbpf.map_fd_by_id(int.from_bytes(group_ref, "little")))


class VtepMaps:
    """The VTEP instance's maps by name (the loaded object's, which are the pinned ones when reused)."""

    def __init__(self, maps: dict[str, libbpf.Map]):
        self.maps = maps

    def read(self) -> MapContents:
        out = MapContents()
        for name in CONFIG_MAPS:
            entries = self.maps[name].dump()
            if name in ARRAY_MAPS:
                entries = [(k, v) for k, v in entries if any(v)]
            out.entries[name] = dict(entries)
        for (kind, size), name in GROUP_MAPS.items():
            for raw_vni, ref in self.maps[name].dump():
                vni = int.from_bytes(raw_vni, "little")
                inner = _inner(ref)
                try:
                    values = {int.from_bytes(k, "little"): DevmapVal.from_buffer_copy(v) for k, v in inner.dump()}
                finally:
                    libbpf.close_fd(inner.fd)
                out.groups[kind][vni] = {member: value.ifindex for member, value in values.items()}
                out.where[(kind, vni)] = size
                out.egress_prog_ids.update(value.prog for value in values.values())
        return out


@dataclass
class GroupChange:
    kind: str  # flood or local
    vni: int
    size: str  # the map class the group lives in after the change
    adds: dict[int, int]  # member key -> ifindex (all members when the group is new or moves)
    removes: list[int]
    moved_from: str | None = None  # the class it leaves, when its member count crossed VTEP_SMALL_GROUP


@dataclass
class MapDiff:
    upserts: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    deletes: dict[str, list[bytes]] = field(default_factory=dict)
    groups: list[GroupChange] = field(default_factory=list)
    groups_removed: list[tuple[str, int, str]] = field(default_factory=list)  # (kind, vni, size)
    fresh_port_slots: list[int] = field(default_factory=list)
    fresh_vni_slots: list[int] = field(default_factory=list)
    rewire_egress: bool = False  # every member must move to a new egress program

    @property
    def empty(self) -> bool:
        return not (
            any(self.upserts.values())
            or any(self.deletes.values())
            or self.groups
            or self.groups_removed
            or self.rewire_egress
        )


def diff(current: MapContents, desired: MapContents) -> MapDiff:
    d = MapDiff()
    for name, want in desired.entries.items():
        have = current.entries.get(name, {})
        d.upserts[name] = {k: v for k, v in want.items() if have.get(k) != v}
        d.deletes[name] = [k for k in have if k not in want]
    for kind, want_groups in desired.groups.items():
        have_groups = current.groups[kind]
        for vni, members in want_groups.items():
            size = group_class(members)
            have = have_groups.get(vni)
            was = current.where.get((kind, vni))
            if have is None or was != size:
                d.groups.append(GroupChange(kind, vni, size, dict(members), [], moved_from=was))
                continue
            adds = {k: v for k, v in members.items() if have.get(k) != v}
            removes = [k for k in have if k not in members]
            if adds or removes:
                d.groups.append(GroupChange(kind, vni, size, adds, removes))
        d.groups_removed += [(kind, vni, current.where[(kind, vni)]) for vni in have_groups if vni not in want_groups]
    d.fresh_port_slots = sorted(set(desired.port_slots().values()) - set(current.port_slots().values()))
    d.fresh_vni_slots = sorted(set(desired.vni_slots().values()) - set(current.vni_slots().values()))
    return d


class Writer:
    """Applies a MapDiff; remembers how to undo each step, so a failure half-way restores the previous state."""

    def __init__(self, maps: dict[str, libbpf.Map], current: MapContents, egress_fd: int):
        self.maps = maps
        self.current = current
        self.egress_fd = egress_fd
        self.undo: list = []
        self._open: list[int] = []

    def _remove(self, name: str, key: bytes) -> None:
        m = self.maps[name]
        if name in ARRAY_MAPS:
            m.update(key, bytes(m.value_size))
        else:
            m.delete(key)

    def _put(self, name: str, key: bytes, value: bytes) -> None:
        old = self.current.entries.get(name, {}).get(key)
        m = self.maps[name]
        m.update(key, value)
        self.undo.append(lambda: m.update(key, old) if old is not None else self._remove(name, key))

    def _delete(self, name: str, key: bytes) -> None:
        old = self.current.entries[name][key]
        m = self.maps[name]
        self._remove(name, key)
        self.undo.append(lambda: m.update(key, old))

    def _group(self, kind: str, size: str, vni: int) -> tuple[libbpf.Map, bool]:
        """The VNI's member group in the map of its size class, and whether it is new (not yet published)."""
        found = self.maps[GROUP_MAPS[(kind, size)]].lookup(u32(vni))
        if found is not None:
            group = _inner(found)
        else:
            fd = libbpf.map_create(BPF_MAP_TYPE_DEVMAP_HASH, f"{kind}{vni}", 4, 8, GROUP_CAPACITY[size])
            group = libbpf.Map.from_fd(fd)
        self._open.append(group.fd)
        return group, found is None

    def _publish(self, kind: str, size: str, vni: int, group: libbpf.Map) -> None:
        outer, key = self.maps[GROUP_MAPS[(kind, size)]], u32(vni)
        outer.update(key, u32(group.fd))
        self.undo.append(lambda: outer.delete(key))

    def _member(self, group: libbpf.Map, member: int, ifindex: int) -> None:
        key = u32(member)
        old = group.lookup(key)
        group.update(key, bytes(DevmapVal(ifindex, self.egress_fd)))
        if old is None:
            self.undo.append(lambda: group.delete(key))
        # A changed member's old program is known by id only and cannot be written back by fd; undoing leaves it
        # on the new egress program, which serves the old entries as well.

    def _remove_member(self, group: libbpf.Map, change: GroupChange, member: int) -> None:
        key = u32(member)
        readd = bytes(DevmapVal(self.current.groups[change.kind][change.vni][member], self.egress_fd))
        group.delete(key)
        self.undo.append(lambda: group.update(key, readd))

    def _zero(self, name: str, slots: list[int]) -> None:
        m = self.maps[name]
        zeros = bytes(m.value_buffer_size)
        for slot in slots:
            m.update(u32(slot), zeros)

    def apply(self, d: MapDiff, desired: MapContents) -> None:
        try:
            # Make before break: fresh counters, configuration entries, members in; then members out, removals.
            self._zero("port_stats", d.fresh_port_slots)
            self._zero("vni_stats", d.fresh_vni_slots)
            for name, entries in d.upserts.items():
                for key, value in entries.items():
                    self._put(name, key, value)
            changes = d.groups
            if d.rewire_egress:
                touched = {(c.kind, c.vni) for c in changes}
                changes = changes + [
                    GroupChange(kind, vni, group_class(members), dict(members), [])
                    for kind, groups in desired.groups.items()
                    for vni, members in groups.items()
                    if (kind, vni) not in touched
                ]
            for change in changes:
                group, new = self._group(change.kind, change.size, change.vni)
                for member, ifindex in change.adds.items():
                    self._member(group, member, ifindex)
                if new:  # a new group goes live only when complete
                    self._publish(change.kind, change.size, change.vni, group)
            for change in changes:
                if change.moved_from:
                    self.maps[GROUP_MAPS[(change.kind, change.moved_from)]].delete(u32(change.vni))
                    continue
                group, _new = self._group(change.kind, change.size, change.vni)
                for member in change.removes:
                    self._remove_member(group, change, member)
            for kind, vni, size in d.groups_removed:
                self.maps[GROUP_MAPS[(kind, size)]].delete(u32(vni))
            for name, keys in d.deletes.items():
                for key in keys:
                    self._delete(name, key)
        except (libbpf.LibbpfError, ValueError):
            self.rollback()
            raise

    def rollback(self) -> None:
        """Undo what apply() wrote; also after apply() returned, when a later step (the attach) failed."""
        for step in reversed(self.undo):
            with contextlib.suppress(libbpf.LibbpfError):  # best effort: the error that made us roll back is reported
                step()
        self.undo.clear()

    def close(self) -> None:
        for fd in self._open:
            libbpf.close_fd(fd)
        self._open.clear()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def describe(contents: MapContents, names: dict[int, str]) -> dict[int, set[str]]:
    """What a VTEP's maps say, per VNI, in words: members and peers (VNI 0: the VTEP's tunnel ports)."""

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
    peers = contents.entries["tunnel_peers"]
    for (vni, ifindex), (first, count) in contents.peer_rows().items():
        for index in range(first, first + count):
            raw = peers.get(bytes(ctypes.c_uint32(index)))
            if raw is not None:
                peer = PeerValue.from_buffer_copy(raw)
                said = f"peer {ip_str(peer.remote_ip)} via {name(ifindex)} ({mac_str(peer.mac)})"
                out.setdefault(vni, set()).add(said)
    for ifindex, port in ports.items():
        if port.kind == PORT_TUNNEL:
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


def counters(maps: dict[str, libbpf.Map], contents: MapContents, names: dict[int, str]) -> dict:
    """Per-VNI and per-port counters, summed over CPUs, with drops by reason (non-zero only)."""

    def total(stats: list[TrafficStats]) -> dict:
        out = {f: sum(getattr(s, f) for s in stats) for f in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")}
        out["drops"] = {reason: n for i, reason in enumerate(DROP_REASONS) if (n := sum(s.drops[i] for s in stats))}
        return out

    vni_stats = TypedMap(maps["vni_stats"], LAYOUTS["vni_stats"])
    port_stats = TypedMap(maps["port_stats"], LAYOUTS["port_stats"])
    return {
        "vnis": {vni: total(vni_stats.get(slot)) for vni, slot in sorted(contents.vni_slots().items())},
        "ports": {
            names.get(ifindex, str(ifindex)): total(port_stats.get(slot))
            for ifindex, slot in sorted(contents.port_slots().items())
        },
    }
