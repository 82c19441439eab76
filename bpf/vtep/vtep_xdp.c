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
 */
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

/* --- VLAN tags ------------------------------------------------------------------------------------------------ */

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

/* Put the Outer for a frame of `vni` in front of it: every field but the per-copy ones (MACs, addresses, IP id,
 * checksum: finish_outer). Returns 0, or -1 when the frame has no headroom. */
static __always_inline int push_outer(struct xdp_md *ctx, struct cpu_state *cpu, __u32 vni)
{
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	__be16 udp_source = outer_udp_source(data, data_end);
	struct outer_template *t = outer_template(cpu, vni, data_end - data);

	if (bpf_xdp_adjust_head(ctx, -VXLAN_OVERHEAD))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + VXLAN_OVERHEAD > data_end)
		return -1;
	write_outer(data, t, udp_source);
	return 0;
}

/* --- The FDB -------------------------------------------------------------------------------------------------- */

static __always_inline void fdb_changed(void)
{
	__u32 zero = 0;
	__u64 *generation = bpf_map_lookup_elem(&fdb_generation, &zero);

	if (generation)
		__sync_fetch_and_add(generation, 1);
}

/* The tick's time (CLOCK_MONOTONIC to within a tick): aging counts seconds, and reading the clock source costs more
 * than a hash lookup here. */
static __always_inline __u64 clock_now(struct frame *f)
{
	if (!f->now)
		f->now = bpf_ktime_get_coarse_ns();
	return f->now;
}

static __always_inline int expired(struct frame *f, struct fdb_entry *e)
{
	return (__s64)(clock_now(f) - e->seen_ns) > (__s64)f->settings->aging_ns;
}

/* Learn that `mac` of the frame's VNI is behind local port `ifindex` (remote_ip 0), or behind the remote VTEP
 * remote_ip (peer: its tunnel_peers index) through tunnel port `ifindex`. A static entry is never overridden. */
static __always_inline void learn(struct frame *f, __u8 *mac, __u32 ifindex, __be32 remote_ip, __u32 peer)
{
	struct recent_source *recent = &f->cpu->recent;
	struct fdb_key key = { .vni = f->vni };
	struct fdb_entry *e, fresh = {};

	if (mac[0] & 1) /* a multicast source is not a station */
		return;
	if (f->jiffies - recent->seen_jiffies < RECENT_JIFFIES && recent->vni == f->vni &&
	    recent->ifindex == ifindex && recent->remote_ip == remote_ip &&
	    *(__u32 *)recent->mac == *(__u32 *)mac && *(__u16 *)&recent->mac[4] == *(__u16 *)&mac[4])
		return;
	__builtin_memcpy(key.mac, mac, 6);
	e = bpf_map_lookup_elem(&fdb, &key);
	if (e && e->ifindex == ifindex && e->remote_ip == remote_ip) {
		if ((__s64)(clock_now(f) - e->seen_ns) >= FDB_REFRESH_NS) {
			if (expired(f, e)) { /* gone and back: as if it had been aged out, then learned */
				count_fdb(f, FDB_AGED_OUT);
				count_fdb(f, FDB_LEARNED);
			}
			e->seen_ns = clock_now(f);
			e->peer = peer;
		}
	} else if (!e && f->settings->static_entries && (e = bpf_map_lookup_elem(&fdb_static, &key))) {
		if (e->ifindex != ifindex || e->remote_ip != remote_ip) {
			count_fdb(f, FDB_STATIC_CONFLICT); /* every such frame, so not remembered as recent */
			return;
		}
	} else {
		count_fdb(f, e ? FDB_MOVED : FDB_LEARNED);
		fresh.seen_ns = clock_now(f);
		fresh.ifindex = ifindex;
		fresh.remote_ip = remote_ip;
		fresh.peer = peer;
		fresh.vid = f->vid;
		bpf_map_update_elem(&fdb, &key, &fresh, BPF_ANY);
		fdb_changed();
	}
	recent->seen_jiffies = f->jiffies;
	recent->vni = f->vni;
	recent->ifindex = ifindex;
	recent->remote_ip = remote_ip;
	__builtin_memcpy(recent->mac, mac, 6);
}

