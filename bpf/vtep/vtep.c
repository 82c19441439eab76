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
 *   metadata (in front of it in generic mode), and its tunnel copies get their Outer in egress (struct
 *   flood_settings).
 *
 * vtep_egress runs once per flooded copy. A local copy loses the Outer (a trunk's copy then gets the trunk's VID);
 * a tunnel copy gets its peer's addresses. Everything a copy needs travels in the frame: the VNI in the Outer's
 * VXLAN header, and the frame's stamp in the Outer fields that every tunnel copy overwrites (or the short stamp's
 * VNI slot and frame number, which a devmap copy's metadata carries too). There is no per-CPU "current frame":
 * native XDP runs the egress programs at the devmap flush, after later frames' ingress, so a copy can never get
 * another frame's VNI.
 *
 * One uplink carries many peers: the kernel runs the first queued frame's egress program for every frame queued to
 * a device (kernel/bpf/devmap.c, bq_enqueue), so the peer cannot come from the entry. Egress numbers the copies of
 * each frame per device instead (copy_state, by the frame's stamp): copy n goes to the n-th peer of the VNI behind
 * the port, tunnel_peers[port_vnis[vni, port].first_peer + n].
 *
 * The TC backend (seed 000's XDP + TC) shares all of ingress: vtep_ingress_tc classifies, admits, decapsulates and
 * learns as above, but where the XDP backend redirects it leaves a command in the frame's metadata (struct
 * tc_command) and passes the frame to the stack, which hands it, as an skb with that metadata, to vtep_replicate at
 * tc ingress of the same port. That program sends known unicast on, and replicates a flooded frame with
 * bpf_clone_redirect: the local copies first, then the Outer added once and, per peer, its addresses written and
 * the copy sent. It walks the VNI's members in vni_members (a devmap cannot be iterated from BPF).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "xdpfleet_parse.h"
#include "xdpfleet_csum.h"
#include "vtep.h"

#define VXLAN_FLAG_VNI bpf_htonl(0x08000000)
#define OUTER_TTL 64
#define NO_VNI_SLOT 0xffff
/* A redirected frame may be this much longer than its device's MTU (Ethernet header and one tag); the kernel drops a
 * longer one before it reaches the device or an egress program (xdp_ok_fwd_dev). layouts.DEVMAP_FRAME_ALLOWANCE. */
#define DEVICE_FRAME_ALLOWANCE 18

struct vxlanhdr {
	__be32 flags;
	__be32 vni; /* VNI in the upper 24 bits */
};

struct outer_hdr {
	struct ethhdr eth;
	struct iphdr ip;
	struct udphdr udp;
	struct vxlanhdr vxlan;
} __attribute__((packed));

/* Byte offsets in the Outer. It is written and patched as words: the struct is packed, and byte-wise copies of it
 * cost more than the rest of a copy's work. */
#define OUTER_DMAC 0
#define OUTER_SMAC 6
#define OUTER_IP_ID 18
#define OUTER_IP_CHECK 24
#define OUTER_IP_SADDR 26
#define OUTER_IP_DADDR 30
#define OUTER_UDP_SOURCE 34
#define OUTER_VXLAN_VNI 46

_Static_assert(sizeof(struct outer_hdr) == VXLAN_OVERHEAD, "outer header is 50 bytes");
_Static_assert(__builtin_offsetof(struct outer_hdr, ip.id) == OUTER_IP_ID &&
		       __builtin_offsetof(struct outer_hdr, ip.check) == OUTER_IP_CHECK &&
		       __builtin_offsetof(struct outer_hdr, ip.saddr) == OUTER_IP_SADDR &&
		       __builtin_offsetof(struct outer_hdr, ip.daddr) == OUTER_IP_DADDR &&
		       __builtin_offsetof(struct outer_hdr, udp.source) == OUTER_UDP_SOURCE &&
		       __builtin_offsetof(struct outer_hdr, vxlan.vni) == OUTER_VXLAN_VNI,
	       "outer header offsets");

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
 * in generic XDP (vtep_ingress_generic: egress sees no metadata there), in front of the frame. Its bit 0 is clear
 * (an Outer's first word, STAMP_SEQ, is odd) and it is never 0 (copy_state's seq when no frame is being numbered: a
 * stamp equal to it would continue numbering where the last frame stopped). */
#define SHORT_STAMP_LEN 4
#define SHORT_FROM_TUNNEL 0x2 /* as STAMP_FROM_TUNNEL */
#define SHORT_NONZERO 0x4
#define SHORT_SLOT_SHIFT 3 /* 12 bits: the VNI slot */
#define SHORT_SLOT_MASK 0xfff
#define SHORT_SEQ_SHIFT 15 /* 17 bits: the frame's number on its CPU */
_Static_assert(VTEP_MAX_VNIS <= SHORT_SLOT_MASK + 1, "a VNI slot fits the short stamp");

/* The last Outer a CPU built, for one (VNI, Inner length). */
struct outer_template {
	__u32 vni;
	__u32 inner_len;
	struct outer_hdr hdr; /* 8-aligned: copied as words */
	__u16 pad;
};
_Static_assert(__builtin_offsetof(struct outer_template, hdr) % 8 == 0, "template words are aligned");

/* How long a CPU trusts what it remembers of the FDB (recent_source, recent_destination), in jiffies (read for
 * free per frame, where the clock costs a helper call): 0.1 s at HZ=1000, 1 s at HZ=100. */
#define RECENT_JIFFIES 100

/* The last source this CPU learned or refreshed: its next frames from the same place within RECENT_JIFFIES need no
 * FDB lookup (a burst of one sender's frames is the common case). */
struct recent_source {
	__u64 seen_jiffies;
	__u32 vni;
	__u32 ifindex;
	__be32 remote_ip;
	__u8 mac[6];
	__u16 pad;
};

/* The last destination this CPU looked up, found or not, with the FDB generation it saw: valid until the FDB
 * changes (fdb_generation) or RECENT_JIFFIES pass (an entry that expires meanwhile is honoured that much longer). */
struct recent_destination {
	__u64 generation;
	__u64 checked_jiffies;
	__u32 vni;
	__u8 mac[6];
	__u8 found;
	__u8 pad;
	struct fdb_entry entry;
};

/* cpu_state[0], per CPU: what ingress keeps from one frame to the next. */
struct cpu_state {
	struct outer_template template;
	struct recent_source recent;
	struct recent_destination destination;
	__u32 seq; /* numbers the flooded frames (odd: never 0) */
	__u32 pad;
};

/* Keyed by member: a local port's ifindex, or a peer's member key (peer_member_key in vtep_abi.h). Sizes, not
 * BTF types: libbpf cannot size the union inside struct bpf_devmap_val from BTF. */
struct member_group {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, VTEP_SMALL_GROUP);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct bpf_devmap_val));
};

