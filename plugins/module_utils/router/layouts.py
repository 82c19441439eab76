# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The XDP router's maps (ctypes, the one declaration of their values: bpf/router/router_abi.h defines them for C
from here, and they are checked against the object's BTF, with the numbers of router/abi.py, before anything is
written), and its program's name."""

from __future__ import annotations

import ctypes

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router.abi import ABI

PROGRAM = "xdp_router"
PORTS = "router_ports"  # DEVMAP_HASH: ifindex -> ifindex, the interfaces frames may be redirected to
STATS = "router_stats"  # per-CPU array indexed by enum router_verdict


@abi.c_struct("router_counter")
class RouterCounter(ctypes.Structure):
    """router_stats[verdict], per CPU: the frames and bytes of each verdict."""

    _members_ = (abi.Field("packets", abi.U64), abi.Field("bytes", abi.U64))


HEADER = abi.Header(ABI, "plugins/module_utils/router/layouts.py", (RouterCounter,))


LAYOUTS = {
    layout.map_name: layout
    for layout in (
        MapLayout(PORTS, ctypes.c_uint32, ctypes.c_uint32),
        MapLayout(STATS, ctypes.c_uint32, RouterCounter, ABI),
    )
}
