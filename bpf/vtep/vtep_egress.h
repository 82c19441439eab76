/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Egress, one flooded copy (vtep_egress): its peer (copies numbered per frame and port), a local copy's Outer or
 * short stamp removed and its trunk's tag, a short-stamped copy's whole Outer.
 */
#ifndef XDPFLEET_VTEP_EGRESS_H
#define XDPFLEET_VTEP_EGRESS_H

#include "vtep_frame.h"
#include "vtep_vlan.h"

/* The peer of this copy. The copies of one frame (by its number, seq) on a port run one after the other and are
 * numbered 0, 1, ...; copy n goes to the n-th of the VNI's peers behind the port: from the hint (where they are
 * behind hint_ifindex) or port_vnis. NULL: more copies than peers (during an update). */
static __always_inline struct peer *copy_peer(__u32 port_slot, __u32 ifindex, __u32 vni, __u32 seq, __u32 hint_ifindex,
					      __u32 hint_first, __u32 hint_peers)
{
	struct copy_state *state = bpf_map_lookup_elem(&copy_state, &port_slot);
	struct port_vni_key key = { .vni = vni, .ifindex = ifindex };
	struct port_vni *row;
	struct peer *peer;
	__u32 index;

	if (!state)
		return NULL;
	if (state->seq != seq) {
		state->seq = seq;
		state->next_copy = 0;
		if (hint_ifindex == ifindex) {
			state->first_peer = hint_first;
			state->peers = hint_peers;
		} else {
			row = bpf_map_lookup_elem(&port_vnis, &key);
			state->first_peer = row ? row->first_peer : 0;
			state->peers = row ? row->peers : 0;
		}
	}
	if (state->next_copy >= state->peers)
		return NULL;
	index = state->first_peer + state->next_copy++;
	if (state->next_copy == state->peers)
		state->seq = 0; /* all copies made: a later frame with the same number starts over */
	peer = bpf_map_lookup_elem(&tunnel_peers, &index);
	return peer && peer->remote_ip && peer->vni == vni ? peer : NULL;
}

/* A local copy leaves through an access port or a trunk of its VNI: the first `skip` bytes (the Outer, or the short
 * stamp) removed, a translated trunk's tag added. Returns -1 or the drop reason. */
static __always_inline int local_copy(struct xdp_md *ctx, struct port_config *port, __u32 ifindex, __u32 vni, int skip)
{
	struct port_vni_key key = { .vni = vni, .ifindex = ifindex };
	struct port_vni *member;

	if (port->kind == PORT_ACCESS) {
		if (port->vni != vni)
			return DROP_NOT_MEMBER;
		if (bpf_xdp_adjust_head(ctx, skip))
			return DROP_MALFORMED;
	} else {
		member = bpf_map_lookup_elem(&port_vnis, &key);
		if (!member)
			return DROP_NOT_MEMBER;
		if (!(member->flags & VNI_PRESERVE_VLAN)) {
			if (push_tag(ctx, skip, member->vid))
				return DROP_MALFORMED;
		} else if (!has_vid((void *)(long)ctx->data, (void *)(long)ctx->data_end, skip, member->vid)) {
			return DROP_VID_MISMATCH;
		} else if (bpf_xdp_adjust_head(ctx, skip)) {
			return DROP_MALFORMED;
		}
	}
	/* The device drops a longer copy, uncounted (a full-size frame that got a trunk's tag here) */
	if ((long)ctx->data_end - (long)ctx->data > port->mtu + DEVICE_FRAME_ALLOWANCE)
		return DROP_MTU;
	return -1;
}

/* A copy of a frame with the short stamp `word` (from its metadata or its record; the copy is the bare frame):
 * tunnel copies get their whole Outer here. */
static __always_inline int short_copy(struct xdp_md *ctx, struct port_config *port, __u32 ifindex, __u32 word)
{
	__u32 slot = (word >> SHORT_SLOT_SHIFT) & SHORT_SLOT_MASK, zero = 0;
	struct traffic_stats *vs = bpf_map_lookup_elem(&vni_stats, &slot);
	struct flood_settings *row = bpf_map_lookup_elem(&flood_settings, &slot);
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	struct cpu_state *cpu;
	struct peer *peer;
	int reason;

	if (!row)
		return drop(port->slot, vs, DROP_NO_OUTER);
	if (port->kind != PORT_TUNNEL) {
		reason = local_copy(ctx, port, ifindex, row->vni, 0);
		if (reason >= 0)
			return drop(port->slot, vs, reason);
	} else {
		if (word & SHORT_FROM_TUNNEL)
			return drop(port->slot, vs, DROP_SPLIT_HORIZON);
		peer = copy_peer(port->slot, ifindex, row->vni, word, row->tunnel_ifindex, row->first_peer, row->peers);
		if (!peer)
			return drop(port->slot, vs, DROP_NO_PEER);
		if (data_end - data + VXLAN_OVERHEAD - (int)sizeof(struct ethhdr) > port->mtu)
			return drop(port->slot, vs, DROP_MTU);
		cpu = bpf_map_lookup_elem(&cpu_state, &zero);
		data = cpu ? push_outer(ctx, cpu, row->vni) : NULL;
		if (!data)
			return drop(port->slot, vs, DROP_MALFORMED);
		finish_outer(data, port, peer, *(__u16 *)(data + OUTER_IP_CHECK));
	}
	count_sent(port->slot, vs, ctx->data_end - ctx->data);
	return XDP_PASS;
}

#endif