struct large_member_group {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, VTEP_MAX_MEMBERS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct bpf_devmap_val));
};

/* Groups by VNI slot: an array index, where a hash of maps by VNI cost a hash lookup per frame. */
#define GROUP_MAP(name, group)                                                                                  \
	struct {                                                                                                \
		__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);                                                       \
		__uint(max_entries, VTEP_MAX_VNIS);                                                             \
		__type(key, __u32);                                                                             \
		__array(values, struct group);                                                                  \
	} name SEC(".maps")

/* Every member of a VNI (for frames from local ports), and local members only (for decapsulated frames). */
GROUP_MAP(vni_flood, member_group);
GROUP_MAP(vni_flood_large, large_member_group);
GROUP_MAP(vni_local, member_group);
GROUP_MAP(vni_local_large, large_member_group);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VTEP_MAX_IFINDEX);
	__type(key, __u32);
	__type(value, struct port_config);
} port_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, VTEP_MAX_PORTS * 64);
	__type(key, struct vlan_key);
	__type(value, struct vni_ref);
} vlan_bindings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, VTEP_MAX_PORTS * 64);
	__type(key, struct port_vni_key);
	__type(value, struct port_vni);
} port_vnis SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VTEP_MAX_PEERS);
	__type(key, __u32);
	__type(value, struct peer);
} tunnel_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VTEP_MAX_VNIS);
	__type(key, __u32);
	__type(value, struct flood_settings);
} flood_settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VTEP_MAX_VNIS);
	__type(key, __u32);
	__type(value, struct vni_members);
} vni_members SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, VTEP_MAX_VNIS * 16);
	__type(key, struct peer_addr_key);
	__type(value, __u32);
} peer_admission SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct vtep_settings);
} settings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, VTEP_MAX_STATIC_FDB);
	__type(key, struct fdb_key);
	__type(value, struct fdb_entry);
} fdb_static SEC(".maps");

