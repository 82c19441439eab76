// SPDX-License-Identifier: GPL-2.0-only
/*
 * VXLAN VTEP in XDP: known unicast sent to one place, BUM replicated with devmap broadcast and a per-copy rewrite in
 * a devmap egress program, MAC learning, VLAN translation.
 *
 * vtep_ingress runs on every VTEP port (vtep_ingress_generic in generic mode). It classifies a frame into a VNI
 * (access port: the port's VNI; trunk: (port, VID), the tag removed unless the VNI preserves it; tunnel: the VXLAN
 * header, after admission), learns the source MAC and looks up the destination:
 * - known unicast: one bpf_redirect, to the local port (a trunk gets its VID) or, encapsulated, to the one remote
 *   VTEP; no devmap, no egress program;
 * - anything else is flooded: the frame gets its 50-byte Outer once, here, and is broadcast through the VNI's group
 *   (vni_flood: every member, for local frames; vni_local: local members only, for decapsulated frames, which
 *   keep the Outer they came with: split horizon). A frame too long to reach the local ports with an Outer (the
 *   devmap drops a frame longer than the port's MTU + 18 before egress) carries a 4-byte stamp instead, in its
 *   metadata, and its tunnel copies get their Outer in egress (struct flood_settings). Its copies are exactly as
 *   long as the frame, so a full-size frame (a tagged one of a VNI that preserves tags too) still reaches every
 *   member of the same MTU. A copy that a member's device refuses for its length (a VNI of mixed MTUs) never
 *   reaches egress: ingress counts it (lost_copies).
 *
 * vtep_egress runs once per flooded copy. A local copy loses the Outer (a trunk's copy then gets the trunk's VID);
 * a tunnel copy gets its peer's addresses. In native XDP everything a copy needs travels in the frame: the VNI in
 * the Outer's VXLAN header, and the frame's stamp in the Outer fields that every tunnel copy overwrites (or the
 * short stamp's VNI slot and frame number, which a devmap copy's metadata carries too). There is no per-CPU
 * "current frame" in native XDP: it runs the egress programs at the devmap flush, after later frames' ingress, so a
 * copy could get another frame's VNI. Generic XDP is the other way round: a devmap copy keeps no metadata, and the
 * copies' egress programs run within the ingress program's redirect, on its CPU, before any other frame's ingress
 * there; so the short stamp stays in a per-CPU record of the frame being flooded, which names the frame (port,
 * length, first bytes) so that a copy of another frame never takes it (see broadcast()).
 *
 * One uplink carries many peers: the kernel runs the first queued frame's egress program for every frame queued to
 * a device (kernel/bpf/devmap.c, bq_enqueue), so the peer cannot come from the entry. Egress numbers the copies of
 * each frame per device instead (copy_state, by the frame's stamp): copy n goes to the n-th peer of the VNI behind
 * the port, tunnel_peers[port_vnis[vni, port].first_peer + n].
 *
 * vtep_ingress_tc is the TC backend's ingress (see vtep_tc.c): it shares all of ingress, but where the XDP backend
 * redirects it leaves a command in the frame's metadata (struct tc_command) and passes the frame on to tc. It is
 * here, with the other XDP programs, so that the XDP backend's object needs nothing a tc program needs.
 *
 * This file holds the programs and the ingress that classifies a frame; the parts they call are in the headers
 * beside it: vtep_frame.h (the stamps, struct frame, the Outer pushed), vtep_vlan.h, vtep_fdb.h, vtep_unicast.h,
 * vtep_flood.h and vtep_egress.h; vtep_shared.h has what the TC backend's object (vtep_tc.c) shares.
 */
#include "vtep_fdb.h"
#include "vtep_unicast.h"
#include "vtep_flood.h"
#include "vtep_egress.h"

/* --- Ingress -------------------------------------------------------------------------------------------------- */

