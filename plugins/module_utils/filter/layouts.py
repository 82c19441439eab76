# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The filter's maps: key and value layouts (ctypes, the one declaration of each: bpf/filter/filter_abi.h defines
them for C from here, and they are checked against the object's BTF, with the numbers of filter/abi.py, before
anything is written), and the programs of the object by hook."""

from __future__ import annotations

import ctypes

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.abi import U8, U16, U32, U64, Field
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter.abi import (
    ABI,
    FILTER_MAX_RULES,
    FILTER_NAME_LEN,
)

ADDR_WORDS = 4  # an IPv6 address in 32-bit words; IPv4 is word 0, the rest zero (filter.h: FILTER_ADDR_WORDS)


@abi.c_struct("filter_rule")
class FilterRule(ctypes.Structure):
    _members_ = (
        Field("src", U32 * ADDR_WORDS, "network order, already masked"),
        Field("src_mask", U32 * ADDR_WORDS),
        Field("dst", U32 * ADDR_WORDS),
        Field("dst_mask", U32 * ADDR_WORDS),
        Field("sport_lo", U16, "host order, inclusive"),
        Field("sport_hi", U16),
        Field("dport_lo", U16),
        Field("dport_hi", U16),
        Field("proto", U8, "0: any"),
        Field("flags", U8, "enum filter_rule_flag"),
        Field("action", U8, "enum filter_action"),
        Field("pad", U8),
        Field(
            "name",
            U8 * FILTER_NAME_LEN,
            "NUL-padded, for user space: a deployed filter's maps say which rule is which",
            length="FILTER_NAME_LEN",
        ),
    )


@abi.c_struct("filter_order")
class FilterOrder(ctypes.Structure):
    _members_ = (
        Field("count", U32),
        Field("slot", U16 * FILTER_MAX_RULES, length="FILTER_MAX_RULES"),
        Field("unparsed", U8, "enum filter_unparsed: switched with the rules"),
        Field("pad", U8),
    )


@abi.c_struct("filter_counter")
class FilterCounter(ctypes.Structure):
    _members_ = (Field("packets", U64), Field("bytes", U64))


HEADER = abi.Header(ABI, "plugins/module_utils/filter/layouts.py", (FilterRule, FilterOrder, FilterCounter))
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
