// SPDX-License-Identifier: GPL-2.0-only
/*
 * echo: the traffic generator's reflector. UDP frames addressed to its host (Ethernet destination host_mac, IP
 * destination in its address range) with a destination port in [port_lo, port_hi] go back out of the interface
 * they came in on (XDP_TX) with Ethernet addresses, IP addresses and UDP ports swapped, so the sender counts them
 * as returned; everything else passes: a broadcast or a frame for another host is never reflected (its copy would
 * go out with a source address that is not ours). Swapping two addresses or two ports leaves every checksum valid
 * (the one's-complement sum does not depend on order), so nothing is recomputed.
 *
 * .rodata, set before load: port_lo, port_hi (host order); host_mac (the MAC's 6 bytes in frame order, read as a
 * little-endian integer); ipv4_lo, ipv4_hi (host order); ipv6_lo_*, ipv6_hi_* (the addresses' high and low 64
 * bits, host order). A range with lo > hi (the default) holds no address: no frame of that family is echoed.
 * Map echo_counters: per-CPU array, one struct tg_counter of the frames echoed.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf/include -c echo.c
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tg_match.h"

const volatile __u16 port_lo = 0;
const volatile __u16 port_hi = 0;
const volatile __u64 host_mac = 0;
const volatile __u32 ipv4_lo = 1;
const volatile __u32 ipv4_hi = 0;
const volatile __u64 ipv6_lo_high = 1, ipv6_lo_low = 0;
const volatile __u64 ipv6_hi_high = 0, ipv6_hi_low = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tg_counter);
} echo_counters SEC(".maps");

static __always_inline void swap_bytes(void *a, void *b, int n)
{
	__u8 *x = a, *y = b, t;
	int i;

#pragma unroll
	for (i = 0; i < 16; i++) {
		if (i >= n)
			break;
		t = x[i];
		x[i] = y[i];
		y[i] = t;
	}
}

static __always_inline int ipv6_in_range(const struct in6_addr *a)
{
	__u64 hi = bpf_be64_to_cpu(*(__be64 *)&a->s6_addr32[0]), lo = bpf_be64_to_cpu(*(__be64 *)&a->s6_addr32[2]);

	return (hi > ipv6_lo_high || (hi == ipv6_lo_high && lo >= ipv6_lo_low)) &&
	       (hi < ipv6_hi_high || (hi == ipv6_hi_high && lo <= ipv6_hi_low));
}

/* The frame is for this host: its MAC (never a group address: host_mac is a station's) and one of its addresses. */
static __always_inline int for_this_host(struct tg_frame *f)
{
	__u32 v4;

	if (*(__u32 *)f->eth->h_dest != (__u32)host_mac || *(__u16 *)&f->eth->h_dest[4] != (__u16)(host_mac >> 32))
		return 0;
	if (f->ipv6)
		return ipv6_in_range(&((struct ipv6hdr *)f->l3)->daddr);
	v4 = bpf_ntohl(((struct iphdr *)f->l3)->daddr);
	return v4 >= ipv4_lo && v4 <= ipv4_hi;
}

SEC("xdp")
int xdp_echo(struct xdp_md *ctx)
{
	struct tg_frame f;
	__be16 port;

	if (tg_parse(ctx, &f) || !tg_port_in(f.udp->dest, port_lo, port_hi) || !for_this_host(&f))
		return XDP_PASS;

	swap_bytes(f.eth->h_dest, f.eth->h_source, ETH_ALEN);
	if (f.ipv6) {
		struct ipv6hdr *ip6 = f.l3;

		swap_bytes(&ip6->saddr, &ip6->daddr, sizeof(ip6->saddr));
	} else {
		struct iphdr *ip4 = f.l3;
		__be32 addr = ip4->saddr;

		ip4->saddr = ip4->daddr;
		ip4->daddr = addr;
	}
	port = f.udp->source;
	f.udp->source = f.udp->dest;
	f.udp->dest = port;

	tg_count(&echo_counters, ctx->data_end - ctx->data);
	return XDP_TX;
}

char _license[] SEC("license") = "GPL";
