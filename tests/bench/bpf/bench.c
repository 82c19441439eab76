// SPDX-License-Identifier: GPL-2.0-only
/*
 * Programs that only the VTEP benchmark (tests/bench/bench_vtep.py) needs:
 *
 *   bench_tx     the sender: run with BPF_PROG_RUN + BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX sends every frame out of
 *                the ctx's ingress interface (the veth's far end), so it arrives on the port under test.
 *   bench_tx_flows  the same, the UDP source port of each frame one of FLOWS in turn: many flows (the
 *                XDP/TC table), so that the VTEP's Outer gets a source port per flow.
 *   bench_pass   XDP_PASS: with BPF_PROG_RUN + live frames, the frames go up the stack as if received on the
 *                interface of the ctx (the Linux data planes' per-frame cost).
 *   bench_flood  the BUM ceiling: plain devmap broadcast to the members of `flood`, no rewrite, no egress program.
 *   bench_floor, bench_floor_egress  the floor of the VTEP's flooding design: only what the design makes a flooded
 *                frame and its copies pay, none of the VTEP's decisions (no lookups, no counters, no learning).
 *                Ingress pushes the 50-byte Outer once, with a per-frame word (the stamp) in a field that every
 *                copy overwrites and the partial IP checksum in the checksum field, and broadcasts; each copy's
 *                egress program reads the stamp and patches destination MAC, destination IP and checksum.
 *                VTEP/floor is the VTEP's own work, floor/ceiling the design's.
 *   bench_floor_push, bench_floor_push_egress  the floor in steps, for the per-frame cost only: the push alone
 *                (copies without an egress program), then with an egress program per copy that does nothing.
 *   bench_encap_redirect  the known-unicast ceiling: push a 50-byte Outer and bpf_redirect() to the uplink.
 *   bench_sink   XDP on the sink interface: count and drop (so the sink costs as little as it can).
 *   bench_sink_tc  the same at tc ingress (tcx), for skbs the kernel data plane sends: an XDP sink would first copy
 *                every cloned or short-headroom skb into a fresh page (veth_xdp_rcv_skb), a cost of the sink.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf/include -c bench.c -o bench.o
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "xdpfleet_csum.h"

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
 * frame: -DFLOOD_MAX_ENTRIES=256 gives the ceiling the VTEP's large group size (VTEP_MAX_MEMBERS). */
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

/* The floor's groups: the same members as `flood`; floor_group's entries run bench_floor_egress, push_group's
 * none, empty_egress_group's bench_floor_push_egress. */
struct floor_group_map {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, FLOOD_MAX_ENTRIES);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct bpf_devmap_val));
};
struct floor_group_map floor_group SEC(".maps");
struct floor_group_map empty_egress_group SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, FLOOD_MAX_ENTRIES);
	__type(key, __u32);
	__type(value, __u32);
} push_group SEC(".maps");

/* bench_encap_redirect's output interface, set before load. */
const volatile __u32 uplink_ifindex;

/* The floor's per-frame word, a number per frame as the VTEP's stamp is. */
__u32 floor_seq;

#define OUTER_LEN 50
#define OUTER_IP_CHECK 24
#define OUTER_IP_DADDR 30
#define OUTER_TTL 64
#define VXLAN_UDP_PORT 4789
#define VNI 100
#define LOCAL_IP 0xc6336401 /* 198.51.100.1, as the bench's LOCAL_IP */
#define PEER_IP 0xc633640a  /* 198.51.100.10, the bench's first peer */

/* The Outer's fields as 16-bit words in network order: w[n] holds bytes 2n and 2n+1. */
union outer_words {
	__u16 w[26];
	__u64 q[7];
};

/* Build the Outer for an Inner of `inner_len` bytes in `o`: MACs and destination IP from the arguments, the IP
 * checksum field holding the sum of every IP word but the destination address and the checksum (unfolded). */
static __always_inline void build_outer(union outer_words *o, __u32 inner_len, __u32 dmac_hi, __u16 dmac_lo,
					__be32 daddr)
{
	__u32 sum;

	*(__u32 *)&o->w[0] = dmac_hi;
	o->w[2] = dmac_lo;
	o->w[3] = bpf_htons(0x0200); /* 02:00:00:00:00:01 */
	o->w[4] = 0;
	o->w[5] = bpf_htons(0x0001);
	o->w[6] = bpf_htons(0x0800);
	o->w[7] = bpf_htons(0x4500);
	o->w[8] = bpf_htons(inner_len + OUTER_LEN - 14);
	o->w[9] = 0;                                        /* id */
	o->w[10] = bpf_htons(0x4000);                       /* DF */
	o->w[11] = bpf_htons((OUTER_TTL << 8) | 17);        /* UDP */
	o->w[13] = bpf_htons(LOCAL_IP >> 16);
	o->w[14] = bpf_htons(LOCAL_IP & 0xffff);
	*(__u32 *)&o->w[15] = daddr;
	o->w[17] = bpf_htons(49152);                        /* source port */
	o->w[18] = bpf_htons(VXLAN_UDP_PORT);
	o->w[19] = bpf_htons(inner_len + 16);               /* UDP length */
	o->w[20] = 0;                                       /* no UDP checksum */
	o->w[21] = bpf_htons(0x0800);                       /* VXLAN flags: VNI valid */
	o->w[22] = 0;
	o->w[23] = bpf_htons(VNI >> 8);
	o->w[24] = bpf_htons((VNI & 0xff) << 8);
	sum = o->w[7] + o->w[8] + o->w[9] + o->w[10] + o->w[11] + o->w[13] + o->w[14];
	o->w[12] = xf_csum_fold_raw(sum);
}

