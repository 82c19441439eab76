// SPDX-License-Identifier: GPL-2.0-only
/*
 * VXLAN VTEP in XDP: BUM replication with devmap broadcast and per-copy rewrite in a devmap egress program.
 *
 * vtep_ingress runs on every VTEP port. It classifies a frame into a VNI (access port: the port's VNI; trunk:
 * (port, VID); tunnel: the VXLAN header, after admission), writes a struct command for the copies, and
 * broadcasts the frame through the VNI's devmap: vni_flood (every member) for local frames, vni_local (access
 * and trunk members only: split horizon) for decapsulated ones.
 *
 * vtep_egress runs once per copy, on every devmap entry. Access copies leave as they came; trunk copies only
 * with the VNI's VID; tunnel copies get the 50-byte Outer. One uplink carries many peers: the kernel runs the
 * first queued frame's egress program for every frame queued to a device (kernel/bpf/devmap.c, bq_enqueue), so
 * the peer cannot come from the entry. Instead ingress stamps a per-CPU frame number into the command and
 * egress numbers the copies of each frame per device (copy_state): copy n goes to the n-th peer of the VNI
 * behind the port, tunnel_peers[port_vnis[vni, port].first_peer + n].
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "xdpfleet_parse.h"
#include "xdpfleet_csum.h"
#include "vtep.h"

#define VXLAN_FLAG_VNI bpf_htonl(0x08000000)
#define OUTER_TTL 64

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

_Static_assert(sizeof(struct outer_hdr) == VXLAN_OVERHEAD, "outer header is 50 bytes");
_Static_assert(__builtin_offsetof(struct outer_hdr, ip.check) == 24 && __builtin_offsetof(struct outer_hdr, ip.saddr) == 26 &&
	       __builtin_offsetof(struct outer_hdr, udp.source) == 34, "outer header offsets");

/* header_cache[port slot], per CPU: the last Outer this CPU built for a tunnel port, for one (VNI, Inner length);
 * the fields that differ per copy (MACs, addresses, UDP source port) are written per copy, and the checksum is
 * finished from the partial sum of the fixed fields. */
struct outer_template {
	__u32 vni;
	__u32 inner_len;
	struct outer_hdr hdr; /* 8-aligned: encapsulate() copies it as words */
	__u16 pad;
	__u32 ip_csum_partial; /* unfolded sum of the IPv4 header without addresses and checksum */
};
_Static_assert(__builtin_offsetof(struct outer_template, hdr) % 8 == 0, "template words are aligned");

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

#define GROUP_MAP(name, group)                                                                                  \
	struct {                                                                                                \
		__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);                                                        \
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
	__type(value, struct vni_tunnel);
} vni_tunnels SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, VTEP_MAX_VNIS * 16);
	__type(key, struct peer_addr_key);
	__type(value, __u32);
} peer_admission SEC(".maps");

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

/* The last command of this CPU: egress reads it where it gets no metadata (generic mode), which is safe there
 * because generic XDP runs the egress programs of a frame's copies before the next frame's ingress. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct command);
} current_command SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VTEP_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct outer_template);
} header_cache SEC(".maps");

#define NO_VNI_SLOT 0xffff

static __always_inline void count_rx(void *map, __u32 slot, __u64 bytes)
{
	struct traffic_stats *s = bpf_map_lookup_elem(map, &slot);

	if (s) {
		s->rx_packets++;
		s->rx_bytes += bytes;
	}
}

static __always_inline void count_tx(void *map, __u32 slot, __u64 bytes)
{
	struct traffic_stats *s = bpf_map_lookup_elem(map, &slot);

	if (s) {
		s->tx_packets++;
		s->tx_bytes += bytes;
	}
}

/* Count a drop on the port and, when known, on the VNI; returns XDP_DROP. */
static __always_inline int drop(__u32 port_slot, __u32 vni_slot, enum drop_reason reason)
{
	struct traffic_stats *s;

	if (reason >= DROP_REASONS)
		return XDP_DROP;
	s = bpf_map_lookup_elem(&port_stats, &port_slot);
	if (s)
		s->drops[reason]++;
	if (vni_slot != NO_VNI_SLOT) {
		s = bpf_map_lookup_elem(&vni_stats, &vni_slot);
		if (s)
			s->drops[reason]++;
	}
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

/* Classify a frame from a VLAN-aware port: only one 802.1Q tag with a bound VID; PCP and DEI stay untouched.
 * Returns -1 with *ref set, or the drop reason. */
static __always_inline int trunk_vni(void *data, void *data_end, __u32 ifindex, struct vni_ref *ref)
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
	return -1;
}