/* A frame from a local port, its VNI known (and a trunk's tag removed unless preserved). */
static __always_inline int local_ingress(struct xdp_md *ctx, struct frame *f)
{
	struct ethhdr *eth = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct port_config *port;
	struct port_vni *member;
	struct fdb_entry *e;
	int action;

	if ((void *)(eth + 1) > data_end)
		return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
	count_rx(f->vni_stats, data_end - (void *)eth);
	learn(f, eth->h_source, f->in_ifindex, 0, 0);
	if (!(eth->h_dest[0] & 1)) {
		e = fdb_find(f, eth->h_dest);
		if (e && e->remote_ip) {
			action = send_remote(ctx, f, e);
			if (action >= 0)
				return action;
		} else if (e) {
			port = local_target(f, e->ifindex, &member);
			if (port)
				return send_local(ctx, f, e->ifindex, port, member);
		}
	}
	return flood_local(ctx, f);
}

/* VXLAN on a tunnel port: admit, learn, then send the Inner to its one local port or flood it to the local members
 * only. Anything else is the host's. */
static __always_inline int tunnel_ingress(struct xdp_md *ctx, struct port_config *port, struct frame *f)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xf_cursor c = { .pos = data };
	struct port_vni_key key = { .ifindex = f->in_ifindex };
	struct flood_settings *row;
	struct port_config *target;
	struct peer_addr_key sender;
	struct port_vni *admitted, *member;
	struct fdb_entry *e;
	struct vxlanhdr *vxh;
	struct ethhdr *eth, *inner;
	struct udphdr *udp;
	struct iphdr *ip;
	__u32 *peer;
	int outer_len;
	void *group;

	if (xf_parse_ethhdr(&c, data_end, &eth, NULL) != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (xf_parse_iphdr(&c, data_end, &ip) != IPPROTO_UDP || ip->daddr != port->local_ip)
		return XDP_PASS;
	/* A later fragment has no UDP header to look at; the host cannot reassemble it without the first. */
	if (ip->frag_off & bpf_htons(XF_IP_OFFSET))
		return XDP_PASS;
	if (xf_parse_udphdr(&c, data_end, &udp) < 0 || udp->dest != bpf_htons(VXLAN_PORT))
		return XDP_PASS;
	/* Sent to another host's MAC (a switch flooding it, a promiscuous port): the kernel would drop it, not take it
	 * for its own address, and so does the VTEP. */
	if (!(eth->h_dest[0] & 1) && (*(__u16 *)&eth->h_dest[0] != *(__u16 *)&port->mac[0] ||
				      *(__u32 *)&eth->h_dest[2] != *(__u32 *)&port->mac[2]))
		return drop(f->in_slot, NULL, DROP_OTHER_HOST);
	/* The first fragment of a VXLAN datagram: its tunnel frame cannot be admitted here, and reassembled by the
	 * host, a VXLAN socket of the kernel on this host would decapsulate it without admission. */
	if (ip->frag_off & bpf_htons(XF_IP_MF))
		return drop(f->in_slot, NULL, DROP_FRAGMENT);
	vxh = c.pos;
	if ((void *)(vxh + 1) > data_end || !(vxh->flags & VXLAN_FLAG_VNI))
		return drop(f->in_slot, NULL, DROP_MALFORMED);
	/* The lengths say where the datagram ends: the Inner is what the kernel would decapsulate only when both end
	 * where the frame does (compared, never added to a pointer: 6.1's verifier does not bound a byte swap). */
	if (bpf_ntohs(ip->tot_len) != data_end - (void *)ip || bpf_ntohs(udp->len) != data_end - (void *)udp)
		return drop(f->in_slot, NULL, DROP_OUTER_LENGTH);

	key.vni = bpf_ntohl(vxh->vni) >> 8;
	admitted = bpf_map_lookup_elem(&port_vnis, &key);
	if (!admitted)
		return drop(f->in_slot, NULL, DROP_NOT_ADMITTED);
	f->vni = key.vni;
	f->vni_slot = admitted->vni_slot;
	f->flags = admitted->flags | FRAME_FROM_TUNNEL;
	f->vni_stats = bpf_map_lookup_elem(&vni_stats, &(__u32){ f->vni_slot });
	sender.vni = key.vni;
	sender.addr = ip->saddr;
	peer = bpf_map_lookup_elem(&peer_admission, &sender);
	/* A peer of the VNI behind another tunnel port is not one here: learned here, its MACs would be sent to it
	 * through this port, from this port's address. */
	if (!peer || *peer - admitted->first_peer >= admitted->peers)
		return drop(f->in_slot, f->vni_stats, DROP_NOT_PEER);

	inner = (void *)(vxh + 1);
	if ((void *)(inner + 1) > data_end)
		return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
	outer_len = (void *)inner - data;
	count_rx(f->vni_stats, data_end - (void *)inner);
	learn(f, inner->h_source, f->in_ifindex, sender.addr, *peer);
	if (!(inner->h_dest[0] & 1)) {
		e = fdb_find(f, inner->h_dest);
		if (e && e->remote_ip)
			return drop(f->in_slot, f->vni_stats, DROP_SPLIT_HORIZON);
		if (e && (target = local_target(f, e->ifindex, &member))) {
			if (bpf_xdp_adjust_head(ctx, outer_len))
				return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
			return send_local(ctx, f, e->ifindex, target, member);
		}
	}

	if (f->to_tc) {
		if (bpf_xdp_adjust_head(ctx, outer_len))
			return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
		return flood_tc(ctx, f);
	}
	group = vni_group(&vni_local, &vni_local_large, f->vni_slot);
	row = flooding(f);
	if (!group || !row)
		return drop(f->in_slot, f->vni_stats, DROP_NO_GROUP);
	if (data_end - (void *)inner + VXLAN_OVERHEAD <= row->frame_limit) {
		/* Keep the last 50 bytes of the Outer (it may be longer: IP options, a tag): the copies read the VNI and
		 * the stamp there and remove exactly that much. */
		if (bpf_xdp_adjust_head(ctx, outer_len - VXLAN_OVERHEAD))
			return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + VXLAN_OVERHEAD > data_end)
			return XDP_DROP;
		stamp(data, f, row, STAMP_FROM_TUNNEL);
		drop_meta(ctx);
	} else if (bpf_xdp_adjust_head(ctx, outer_len) || short_stamp(ctx, f, SHORT_FROM_TUNNEL)) {
		return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
	}
	return broadcast(ctx, f, row, group);
}

