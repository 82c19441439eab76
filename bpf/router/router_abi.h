/* SPDX-License-Identifier: GPL-2.0-only */

/*
 * Generated from plugins/module_utils/router/abi.py and plugins/module_utils/router/layouts.py by `make abi`: edit
 * those files, not this one (tests/unit/test_abi.py fails when they differ). The XDP router's verdicts and limits,
 * shared by the data plane and user space.
 */

#ifndef XDPFLEET_ROUTER_ABI_H
#define XDPFLEET_ROUTER_ABI_H

#include <linux/types.h>

/*
 * What the router did with a frame; router_stats is indexed by it. Every verdict but the two forwarded ones hands the
 * frame to the kernel unchanged (XDP_PASS), which forwards, answers or drops it as it would without XDP.
 */
enum router_verdict {
	RT_FORWARDED_V4 = 0, /* IPv4 routed by the kernel's FIB, TTL decremented, redirected out of a router port */
	RT_FORWARDED_V6 = 1, /* IPv6 routed by the kernel's FIB, hop limit decremented, redirected out of a port */
	RT_PASS_NOT_IP = 2, /* neither IPv4 nor IPv6 (ARP among others: the kernel answers it) */
	RT_PASS_VLAN = 3, /* an 802.1Q/802.1ad tagged frame */
	/*
	 * an IP header cut short or invalid, a wrong IPv4 header checksum, or an IP length past the frame (the kernel
	 * drops it)
	 */
	RT_PASS_MALFORMED = 4,
	RT_PASS_TTL = 5, /* TTL or hop limit <= 1: the kernel sends ICMP time exceeded */
	RT_PASS_OPTIONS = 6, /* IPv4 options or an IPv6 hop-by-hop header: the kernel processes them */
	RT_PASS_LOCAL = 7, /* not forwarded: for this host, broadcast, multicast or link-local (FIB: not forwarded) */
	RT_PASS_NO_ROUTE = 8, /* no route, or a blackhole, unreachable or prohibit route: the kernel answers it */
	RT_PASS_NO_NEIGH = 9, /* the next hop has no neighbour entry yet: the kernel resolves it (ARP/ND) and sends */
	RT_PASS_MTU = 10, /* larger than the egress MTU: the kernel fragments it or sends ICMP too big */
	RT_PASS_FWD_DISABLED = 11, /* forwarding is off on the ingress interface (sysctl) */
	RT_PASS_NOT_PORT = 12, /* routed out of an interface that is not one of the router's ports */
	RT_PASS_FIB_OTHER = 13, /* any other FIB lookup result (a lightweight tunnel route, no source address) */
	/*
	 * from or to an address the kernel checks itself and bpf_fib_lookup does not: loopback, unspecified,
	 * link-local, multicast, broadcast (martians, ND, MLD)
	 */
	RT_PASS_SPECIAL_ADDR = 14,
	/*
	 * IPv4 from a source the kernel's FIB holds as this host's (one of its addresses, a local broadcast address) or
	 * has no route back to: the kernel refuses a source that is its own before it forwards
	 */
	RT_PASS_LOCAL_SOURCE = 15,
	RT_VERDICTS = 16,
};

/* The router's limits, as its maps hold them. */
enum router_limits {
	RT_PORTS_MAX = 256, /* ports a router forwards between (router_ports, a DEVMAP_HASH keyed by ifindex) */
};

/* router_stats[verdict], per CPU: the frames and bytes of each verdict. */
struct router_counter {
	__u64 packets;
	__u64 bytes;
};
_Static_assert(sizeof(struct router_counter) == 16, "the size of RouterCounter in Python");

/*
 * Every enum above as a member, so that each reaches the object's BTF, where user space compares it with
 * plugins/module_utils/router/abi.py. Nothing reads the variable; its section is not one that libbpf loads, so it costs
 * no map and no instruction.
 */
struct router_abi {
	enum router_verdict router_verdict;
	enum router_limits router_limits;
};
static const struct router_abi router_abi __attribute__((section(".xdpfleet_abi"), used));

#endif /* XDPFLEET_ROUTER_ABI_H */
