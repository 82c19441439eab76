# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP's maps as the data plane declares them (bpf/vtep/vtep.h): the key and value layouts (ctypes, checked
against the object's BTF, with the numbers of vtep/abi.py, before anything is written), which maps hold the
configuration, and how values are encoded (addresses in network order).

Nothing here reads or writes a map: plan.py compiles contents in these layouts, writer.py writes them.
"""

from __future__ import annotations

import ctypes
import socket

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import (
    ABI,
    DROP_REASONS,
    FDB_EVENTS,
    VTEP_MAX_MEMBERS,
    VTEP_SMALL_GROUP,
)

# --- Key and value layouts --------------------------------------------------------------------------------------


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
    _fields_ = [("vni", ctypes.c_uint32), ("vni_slot", ctypes.c_uint16), ("flags", ctypes.c_uint16)]


class VlanKey(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("vid", ctypes.c_uint16), ("pad", ctypes.c_uint16)]


class PortVniKey(ctypes.Structure):
    _fields_ = [("vni", ctypes.c_uint32), ("ifindex", ctypes.c_uint32)]


class PortVni(ctypes.Structure):
    _fields_ = [
        ("vid", ctypes.c_uint16),
        ("vni_slot", ctypes.c_uint16),
        ("peers", ctypes.c_uint16),
        ("flags", ctypes.c_uint16),
        ("first_peer", ctypes.c_uint32),
    ]


class PeerValue(ctypes.Structure):
    _fields_ = [
        ("remote_ip", ctypes.c_uint32),
        ("mac", ctypes.c_uint8 * 6),
        ("pad", ctypes.c_uint16),
        ("vni", ctypes.c_uint32),
    ]


class FloodSettings(ctypes.Structure):
    _fields_ = [
        ("vni", ctypes.c_uint32),
        ("tunnel_ifindex", ctypes.c_uint32),
        ("first_peer", ctypes.c_uint32),
        ("peers", ctypes.c_uint16),
        ("frame_limit", ctypes.c_uint16),
        ("tightest_port", ctypes.c_uint32),
        ("others_limit", ctypes.c_uint16),
        ("copy_limit", ctypes.c_uint16),
    ]


class VniMember(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("peer", ctypes.c_uint32)]


class VniMembers(ctypes.Structure):
    """A VNI's members as the TC backend walks them: members[:locals] local ports, members[locals:count] peers."""

    _fields_ = [
        ("vni", ctypes.c_uint32),
        ("locals", ctypes.c_uint16),
        ("count", ctypes.c_uint16),
        ("members", VniMember * VTEP_MAX_MEMBERS),
    ]


class PeerAddrKey(ctypes.Structure):
    _fields_ = [("vni", ctypes.c_uint32), ("addr", ctypes.c_uint32)]


class FdbKey(ctypes.Structure):
    _fields_ = [("vni", ctypes.c_uint32), ("mac", ctypes.c_uint8 * 6), ("pad", ctypes.c_uint16)]


class FdbEntry(ctypes.Structure):
    _fields_ = [
        ("seen_ns", ctypes.c_uint64),  # CLOCK_MONOTONIC (bpf_ktime_get_ns); 0 in a static entry
        ("ifindex", ctypes.c_uint32),
        ("remote_ip", ctypes.c_uint32),  # network order; 0: behind the local port
        ("peer", ctypes.c_uint32),
        ("vid", ctypes.c_uint16),
        ("pad", ctypes.c_uint16),
    ]


class VtepSettings(ctypes.Structure):
    _fields_ = [("aging_ns", ctypes.c_uint64), ("static_entries", ctypes.c_uint32), ("pad", ctypes.c_uint32)]


class TrafficStats(ctypes.Structure):
    _fields_ = [
        ("rx_packets", ctypes.c_uint64),
        ("rx_bytes", ctypes.c_uint64),
        ("tx_packets", ctypes.c_uint64),
        ("tx_bytes", ctypes.c_uint64),
        ("drops", ctypes.c_uint64 * len(DROP_REASONS)),
        ("fdb", ctypes.c_uint64 * len(FDB_EVENTS)),
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