/* fdb_generation[0]: changes whenever an FDB entry comes, moves or goes (the data plane adds 1; user space, after
 * writing fdb_static, adds 1 << 32), so that a CPU's recent_destination knows it is stale. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fdb_generation SEC(".maps");

/* Sized by the document's fdb_size at load (FDB_SIZE_DEFAULT here). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, FDB_SIZE_DEFAULT);
	__type(key, struct fdb_key);
	__type(value, struct fdb_entry);
} fdb SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VTEP_MAX_VNIS);
	__type(key, __u32);
	__type(value, struct traffic_stats);
} vni_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VTEP_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct traffic_stats);
} port_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VTEP_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct copy_state);
} copy_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_state SEC(".maps");

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

static __always_inline void count_tx(struct traffic_stats *s, __u64 bytes)
{
	if (s) {
		s->tx_packets++;
		s->tx_bytes += bytes;
	}
}

static __always_inline void count_fdb(struct frame *f, enum fdb_event event)
{
	if (f->vni_stats && event < FDB_EVENTS)
		f->vni_stats->fdb[event]++;
}

/* Count a drop on the port and, when known, on the VNI; returns XDP_DROP. */
static __always_inline int drop(__u32 port_slot, struct traffic_stats *vni, enum drop_reason reason)
{
	struct traffic_stats *s;

	if (reason >= DROP_REASONS)
		return XDP_DROP;
	s = bpf_map_lookup_elem(&port_stats, &port_slot);
	if (s)
		s->drops[reason]++;
	if (vni)
		vni->drops[reason]++;
	return XDP_DROP;
}

static __always_inline __u32 mix(__u32 h, __u32 v)
{
	h ^= v;
	h *= 0x9e3779b1;
	return h ^ (h >> 15);
}

/* A hash of the Inner flow (MACs, and the IP addresses, protocol and ports where there are some): stable within
 * a flow, so the outer UDP source port keeps a flow on one underlay path. */
