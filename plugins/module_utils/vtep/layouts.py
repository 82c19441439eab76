# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP's maps: the key and value layouts (ctypes, the one declaration of each: bpf/vtep/vtep_abi.h defines them
for C from here, and they are checked against the object's BTF, with the numbers of vtep/abi.py, before anything
is written), which maps hold the configuration, and how values are encoded (addresses in network order).

The key of VNI 100 ends its walk from the inventory here (docs/architecture.md, "The flow of one VNI").
Nothing here reads or writes a map: plan.py compiles contents in these layouts, writer.py writes them.
"""

from __future__ import annotations

import ctypes
import socket

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.abi import U8, U16, U32, U64, Field
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import (
    ABI,
    DROP_REASONS,
    FDB_EVENTS,
    VTEP_MAX_MEMBERS,
    VTEP_SMALL_GROUP,
)

# --- Key and value layouts --------------------------------------------------------------------------------------


@abi.c_struct("port_config")
class PortConfig(ctypes.Structure):
    """port_config[ifindex]; kind PORT_NONE: not a VTEP port. Slots are small indexes that user space assigns, so
    that per-port and per-VNI state lives in arrays (an index, not a hash lookup, on the per-frame and per-copy
    paths)."""

    _members_ = (
        Field("kind", U32, "enum port_kind"),
        Field("vni", U32, "PORT_ACCESS: the port's VNI"),
        Field("local_ip", U32, "PORT_TUNNEL: outer source address", network_order=True),
        Field("mtu", U16, "the interface's MTU: tunnel copies longer than this are dropped"),
        Field("mac", U8 * 6, "PORT_TUNNEL: outer source MAC"),
        Field("slot", U16, "index in port_stats and copy_state"),
        Field("vni_slot", U16, "PORT_ACCESS: its VNI's slot"),
    )


@abi.c_struct("vni_ref")
class VniRef(ctypes.Structure):
    """vlan_bindings values: a VNI, its slot and its flags (enum vni_flag)"""

    _members_ = (Field("vni", U32), Field("vni_slot", U16), Field("flags", U16))


@abi.c_struct("vlan_key")
class VlanKey(ctypes.Structure):
    """vlan_bindings[{ifindex, vid}] = struct vni_ref"""

    _members_ = (Field("ifindex", U32), Field("vid", U16), Field("pad", U16))


@abi.c_struct("port_vni_key")
class PortVniKey(ctypes.Structure):
    """port_vnis[{vni, ifindex}]: a port's membership in a VNI. Nothing leaves a local port for a VNI it is not a
    member of (on a trunk: it leaves with the VID bound to that VNI); ingress accepts VXLAN on a tunnel port only for
    the VNIs it is a member of, and finds there where the VNI's peers behind that port are in tunnel_peers."""

    _members_ = (Field("vni", U32), Field("ifindex", U32))


@abi.c_struct("port_vni")
class PortVni(ctypes.Structure):
    _members_ = (
        Field("vid", U16, "trunk: the VID of this VNI on the port; otherwise 0"),
        Field("vni_slot", U16, "the VNI's slot"),
        Field("peers", U16, "tunnel: the VNI's peers behind this port, one per copy"),
        Field("flags", U16, "enum vni_flag"),
        Field(
            "first_peer", U32, "tunnel: tunnel_peers index of the peer that copy 0 goes to; copy n gets first_peer + n"
        ),
    )


@abi.c_struct("peer")
class PeerValue(ctypes.Structure):
    """tunnel_peers[index]: a remote VTEP of a VNI, an array so that each copy costs an index, not a hash lookup. A
    devmap entry per peer makes the copies; all entries of a port run the same egress program, so a copy's peer
    comes from its position among the frame's copies (see copy_state), not from which entry made it. An all-zero
    entry is no peer. The FDB names a remote MAC's VTEP by index too; vni and remote_ip tell a stale index."""

    _members_ = (
        Field("remote_ip", U32, network_order=True),
        Field("mac", U8 * 6, "next hop"),
        Field("pad", U16),
        Field("vni", U32),
    )


