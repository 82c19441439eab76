# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the filter (bpf/filter/filter.c) needs from the kernel, per hook (bpf/features.py says how it is checked).
tests/unit/test_features.py holds these lists to what the compiled object calls and defines."""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.features import Needs

NEEDS = Needs(
    plane="filter",
    source="filter/filter.c",
    helpers={"filter_xdp": ("bpf_map_lookup_elem",), "filter_tc": ("bpf_map_lookup_elem", "bpf_skb_pull_data")},
    map_types=("BPF_MAP_TYPE_ARRAY", "BPF_MAP_TYPE_PERCPU_ARRAY"),
    variants={"hook xdp": ("xdp",), "hook tc": ("tc",)},
)


def variant(hook: str) -> str:
    return f"hook {hook}"
