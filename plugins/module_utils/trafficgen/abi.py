# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The traffic generator's numbers, declared once for C and Python: the limits of a template as the sender's maps
hold it (a template is validated against them before anything is loaded), and how an entry's writes are sized.

bpf/trafficgen/trafficgen_abi.h is generated from this file and the structs of layouts.py (`make abi`), and
bpf/trafficgen/tg_match.h includes it. The sender's map layouts in layouts.py carry ABI, so loading the sender
checks these numbers against its BTF (see bpf/abi.py).
"""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi

LIMITS = abi.Enum(
    "tg_limits",
    "A template's limits, as the sender's maps hold it.",
    (
        (
            "TG_HEADER_MAX",
            128,
            "bytes of a base packet rewritten per frame, at most (a power of two: diff offsets are masked with it)",
        ),
        ("TG_HEADER_WORD", 8, "the sender rewrites the header in words of this many bytes (tg_cpu.header_words)"),
        ("TG_BASES_MAX", 8, "base packets of a template (tg_bases)"),
        ("TG_DIFFS_MAX", 8, "writes per entry (tg_entry.diffs)"),
        ("TG_ENTRIES_MAX", 65536, "entries of a template's cycle (tg_entries, sized to the template before load)"),
    ),
)
TG_HEADER_MAX = LIMITS["TG_HEADER_MAX"]
TG_HEADER_WORD = LIMITS["TG_HEADER_WORD"]
TG_BASES_MAX = LIMITS["TG_BASES_MAX"]
TG_DIFFS_MAX = LIMITS["TG_DIFFS_MAX"]
TG_ENTRIES_MAX = LIMITS["TG_ENTRIES_MAX"]

DIFF_SIZE = abi.Enum(
    "tg_diff_size",
    "tg_diff.size: the writes the sender makes, in bytes.",
    (
        ("TG_DIFF_U8", 1, "the last byte of a frame of odd length"),
        ("TG_DIFF_U16", 2, "one 16-bit word"),
        ("TG_DIFF_U32", 4, "two adjacent 16-bit words"),
    ),
)
TG_DIFF_U16 = DIFF_SIZE["TG_DIFF_U16"]
TG_DIFF_U32 = DIFF_SIZE["TG_DIFF_U32"]

ABI = abi.Abi(
    name="trafficgen",
    header="bpf/trafficgen/trafficgen_abi.h",
    source="plugins/module_utils/trafficgen/abi.py",
    doc="The traffic generator's limits and encodings, shared by the sender and user space.",
    enums=(LIMITS, DIFF_SIZE),
)
