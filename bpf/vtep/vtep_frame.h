/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A frame in vtep_xdp.c's programs: the stamp a flooded frame carries to its copies' egress (in its Outer, or the
 * short stamp), what ingress knows of a frame once its VNI is (struct frame), its counting, its Outer pushed in front
 * of it, and its hand-over to the TC backend.
 */
#ifndef XDPFLEET_VTEP_FRAME_H
#define XDPFLEET_VTEP_FRAME_H

#include "vtep_shared.h"

/* A flooded frame's stamp: its facts for the egress programs of its copies, in Outer fields that egress writes for
 * every tunnel copy and removes with the Outer on every local copy. The IP checksum field carries the partial sum
 * of the fixed IP fields (those of the header without id, addresses and checksum), which egress completes. */
#define STAMP_SEQ OUTER_DMAC              /* u32: the frame's number on its CPU (odd: see SHORT_STAMP) */
#define STAMP_VNI_SLOT (OUTER_DMAC + 4)   /* u16 */
#define STAMP_TUNNEL OUTER_SMAC           /* u32: the tunnel port STAMP_FIRST_PEER and STAMP_PEERS are for; 0: none */
#define STAMP_FLAGS (OUTER_SMAC + 4)      /* u16: STAMP_FROM_TUNNEL */
#define STAMP_PEERS OUTER_IP_ID           /* u16 */
#define STAMP_FIRST_PEER OUTER_IP_DADDR   /* u32 */
#define STAMP_FROM_TUNNEL 0x1             /* decapsulated: never back into a tunnel (split horizon) */
/* frame.flags: a decapsulated frame (never back into a tunnel), beside the VNI's enum vni_flag bits */
#define FRAME_FROM_TUNNEL 0x8000
_Static_assert(!(FRAME_FROM_TUNNEL & VNI_PRESERVE_VLAN), "a VNI flag is not the decapsulated mark");

/* The short stamp: a flooded frame too long for an Outer carries one little-endian u32, as its whole metadata (so
 * that its copies are exactly as long as the frame: a full-size frame still reaches a member of the same MTU) or,
 * in generic XDP (vtep_ingress_generic: egress sees no metadata there), in its CPU's record (struct generic_flood).
 * It is never 0 (copy_state's seq when no frame is being numbered: a stamp equal to it would continue numbering
 * where the last frame stopped; and a record's 0 says the frame carries its Outer). */
#define SHORT_STAMP_LEN 4
#define SHORT_FROM_TUNNEL 0x2 /* as STAMP_FROM_TUNNEL */
#define SHORT_NONZERO 0x4
#define SHORT_SLOT_SHIFT 3 /* 12 bits: the VNI slot */
#define SHORT_SLOT_MASK 0xfff
#define SHORT_SEQ_SHIFT 15 /* 17 bits: the frame's number on its CPU */
_Static_assert(VTEP_MAX_VNIS <= SHORT_SLOT_MASK + 1, "a VNI slot fits the short stamp");

/* A frame in ingress, once its VNI is known. */
struct frame {
	struct traffic_stats *vni_stats; /* NULL: not counted per VNI */
	struct vtep_settings *settings;
	struct cpu_state *cpu;
	__u64 jiffies;
	__u64 now; /* CLOCK_MONOTONIC (coarse), read when first needed: clock_now() */
	__u32 vni;
	__u32 in_ifindex;
	__u16 in_slot;
	__u16 vni_slot;
	__u16 vid;   /* the VID it came with on a trunk */
	__u16 flags; /* enum vni_flag, and FRAME_FROM_TUNNEL for a decapsulated frame */
	__u32 short_word; /* generic XDP: the short stamp that the frame's record carries to its copies */
	__u8 stamp_in_metadata; /* the copies' egress program sees the frame's metadata (native XDP) */
	__u8 to_tc;             /* the TC backend: forwarding is vtep_replicate's (hand_to_tc) */
};

static __always_inline void count_rx(struct traffic_stats *s, __u64 bytes)
{
	if (s) {
		s->rx_packets++;
		s->rx_bytes += bytes;
	}
}

static __always_inline void count_fdb(struct frame *f, enum fdb_event event)
{
	if (f->vni_stats && event < FDB_EVENTS)
		f->vni_stats->fdb[event]++;
}

/* Put the Outer for a frame of `vni` in front of it: every field but the per-copy ones (MACs, addresses, IP id,
 * checksum: finish_outer). Returns the frame's new start, its Outer in bounds where the verifier sees it, or NULL when
 * the frame has no headroom. */
static __always_inline __u8 *push_outer(struct xdp_md *ctx, struct cpu_state *cpu, __u32 vni)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__be16 udp_source = outer_udp_source(data, data_end);
	struct outer_template *t = outer_template(cpu, vni, data_end - data);

	if (bpf_xdp_adjust_head(ctx, -VXLAN_OVERHEAD))
		return NULL;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + VXLAN_OVERHEAD > data_end)
		return NULL;
	write_outer(data, t, udp_source);
	return data;
}

/* The TC backend: leave the command in the frame's metadata (it has none: ingress dropped what came with it) and pass
 * the frame to the stack, which hands it to vtep_replicate. */
static __always_inline int hand_to_tc(struct xdp_md *ctx, struct frame *f, __u16 op, __u32 ifindex)
{
	struct tc_command *cmd;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*cmd)))
		return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
	cmd = (void *)(long)ctx->data_meta;
	if ((void *)(cmd + 1) > (void *)(long)ctx->data)
		return XDP_DROP;
	cmd->magic = TC_COMMAND_MAGIC;
	cmd->op = op;
	cmd->ifindex = ifindex;
	cmd->vni = f->vni;
	cmd->vni_slot = f->vni_slot;
	return XDP_PASS;
}

#endif
