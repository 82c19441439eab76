/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * VLAN tags in vtep_xdp.c's programs: a trunk's frame classified by its tag, the tag removed, added or checked.
 */
#ifndef XDPFLEET_VTEP_VLAN_H
#define XDPFLEET_VTEP_VLAN_H

#include "vtep_shared.h"

/* Classify a frame from a VLAN-aware port: only one 802.1Q tag with a bound VID. Returns -1 with *ref and *vid
 * set, or the drop reason. */
static __always_inline int trunk_vni(void *data, void *data_end, __u32 ifindex, struct vni_ref *ref, __u16 *vid)
{
	struct ethhdr *eth = data;
	struct xf_vlan_hdr *tag = (void *)(eth + 1);
	struct vlan_key key = { .ifindex = ifindex };
	struct vni_ref *bound;

	if ((void *)(eth + 1) > data_end)
		return DROP_MALFORMED;
	if (eth->h_proto == bpf_htons(ETH_P_8021AD))
		return DROP_QINQ;
	if (eth->h_proto != bpf_htons(ETH_P_8021Q))
		return DROP_UNTAGGED;
	if ((void *)(tag + 1) > data_end)
		return DROP_MALFORMED;
	if (xf_proto_is_vlan(tag->encap_proto))
		return DROP_QINQ;
	key.vid = bpf_ntohs(tag->tci) & XF_VLAN_VID_MASK;
	if (key.vid == 0 || key.vid == 4095)
		return DROP_VID_RESERVED;
	bound = bpf_map_lookup_elem(&vlan_bindings, &key);
	if (!bound)
		return DROP_VID_UNKNOWN;
	*ref = *bound;
	*vid = key.vid;
	return -1;
}

/* Remove the 802.1Q tag that follows the MACs. */
static __always_inline int pop_tag(struct xdp_md *ctx)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__u64 macs;
	__u32 tail;

	if (data + 18 > data_end)
		return -1;
	macs = *(__u64 *)data;
	tail = *(__u32 *)(data + 8);
	*(__u32 *)(data + 12) = tail;
	*(__u64 *)(data + 4) = macs;
	return bpf_xdp_adjust_head(ctx, 4);
}

/* Put an 802.1Q tag with `vid` after the MACs of the frame that starts `skip` bytes into the data (0, or the Outer
 * that egress removes in the same move). */
static __always_inline int push_tag(struct xdp_md *ctx, int skip, __u16 vid)
{
	__u8 *data, *data_end;
	__u64 macs;
	__u32 tail;

	if (bpf_xdp_adjust_head(ctx, skip - 4))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + 18 > data_end)
		return -1;
	macs = *(__u64 *)(data + 4);
	tail = *(__u32 *)(data + 12);
	*(__u64 *)data = macs;
	*(__u32 *)(data + 8) = tail;
	*(__be16 *)(data + 12) = bpf_htons(ETH_P_8021Q);
	*(__be16 *)(data + 14) = bpf_htons(vid);
	return 0;
}

/* preserve mode: the frame at `offset` carries exactly the VID bound to its VNI on the trunk. */
static __always_inline int has_vid(__u8 *data, __u8 *data_end, int offset, __u16 vid)
{
	struct ethhdr *eth = (void *)(data + offset);
	struct xf_vlan_hdr *tag = (void *)(eth + 1);

	return (void *)(tag + 1) <= (void *)data_end && eth->h_proto == bpf_htons(ETH_P_8021Q) &&
	       (bpf_ntohs(tag->tci) & XF_VLAN_VID_MASK) == vid;
}

#endif
