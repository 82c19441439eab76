# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the router (bpf/router/router.c) needs from the kernel (bpf/features.py says how it is checked).
tests/unit/test_features.py holds these lists to what the compiled object calls and defines."""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.features import Needs

VARIANT = "hook xdp"
NEEDS = Needs(
    plane="router",
    source="router/router.c",
    helpers={"xdp_router": ("bpf_map_lookup_elem", "bpf_redirect_map", "bpf_fib_lookup", "bpf_xdp_adjust_tail")},
    map_types=("BPF_MAP_TYPE_DEVMAP_HASH", "BPF_MAP_TYPE_PERCPU_ARRAY"),
    variants={VARIANT: ("xdp",)},
)