@abi.c_struct("flood_settings")
class FloodSettings(ctypes.Structure):
    """flood_settings[vni slot]: what ingress needs to flood a frame of the VNI, in an array by slot (no hash
    lookup):

    - frame_limit: the longest frame every local member of the VNI accepts from a devmap (its MTU + 18: the kernel
    drops a longer one before the egress program runs) and every tunnel port of the VNI sends (its MTU + 14: a
    longer tunnel copy must reach egress to be dropped and counted). A flooded frame that fits with its Outer
    carries the Outer to every copy; a longer one carries a 4-byte stamp, and tunnel copies get their Outer in
    egress. A frame from tightest_port (the local member that sets frame_limit) is not copied back to it:
    others_limit is its limit;

    - copy_limit: the longest copy that the device of every member of the VNI (local ports, and tunnel ports of its
    peers) takes from a devmap, its MTU + 18. Only a longer flooded frame can lose copies in the kernel (a stamped
    one, longer than frame_limit): ingress then finds in vni_members which, and counts them;

    - a copy of port_vnis' row for the VNI's first tunnel port (the lowest ifindex; 0: none), so that ingress stamps
    it on a flooded frame and copies to that port need no hash lookup."""

    _members_ = (
        Field("vni", U32, "whose row this is: while a slot passes to another VNI during an update, it is not used"),
        Field("tunnel_ifindex", U32),
        Field("first_peer", U32),
        Field("peers", U16),
        Field("frame_limit", U16),
        Field("tightest_port", U32),
        Field("others_limit", U16),
        Field("copy_limit", U16),
    )


@abi.c_struct("vni_member")
class VniMember(ctypes.Structure):
    """vni_members[vni slot]: the VNI's members as the TC backend walks them to replicate a frame, and as the XDP
    backend's ingress walks them to count the copies a devmap drops for their length (a devmap cannot be iterated
    from BPF): the local ports first (ifindex), then one entry per peer (its tunnel port's ifindex and its
    tunnel_peers index), written from the same plan as the VNI's flood group. A row is written while frames read
    it; each copy is checked as the XDP backend's egress checks it (membership, VID, the peer's VNI), so a row read
    half old, half new never sends a frame where its VNI does not go."""

    _members_ = (Field("ifindex", U32), Field("peer", U32, "a peer: its tunnel_peers index"))


@abi.c_struct("vni_members")
class VniMembers(ctypes.Structure):
    _members_ = (
        Field("vni", U32, "whose row this is: while a slot passes to another VNI during an update, it is not used"),
        Field("locals", U16, "members[0, locals) are local ports"),
        Field("count", U16, "members[locals, count) are peers"),
        Field("members", VniMember * VTEP_MAX_MEMBERS, length="VTEP_MAX_MEMBERS"),
    )


@abi.c_struct("peer_addr_key")
class PeerAddrKey(ctypes.Structure):
    """peer_admission[{vni, remote_ip}] = the peer's tunnel_peers index: VXLAN for a VNI is accepted only from a
    configured peer of it, and only on a tunnel port that is a member of the VNI (port_vnis)."""

    _members_ = (Field("vni", U32), Field("addr", U32, network_order=True))


@abi.c_struct("fdb_key")
class FdbKey(ctypes.Structure):
    """The FDB: fdb_static (the document's entries, never aged) and fdb (learned, an LRU of fdb_size entries)."""

    _members_ = (Field("vni", U32), Field("mac", U8 * 6), Field("pad", U16))


@abi.c_struct("fdb_entry")
class FdbEntry(ctypes.Structure):
    _members_ = (
        Field(
            "seen_ns",
            U64,
            "learned: CLOCK_MONOTONIC (coarse) of the last frame from the MAC, refreshed every FDB_REFRESH_NS; 0 in "
            "a static entry",
        ),
        Field("ifindex", U32, "the local port, or the tunnel port towards the remote VTEP"),
        Field("remote_ip", U32, "the remote VTEP; 0: the MAC is behind the local port", network_order=True),
        Field("peer", U32, "remote: that VTEP's tunnel_peers index for the VNI"),
        Field("vid", U16, "learned on a trunk: the frame's VID"),
        Field("pad", U16),
    )


@abi.c_struct("vtep_settings")
class VtepSettings(ctypes.Structure):
    """settings[0]: the VTEP's own settings."""

    _members_ = (
        Field("aging_ns", U64, "a learned entry older than this is gone"),
        Field("static_entries", U32, "entries in fdb_static: none, no lookup"),
        Field("pad", U32),
    )


@abi.c_struct("traffic_stats")
class TrafficStats(ctypes.Structure):
    """port_stats[port slot] and vni_stats[vni slot], per CPU."""

    _members_ = (
        Field("rx_packets", U64),
        Field("rx_bytes", U64),
        Field("tx_packets", U64, "copies sent"),
        Field("tx_bytes", U64),
        Field("drops", U64 * len(DROP_REASONS), length="DROP_REASONS"),
        Field("fdb", U64 * len(FDB_EVENTS), "per VNI only", length="FDB_EVENTS"),
    )


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
        MapLayout("flood_settings", ctypes.c_uint32, FloodSettings),
        MapLayout("vni_members", ctypes.c_uint32, VniMembers),
        MapLayout("peer_admission", PeerAddrKey, ctypes.c_uint32),
        MapLayout("settings", ctypes.c_uint32, VtepSettings),
        MapLayout("fdb_static", FdbKey, FdbEntry),
        MapLayout("fdb", FdbKey, FdbEntry),
        MapLayout("fdb_generation", ctypes.c_uint32, ctypes.c_uint64),
        MapLayout("vni_stats", ctypes.c_uint32, TrafficStats, ABI),
        MapLayout("port_stats", ctypes.c_uint32, TrafficStats, ABI),
    )
}

