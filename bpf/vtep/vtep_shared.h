/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What the VTEP's two objects share: vtep_xdp.c (the programs at the XDP hook, of both backends) and vtep_tc.c (the
 * TC backend's program at tc ingress). The TC backend loads both objects on one set of maps, so the maps are
 * declared here once, with the counters, the Outer header both backends build, and the command the TC backend's
 * XDP program leaves for its tc program.
 */
#ifndef XDPFLEET_VTEP_SHARED_H
#define XDPFLEET_VTEP_SHARED_H

#include <linux/bpf.h>
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

/* The flooded frame whose copies are being made in generic XDP, as its ingress left it for their egress program
 * (vtep_xdp.c): its short stamp (0: the frame carries its Outer), and the frame it is for. */
struct generic_flood {
	__u32 word;
	__u32 in_ifindex; /* the port it came from; 0: none (native XDP clears it) */
	__u32 len;        /* its length, and its first 4 bytes, as its copies reach egress */
	__u32 head;
};

/* cpu_state[0], per CPU: what ingress keeps from one frame to the next. */
struct cpu_state {
	struct outer_template template;
	struct recent_source recent;
	struct recent_destination destination;
	__u32 seq; /* numbers the flooded frames (odd: never 0) */
	__u32 pad;
	struct generic_flood flood;
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
	__uint(max_entries, VTEP_MAX_VLAN_BINDINGS);
	__type(key, struct vlan_key);
	__type(value, struct vni_ref);
} vlan_bindings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, VTEP_MAX_PORT_VNIS);
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

static __always_inline void count_tx(struct traffic_stats *s, __u64 bytes)
{
	if (s) {
		s->tx_packets++;
		s->tx_bytes += bytes;
	}
}

/* A frame sent by a port: it counts for the port and, when known, for its VNI. */
static __always_inline void count_sent(__u32 port_slot, struct traffic_stats *vni, __u64 bytes)
{
	count_tx(bpf_map_lookup_elem(&port_stats, &port_slot), bytes);
	count_tx(vni, bytes);
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

#endif