/* Hand the frame to every member of the VNI's group, with the command for their egress programs. */
static __always_inline int replicate(struct xdp_md *ctx, void *groups, void *large_groups, struct vni_ref *ref,
				     struct port_config *port, __u16 flags)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 zero = 0, inner_len = data_end - data;
	struct command *cmd, *current;
	struct vni_tunnel *tunnel;
	void *group;

	group = bpf_map_lookup_elem(groups, &ref->vni);
	if (!group)
		group = bpf_map_lookup_elem(large_groups, &ref->vni);
	if (!group)
		return drop(port->slot, ref->vni_slot, DROP_NO_GROUP);
	current = bpf_map_lookup_elem(&current_command, &zero);
	if (!current)
		return XDP_ABORTED;
	count_rx(&vni_stats, ref->vni_slot, inner_len);

	current->magic = VTEP_COMMAND_MAGIC;
	current->vni = ref->vni;
	current->vni_slot = ref->vni_slot;
	current->seq++;
	/* RFC 7348: a source port from the Inner flow, in the dynamic range 49152-65535. */
	current->udp_source = bpf_htons(49152 | (inner_flow_hash(data, data_end) & 0x3fff));
	current->inner_len = inner_len;
	current->flags = flags;
	tunnel = flags & COMMAND_FROM_TUNNEL ? NULL : bpf_map_lookup_elem(&vni_tunnels, &ref->vni_slot);
	if (tunnel && tunnel->vni == ref->vni) {
		current->tunnel_ifindex = tunnel->ifindex;
		current->first_peer = tunnel->first_peer;
		current->peers = tunnel->peers;
	} else {
		current->tunnel_ifindex = 0;
	}

	/* Native mode carries the command with the frame; generic mode gives egress no metadata (current_command). */
	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*cmd)) == 0) {
		cmd = (void *)(long)ctx->data_meta;
		if ((void *)(cmd + 1) <= (void *)(long)ctx->data)
			*cmd = *current;
	}
	return bpf_redirect_map(group, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS);
}

/* VXLAN on a tunnel port: admit, decapsulate, replicate to local members only. Anything else is the host's. */
static __always_inline int tunnel_ingress(struct xdp_md *ctx, struct port_config *port, __u32 ifindex)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xf_cursor c = { .pos = data };
	struct port_vni_key member = { .ifindex = ifindex };
	struct peer_addr_key sender;
	struct port_vni *admitted;
	struct vni_ref ref;
	struct vxlanhdr *vxh;
	struct ethhdr *eth;
	struct udphdr *udp;
	struct iphdr *ip;
	int outer_len;

	if (xf_parse_ethhdr(&c, data_end, &eth, NULL) != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	if (xf_parse_iphdr(&c, data_end, &ip) != IPPROTO_UDP || ip->daddr != port->local_ip)
		return XDP_PASS;
	if (ip->frag_off & bpf_htons(0x3fff)) /* fragments are reassembled by the host, not here */
		return XDP_PASS;
	if (xf_parse_udphdr(&c, data_end, &udp) < 0 || udp->dest != bpf_htons(VXLAN_PORT))
		return XDP_PASS;
	vxh = c.pos;
	if ((void *)(vxh + 1) > data_end || !(vxh->flags & VXLAN_FLAG_VNI))
		return drop(port->slot, NO_VNI_SLOT, DROP_MALFORMED);

	member.vni = bpf_ntohl(vxh->vni) >> 8;
	admitted = bpf_map_lookup_elem(&port_vnis, &member);
	if (!admitted)
		return drop(port->slot, NO_VNI_SLOT, DROP_NOT_ADMITTED);
	ref.vni = member.vni;
	ref.vni_slot = admitted->vni_slot;
	sender.vni = member.vni;
	sender.addr = ip->saddr;
	if (!bpf_map_lookup_elem(&peer_admission, &sender))
		return drop(port->slot, ref.vni_slot, DROP_NOT_PEER);

	outer_len = (void *)(vxh + 1) - data;
	if (bpf_xdp_adjust_head(ctx, outer_len))
		return drop(port->slot, ref.vni_slot, DROP_MALFORMED);
	return replicate(ctx, &vni_local, &vni_local_large, &ref, port, COMMAND_FROM_TUNNEL);
}

