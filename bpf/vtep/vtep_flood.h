/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Flooding in ingress: the frame stamped (its Outer, or the short stamp) and broadcast through its VNI's group, the
 * copies that a member's device refuses for their length counted, or handed to the TC backend. It defines two global
 * functions (vtep_copy_refused, vtep_count_lost_copies): vtep_xdp.c is the one object that includes it.
 */
#ifndef XDPFLEET_VTEP_FLOOD_H
#define XDPFLEET_VTEP_FLOOD_H

#include "vtep_frame.h"

static __always_inline void *vni_group(void *groups, void *large_groups, __u32 slot)
{
	void *group = bpf_map_lookup_elem(groups, &slot);

	return group ? group : bpf_map_lookup_elem(large_groups, &slot);
}

/* The VNI's flood settings, or NULL while its slot passes to another VNI. */
static __always_inline struct flood_settings *flooding(struct frame *f)
{
	__u32 slot = f->vni_slot;
	struct flood_settings *row = bpf_map_lookup_elem(&flood_settings, &slot);

	return row && row->vni == f->vni ? row : NULL;
}

/* Stamp the Outer at `data` (see STAMP_*) with the frame's facts. */
static __always_inline void stamp(__u8 *data, struct frame *f, struct flood_settings *row, __u16 flags)
{
	f->cpu->seq += 2;
	*(__u32 *)(data + STAMP_SEQ) = f->cpu->seq | 1;
	*(__u16 *)(data + STAMP_VNI_SLOT) = f->vni_slot;
	*(__u16 *)(data + STAMP_FLAGS) = flags;
	*(__u32 *)(data + STAMP_TUNNEL) = row->tunnel_ifindex;
	*(__u32 *)(data + STAMP_FIRST_PEER) = row->first_peer;
	*(__u16 *)(data + STAMP_PEERS) = row->peers;
}

/* A flooded copy's metadata is its short stamp or nothing: metadata the frame came with (from the driver, or a
 * program before this one) is dropped, so egress never takes it for a stamp. */
static __always_inline void drop_meta(struct xdp_md *ctx)
{
	void *meta = (void *)(long)ctx->data_meta;
	void *data = (void *)(long)ctx->data;

	if (meta < data)
		bpf_xdp_adjust_meta(ctx, (int)(data - meta));
}

/* Give the frame the short stamp (see SHORT_STAMP_LEN): its metadata in native XDP, its record in generic XDP.
 * Its VNI is known by slot only: were the slot to pass to another VNI between ingress and egress (only when every
 * slot is taken, see plan.assign_slots), egress would take the new VNI's row, whose members are not the old VNI's
 * ports. */
static __always_inline int short_stamp(struct xdp_md *ctx, struct frame *f, __u32 flags)
{
	__u32 *stamp;

	f->cpu->seq += 2;
	f->short_word = (f->cpu->seq >> 1) << SHORT_SEQ_SHIFT | (__u32)f->vni_slot << SHORT_SLOT_SHIFT | SHORT_NONZERO |
			flags;
	drop_meta(ctx);
	if (!f->stamp_in_metadata)
		return 0;
	if (bpf_xdp_adjust_meta(ctx, -SHORT_STAMP_LEN))
		return -1;
	stamp = (void *)(long)ctx->data_meta;
	if ((void *)(stamp + 1) > (void *)(long)ctx->data)
		return -1;
	*stamp = f->short_word;
	return 0;
}

/* The copies of a flooded frame `len` bytes long that a member's device refuses: a devmap sends no copy longer than
 * its device's MTU + 18 (xdp_ok_fwd_dev), and no egress program sees it. Both walk the first `end` members of the
 * VNI in `vni_slot` (vni_members, whose row the caller checked), but the port the frame came from (it gets no copy),
 * and hold the copy to its device's MTU now, as the kernel does (port_config's is the one the VTEP was configured
 * with, which egress holds the copies it sees to: a copy is counted by one of the two).
 *
 * Global functions, so that the verifier checks each loop once, with nothing known of its arguments: inlined, the
 * walk of up to VTEP_MAX_MEMBERS members was checked again for every state the flooding code reached it in, more
 * than the verifier's million instructions. */

/* Whether the device `ifindex` refuses a copy `len` bytes long. */
static __always_inline int refuses(struct xdp_md *ctx, __u32 ifindex, __u32 len)
{
	__u32 mtu = 0;

	return bpf_check_mtu(ctx, ifindex, &mtu, 0, 0) >= 0 && len > mtu + DEVICE_FRAME_ALLOWANCE;
}

/* Whether a member's device refuses its copy. */
__attribute__((noinline)) int vtep_copy_refused(struct xdp_md *ctx, __u32 vni_slot, __u32 end, __u32 in_ifindex,
						__u32 len)
{
	struct vni_members *row = bpf_map_lookup_elem(&vni_members, &vni_slot);
	__u32 i, ifindex;

	if (!row)
		return 0;
	for (i = 0; i < VTEP_MAX_MEMBERS && i < end; i++) {
		ifindex = row->members[i].ifindex;
		if (ifindex != in_ifindex && refuses(ctx, ifindex, len))
			return 1;
	}
	return 0;
}

