// SPDX-License-Identifier: GPL-2.0-only
/*
 * echo: the traffic generator's reflector. UDP frames to a destination port in [port_lo, port_hi] go back out
 * of the interface they came in on (XDP_TX) with Ethernet addresses, IP addresses and UDP ports swapped, so
 * the sender counts them as returned; everything else passes. Swapping two addresses or two ports leaves
 * every checksum valid (the one's-complement sum does not depend on order), so nothing is recomputed.
 *
 * .rodata: port_lo, port_hi (host order), set before load.
 * Map echo_counters: per-CPU array, one struct tg_counter of the frames echoed.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf/include -c echo.c
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "tg_match.h"

const volatile __u16 port_lo = 0;
const volatile __u16 port_hi = 0;

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

SEC("xdp")
int xdp_echo(struct xdp_md *ctx)
{
	struct tg_frame f;
	__be16 port;

	if (tg_parse(ctx, &f) || !tg_port_in(f.udp->dest, port_lo, port_hi))
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
