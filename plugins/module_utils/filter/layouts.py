# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The filter's maps as the data plane declares them (bpf/filter/filter.h): key and value layouts (ctypes, checked
against the object's BTF, with the numbers of filter/abi.py, before anything is written), and the programs of
the object by hook."""

from __future__ import annotations

import ctypes

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter.abi import (
    ABI,
    FILTER_MAX_RULES,
    FILTER_NAME_LEN,
)

ADDR_WORDS = 4


class FilterRule(ctypes.Structure):
    _fields_ = [
        ("src", ctypes.c_uint32 * ADDR_WORDS),  # network order, masked
        ("src_mask", ctypes.c_uint32 * ADDR_WORDS),
        ("dst", ctypes.c_uint32 * ADDR_WORDS),
        ("dst_mask", ctypes.c_uint32 * ADDR_WORDS),
        ("sport_lo", ctypes.c_uint16),
        ("sport_hi", ctypes.c_uint16),
        ("dport_lo", ctypes.c_uint16),
        ("dport_hi", ctypes.c_uint16),
        ("proto", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("action", ctypes.c_uint8),
        ("pad", ctypes.c_uint8),
        ("name", ctypes.c_uint8 * FILTER_NAME_LEN),  # NUL-padded
    ]


class FilterOrder(ctypes.Structure):
    _fields_ = [
        ("count", ctypes.c_uint32),
        ("slot", ctypes.c_uint16 * FILTER_MAX_RULES),
        ("unparsed", ctypes.c_uint8),  # abi.UNPARSED: the order's rules and this switch together
        ("pad", ctypes.c_uint8),
    ]


class FilterCounter(ctypes.Structure):
    _fields_ = [("packets", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


LAYOUTS = {
    layout.map_name: layout
    for layout in (
        MapLayout("filter_rules", ctypes.c_uint32, FilterRule, ABI),
        MapLayout("filter_order", ctypes.c_uint32, FilterOrder, ABI),
        MapLayout("filter_active", ctypes.c_uint32, ctypes.c_uint32),
        MapLayout("filter_counters", ctypes.c_uint32, FilterCounter),
        MapLayout("filter_unmatched", ctypes.c_uint32, FilterCounter, ABI),
    )
}
MAP_NAMES = tuple(LAYOUTS)
# The object's program per hook: the same core (filter.h) over the same maps.
PROGRAMS = {"xdp": "filter_xdp", "tc": "filter_tc"}