/* Where a unicast MAC of the frame's VNI is: a static entry, else a learned one that has not aged out. */
static __always_inline struct fdb_entry *fdb_lookup(struct frame *f, __u8 *mac)
{
	struct fdb_key key = { .vni = f->vni };
	struct fdb_entry *e;

	__builtin_memcpy(key.mac, mac, 6);
	if (f->settings->static_entries) {
		e = bpf_map_lookup_elem(&fdb_static, &key);
		if (e)
			return e;
	}
	e = bpf_map_lookup_elem(&fdb, &key);
	if (e && expired(f, e)) {
		bpf_map_delete_elem(&fdb, &key);
		fdb_changed();
		count_fdb(f, FDB_AGED_OUT);
		return NULL;
	}
	return e;
}

/* fdb_lookup(), through this CPU's recent destination: a burst to one MAC (or to one unknown MAC) costs one lookup. */
static __always_inline struct fdb_entry *fdb_find(struct frame *f, __u8 *mac)
{
	struct recent_destination *recent = &f->cpu->destination;
	__u32 zero = 0;
	__u64 *generation = bpf_map_lookup_elem(&fdb_generation, &zero);
	struct fdb_entry *e;

	if (!generation)
		return fdb_lookup(f, mac);
	if (recent->generation == *generation && f->jiffies - recent->checked_jiffies < RECENT_JIFFIES &&
	    recent->vni == f->vni && *(__u32 *)recent->mac == *(__u32 *)mac &&
	    *(__u16 *)&recent->mac[4] == *(__u16 *)&mac[4])
		return recent->found ? &recent->entry : NULL;
	recent->generation = *generation; /* before the lookup: a change meanwhile makes this stale at once */
	e = fdb_lookup(f, mac);
	recent->checked_jiffies = f->jiffies;
	recent->vni = f->vni;
	__builtin_memcpy(recent->mac, mac, 6);
	recent->found = e != NULL;
	if (e)
		recent->entry = *e;
	return e;
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

/* Send the known unicast frame, as it is now, out of `ifindex` (port `slot`): a redirect, counted sent, or in the TC
 * backend a command to do it (vtep_replicate counts it sent once the kernel took it). */
static __always_inline int send_to(struct xdp_md *ctx, struct frame *f, __u32 ifindex, __u32 slot)
{
	__u64 len = ctx->data_end - ctx->data;

	count_fdb(f, FDB_KNOWN_UNICAST);
	if (f->to_tc)
		return hand_to_tc(ctx, f, TC_SEND, ifindex);
	count_tx(bpf_map_lookup_elem(&port_stats, &slot), len);
	count_tx(f->vni_stats, len);
	return bpf_redirect(ifindex, 0);
}

/* --- Known unicast: one redirect ------------------------------------------------------------------------------ */

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
	if (push_outer(ctx, f->cpu, f->vni))
		return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + VXLAN_OVERHEAD > data_end)
		return XDP_DROP;
	finish_outer(data, port, peer, *(__u16 *)(data + OUTER_IP_CHECK));
	return send_to(ctx, f, ifindex, port->slot);
}

/* --- Flooding ------------------------------------------------------------------------------------------------- */

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
		if (push_outer(ctx, f->cpu, f->vni))
			return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + VXLAN_OVERHEAD > data_end)
			return XDP_DROP;
		stamp(data, f, row, 0);
		drop_meta(ctx);
	} else if (short_stamp(ctx, f, 0)) {
		return drop(f->in_slot, f->vni_stats, DROP_MALFORMED);
	}
	return broadcast(ctx, f, row, group);
}

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

/* --- Egress: one flooded copy --------------------------------------------------------------------------------- */

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
		if (!cpu || push_outer(ctx, cpu, row->vni))
			return drop(port->slot, vs, DROP_MALFORMED);
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		if (data + VXLAN_OVERHEAD > data_end)
			return XDP_DROP;
		finish_outer(data, port, peer, *(__u16 *)(data + OUTER_IP_CHECK));
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	count_tx(bpf_map_lookup_elem(&port_stats, &(__u32){ port->slot }), data_end - data);
	count_tx(vs, data_end - data);
	return XDP_PASS;
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
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	count_tx(bpf_map_lookup_elem(&port_stats, &(__u32){ port->slot }), data_end - data);
	count_tx(vs, data_end - data);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
