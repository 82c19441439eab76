/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * filter.h: the packet filter's rule-matching core, shared by its XDP and its tc program (filter.c), so that the
 * same compiled rules run at either hook.
 *
 * A rule matches on address family, IPv4/IPv6 source and destination prefixes (address & mask == network, the
 * masks computed by user space), IP protocol and source/destination port ranges. Rules are tried in order and the
 * first match wins; its per-CPU counters count the frame, and its action says drop or pass. A frame no rule
 * matches passes, counted in filter_unmatched by reason.
 *
 * A frame whose protocol or ports the parser could not reach (below) is never passed as if no rule matched: the
 * rules are walked as usual, a rule that misses on what is known (family, addresses, a known protocol) is passed
 * over, and a rule that matches without needing the unknown decides; but the first rule that could match and needs
 * the protocol or the ports stops the walk: the frame is counted UNMATCHED_UNPARSED and dropped, or passed when the
 * active order's unparsed says UNPARSED_PASS. No later rule decides it: a later rule cannot know that the earlier
 * one would not have matched.
 *
 * Why a rule table and not LPM tries: first-match-wins over several fields at once is an ordered list; tries
 * answer one field each (longest prefix), and combining their answers into "the first rule matching all fields"
 * costs a bitmap per trie entry and an AND per frame. The rule lists an inventory declares are short (at most
 * FILTER_MAX_RULES), so a linear walk over array entries (lookups the verifier inlines) is the simple fast path.
 *
 * Changing rules without a reload, and without a frame seeing half a change:
 *   filter_rules[slot]     one rule; a slot is written only while no order refers to it
 *   filter_counters[slot]  its per-CPU packets/bytes: a rule that stays keeps its slot, so its counts
 *   filter_order[gen]      the slots in rule order; two generations
 *   filter_active[0]       the generation in use: user space writes the other one, then flips this word
 * So a change writes the new or changed rules into free slots (counters zeroed), the new order into the idle
 * generation, and one word to switch; unchanged rules are not written.
 *
 * Parsing: up to two VLAN tags (at tc the kernel has already moved the outer tag into the skb, so the frame starts
 * with the inner type or the second tag), IPv4 with options, IPv6 with up to FILTER_MAX_EXT_HEADERS extension
 * headers (hop-by-hop, routing, fragment, destination options, AH; 8 bytes of each must be in the frame). The
 * protocol is IPv4's, or IPv6's upper-layer one behind those headers; the ports are the first 4 bytes behind the IP
 * header or the chain, for TCP and UDP. A non-first fragment (IPv4 offset != 0, or an IPv6 fragment header with
 * offset != 0) has no ports: a rule with ports never matches it; rules without ports (addresses, protocol) do. A
 * first fragment carries the ports and matches as a whole packet would, so dropping it leaves the rest of the
 * datagram unassemblable. Unknown (unparsed, see above): the protocol behind more than FILTER_MAX_EXT_HEADERS
 * headers, behind one cut short, or of a non-first IPv6 fragment whose fragment header names another extension
 * header (the chain behind it is in the first fragment); the ports of TCP or UDP when their 4 bytes are not all in
 * the frame. The IP total and payload lengths are not consulted: what is in the frame is parsed. At tc the program
 * reads only the skb's linear part: when the parse runs into its end, it pulls up to FILTER_PULL_BYTES in and parses
 * again, so there headers past FILTER_PULL_BYTES are unknown too.
 */
#ifndef XDPFLEET_FILTER_H
#define XDPFLEET_FILTER_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "xdpfleet_parse.h"
#include "filter_abi.h"

/* An IPv6 address in 32-bit words; an IPv4 address is word 0, the rest zero. filter_rule (filter_abi.h) has it. */
#define FILTER_ADDR_WORDS ((int)(sizeof(((struct filter_rule *)0)->src) / sizeof(__u32)))

#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60
#define IP6_FRAG_OFFSET 0xfff8 /* frag_off in host order: the offset, in 8-byte units shifted left by 3 */
/* The extension headers above as a bit set over next-header values (all below 64): one test in the common case. */
#define IP6_EXT_HEADERS                                                                                          \
	((1ULL << NEXTHDR_HOP) | (1ULL << NEXTHDR_ROUTING) | (1ULL << NEXTHDR_FRAGMENT) | (1ULL << NEXTHDR_AUTH) | \
	 (1ULL << NEXTHDR_DEST))

/*
 * filter_key.flags beside the family (RULE_IPV4, RULE_IPV6) and RULE_PORTS (the ports are known). Neither
 * RULE_PORTS nor KEY_PORTS_UNKNOWN: the frame has no ports (not TCP or UDP, or a non-first fragment).
 */