SEC("xdp")
int vtep_ingress(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 ifindex = ctx->ingress_ifindex;
	struct port_config *port;
	struct vni_ref ref;
	int reason;

	port = bpf_map_lookup_elem(&port_config, &ifindex);
	if (!port || port->kind == PORT_NONE)
		return XDP_PASS;
	count_rx(&port_stats, port->slot, data_end - data);

	switch (port->kind) {
	case PORT_TUNNEL:
		return tunnel_ingress(ctx, port, ifindex);
	case PORT_ACCESS:
		ref.vni = port->vni;
		ref.vni_slot = port->vni_slot;
		break;
	case PORT_TRUNK:
		reason = trunk_vni(data, data_end, ifindex, &ref);
		if (reason >= 0)
			return drop(port->slot, NO_VNI_SLOT, reason);
		break;
	default:
		return XDP_PASS;
	}
	return replicate(ctx, &vni_flood, &vni_flood_large, &ref, port, 0);
}

/* The command of this copy: from the metadata, which is then removed so no receiver sees it, or else from
 * current_command. */
static __always_inline int take_command(struct xdp_md *ctx, struct command *cmd)
{
	struct command *meta = (void *)(long)ctx->data_meta;
	struct command *found;
	__u32 zero = 0;

	if ((void *)(meta + 1) <= (void *)(long)ctx->data) {
		*cmd = *meta;
		bpf_xdp_adjust_meta(ctx, (int)sizeof(*cmd));
	} else {
		found = bpf_map_lookup_elem(&current_command, &zero);
		if (!found)
			return -1;
		*cmd = *found;
	}
	return cmd->magic == VTEP_COMMAND_MAGIC ? 0 : -1;
}

/* The peer of this copy. The copies of one frame on a port run one after the other and are numbered 0, 1, ...;
 * copy n goes to the n-th of the VNI's peers behind the port. NULL: more copies than peers (during an update). */
static __always_inline struct peer *copy_peer(__u32 port_slot, __u32 ifindex, struct command *cmd)
{
	struct copy_state *state = bpf_map_lookup_elem(&copy_state, &port_slot);
	struct port_vni_key member = { .vni = cmd->vni, .ifindex = ifindex };
	struct port_vni *row;
	struct peer *peer;
	__u32 index;

	if (!state)
		return NULL;
	if (state->seq != cmd->seq) {
		state->seq = cmd->seq;
		state->next_copy = 0;
		if (cmd->tunnel_ifindex == ifindex) {
			state->first_peer = cmd->first_peer;
			state->peers = cmd->peers;
		} else {
			row = bpf_map_lookup_elem(&port_vnis, &member);
			state->first_peer = row ? row->first_peer : 0;
			state->peers = row ? row->peers : 0;
		}
	}
	if (state->next_copy >= state->peers)
		return NULL;
	index = state->first_peer + state->next_copy++;
	peer = bpf_map_lookup_elem(&tunnel_peers, &index);
	return peer && peer->remote_ip ? peer : NULL;
}

static __always_inline struct outer_template *outer_template(__u32 port_slot, __u32 vni, __u32 inner_len)
{
	struct outer_template *t = bpf_map_lookup_elem(&header_cache, &port_slot);
	__u16 *w;

	if (!t)
		return NULL;
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
	t->ip_csum_partial = (__u32)w[0] + w[1] + w[2] + w[3] + w[4];
	return t;
}

/* Byte offsets in the Outer; the header is copied and patched as words (the struct is packed, and byte-wise
 * copies of it cost more than the rest of the copy's work). */
#define OUTER_IP_CHECK 24
#define OUTER_IP_SADDR 26
#define OUTER_IP_DADDR 30
#define OUTER_UDP_SOURCE 34