# bpf/vtep/vtep_abi.h: the numbers of abi.py, then these structs for C (copy_state, which only C reads, is in
# bpf/vtep/vtep.h; DevmapVal is the kernel's).
HEADER = abi.Header(
    ABI,
    "plugins/module_utils/vtep/layouts.py",
    (
        PortConfig,
        VniRef,
        VlanKey,
        PortVniKey,
        PortVni,
        PeerValue,
        FloodSettings,
        VniMember,
        VniMembers,
        PeerAddrKey,
        FdbKey,
        FdbEntry,
        VtepSettings,
        TrafficStats,
    ),
)

# --- Which maps hold what ---------------------------------------------------------------------------------------

# In the order they are written: a row of peers is in tunnel_peers before port_vnis and flood_settings point at it,
# and static FDB entries are in fdb_static before settings says there are some.
CONFIG_MAPS = (
    "port_config",
    "vlan_bindings",
    "tunnel_peers",
    "port_vnis",
    "vni_members",
    "flood_settings",
    "peer_admission",
    "fdb_static",
    "settings",
)
# Arrays among them: every index exists, an all-zero value is an absent entry and removing one writes zeros.
ARRAY_MAPS = ("port_config", "tunnel_peers", "vni_members", "flood_settings", "settings")
# The learned FDB: the data plane writes it, user space only reads it (and drops what a static entry overrides).
LEARNED_FDB = "fdb"
# fdb_generation[0]: the data plane adds 1 when a learned entry comes, moves or goes; user space adds this after
# changing fdb_static, so the CPUs' cached lookups are stale (its own half: a racing add of the other is not lost).
FDB_GENERATION = "fdb_generation"
USER_FDB_GENERATION_STEP = 1 << 32
# ARRAY_OF_MAPS: VNI slot -> DEVMAP_HASH of members (sizes only, no BTF). "flood" groups serve frames from local
# ports, "local" groups (local members only: split horizon) decapsulated ones. Broadcast walks every bucket of a
# group, so groups of up to VTEP_SMALL_GROUP members live in the small maps.
GROUP_MAPS = {
    ("flood", "small"): "vni_flood",
    ("flood", "large"): "vni_flood_large",
    ("local", "small"): "vni_local",
    ("local", "large"): "vni_local_large",
}
GROUP_CAPACITY = {"small": VTEP_SMALL_GROUP, "large": VTEP_MAX_MEMBERS}
# A devmap hands a frame to a port only when it is at most the port's MTU + 18 (Ethernet header and one VLAN tag,
# kernel xdp_ok_fwd_dev): flood_settings.frame_limit, the longest flooded frame that may carry its Outer, and
# flood_settings.copy_limit, above which ingress counts the copies a member's device refuses.
DEVMAP_FRAME_ALLOWANCE = 18
ETH_HLEN = 14  # a tunnel copy fits when its frame is at most the tunnel port's MTU + the Ethernet header
FRAME_LIMIT_MAX = 0xFFFF
MAP_NAMES = (*LAYOUTS, *GROUP_MAPS.values())
# The object's programs. The XDP backend: the ingress program of each XDP mode (a flooded frame's short stamp travels
# as metadata in native mode; generic mode's egress programs see no metadata, and take it from the CPU's record of
# the frame) and the groups' egress program, which reads both. The TC backend
# (XDP + TC): one XDP ingress program for both modes, which hands forwarding to the tc ingress program.
BACKENDS = ("xdp", "tc")
INGRESS_PROGRAMS = {"native": "vtep_ingress", "generic": "vtep_ingress_generic"}
EGRESS_PROGRAM = "vtep_egress"
TC_BACKEND_INGRESS_PROGRAM = "vtep_ingress_tc"
TC_PROGRAM = "vtep_replicate"


def ingress_program(backend: str, mode: str) -> str:
    """The XDP program a VTEP port runs, for a backend and an XDP mode."""
    return TC_BACKEND_INGRESS_PROGRAM if backend == "tc" else INGRESS_PROGRAMS[mode]


def group_class(members: dict) -> str:
    """The group maps a group of this many members lives in."""
    return "small" if len(members) <= VTEP_SMALL_GROUP else "large"


# --- Encodings --------------------------------------------------------------------------------------------------


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
