/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Known unicast: one redirect, to a local port of the frame's VNI or, encapsulated, to the one remote VTEP.
 */
#ifndef XDPFLEET_VTEP_UNICAST_H
#define XDPFLEET_VTEP_UNICAST_H

#include "vtep_frame.h"
#include "vtep_vlan.h"

/* Send the known unicast frame, as it is now, out of `ifindex` (port `slot`): a redirect, counted sent, or in the TC
 * backend a command to do it (vtep_replicate counts it sent once the kernel took it). */
static __always_inline int send_to(struct xdp_md *ctx, struct frame *f, __u32 ifindex, __u32 slot)
{
	__u64 len = ctx->data_end - ctx->data;

	count_fdb(f, FDB_KNOWN_UNICAST);
	if (f->to_tc)
		return hand_to_tc(ctx, f, TC_SEND, ifindex);
	count_sent(slot, f->vni_stats, len);
	return bpf_redirect(ifindex, 0);
}

/* A local port of the frame's VNI, or NULL (an entry that the configuration no longer backs: flood instead). */
static __always_inline struct port_config *local_target(struct frame *f, __u32 ifindex, struct port_vni **member)
{
	struct port_vni_key key = { .vni = f->vni, .ifindex = ifindex };
	struct port_config *port = bpf_map_lookup_elem(&port_config, &ifindex);

	if (!port || (port->kind != PORT_ACCESS && port->kind != PORT_TRUNK))
		return NULL;
	*member = bpf_map_lookup_elem(&port_vnis, &key);
	return *member ? port : NULL;
}

/* Send the frame (no Outer) out of local port `ifindex` of its VNI. */
static __always_inline int send_local(struct xdp_md *ctx, struct frame *f, __u32 ifindex, struct port_config *port,
				      struct port_vni *member)
{
	__u8 *data, *data_end;

	if (ifindex == f->in_ifindex)
		return drop(f->in_slot, f->vni_stats, DROP_HAIRPIN);
	if (port->kind == PORT_TRUNK) {
		if (member->flags & VNI_PRESERVE_VLAN) {
			if (!has_vid((void *)(long)ctx->data, (void *)(long)ctx->data_end, 0, member->vid))
				return drop(port->slot, f->vni_stats, DROP_VID_MISMATCH);
		} else if (push_tag(ctx, 0, member->vid)) {
			return drop(port->slot, f->vni_stats, DROP_MALFORMED);
		}
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	/* the kernel would drop a longer frame after the redirect, uncounted (a decapsulated frame may be longer than
	 * a local port takes) */
	if (data_end - data > port->mtu + DEVICE_FRAME_ALLOWANCE)
		return drop(port->slot, f->vni_stats, DROP_MTU);
	return send_to(ctx, f, ifindex, port->slot);
}

/* Encapsulate the frame to the remote VTEP of `e` and send it out of its tunnel port. Returns -1 when the entry
 * is no longer backed by the configuration (flood instead). */
static __always_inline int send_remote(struct xdp_md *ctx, struct frame *f, struct fdb_entry *e)
{
	__u32 ifindex = e->ifindex, index = e->peer;
	struct port_config *port;
	struct peer *peer;
	__u8 *data, *data_end;

	if (f->flags & FRAME_FROM_TUNNEL)
		return drop(f->in_slot, f->vni_stats, DROP_SPLIT_HORIZON);
	peer = bpf_map_lookup_elem(&tunnel_peers, &index);
	if (!peer || peer->remote_ip != e->remote_ip || peer->vni != f->vni)
		return -1;
	port = bpf_map_lookup_elem(&port_config, &ifindex);
	if (!port || port->kind != PORT_TUNNEL)
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data_end - data + VXLAN_OVERHEAD - (int)sizeof(struct ethhdr) > port->mtu)
		return drop(port->slot, f->vni_stats, DROP_MTU);
	data = push_outer(ctx, f->cpu, f->vni);
	if (!data)
		return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
	finish_outer(data, port, peer, *(__u16 *)(data + OUTER_IP_CHECK));
	return send_to(ctx, f, ifindex, port->slot);
}

#endif
