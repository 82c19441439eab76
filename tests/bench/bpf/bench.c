// SPDX-License-Identifier: GPL-2.0-only
/*
 * Programs that only the VTEP benchmark (tests/bench/bench_vtep.py) needs:
 *
 *   bench_tx     the sender: run with BPF_PROG_RUN + BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX sends every frame out of
 *                the ctx's ingress interface (the veth's far end), so it arrives on the port under test.
 *   bench_flood  the ceiling: plain devmap broadcast to the members of `flood`, no rewrite, no egress program.
 *   bench_sink   XDP on the sink interface: count and drop (so the sink costs as little as it can).
 *   bench_sink_tc  the same at tc ingress (tcx), for skbs the kernel data plane sends: an XDP sink would first copy
 *                every cloned or short-headroom skb into a fresh page (veth_xdp_rcv_skb), a cost of the sink.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -c bench.c -o bench.o
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>

struct sink_counter {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_counter);
} sink_counters SEC(".maps");

/* Broadcast through a DEVMAP_HASH walks all its buckets (max_entries rounded up to a power of 2) for every
 * frame: -DFLOOD_MAX_ENTRIES=256 gives the ceiling the VTEP's group size (VTEP_MAX_MEMBERS). */
#ifndef FLOOD_MAX_ENTRIES
#define FLOOD_MAX_ENTRIES 16
#endif

/* key: any member number; value: the output ifindex (legacy 4-byte value: no egress program possible). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, FLOOD_MAX_ENTRIES);
	__type(key, __u32);
	__type(value, __u32);
} flood SEC(".maps");

SEC("xdp")
int bench_tx(struct xdp_md *ctx)
{
	return XDP_TX;
}

SEC("xdp")
int bench_flood(struct xdp_md *ctx)
{
	return bpf_redirect_map(&flood, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
}

static __always_inline void count(__u64 bytes)
{
	__u32 zero = 0;
	struct sink_counter *c = bpf_map_lookup_elem(&sink_counters, &zero);

	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

SEC("xdp")
int bench_sink(struct xdp_md *ctx)
{
	count(ctx->data_end - ctx->data);
	return XDP_DROP;
}

SEC("tc")
int bench_sink_tc(struct __sk_buff *skb)
{
	count(skb->len); /* at tcx ingress the MAC header is pushed back: the whole frame */
	return TC_ACT_SHOT;
}

char LICENSE[] SEC("license") = "GPL";
