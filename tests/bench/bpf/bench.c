// SPDX-License-Identifier: GPL-2.0-only
/*
 * Programs that only the VTEP benchmark (tests/bench/bench_vtep.py) needs:
 *
 *   bench_tx     the sender: run with BPF_PROG_RUN + BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX sends every frame out of
 *                the ctx's ingress interface (the veth's far end), so it arrives on the port under test.
 *   bench_flood  the ceiling: plain devmap broadcast to the members of `flood`, no rewrite, no egress program.
 *   bench_bare_encap, bench_bare_encap_egress  the floor of the VTEP's design: only the parts every VTEP copy
 *                must pay for (a 32-byte command in the metadata, an egress program per copy that takes it off,
 *                a 50-byte Outer pushed in front) and none of its decisions (no lookups, no counters, a constant
 *                Outer). What separates the VTEP from this is its own work; what separates this from the ceiling
 *                is the design's.
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

/* The same broadcast as `flood`, but every entry runs bench_bare_encap_egress. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, FLOOD_MAX_ENTRIES);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct bpf_devmap_val));
} flood_encap SEC(".maps");

/* The size of the VTEP's struct command (bpf/vtep/vtep.h), and of its Outer. */
struct bare_command {
	__u64 words[4];
};
#define BARE_OUTER_LEN 50

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

SEC("xdp")
int bench_bare_encap(struct xdp_md *ctx)
{
	struct bare_command *cmd;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*cmd)))
		return XDP_ABORTED;
	cmd = (void *)(long)ctx->data_meta;
	if ((void *)(cmd + 1) > (void *)(long)ctx->data)
		return XDP_ABORTED;
	cmd->words[0] = 1;
	cmd->words[1] = 2;
	cmd->words[2] = 3;
	cmd->words[3] = 4;
	return bpf_redirect_map(&flood_encap, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
}

SEC("xdp/devmap")
int bench_bare_encap_egress(struct xdp_md *ctx)
{
	struct bare_command *cmd = (void *)(long)ctx->data_meta;
	__u64 *outer, *data_end;
	__u64 check;

	if ((void *)(cmd + 1) > (void *)(long)ctx->data)
		return XDP_DROP;
	check = cmd->words[0] ^ cmd->words[1] ^ cmd->words[2] ^ cmd->words[3]; /* read, as egress must */
	if (bpf_xdp_adjust_meta(ctx, (int)sizeof(*cmd)) || bpf_xdp_adjust_head(ctx, -BARE_OUTER_LEN))
		return XDP_DROP;
	outer = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if ((void *)outer + BARE_OUTER_LEN > (void *)data_end)
		return XDP_DROP;
	outer[0] = check;
	outer[1] = 0x0045000800000000ULL;
	outer[2] = 0;
	outer[3] = 0;
	outer[4] = 0;
	outer[5] = 0;
	*(__u16 *)&outer[6] = 0;
	return XDP_PASS;
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