/* Count (mtu, on the member's port and on the VNI) each copy (one per local port, one per peer) that its device
 * refuses, or every copy (`len` 0). */
__attribute__((noinline)) int vtep_count_lost_copies(struct xdp_md *ctx, __u32 vni_slot, __u32 end,
						     __u32 in_ifindex, __u32 len)
{
	struct vni_members *row = bpf_map_lookup_elem(&vni_members, &vni_slot);
	struct traffic_stats *vs = bpf_map_lookup_elem(&vni_stats, &vni_slot);
	struct port_config *port;
	__u32 i, ifindex;

	if (!row || !vs)
		return 0;
	for (i = 0; i < VTEP_MAX_MEMBERS && i < end; i++) {
		ifindex = row->members[i].ifindex;
		port = bpf_map_lookup_elem(&port_config, &ifindex);
		if (ifindex != in_ifindex && port && (!len || refuses(ctx, ifindex, len)))
			drop(port->slot, vs, DROP_MTU);
	}
	return 0;
}

/* Count each copy of the flooded frame, `len` bytes long, that is lost for its length. Native XDP sends the other
 * copies. Generic XDP ends the whole broadcast at the first copy a device refuses (dev_map_redirect_multi returns
 * the error), so the members after it in the map's order would lose theirs too: there the frame is not flooded,
 * every copy counted. Returns 1 when the frame is not to be flooded. */
static __always_inline int lost_copies(struct xdp_md *ctx, struct frame *f, __u32 len)
{
	__u32 slot = f->vni_slot, end;
	struct vni_members *row = bpf_map_lookup_elem(&vni_members, &slot);

	if (!row || row->vni != f->vni)
		return 0;
	/* a decapsulated frame's group has the local members only: those listed first */
	end = f->flags & FRAME_FROM_TUNNEL ? row->locals : row->count;
	if (f->stamp_in_metadata) {
		vtep_count_lost_copies(ctx, slot, end, f->in_ifindex, len);
		return 0;
	}
	if (!vtep_copy_refused(ctx, slot, end, f->in_ifindex, len))
		return 0;
	vtep_count_lost_copies(ctx, slot, end, f->in_ifindex, 0);
	return 1;
}

/* Hand the flooded frame, as it is now, to every member of `group` but the port it came from (a frame longer than
 * the VNI's copy_limit: see lost_copies).
 *
 * In generic XDP the copies' egress programs run on this CPU within this redirect, one after the other, before this
 * CPU runs any other frame's ingress (kernel/bpf/devmap.c: dev_map_redirect_multi clones the skb and runs each
 * clone's egress program, dev_map_generic_redirect, before it returns): the frame's record tells them its short
 * stamp, and the frame it is for. Native XDP runs them at the devmap flush, after later frames' ingress: there the
 * frame carries everything, and the record is cleared. */
static __always_inline int broadcast(struct xdp_md *ctx, struct frame *f, struct flood_settings *settings, void *group)
{
	struct generic_flood *record = &f->cpu->flood;
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;

	if (len > settings->copy_limit && lost_copies(ctx, f, len))
		return XDP_DROP;
	data = (void *)(long)ctx->data; /* read again after a call to a global function */
	data_end = (void *)(long)ctx->data_end;
	record->in_ifindex = 0;
	if (!f->stamp_in_metadata && data + sizeof(__u32) <= data_end) {
		record->word = f->short_word;
		record->len = len;
		record->head = *(__u32 *)data;
		record->in_ifindex = f->in_ifindex;
	}
	count_fdb(f, FDB_FLOODED);
	return bpf_redirect_map(group, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
}

/* The TC backend floods in vtep_replicate: the frame (no Outer) and a command naming its VNI. */
static __always_inline int flood_tc(struct xdp_md *ctx, struct frame *f)
{
	if (!flooding(f))
		return drop(f->in_slot, f->vni_stats, DROP_NO_GROUP);
	count_fdb(f, FDB_FLOODED);
	return hand_to_tc(ctx, f, TC_FLOOD, f->in_ifindex);
}

/* A frame from a local port: give it its Outer (or the short stamp) and hand it to every member of its VNI. */
static __always_inline int flood_local(struct xdp_md *ctx, struct frame *f)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	struct flood_settings *row;
	void *group;
	__u32 limit;

	if (f->to_tc)
		return flood_tc(ctx, f);
	group = vni_group(&vni_flood, &vni_flood_large, f->vni_slot);
	row = flooding(f);
	if (!group || !row)
		return drop(f->in_slot, f->vni_stats, DROP_NO_GROUP);
	limit = f->in_ifindex == row->tightest_port ? row->others_limit : row->frame_limit;
	if (data_end - data + VXLAN_OVERHEAD <= limit) {
		data = push_outer(ctx, f->cpu, f->vni);
		if (!data)
			return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
		stamp(data, f, row, 0);
		drop_meta(ctx);
	} else if (short_stamp(ctx, f, 0)) {
		return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
	}
	return broadcast(ctx, f, row, group);
}

#endif