static __always_inline int ingress(struct xdp_md *ctx, __u8 stamp_in_metadata, __u8 to_tc)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct frame f = { .in_ifindex = ctx->ingress_ifindex, .stamp_in_metadata = stamp_in_metadata, .to_tc = to_tc };
	struct port_config *port;
	struct vni_ref ref;
	__u32 zero = 0;
	int reason;

	port = bpf_map_lookup_elem(&port_config, &f.in_ifindex);
	if (!port || port->kind == PORT_NONE)
		return XDP_PASS;
	f.in_slot = port->slot;
	count_rx(bpf_map_lookup_elem(&port_stats, &(__u32){ port->slot }), data_end - data);
	f.settings = bpf_map_lookup_elem(&settings, &zero);
	f.cpu = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!f.settings || !f.cpu)
		return XDP_ABORTED;
	f.jiffies = bpf_jiffies64();

	switch (port->kind) {
	case PORT_TUNNEL:
		return tunnel_ingress(ctx, port, &f);
	case PORT_ACCESS:
		f.vni = port->vni;
		f.vni_slot = port->vni_slot;
		break;
	case PORT_TRUNK:
		reason = trunk_vni(data, data_end, f.in_ifindex, &ref, &f.vid);
		if (reason >= 0)
			return drop(f.in_slot, NULL, reason);
		f.vni = ref.vni;
		f.vni_slot = ref.vni_slot;
		f.flags = ref.flags;
		if (!(ref.flags & VNI_PRESERVE_VLAN) && pop_tag(ctx))
			return drop(f.in_slot, NULL, DROP_MALFORMED);
		break;
	default:
		return XDP_PASS;
	}
	f.vni_stats = bpf_map_lookup_elem(&vni_stats, &(__u32){ f.vni_slot });
	return local_ingress(ctx, &f);
}

