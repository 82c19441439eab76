# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the traffic generator's two objects need from the kernel (bpf/features.py says how it is checked): the
sender (bpf/trafficgen/sender.c: xdp_send runs through BPF_PROG_RUN in live-frames mode, xdp_count_return is
attached at XDP) and the echo server (bpf/trafficgen/echo.c, at XDP). tests/unit/test_features.py holds these lists
to what the compiled objects call and define."""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.features import Needs

SENDER_VARIANT = "live frames"
ECHO_VARIANT = "hook xdp"
SENDER = Needs(
    plane="sender",
    source="trafficgen/sender.c",
    helpers={
        "xdp_send": ("bpf_map_lookup_elem", "bpf_ktime_get_ns", "bpf_xdp_adjust_tail"),
        "xdp_count_return": ("bpf_map_lookup_elem",),
    },
    map_types=("BPF_MAP_TYPE_ARRAY", "BPF_MAP_TYPE_PERCPU_ARRAY"),
    variants={SENDER_VARIANT: ("live_frames", "xdp")},
)
ECHO = Needs(
    plane="echo server",
    source="trafficgen/echo.c",
    helpers={"xdp_echo": ("bpf_map_lookup_elem",)},
    map_types=("BPF_MAP_TYPE_PERCPU_ARRAY",),
    variants={ECHO_VARIANT: ("xdp",)},
)