static __always_inline __u32 inner_flow_hash(void *data, void *data_end)
{
	struct xf_cursor c = { .pos = data };
	struct ethhdr *eth;
	struct iphdr *ip;
	__u32 h = 0x7674;
	int proto;

	proto = xf_parse_ethhdr(&c, data_end, &eth, NULL);
	if (proto < 0)
		return h;
	h = mix(h, *(__u32 *)eth->h_dest);
	h = mix(h, *(__u32 *)eth->h_source);
	if (proto != bpf_htons(ETH_P_IP) || xf_parse_iphdr(&c, data_end, &ip) < 0)
		return mix(h, proto);
	h = mix(h, ip->saddr);
	h = mix(h, ip->daddr);
	h = mix(h, ip->protocol);
	if ((ip->protocol == IPPROTO_UDP || ip->protocol == IPPROTO_TCP) && c.pos + 4 <= data_end)
		h = mix(h, *(__u32 *)c.pos); /* both ports */
	return h;
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

/* --- The Outer ------------------------------------------------------------------------------------------------ */

static __always_inline struct outer_template *outer_template(struct cpu_state *cpu, __u32 vni, __u32 inner_len)
{
	struct outer_template *t = &cpu->template;
	__u16 *w;

	if (t->vni == vni && t->inner_len == inner_len)
		return t;
	t->vni = vni;
	t->inner_len = inner_len;
	__builtin_memset(&t->hdr, 0, sizeof(t->hdr));
	t->hdr.eth.h_proto = bpf_htons(ETH_P_IP);
	t->hdr.ip.version = 4;
	t->hdr.ip.ihl = 5;
	t->hdr.ip.ttl = OUTER_TTL;
	t->hdr.ip.protocol = IPPROTO_UDP;
	t->hdr.ip.frag_off = bpf_htons(0x4000); /* DF: the underlay MTU was checked, never fragment */
	t->hdr.ip.tot_len = bpf_htons(inner_len + VXLAN_OVERHEAD - sizeof(struct ethhdr));
	t->hdr.udp.dest = bpf_htons(VXLAN_PORT);
	t->hdr.udp.len = bpf_htons(inner_len + sizeof(struct udphdr) + sizeof(struct vxlanhdr));
	t->hdr.vxlan.flags = VXLAN_FLAG_VNI;
	t->hdr.vxlan.vni = bpf_htonl(vni << 8);
	w = (__u16 *)((void *)&t->hdr + sizeof(struct ethhdr));
	/* id (w[2]) is 0; addresses and checksum are not in the partial sum */
	t->hdr.ip.check = xf_csum_fold_raw((__u32)w[0] + w[1] + w[3] + w[4]);
	return t;
}

/* RFC 7348: the Outer's UDP source port from the Inner flow, in the dynamic range 49152-65535. */
static __always_inline __be16 outer_udp_source(void *data, void *data_end)
{
	return bpf_htons(49152 | (inner_flow_hash(data, data_end) & 0x3fff));
}

/* Write the template's Outer at `data` (50 bytes the caller made room for and checked). */
static __always_inline void write_outer(__u8 *data, struct outer_template *t, __be16 udp_source)
{
	const __u64 *words = (const __u64 *)&t->hdr;

	*(__u64 *)(data + 0) = words[0];
	*(__u64 *)(data + 8) = words[1];
	*(__u64 *)(data + 16) = words[2];
	*(__u64 *)(data + 24) = words[3];
	*(__u64 *)(data + 32) = words[4];
	*(__u64 *)(data + 40) = words[5];
	*(__u16 *)(data + 48) = *(const __u16 *)&words[6];
	*(__be16 *)(data + OUTER_UDP_SOURCE) = udp_source;
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

/* Address the Outer at `data` to `peer` from `port`, and complete its checksum from the partial sum (in the Outer's
 * checksum field as push_outer leaves it). */
static __always_inline void finish_outer(__u8 *data, struct port_config *port, struct peer *peer, __u16 partial)
{
	__u32 sum = partial + (port->local_ip & 0xffff) + (port->local_ip >> 16) + (peer->remote_ip & 0xffff) +
		    (peer->remote_ip >> 16);

	*(__u32 *)(data + 0) = *(__u32 *)&peer->mac[0];
	*(__u16 *)(data + 4) = *(__u16 *)&peer->mac[4];
	*(__u16 *)(data + 6) = *(__u16 *)&port->mac[0];
	*(__u32 *)(data + 8) = *(__u32 *)&port->mac[2];
	*(__u16 *)(data + OUTER_IP_ID) = 0;
	*(__be32 *)(data + OUTER_IP_SADDR) = port->local_ip;
	*(__be32 *)(data + OUTER_IP_DADDR) = peer->remote_ip;
	*(__sum16 *)(data + OUTER_IP_CHECK) = xf_csum_fold(sum);
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

/* --- The TC backend's hand-over ------------------------------------------------------------------------------ */

#define TC_COMMAND_MAGIC 0x7674

enum tc_op {
	TC_SEND = 1,  /* send the frame as it is out of `ifindex` (known unicast, ready as the XDP backend sends it) */
	TC_FLOOD = 2, /* replicate the frame (no Outer) to the members of its VNI; `ifindex` is the port it came from */
};

/* What vtep_ingress_tc leaves as the whole metadata of a frame it passes for vtep_replicate. */
struct tc_command {
	__u16 magic;
	__u16 op; /* enum tc_op */
	__u32 ifindex;
	__u32 vni;
	__u32 vni_slot;
};

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

/* Send the frame, as it is now, out of `ifindex`: a redirect, or in the TC backend a command to do it. */
static __always_inline int send_to(struct xdp_md *ctx, struct frame *f, __u32 ifindex)
{
	if (f->to_tc)
		return hand_to_tc(ctx, f, TC_SEND, ifindex);
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
	count_tx(bpf_map_lookup_elem(&port_stats, &(__u32){ port->slot }), data_end - data);
	count_tx(f->vni_stats, data_end - data);
	count_fdb(f, FDB_KNOWN_UNICAST);
	return send_to(ctx, f, ifindex);
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
	count_tx(bpf_map_lookup_elem(&port_stats, &(__u32){ port->slot }), data_end - data);
	count_tx(f->vni_stats, data_end - data);
	count_fdb(f, FDB_KNOWN_UNICAST);
	return send_to(ctx, f, ifindex);
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

/* Give the frame the short stamp (see SHORT_STAMP_LEN). Its VNI is known by slot only: were the slot to pass to
 * another VNI between ingress and egress (only when every slot is taken, see plan.assign_slots), egress would take
 * the new VNI's row, whose members are not the old VNI's ports. */
static __always_inline int short_stamp(struct xdp_md *ctx, struct frame *f, __u32 flags)
{
	__u32 word, *stamp;

	f->cpu->seq += 2;
	word = (f->cpu->seq >> 1) << SHORT_SEQ_SHIFT | (__u32)f->vni_slot << SHORT_SLOT_SHIFT | SHORT_NONZERO | flags;
	drop_meta(ctx);
	if (f->stamp_in_metadata && !bpf_xdp_adjust_meta(ctx, -SHORT_STAMP_LEN)) {
		stamp = (void *)(long)ctx->data_meta;
		if ((void *)(stamp + 1) > (void *)(long)ctx->data)
			return -1;
		*stamp = word;
		return 0;
	}
	if (bpf_xdp_adjust_head(ctx, -SHORT_STAMP_LEN))
		return -1;
	stamp = (void *)(long)ctx->data;
	if ((void *)(stamp + 1) > (void *)(long)ctx->data_end)
		return -1;
	*stamp = word;
	return 0;
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
	count_fdb(f, FDB_FLOODED);
	return bpf_redirect_map(group, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
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
	/* The first fragment of a VXLAN datagram: its tunnel frame cannot be admitted here, and reassembled by the
	 * host, a VXLAN socket of the kernel on this host would decapsulate it without admission. */
	if (ip->frag_off & bpf_htons(XF_IP_MF))
		return drop(f->in_slot, NULL, DROP_FRAGMENT);
	vxh = c.pos;
	if ((void *)(vxh + 1) > data_end || !(vxh->flags & VXLAN_FLAG_VNI))
		return drop(f->in_slot, NULL, DROP_MALFORMED);

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
	count_fdb(f, FDB_FLOODED);
	return bpf_redirect_map(group, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
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
 * apart): the short stamp goes in front of the frame. */
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

/* A copy of a frame with the short stamp `word`, read from its first `skip` bytes (or its metadata: skip 0): tunnel
 * copies get their whole Outer here. */
static __always_inline int short_copy(struct xdp_md *ctx, struct port_config *port, __u32 ifindex, __u32 word,
				      int skip)
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
		reason = local_copy(ctx, port, ifindex, row->vni, skip);
		if (reason >= 0)
			return drop(port->slot, vs, reason);
	} else {
		if (word & SHORT_FROM_TUNNEL)
			return drop(port->slot, vs, DROP_SPLIT_HORIZON);
		peer = copy_peer(port->slot, ifindex, row->vni, word, row->tunnel_ifindex, row->first_peer, row->peers);
		if (!peer)
			return drop(port->slot, vs, DROP_NO_PEER);
		if (data_end - data - skip + VXLAN_OVERHEAD - (int)sizeof(struct ethhdr) > port->mtu)
			return drop(port->slot, vs, DROP_MTU);
		cpu = bpf_map_lookup_elem(&cpu_state, &zero);
		if (!cpu || bpf_xdp_adjust_head(ctx, skip) || push_outer(ctx, cpu, row->vni))
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
	__u32 ifindex = ctx->egress_ifindex, vni, vni_slot;
	__u32 *meta = (void *)(long)ctx->data_meta;
	__u8 *data = (void *)(long)ctx->data;
	__u8 *data_end = (void *)(long)ctx->data_end;
	struct traffic_stats *vs;
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
			return short_copy(ctx, port, ifindex, word, 0);
		}
	}
	if (data + SHORT_STAMP_LEN > data_end)
		return drop(port->slot, NULL, DROP_NO_OUTER);
	if (!(*(__u32 *)data & 1))
		return short_copy(ctx, port, ifindex, *(__u32 *)data, SHORT_STAMP_LEN);
	if (data + VXLAN_OVERHEAD > data_end)
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

/* --- The TC backend: replication at tc ingress ---------------------------------------------------------------- */

/* The tags a frame may carry to be flooded to a tunnel: the stack moves the first into the skb before tc, and each
 * one popped brings the next out. */
#define TC_TAGS_MAX 2
#define VLAN_HLEN 4

/* Open-coded numeric iterator (kernel 6.4+): the verifier checks a loop body once, whatever the member count. */
struct bpf_iter_num {
	__u64 __opaque[1];
} __attribute__((aligned(8)));
extern int bpf_iter_num_new(struct bpf_iter_num *it, int start, int end) __ksym;
extern int *bpf_iter_num_next(struct bpf_iter_num *it) __ksym;
extern void bpf_iter_num_destroy(struct bpf_iter_num *it) __ksym;

/* A local copy out of an access port or a trunk of the VNI: as local_copy() checks a devmap copy, a translated trunk's
 * copy getting the trunk's VID (as the skb's tag, taken off again for the next copy). Returns -1 or the drop reason. */
static __always_inline int tc_local_copy(struct __sk_buff *skb, struct port_config *port, __u32 ifindex, __u32 vni,
					 struct traffic_stats *vs)
{
	struct port_vni_key key = { .vni = vni, .ifindex = ifindex };
	struct port_vni *member = NULL;
	__u32 len = skb->len + (skb->vlan_present ? VLAN_HLEN : 0); /* as on the wire */
	__u16 vid = 0;

	if (port->kind == PORT_ACCESS) {
		if (port->vni != vni)
			return DROP_NOT_MEMBER;
	} else {
		member = bpf_map_lookup_elem(&port_vnis, &key);
		if (!member)
			return DROP_NOT_MEMBER;
		if (!(member->flags & VNI_PRESERVE_VLAN)) {
			vid = member->vid;
			len += VLAN_HLEN;
		} else if (!skb->vlan_present || skb->vlan_proto != bpf_htons(ETH_P_8021Q) ||
			   (skb->vlan_tci & XF_VLAN_VID_MASK) != member->vid) {
			return DROP_VID_MISMATCH;
		}
	}
	if (len > port->mtu + DEVICE_FRAME_ALLOWANCE)
		return DROP_MTU;
	if (vid && bpf_skb_vlan_push(skb, bpf_htons(ETH_P_8021Q), vid))
		return DROP_MALFORMED;
	bpf_clone_redirect(skb, ifindex, 0);
	if (vid && bpf_skb_vlan_pop(skb))
		return DROP_MALFORMED;
	count_tx(bpf_map_lookup_elem(&port_stats, &(__u32){ port->slot }), len);
	count_tx(vs, len);
	return -1;
}

/* Put the frame's tags (in the skb, see TC_TAGS_MAX) back in front of its EtherType, as a tunnel carries them. */
static __always_inline int tc_tags_inline(struct __sk_buff *skb)
{
	__u32 tags[TC_TAGS_MAX] = {}, n = 0, i;
	__u8 *data, *data_end;

	for (i = 0; i < TC_TAGS_MAX && skb->vlan_present; i++) {
		tags[i] = skb->vlan_proto << 16 | skb->vlan_tci; /* the TPID as it lies in the frame */
		n++;
		if (bpf_skb_vlan_pop(skb))
			return -1;
	}
	if (skb->vlan_present)
		return -1;
	for (i = TC_TAGS_MAX; i-- > 0;) {
		if (i >= n)
			continue;
		if (bpf_skb_change_head(skb, VLAN_HLEN, 0))
			return -1;
		data = (void *)(long)skb->data;
		data_end = (void *)(long)skb->data_end;
		if (data + 18 > data_end)
			return -1;
		*(__u64 *)data = *(__u64 *)(data + 4);
		*(__u32 *)(data + 8) = *(__u32 *)(data + 12);
		*(__be16 *)(data + 12) = (__be16)(tags[i] >> 16);
		*(__be16 *)(data + 14) = bpf_htons(tags[i] & 0xffff);
	}
	return 0;
}

/* Put the Outer in front of the frame once for all its tunnel copies; returns the partial sum finish_outer completes
 * per copy (the copies share the frame: each overwrites the last one's checksum), or -1. */
static __always_inline int tc_push_outer(struct __sk_buff *skb, __u32 vni)
{
	__u8 *data = (void *)(long)skb->data;
	__u8 *data_end = (void *)(long)skb->data_end;
	struct cpu_state *cpu = bpf_map_lookup_elem(&cpu_state, &(__u32){ 0 });
	struct outer_template *t;
	__be16 udp_source;

	if (!cpu)
		return -1;
	udp_source = outer_udp_source(data, data_end);
	t = outer_template(cpu, vni, skb->len);
	if (bpf_skb_change_head(skb, VXLAN_OVERHEAD, 0))
		return -1;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (data + VXLAN_OVERHEAD > data_end)
		return -1;
	write_outer(data, t, udp_source);
	return *(__u16 *)(data + OUTER_IP_CHECK);
}

/* The tunnel copies: each peer's addresses into the one Outer, then the copy out (the last one is the frame itself).
 * Returns the tc verdict. */
static __always_inline int tc_tunnel_copies(struct __sk_buff *skb, struct vni_members *row, __u32 vni,
					    struct traffic_stats *vs, __u16 partial)
{
	__u32 last = row->count - 1, ifindex, index, i;
	struct port_config *port;
	struct bpf_iter_num it;
	struct peer *peer;
	__u8 *data;
	int *n, verdict = TC_ACT_STOLEN;

	bpf_iter_num_new(&it, row->locals, row->count);
	while ((n = bpf_iter_num_next(&it))) {
		i = *n;
		if (i >= VTEP_MAX_MEMBERS)
			break;
		ifindex = row->members[i].ifindex;
		index = row->members[i].peer;
		port = bpf_map_lookup_elem(&port_config, &ifindex);
		if (!port || port->kind != PORT_TUNNEL)
			continue; /* a row being rewritten: what it names now is no VTEP tunnel */
		peer = bpf_map_lookup_elem(&tunnel_peers, &index);
		if (!peer || !peer->remote_ip || peer->vni != vni) {
			drop(port->slot, vs, DROP_NO_PEER);
			continue;
		}
		if (skb->len - sizeof(struct ethhdr) > port->mtu) {
			drop(port->slot, vs, DROP_MTU);
			continue;
		}
		data = (void *)(long)skb->data;
		if (data + VXLAN_OVERHEAD > (__u8 *)(long)skb->data_end)
			break;
		finish_outer(data, port, peer, partial);
		count_tx(bpf_map_lookup_elem(&port_stats, &(__u32){ port->slot }), skb->len);
		count_tx(vs, skb->len);
		if (i == last) {
			verdict = bpf_redirect(ifindex, 0);
			break;
		}
		bpf_clone_redirect(skb, ifindex, 0);
	}
	bpf_iter_num_destroy(&it);
	return verdict;
}

/* Replicate a flooded frame to its VNI's members: local copies first (none back to the port it came from), then,
 * for a frame from a local port, the tunnel copies (split horizon: a decapsulated frame never goes to a tunnel). */
static __always_inline int tc_flood(struct __sk_buff *skb, struct tc_command *cmd)
{
	__u32 slot = cmd->vni_slot, from_ifindex = cmd->ifindex, vni = cmd->vni, ifindex, i;
	struct vni_members *row = bpf_map_lookup_elem(&vni_members, &slot);
	struct traffic_stats *vs = bpf_map_lookup_elem(&vni_stats, &slot);
	struct port_config *from = bpf_map_lookup_elem(&port_config, &from_ifindex), *port;
	struct bpf_iter_num it;
	int *n, reason, partial;

	if (!from)
		return TC_ACT_SHOT;
	if (!row || row->vni != vni) {
		drop(from->slot, vs, DROP_NO_GROUP);
		return TC_ACT_SHOT;
	}
	bpf_iter_num_new(&it, 0, row->locals);
	while ((n = bpf_iter_num_next(&it))) {
		i = *n;
		if (i >= VTEP_MAX_MEMBERS)
			break;
		ifindex = row->members[i].ifindex;
		if (ifindex == from_ifindex)
			continue;
		port = bpf_map_lookup_elem(&port_config, &ifindex);
		if (!port || port->kind == PORT_NONE || port->kind == PORT_TUNNEL)
			continue; /* a row being rewritten: what it names now is no local port */
		reason = tc_local_copy(skb, port, ifindex, vni, vs);
		if (reason >= 0)
			drop(port->slot, vs, reason);
	}
	bpf_iter_num_destroy(&it);
	if (from->kind == PORT_TUNNEL || row->count <= row->locals)
		return TC_ACT_STOLEN;
	if (tc_tags_inline(skb) || (partial = tc_push_outer(skb, vni)) < 0) {
		drop(from->slot, vs, DROP_MALFORMED);
		return TC_ACT_SHOT;
	}
	return tc_tunnel_copies(skb, row, vni, vs, partial);
}

/* The TC backend's tc ingress program, on every VTEP port next to vtep_ingress_tc: carries out its command. A frame
 * without one is the host's: TC_ACT_UNSPEC passes it on to the next tcx program of the port (a filter attached after
 * the VTEP sees it), or to the stack. TC_ACT_STOLEN: every copy was sent or dropped (and counted). */
SEC("tc")
int vtep_replicate(struct __sk_buff *skb)
{
	struct tc_command *cmd = (void *)(long)skb->data_meta;

	if ((void *)(cmd + 1) > (void *)(long)skb->data)
		return TC_ACT_UNSPEC;
	barrier_var(cmd);
	if ((void *)(cmd + 1) != (void *)(long)skb->data || cmd->magic != TC_COMMAND_MAGIC)
		return TC_ACT_UNSPEC;
	if (cmd->op == TC_SEND)
		return bpf_redirect(cmd->ifindex, 0);
	if (cmd->op == TC_FLOOD)
		return tc_flood(skb, cmd);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "GPL";
