# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The XDP router's numbers, declared once for C and Python: what it did with each frame (the index of its per-CPU
counters, router_stats) and how many ports it forwards between.

bpf/router/router_abi.h is generated from this file and the structs of layouts.py (`make abi`), and
bpf/router/router.c includes it. The router's map layouts in router/layouts.py carry ABI, so loading it checks these
numbers against its BTF (see bpf/abi.py).
"""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi

VERDICTS = abi.Enum(
    "router_verdict",
    "What the router did with a frame; router_stats is indexed by it. Every verdict but the two forwarded ones hands "
    "the frame to the kernel unchanged (XDP_PASS), which forwards, answers or drops it as it would without XDP.",
    (
        ("RT_FORWARDED_V4", 0, "IPv4 routed by the kernel's FIB, TTL decremented, redirected out of a router port"),
        ("RT_FORWARDED_V6", 1, "IPv6 routed by the kernel's FIB, hop limit decremented, redirected out of a port"),
        ("RT_PASS_NOT_IP", 2, "neither IPv4 nor IPv6 (ARP among others: the kernel answers it)"),
        ("RT_PASS_VLAN", 3, "an 802.1Q/802.1ad tagged frame"),
        (
            "RT_PASS_MALFORMED",
            4,
            "an IP header cut short or invalid, a wrong IPv4 header "
            "checksum, or an IP length past the frame (the kernel drops it)",
        ),
        ("RT_PASS_TTL", 5, "TTL or hop limit <= 1: the kernel sends ICMP time exceeded"),
        ("RT_PASS_OPTIONS", 6, "IPv4 options or an IPv6 hop-by-hop header: the kernel processes them"),
        ("RT_PASS_LOCAL", 7, "not forwarded: for this host, broadcast, multicast or link-local (FIB: not forwarded)"),
        ("RT_PASS_NO_ROUTE", 8, "no route, or a blackhole, unreachable or prohibit route: the kernel answers it"),
        ("RT_PASS_NO_NEIGH", 9, "the next hop has no neighbour entry yet: the kernel resolves it (ARP/ND) and sends"),
        ("RT_PASS_MTU", 10, "larger than the egress MTU: the kernel fragments it or sends ICMP too big"),
        ("RT_PASS_FWD_DISABLED", 11, "forwarding is off on the ingress interface (sysctl)"),
        ("RT_PASS_NOT_PORT", 12, "routed out of an interface that is not one of the router's ports"),
        ("RT_PASS_FIB_OTHER", 13, "any other FIB lookup result (a lightweight tunnel route, no source address)"),
        (
            "RT_PASS_SPECIAL_ADDR",
            14,
            "from or to an address the kernel checks itself and bpf_fib_lookup does not: "
            "loopback, unspecified, link-local, multicast, broadcast (martians, ND, MLD)",
        ),
        (
            "RT_PASS_LOCAL_SOURCE",
            15,
            "IPv4 from a source the kernel's FIB holds as this host's (one of its addresses, a local broadcast "
            "address) or has no route back to: the kernel refuses a source that is its own before it forwards",
        ),
    ),
    count="RT_VERDICTS",
)

LIMITS = abi.Enum(
    "router_limits",
    "The router's limits, as its maps hold them.",
    (("RT_PORTS_MAX", 256, "ports a router forwards between (router_ports, a DEVMAP_HASH keyed by ifindex)"),),
)
RT_PORTS_MAX = LIMITS["RT_PORTS_MAX"]
VERDICT_NAMES = VERDICTS.labels("RT_")  # value -> forwarded_v4, pass_not_ip, ...

ABI = abi.Abi(
    name="router",
    header="bpf/router/router_abi.h",
    source="plugins/module_utils/router/abi.py",
    doc="The XDP router's verdicts and limits, shared by the data plane and user space.",
    enums=(VERDICTS, LIMITS),
)
