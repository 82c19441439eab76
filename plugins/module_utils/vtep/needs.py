# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the VTEP (bpf/vtep/vtep_xdp.c, and vtep_tc.c for the tc backend) needs from the kernel, per backend
(bpf/features.py says how it is checked).

The XDP programs of both backends are one object; the tc backend's vtep_replicate (open-coded iterators, Linux 6.4)
is an object of its own, which only the tc backend loads. tests/unit/test_features.py holds these lists to what the
compiled objects call and define.
"""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.features import Needs

_INGRESS = (
    "bpf_map_lookup_elem",
    "bpf_map_update_elem",
    "bpf_map_delete_elem",
    "bpf_redirect",
    "bpf_xdp_adjust_head",
    "bpf_redirect_map",
    "bpf_xdp_adjust_meta",
    "bpf_jiffies64",
    "bpf_ktime_get_coarse_ns",
    "bpf_check_mtu",
)
_BROADCAST = ("BPF_F_BROADCAST", "BPF_F_EXCLUDE_INGRESS")

NEEDS = Needs(
    plane="vtep",
    source="vtep/vtep_xdp.c",
    more_sources=("vtep/vtep_tc.c",),
    helpers={
        "vtep_ingress": _INGRESS,
        "vtep_ingress_generic": _INGRESS,
        "vtep_ingress_tc": _INGRESS,
        "vtep_egress": ("bpf_map_lookup_elem", "bpf_xdp_adjust_head", "bpf_xdp_adjust_meta"),
        "vtep_replicate": (
            "bpf_map_lookup_elem",
            "bpf_clone_redirect",
            "bpf_skb_vlan_push",
            "bpf_skb_vlan_pop",
            "bpf_redirect",
            "bpf_skb_change_head",
        ),
    },
    kfuncs={"vtep_replicate": ("bpf_iter_num_new", "bpf_iter_num_next", "bpf_iter_num_destroy")},
    map_types=(
        "BPF_MAP_TYPE_ARRAY",
        "BPF_MAP_TYPE_ARRAY_OF_MAPS",
        "BPF_MAP_TYPE_DEVMAP_HASH",
        "BPF_MAP_TYPE_HASH",
        "BPF_MAP_TYPE_LRU_HASH",
        "BPF_MAP_TYPE_PERCPU_ARRAY",
    ),
    flags={"vtep_ingress": _BROADCAST, "vtep_ingress_generic": _BROADCAST},
    devmap_programs=("vtep_egress",),
    variants={"backend xdp": ("xdp",), "backend tc": ("xdp", "tc")},
    programs={"backend xdp": ("vtep_ingress", "vtep_ingress_generic", "vtep_ingress_tc", "vtep_egress")},
)


def variant(backend: str) -> str:
    return f"backend {backend}"