/* Put the Outer `o` in front of the frame. Returns the Outer's address, or NULL when there is no headroom. */
static __always_inline __u8 *push_outer(struct xdp_md *ctx, union outer_words *o)
{
	__u8 *data, *data_end;

	if (bpf_xdp_adjust_head(ctx, -OUTER_LEN))
		return NULL;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + OUTER_LEN > data_end)
		return NULL;
	*(__u64 *)(data + 0) = o->q[0];
	*(__u64 *)(data + 8) = o->q[1];
	*(__u64 *)(data + 16) = o->q[2];
	*(__u64 *)(data + 24) = o->q[3];
	*(__u64 *)(data + 32) = o->q[4];
	*(__u64 *)(data + 40) = o->q[5];
	*(__u16 *)(data + 48) = o->w[24];
	return data;
}

SEC("xdp")
int bench_tx(struct xdp_md *ctx)
{
	return XDP_TX;
}

#define FLOWS 64
#define UDP_SOURCE_OFFSET 34 /* Ethernet 14 + IPv4 without options 20 */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} flow_counter SEC(".maps");

/* The frame's UDP checksum is 0 (none): changing its source port needs no other change. Live frames reuse their
 * pages, so every frame gets its port written. */
SEC("xdp")
int bench_tx_flows(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	__u32 *n = bpf_map_lookup_elem(&flow_counter, &(__u32){ 0 });

	if (n && data + UDP_SOURCE_OFFSET + 2 <= (__u8 *)(long)ctx->data_end)
		*(__be16 *)(data + UDP_SOURCE_OFFSET) = bpf_htons(1024 + (*n)++ % FLOWS);
	return XDP_TX;
}

/* The Linux data planes under the cost timer: live frames passed to the stack as if received on acc. */
SEC("xdp")
int bench_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int bench_flood(struct xdp_md *ctx)
{
	return bpf_redirect_map(&flood, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
}

/* Push the Outer once, the frame's stamp where the destination MAC goes, and broadcast it through `group`. */
static __always_inline int push_and_flood(struct xdp_md *ctx, void *group)
{
	union outer_words o;

	build_outer(&o, ctx->data_end - ctx->data, ++floor_seq, 0, 0);
	if (!push_outer(ctx, &o))
		return XDP_ABORTED;
	return bpf_redirect_map(group, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
}

SEC("xdp")
int bench_floor(struct xdp_md *ctx)
{
	return push_and_flood(ctx, &floor_group);
}

SEC("xdp")
int bench_floor_push(struct xdp_md *ctx)
{
	return push_and_flood(ctx, &push_group);
}

SEC("xdp")
int bench_floor_push_egress(struct xdp_md *ctx)
{
	return push_and_flood(ctx, &empty_egress_group);
}

/* One copy: its peer from the stamp (the VTEP's comes from the stamp and the copy's number), then destination
 * MAC, destination IP and the checksum completed from the partial sum that ingress left in it. */
SEC("xdp/devmap")
int bench_floor_egress(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__u32 stamp, peer;
	__be32 daddr;

	if (data + OUTER_LEN > data_end)
		return XDP_DROP;
	stamp = *(__u32 *)data;
	peer = PEER_IP + (stamp & 1);
	daddr = bpf_htonl(peer);
	*(__u32 *)data = bpf_htonl(0x02000000);
	*(__u16 *)(data + 4) = bpf_htons(peer & 0xff);
	*(__be32 *)(data + OUTER_IP_DADDR) = daddr;
	*(__sum16 *)(data + OUTER_IP_CHECK) =
		xf_csum_fold(*(__u16 *)(data + OUTER_IP_CHECK) + (daddr & 0xffff) + (daddr >> 16));
	return XDP_PASS;
}

SEC("xdp/devmap")
int bench_empty_egress(struct xdp_md *ctx)
{
	return XDP_PASS;
}

/* The known-unicast ceiling: a complete Outer to the first peer, one redirect. */
SEC("xdp")
int bench_encap_redirect(struct xdp_md *ctx)
{
	__be32 daddr = bpf_htonl(PEER_IP);
	union outer_words o;

	build_outer(&o, ctx->data_end - ctx->data, bpf_htonl(0x02000000), bpf_htons(PEER_IP & 0xff), daddr);
	o.w[12] = xf_csum_fold(o.w[12] + (daddr & 0xffff) + (daddr >> 16));
	if (!push_outer(ctx, &o))
		return XDP_ABORTED;
	return bpf_redirect(uplink_ifindex, 0);
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