#define KEY_PROTO_UNKNOWN 0x10 /* the protocol is past what the parser reached (the ports too, if it has any) */
#define KEY_PORTS_UNKNOWN 0x20 /* TCP or UDP whose ports are past what the parser reached */
#define KEY_SHORT 0x40 /* the parse ran into data_end: at tc more of the frame may be pulled in */

/* What a frame is matched on. flags: its family (RULE_IPV4 or RULE_IPV6), RULE_PORTS when the ports are known, KEY_*. */
struct filter_key {
	__u32 src[FILTER_ADDR_WORDS];
	__u32 dst[FILTER_ADDR_WORDS];
	__u16 sport;
	__u16 dport;
	__u8 proto;
	__u8 flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FILTER_MAX_RULES);
	__type(key, __u32);
	__type(value, struct filter_rule);
} filter_rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FILTER_GENERATIONS);
	__type(key, __u32);
	__type(value, struct filter_order);
} filter_order SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} filter_active SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FILTER_MAX_RULES);
	__type(key, __u32);
	__type(value, struct filter_counter);
} filter_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNMATCHED_REASONS);
	__type(key, __u32);
	__type(value, struct filter_counter);
} filter_unmatched SEC(".maps");

static __always_inline void filter_count(void *counters, __u32 index, __u64 len)
{
	struct filter_counter *c = bpf_map_lookup_elem(counters, &index);

	if (c) { /* per-CPU: no other CPU writes it */
		c->packets++;
		c->bytes += len;
	}
}

/* Ports of a TCP or UDP header at pos (both start with them): RULE_PORTS, or unknown when they are not in the frame. */
static __always_inline void filter_ports(struct filter_key *key, void *pos, void *data_end)
{
	__be16 *ports = pos;

	if (key->proto != IPPROTO_TCP && key->proto != IPPROTO_UDP)
		return;
	if ((void *)(ports + 2) > data_end) {
		key->flags |= KEY_PORTS_UNKNOWN | KEY_SHORT;
		return;
	}
	key->sport = bpf_ntohs(ports[0]);
	key->dport = bpf_ntohs(ports[1]);
	key->flags |= RULE_PORTS;
}

static __always_inline int filter_ipv6_ext_header(__u8 nexthdr)
{
	return nexthdr < 64 && ((IP6_EXT_HEADERS >> nexthdr) & 1);
}

/*
 * Walk IPv6 extension headers to the upper-layer protocol. Returns 1 when the ports (if any) follow at cur->pos,
 * 0 when the frame has none to read: a non-first fragment, or a protocol left unknown (flags say which).
 */
static __always_inline int filter_ipv6_ext(struct filter_key *key, struct xf_cursor *cur, void *data_end)
{
	int i;

#pragma unroll
	for (i = 0; i < FILTER_MAX_EXT_HEADERS; i++) {
		__u8 *ext = cur->pos;
		__u32 len;

		if (!filter_ipv6_ext_header(key->proto))
			return 1;
		if ((void *)(ext + 8) > data_end) {
			key->flags |= KEY_PROTO_UNKNOWN | KEY_PORTS_UNKNOWN | KEY_SHORT;
			return 0;
		}
		if (key->proto == NEXTHDR_FRAGMENT) {
			key->proto = ext[0];
			cur->pos = ext + 8;
			if (!(bpf_ntohs(*(__be16 *)(ext + 2)) & IP6_FRAG_OFFSET))
				continue;
			if (filter_ipv6_ext_header(key->proto))
				key->flags |= KEY_PROTO_UNKNOWN; /* and no ports, as any non-first fragment */
			return 0;
		}
		len = key->proto == NEXTHDR_AUTH ? ((__u32)ext[1] + 2) * 4 : ((__u32)ext[1] + 1) * 8;
		key->proto = ext[0];
		cur->pos = ext + len;
	}
	if (!filter_ipv6_ext_header(key->proto))
		return 1;
	key->flags |= KEY_PROTO_UNKNOWN | KEY_PORTS_UNKNOWN; /* more headers than the walk takes */
	return 0;
}

/*
 * Parse a frame into key. Returns -1 when rules cannot match it, with *reason the enum filter_unmatched number.
 * A header cut short sets KEY_SHORT (also when the frame is malformed or not IP for it: at tc, pulling more in may
 * tell otherwise).
 */
static __always_inline int filter_parse(struct filter_key *key, void *data, void *data_end, __u32 *reason)
{
	struct xf_cursor cur = {.pos = data};
	struct ethhdr *eth;
	int proto;

	proto = xf_parse_ethhdr(&cur, data_end, &eth, NULL);
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph;

		if (xf_parse_iphdr(&cur, data_end, &iph) < 0)
			goto malformed;
		key->flags = RULE_IPV4;
		key->proto = iph->protocol;
		key->src[0] = iph->saddr;
		key->dst[0] = iph->daddr;
		if (!(bpf_ntohs(iph->frag_off) & XF_IP_OFFSET))
			filter_ports(key, cur.pos, data_end);
		return 0;
	}
	if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6h;
		int i;

		if (xf_parse_ip6hdr(&cur, data_end, &ip6h) < 0)
			goto malformed;
		key->flags = RULE_IPV6;
		key->proto = ip6h->nexthdr;