static __always_inline int encapsulate(struct xdp_md *ctx, struct port_config *port, struct peer *peer,
				       struct command *cmd)
{
	struct outer_template *t = outer_template(port->slot, cmd->vni, cmd->inner_len);
	const __u64 *words;
	__u8 *data, *data_end;
	__u32 sum;

	if (!t)
		return -1;
	if (bpf_xdp_adjust_head(ctx, -VXLAN_OVERHEAD))
		return -1;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	if (data + VXLAN_OVERHEAD > data_end)
		return -1;
	words = (const __u64 *)&t->hdr;
	*(__u64 *)(data + 0) = words[0];
	*(__u64 *)(data + 8) = words[1];
	*(__u64 *)(data + 16) = words[2];
	*(__u64 *)(data + 24) = words[3];
	*(__u64 *)(data + 32) = words[4];
	*(__u64 *)(data + 40) = words[5];
	*(__u16 *)(data + 48) = *(const __u16 *)&words[6];
	*(__u32 *)(data + 0) = *(__u32 *)&peer->mac[0];
	*(__u16 *)(data + 4) = *(__u16 *)&peer->mac[4];
	*(__u16 *)(data + 6) = *(__u16 *)&port->mac[0];
	*(__u32 *)(data + 8) = *(__u32 *)&port->mac[2];
	*(__be32 *)(data + OUTER_IP_SADDR) = port->local_ip;
	*(__be32 *)(data + OUTER_IP_DADDR) = peer->remote_ip;
	sum = t->ip_csum_partial + (port->local_ip & 0xffff) + (port->local_ip >> 16) + (peer->remote_ip & 0xffff) +
	      (peer->remote_ip >> 16);
	*(__sum16 *)(data + OUTER_IP_CHECK) = xf_csum_fold(sum);
	*(__be16 *)(data + OUTER_UDP_SOURCE) = cmd->udp_source;
	return 0;
}

SEC("xdp/devmap")
int vtep_egress(struct xdp_md *ctx)
{
	__u32 ifindex = ctx->egress_ifindex;
	struct port_vni_key member = { .ifindex = ifindex };
	struct xf_vlan_hdr *tag;
	struct port_config *port;
	struct port_vni *binding;
	struct ethhdr *eth;
	struct command cmd;
	struct peer *peer;
	void *data, *data_end;

	port = bpf_map_lookup_elem(&port_config, &ifindex);
	if (!port || port->kind == PORT_NONE)
		return XDP_DROP; /* not a VTEP port (any more): nothing to count it on */
	if (take_command(ctx, &cmd))
		return drop(port->slot, NO_VNI_SLOT, DROP_BAD_COMMAND);

	switch (port->kind) {
	case PORT_ACCESS: /* the group is the membership: an access copy leaves as it came */
		break;
	case PORT_TRUNK:
		member.vni = cmd.vni;
		binding = bpf_map_lookup_elem(&port_vnis, &member);
		if (!binding)
			return drop(port->slot, cmd.vni_slot, DROP_NOT_MEMBER);
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		eth = data;
		tag = (void *)(eth + 1);
		if ((void *)(tag + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_8021Q) ||
		    (bpf_ntohs(tag->tci) & XF_VLAN_VID_MASK) != binding->vid)
			return drop(port->slot, cmd.vni_slot, DROP_VID_MISMATCH);
		break;
	case PORT_TUNNEL:
		if (cmd.flags & COMMAND_FROM_TUNNEL)
			return drop(port->slot, cmd.vni_slot, DROP_SPLIT_HORIZON);
		peer = copy_peer(port->slot, ifindex, &cmd);
		if (!peer)
			return drop(port->slot, cmd.vni_slot, DROP_NO_PEER);
		if (cmd.inner_len + VXLAN_OVERHEAD - sizeof(struct ethhdr) > port->mtu)
			return drop(port->slot, cmd.vni_slot, DROP_MTU);
		if (encapsulate(ctx, port, peer, &cmd))
			return drop(port->slot, cmd.vni_slot, DROP_MALFORMED);
		break;
	default:
		return drop(port->slot, cmd.vni_slot, DROP_NOT_MEMBER);
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	count_tx(&port_stats, port->slot, data_end - data);
	count_tx(&vni_stats, cmd.vni_slot, data_end - data);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
