# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the VTEP's maps should hold and what must change to get there: pure data, no kernel.

Following a VNI from the inventory (docs/architecture.md, "The flow of one VNI"): config.validate() gives
Vni(vni=100, access_ports=(AccessPort("acc100"),), ...); compile_desired() turns it into port_vnis[{100,
ifindex(acc100)}], the flood group of VNI 100 = {ifindex(acc100): ...} and so on; diff() compares that with what the
maps hold now (writer.read()) and gives every entry and group member to write or remove, among them the members that
must move onto a new egress program. writer.py writes the difference, words.py says it.

Every compiled entry and member remembers the document path of the item it comes from (MapContents.origins), so
that a write the kernel refuses names that item.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import (
    NS_PER_S,
    PORT_ACCESS,
    PORT_TRUNK,
    PORT_TUNNEL,
    VNI_PRESERVE_VLAN,
    VTEP_MAX_PEERS,
    VTEP_MAX_PORTS,
    VTEP_MAX_VNIS,
    peer_member_key,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import VtepConfig
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import (
    ARRAY_MAPS,
    CONFIG_MAPS,
    DEVMAP_FRAME_ALLOWANCE,
    ETH_HLEN,
    FRAME_LIMIT_MAX,
    FdbEntry,
    FdbKey,
    FloodSettings,
    PeerAddrKey,
    PeerValue,
    PortConfig,
    PortVni,
    PortVniKey,
    VlanKey,
    VniMember,
    VniMembers,
    VniRef,
    VtepSettings,
    group_class,
    ip_be,
    mac_bytes,
)


class DoesNotFit(ValueError):
    """The configuration needs more room than the data plane's maps have; raised before anything is written."""


@dataclass(frozen=True)
class Port:
    """A host interface as the VTEP uses it."""

    name: str
    ifindex: int
    mtu: int
    mac: str


@dataclass
class MapContents:
    """What a VTEP's maps hold (or should hold).

    entries: config map name -> {key bytes: value bytes}; groups: "flood"/"local" -> {vni: {member key: ifindex}},
    each at its VNI's slot (vni_slots()); where: (group kind, vni) -> "small"/"large", the map a group lives in;
    egress_tags: the tags of the egress programs the members run (of the loaded one, in desired contents); origins:
    the document path each entry and member comes from, keyed (map name, key bytes), (group kind, vni) and
    (group kind, vni, member key).
    """

    entries: dict[str, dict[bytes, bytes]] = field(default_factory=lambda: {name: {} for name in CONFIG_MAPS})
    groups: dict[str, dict[int, dict[int, int]]] = field(default_factory=lambda: {"flood": {}, "local": {}})
    where: dict[tuple[str, int], str] = field(default_factory=dict)
    egress_tags: set[str] = field(default_factory=set)
    origins: dict[tuple, str] = field(default_factory=dict)

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
    """Slots for the wanted keys: the ones they have now, the smallest free ones for newcomers, taking a slot that
    a key leaves in this update only when no other is free (its old state is then still in place while it goes)."""
    slots = {key: slot for key, slot in current.items() if key in wanted}
    leaving = set(current.values()) - set(slots.values())
    never = set(range(capacity)) - set(slots.values()) - leaving
    free = iter([*sorted(never), *sorted(leaving)])
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


def place_rows(wanted: dict, current: dict[tuple, tuple[int, int]], capacity: int, paths: dict) -> dict:
    """The first tunnel_peers index of each wanted row ((vni, ifindex) -> number of peers). A row stays where it
    is when it shrinks or keeps its size, or grows into free indexes; otherwise it moves to indexes that no current
    row uses, so the peers it moves to are written before port_vnis points at them and the old ones still serve
    until then. paths: row -> the document path that lists its peers, for DoesNotFit's message."""
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
            raise DoesNotFit(
                f"{paths[row]}: no room for {count} more peers of VNI {row[0]} in tunnel_peers, the data plane's "
                f"limit of {capacity} (VTEP_MAX_PEERS)"
            )
        placed[row] = first
        taken.update(range(first, first + count))
        hint = first + count
    return placed


def compile_desired(
    config: VtepConfig,
    ports: dict[str, Port],
    peer_macs: dict[tuple[int, str], str],
    current: MapContents,
    egress_tag: str,
) -> MapContents:
    """The map contents that realise a configuration, with every member on the egress program `egress_tag`.
    peer_macs: (vni, peer ip) -> next-hop MAC, for peers without one. Ports and VNIs keep the counter slots they
    have in `current`, and rows of peers their place where they can. Raises DoesNotFit."""
    out = MapContents(egress_tags={egress_tag})
    port_slot = assign_slots({ports[n].ifindex for n in config.ports()}, current.port_slots(), VTEP_MAX_PORTS)
    vni_slot = assign_slots({v.vni for v in config.vnis}, current.vni_slots(), VTEP_MAX_VNIS)

    def put(map_name: str, key, value, origin: str) -> None:
        out.entries[map_name][bytes(key)] = bytes(value)
        out.origins[(map_name, bytes(key))] = origin

    def member(kinds, vni: int, key: int, ifindex: int, origin: str) -> None:
        for kind in kinds:
            out.groups[kind][vni][key] = ifindex
            out.origins[(kind, vni, key)] = origin

    def port_config(port: Port, **fields) -> PortConfig:
        return PortConfig(mtu=port.mtu, slot=port_slot[port.ifindex], **fields)

    rows: dict[tuple[int, int], list[tuple[PeerValue, str]]] = {}  # (vni, tunnel ifindex) -> (peer, path), by copy
    vni_flags: dict[int, int] = {}
    row_paths: dict[tuple[int, int], str] = {}
    for tunnel in config.tunnel_ports:
        port = ports[tunnel.port]
        mac = (ctypes.c_uint8 * 6)(*mac_bytes(port.mac))
        put(
            "port_config",
            ctypes.c_uint32(port.ifindex),
            port_config(port, kind=PORT_TUNNEL, local_ip=ip_be(tunnel.local_ip), mac=mac),
            tunnel.path,
        )
    for vni in config.vnis:
        slot = vni_slot[vni.vni]
        for kind in ("flood", "local"):
            out.groups[kind][vni.vni] = {}
            out.origins[(kind, vni.vni)] = vni.path
        flags = VNI_PRESERVE_VLAN if vni.vlan_mode == "preserve" else 0
        vni_flags[vni.vni] = flags
        for access in vni.access_ports:
            port = ports[access.port]
            put(
                "port_config",
                ctypes.c_uint32(port.ifindex),
                port_config(port, kind=PORT_ACCESS, vni=vni.vni, vni_slot=slot),
                access.path,
            )
            put("port_vnis", PortVniKey(vni.vni, port.ifindex), PortVni(vni_slot=slot, flags=flags), access.path)
            member(("flood", "local"), vni.vni, port.ifindex, port.ifindex, access.path)
        for trunk in vni.trunks:
            port = ports[trunk.port]
            put("port_config", ctypes.c_uint32(port.ifindex), port_config(port, kind=PORT_TRUNK), trunk.path)
            put("vlan_bindings", VlanKey(port.ifindex, trunk.vid), VniRef(vni.vni, slot, flags), trunk.path)
            binding = PortVni(vid=trunk.vid, vni_slot=slot, flags=flags)
            put("port_vnis", PortVniKey(vni.vni, port.ifindex), binding, trunk.path)
            member(("flood", "local"), vni.vni, port.ifindex, port.ifindex, trunk.path)
        copies: dict[str, int] = {}
        for peer in vni.peers:  # validated order: by (via, ip), so copy numbers are stable between runs
            port = ports[peer.via]
            copy = copies.get(peer.via, 0)
            copies[peer.via] = copy + 1
            mac = peer.mac or peer_macs[(vni.vni, peer.ip)]
            value = PeerValue(remote_ip=ip_be(peer.ip), mac=(ctypes.c_uint8 * 6)(*mac_bytes(mac)), vni=vni.vni)
            rows.setdefault((vni.vni, port.ifindex), []).append((value, peer.path))
            row_paths[(vni.vni, port.ifindex)] = f"{vni.path}.peers"
            member(("flood",), vni.vni, peer_member_key(port.ifindex, copy), port.ifindex, peer.path)
        if not out.groups["local"][vni.vni]:
            del out.groups["local"][vni.vni]
    wanted = {row: len(peers) for row, peers in rows.items()}
    first = place_rows(wanted, current.peer_rows(), VTEP_MAX_PEERS, row_paths)
    peer_index: dict[tuple[int, int], tuple[int, int]] = {}  # (vni, remote ip) -> (tunnel_peers index, ifindex)
    first_tunnel: dict[int, tuple[int, int, int]] = {}  # vni -> (ifindex, first_peer, peers) of its first tunnel port
    remote: dict[int, list[tuple[int, int]]] = {}  # vni -> (tunnel ifindex, tunnel_peers index) of each peer, by copy
    for (vni, ifindex), peers in sorted(rows.items()):
        remote.setdefault(vni, []).extend((ifindex, first[(vni, ifindex)] + copy) for copy in range(len(peers)))
        for copy, (value, path) in enumerate(peers):
            index = first[(vni, ifindex)] + copy
            put("tunnel_peers", ctypes.c_uint32(index), value, path)
            put("peer_admission", PeerAddrKey(vni, value.remote_ip), ctypes.c_uint32(index), path)
            peer_index[(vni, value.remote_ip)] = (index, ifindex)
        # Also admits the VNI on the port.
        row = PortVni(vni_slot=vni_slot[vni], peers=len(peers), flags=vni_flags[vni], first_peer=first[(vni, ifindex)])
        put("port_vnis", PortVniKey(vni, ifindex), row, row_paths[(vni, ifindex)])
        if vni not in first_tunnel:  # sorted: the VNI's first tunnel port
            first_tunnel[vni] = (ifindex, row.first_peer, row.peers)
    for vni in config.vnis:
        # The TC backend's list of the flood group: the local ports, then each peer by its tunnel_peers index.
        local_ports = [ports[m.port].ifindex for m in (*vni.access_ports, *vni.trunks)]
        peers = remote.get(vni.vni, [])
        listed = [VniMember(ifindex, 0) for ifindex in local_ports] + [VniMember(i, p) for i, p in peers]
        row = VniMembers(vni.vni, len(local_ports), len(listed))
        row.members[: len(listed)] = listed
        put("vni_members", ctypes.c_uint32(vni_slot[vni.vni]), row, vni.path)
    for vni in config.vnis:
        # The longest frame with its Outer that every local member takes, and that the others take when the
        # tightest one sends (a copy never goes back to its sender); and that every tunnel port sends (longer tunnel
        # copies are the egress program's to drop and count, so they must reach it).
        limits = sorted(
            (min(ports[m.port].mtu + DEVMAP_FRAME_ALLOWANCE, FRAME_LIMIT_MAX), ports[m.port].ifindex)
            for m in (*vni.access_ports, *vni.trunks)
        )
        tunnel_limit = min((ports[p.via].mtu + ETH_HLEN for p in vni.peers), default=FRAME_LIMIT_MAX)
        frame_limit, tightest = limits[0] if limits else (FRAME_LIMIT_MAX, 0)
        others_limit = limits[1][0] if len(limits) > 1 else FRAME_LIMIT_MAX
        # The longest copy every member's device takes (tunnel ports too): a longer flooded frame loses copies in the
        # kernel, which ingress counts.
        tunnel_copy_limit = min((ports[p.via].mtu + DEVMAP_FRAME_ALLOWANCE for p in vni.peers), default=FRAME_LIMIT_MAX)
        flooding = FloodSettings(
            vni.vni,
            *first_tunnel.get(vni.vni, (0, 0, 0)),
            min(frame_limit, tunnel_limit),
            tightest,
            others_limit=min(others_limit, tunnel_limit),
            copy_limit=min(frame_limit, tunnel_copy_limit, FRAME_LIMIT_MAX),
        )
        put("flood_settings", ctypes.c_uint32(vni_slot[vni.vni]), flooding, vni.path)
    statics = 0
    for vni in config.vnis:
        vids = {trunk.port: trunk.vid for trunk in vni.trunks}
        for entry in vni.fdb:
            key = FdbKey(vni.vni, (ctypes.c_uint8 * 6)(*mac_bytes(entry.mac)))
            if entry.port is not None:
                value = FdbEntry(ifindex=ports[entry.port].ifindex, vid=vids.get(entry.port, 0))
            else:
                index, ifindex = peer_index[(vni.vni, ip_be(entry.remote))]
                value = FdbEntry(ifindex=ifindex, remote_ip=ip_be(entry.remote), peer=index)
            put("fdb_static", key, value, entry.path)
            statics += 1
    aging = VtepSettings(aging_ns=config.fdb_aging * NS_PER_S, static_entries=statics)
    put("settings", ctypes.c_uint32(0), aging, "fdb_aging")
    return out


@dataclass
class GroupChange:
    kind: str  # flood or local
    vni: int
    slot: int  # the VNI's slot: the group's index in its map
    size: str  # the map class the group lives in after the change
    adds: dict[int, int]  # member key -> ifindex (all members when the group is new, moves or changes program)
    removes: list[int]
    moved_from: str | None = None  # the class it leaves, when its member count crossed VTEP_SMALL_GROUP


@dataclass
class MapDiff:
    """Everything to write and remove to go from the current contents to the desired ones."""

    upserts: dict[str, dict[bytes, bytes]] = field(default_factory=dict)
    deletes: dict[str, list[bytes]] = field(default_factory=dict)
    groups: list[GroupChange] = field(default_factory=list)
    groups_removed: list[tuple[str, int, str, int]] = field(default_factory=list)  # (kind, vni or None, size, slot)
    fresh_port_slots: list[int] = field(default_factory=list)
    fresh_vni_slots: list[int] = field(default_factory=list)
    origins: dict[tuple, str] = field(default_factory=dict)  # the desired contents' origins

    @property
    def empty(self) -> bool:
        return not (any(self.upserts.values()) or any(self.deletes.values()) or self.groups or self.groups_removed)


def diff(current: MapContents, desired: MapContents) -> MapDiff:
    """The one difference between two contents. When any member runs another egress program than the desired one,
    every member of every group is written again: all entries that send to one device must carry the same egress
    program (the kernel runs the first queued frame's program for the whole flush)."""
    d = MapDiff(origins=desired.origins)
    for name, want in desired.entries.items():
        have = current.entries.get(name, {})
        d.upserts[name] = {k: v for k, v in want.items() if have.get(k) != v}
        d.deletes[name] = [k for k in have if k not in want]
    rewire = bool(current.egress_tags - desired.egress_tags)
    have_slots, want_slots = current.vni_slots(), desired.vni_slots()
    for kind, want_groups in desired.groups.items():
        have_groups = current.groups[kind]
        for vni, members in want_groups.items():
            size, slot = group_class(members), want_slots[vni]
            have = have_groups.get(vni)
            was = current.where.get((kind, vni))
            if have is None or was != size:
                d.groups.append(GroupChange(kind, vni, slot, size, dict(members), [], moved_from=was))
                continue
            adds = dict(members) if rewire else {k: v for k, v in members.items() if have.get(k) != v}
            removes = [k for k in have if k not in members]
            if adds or removes:
                d.groups.append(GroupChange(kind, vni, slot, size, adds, removes))
        for vni in have_groups:
            if vni not in want_groups:
                d.groups_removed.append((kind, vni, current.where[(kind, vni)], have_slots[vni]))
    d.fresh_port_slots = _fresh_slots(current.port_slots(), desired.port_slots())
    d.fresh_vni_slots = _fresh_slots(current.vni_slots(), desired.vni_slots())
    return d


def _fresh_slots(have: dict[int, int], want: dict[int, int]) -> list[int]:
    """The counter slots that start counting for a port or VNI, also one a removed port or VNI leaves behind."""
    return sorted({slot for key, slot in want.items() if have.get(key) != slot})


# What fills each configuration map, in the document's terms (for DoesNotFit).
MAP_CONTENTS = {
    "port_config": "ports (tunnel_ports, access_ports and trunks), by ifindex",
    "vlan_bindings": "trunk bindings (vnis[].trunks)",
    "port_vnis": "VNIs on ports (vnis[].access_ports, vnis[].trunks, and each tunnel port the peers of a VNI are via)",
    "tunnel_peers": "peers (vnis[].peers)",
    "vni_members": "VNIs (vnis)",
    "flood_settings": "VNIs (vnis)",
    "peer_admission": "peers (vnis[].peers)",
    "fdb_static": "static FDB entries (vnis[].fdb)",
    "settings": "VTEP settings",
}


def capacity_problems(current: MapContents, desired: MapContents, capacity: dict[str, int]) -> list[str]:
    """Every configuration map the desired contents overflow, given each map's max_entries (the loaded object's):
    an array indexed beyond it, a hash map with more entries, or one that would hold more while an update adds
    its new entries before removing the old ones. Each problem names the document item of the first entry that
    does not fit."""
    problems = []
    for name, want in desired.entries.items():
        limit, what = capacity[name], MAP_CONTENTS[name]
        where = f"max_entries of {name} in the data plane"
        if name in ARRAY_MAPS:
            beyond = [key for key in want if int.from_bytes(key, "little") >= limit]
            if beyond:
                index = int.from_bytes(beyond[0], "little")
                problems.append(
                    f"{desired.origins[(name, beyond[0])]}: {what} needs index {index} of {name}, beyond its "
                    f"{limit} entries ({where})"
                )
        elif len(want) > limit:
            first = list(want)[limit]
            problems.append(
                f"{desired.origins[(name, first)]}: the document needs {len(want)} entries of {name} for its {what}, "
                f"above the data plane's limit of {limit} ({where})"
            )
        else:
            have = current.entries[name]
            added = [key for key in want if key not in have]
            if len(have) + len(added) > limit:
                going = sum(1 for key in have if key not in want)
                problems.append(
                    f"{desired.origins[(name, added[0])]}: the update adds {len(added)} entries to {name} ({what}) "
                    f"before removing the {going} that go, and {name} holds {limit} at most ({where}): apply a "
                    "document without the items that go first, then this one"
                )
    return problems