#pragma unroll
		for (i = 0; i < FILTER_ADDR_WORDS; i++) {
			key->src[i] = ip6h->saddr.in6_u.u6_addr32[i];
			key->dst[i] = ip6h->daddr.in6_u.u6_addr32[i];
		}
		if (filter_ipv6_ext(key, &cur, data_end))
			filter_ports(key, cur.pos, data_end);
		return 0;
	}
	if (proto < 0)
		key->flags = KEY_SHORT; /* cut short in the Ethernet header or a VLAN tag */
	*reason = UNMATCHED_NOT_IP;
	return -1;
malformed:
	key->flags = KEY_SHORT;
	*reason = UNMATCHED_MALFORMED;
	return -1;
}

static __always_inline int filter_addr_match(const __u32 *addr, const __u32 *net, const __u32 *mask)
{
	return ((addr[0] & mask[0]) == net[0]) & ((addr[1] & mask[1]) == net[1]) & ((addr[2] & mask[2]) == net[2]) &
	       ((addr[3] & mask[3]) == net[3]);
}

enum filter_match {
	RULE_MISS,
	RULE_MATCH,
	RULE_UNDECIDED, /* matches on all that is known, and needs the protocol or ports, which are not */
};

static __always_inline int filter_rule_match(const struct filter_rule *r, const struct filter_key *k)
{
	if (!(r->flags & k->flags & (RULE_IPV4 | RULE_IPV6)))
		return RULE_MISS;
	if (r->proto && r->proto != k->proto && !(k->flags & KEY_PROTO_UNKNOWN))
		return RULE_MISS;
	if (r->flags & RULE_PORTS) {
		if (!(k->flags & (RULE_PORTS | KEY_PORTS_UNKNOWN)))
			return RULE_MISS; /* the frame has no ports */
		if ((k->flags & RULE_PORTS) && (k->sport < r->sport_lo || k->sport > r->sport_hi ||
						 k->dport < r->dport_lo || k->dport > r->dport_hi))
			return RULE_MISS;
	}
	if (!filter_addr_match(k->src, r->src, r->src_mask) || !filter_addr_match(k->dst, r->dst, r->dst_mask))
		return RULE_MISS;
	if ((r->proto && (k->flags & KEY_PROTO_UNKNOWN)) || ((r->flags & RULE_PORTS) && (k->flags & KEY_PORTS_UNKNOWN)))
		return RULE_UNDECIDED;
	return RULE_MATCH;
}

/*
 * The rules of the active order over a parsed frame (parsed: filter_parse()'s result, reason its reason), and
 * the count. len is what the counters add as bytes (the frame's full length; at tc data..data_end may be only the
 * skb's linear part). Returns FILTER_DROP or FILTER_COUNT (pass).
 */
static __always_inline int filter_decide(const struct filter_key *key, int parsed, __u32 reason, __u64 len)
{
	struct filter_order *order;
	__u32 zero = 0;
	__u32 *gen, i;

	if (parsed < 0)
		goto unmatched;
	gen = bpf_map_lookup_elem(&filter_active, &zero);
	if (!gen)
		goto unmatched;
	order = bpf_map_lookup_elem(&filter_order, gen);
	if (!order)
		goto unmatched;
	for (i = 0; i < FILTER_MAX_RULES; i++) {
		struct filter_rule *rule;
		__u32 slot;
		int match;

		if (i >= order->count)
			break;
		slot = order->slot[i];
		rule = bpf_map_lookup_elem(&filter_rules, &slot);
		if (!rule)
			break;
		match = filter_rule_match(rule, key);
		if (match == RULE_MATCH) {
			filter_count(&filter_counters, slot, len);
			return rule->action == FILTER_DROP ? FILTER_DROP : FILTER_COUNT;
		}
		if (match == RULE_UNDECIDED) {
			filter_count(&filter_unmatched, UNMATCHED_UNPARSED, len);
			return order->unparsed == UNPARSED_PASS ? FILTER_COUNT : FILTER_DROP;
		}
	}
unmatched:
	filter_count(&filter_unmatched, reason, len);
	return FILTER_COUNT;
}

/* The whole filter over a frame all of which is readable (XDP): parse, then decide. */
static __always_inline int filter_frame(void *data, void *data_end, __u64 len)
{
	struct filter_key key = {};
	__u32 reason = UNMATCHED_NO_RULE;
	int parsed = filter_parse(&key, data, data_end, &reason);

	return filter_decide(&key, parsed, reason, len);
}

#endif /* XDPFLEET_FILTER_H */
