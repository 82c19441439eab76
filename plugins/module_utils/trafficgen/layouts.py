# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The traffic generator's maps, of the sender (bpf/trafficgen/sender.c) and of the echo server (echo.c): key and
value layouts (ctypes, the one declaration of each: bpf/trafficgen/trafficgen_abi.h defines them for C from here,
and they are checked against the object's BTF, with the numbers of trafficgen/abi.py, before it loads)."""

from __future__ import annotations

import ctypes

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.abi import U8, U16, U32, U64, Field
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.abi import ABI, TG_DIFFS_MAX, TG_HEADER_MAX


@abi.c_struct("tg_base")
class TgBase(ctypes.Structure):
    """tg_bases[i]: the first header_words words of base packet i (headers, then payload bytes)."""

    _members_ = (Field("header", U8 * TG_HEADER_MAX, length="TG_HEADER_MAX"),)


@abi.c_struct("tg_diff")
class TgDiff(ctypes.Structure):
    """One write at a frame offset; value holds the bytes in frame order."""

    _members_ = (
        Field("offset", U16),
        Field("size", U8, "enum tg_diff_size"),
        Field("pad", U8),
        Field("value", U8 * 4),
    )


@abi.c_struct("tg_entry")
class TgEntry(ctypes.Structure):
    """tg_entries[k]: frame k of the cycle, a base packet plus the bytes that differ from it (checksums included:
    user space computes them once per entry, so nothing is summed per frame)."""

    _members_ = (
        Field("base", U8),
        Field("diff_count", U8),
        Field("frame_len", U16, "the frame is trimmed to this when shorter than the run's data_in"),
        Field("pad", U32),
        Field("diffs", TgDiff * TG_DIFFS_MAX, length="TG_DIFFS_MAX"),
    )


@abi.c_struct("tg_cpu")
class TgCpu(ctypes.Structure):
    """tg_cpu[0], per CPU: one sender thread's controls (written by user space before each run, so one loaded
    object serves a whole frame-size sweep), its place in the cycle and its counters."""

    _members_ = (
        Field("interval_ns", U64, "pacing: time between frames on this CPU; 0 sends as fast as possible"),
        Field("limit", U64, "stop sending after this many frames on this CPU; 0 = no limit"),
        Field("entry_count", U32, "entries in tg_entries"),
        Field("header_words", U16, "words (TG_HEADER_WORD bytes) of the base rewritten per frame"),
        Field("data_len", U16, "length of the run's data_in: entries shorter than this are trimmed"),
        Field("next_ns", U64, "pacing: when the next frame is due"),
        Field("next_entry", U32),
        Field("pad", U32),
        Field("tx_packets", U64),
        Field("tx_bytes", U64),
        Field("paced", U64, "iterations spent waiting for the pace (dropped without sending)"),
    )


@abi.c_struct("tg_counter")
class TgCounter(ctypes.Structure):
    """Frames counted by the echo server and by the sender's return counter, per CPU."""

    _members_ = (Field("packets", U64), Field("bytes", U64))


HEADER = abi.Header(ABI, "plugins/module_utils/trafficgen/layouts.py", (TgBase, TgDiff, TgEntry, TgCpu, TgCounter))

SENDER_LAYOUTS = {
    layout.map_name: layout
    for layout in (
        MapLayout("tg_bases", ctypes.c_uint32, TgBase),
        MapLayout("tg_entries", ctypes.c_uint32, TgEntry, ABI),  # diff sizes
        MapLayout("tg_cpu", ctypes.c_uint32, TgCpu, ABI),  # header words
        MapLayout("tg_returned", ctypes.c_uint32, TgCounter),
    )
}
ECHO_LAYOUTS = (MapLayout("echo_counters", ctypes.c_uint32, TgCounter),)