/* The ingress program in native mode. */
SEC("xdp")
int vtep_ingress(struct xdp_md *ctx)
{
	return ingress(ctx, 1, 0);
}

/* The ingress program in generic (skb) mode, where a devmap's egress program sees no metadata (the skb keeps it
 * apart): the short stamp goes in the frame's record (see broadcast). */
SEC("xdp")
int vtep_ingress_generic(struct xdp_md *ctx)
{
	return ingress(ctx, 0, 0);
}

/* The ingress program of the TC backend, in either XDP mode (both hand the frame's metadata to the skb). */
SEC("xdp")
int vtep_ingress_tc(struct xdp_md *ctx)
{
	drop_meta(ctx); /* vtep_replicate takes metadata of a command's size for one: only ours may be there */
	return ingress(ctx, 0, 1);
}

SEC("xdp/devmap")
int vtep_egress(struct xdp_md *ctx)
{
	__u32 ifindex = ctx->egress_ifindex, vni, vni_slot, zero = 0;
	__u32 *meta = (void *)(long)ctx->data_meta;
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	struct generic_flood *record;
	struct traffic_stats *vs;
	struct cpu_state *cpu;
	struct port_config *port;
	struct peer *peer;
	__u32 word;
	int reason;

	port = bpf_map_lookup_elem(&port_config, &ifindex);
	if (!port || port->kind == PORT_NONE)
		return XDP_DROP; /* not a VTEP port (any more): nothing to count it on */
	if ((void *)(meta + 1) <= (void *)data) {
		barrier_var(meta); /* else the compiler makes the two tests one (!=), which proves no length */
		if ((void *)(meta + 1) == (void *)data) {
			/* The short stamp as the copy's whole metadata, which does not leave with the copy. */
			word = *meta;
			if (bpf_xdp_adjust_meta(ctx, SHORT_STAMP_LEN))
				return drop(port->slot, NULL, DROP_MALFORMED);
			return short_copy(ctx, port, ifindex, word);
		}
	}
	if (data + VXLAN_OVERHEAD > data_end)
		return drop(port->slot, NULL, DROP_NO_OUTER);
	/* Generic XDP: the record its ingress left on this CPU, when it is this frame's (see broadcast). */
	cpu = bpf_map_lookup_elem(&cpu_state, &zero);
	record = cpu ? &cpu->flood : NULL;
	if (record && record->in_ifindex == ctx->ingress_ifindex && record->len == data_end - data &&
	    record->head == *(__u32 *)data && record->word)
		return short_copy(ctx, port, ifindex, record->word);
	if (!(*(__u32 *)data & 1))
		return drop(port->slot, NULL, DROP_NO_OUTER);
	vni = bpf_ntohl(*(__be32 *)(data + OUTER_VXLAN_VNI)) >> 8;
	vni_slot = *(__u16 *)(data + STAMP_VNI_SLOT);
	vs = bpf_map_lookup_elem(&vni_stats, &vni_slot);

	if (port->kind != PORT_TUNNEL) {
		reason = local_copy(ctx, port, ifindex, vni, VXLAN_OVERHEAD);
		if (reason >= 0)
			return drop(port->slot, vs, reason);
	} else {
		if (*(__u16 *)(data + STAMP_FLAGS) & STAMP_FROM_TUNNEL)
			return drop(port->slot, vs, DROP_SPLIT_HORIZON);
		peer = copy_peer(port->slot, ifindex, vni, *(__u32 *)(data + STAMP_SEQ), *(__u32 *)(data + STAMP_TUNNEL),
				 *(__u32 *)(data + STAMP_FIRST_PEER), *(__u16 *)(data + STAMP_PEERS));
		if (!peer)
			return drop(port->slot, vs, DROP_NO_PEER);
		if (data_end - data - (int)sizeof(struct ethhdr) > port->mtu)
			return drop(port->slot, vs, DROP_MTU);
		finish_outer(data, port, peer, *(__u16 *)(data + OUTER_IP_CHECK));
	}
	count_sent(port->slot, vs, ctx->data_end - ctx->data);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
