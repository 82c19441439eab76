/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Test-frame matching for the traffic generator's receive programs: Ethernet, at most two VLAN tags, IPv4 (no
 * options, not a fragment) or IPv6 (no extension headers), UDP. The generator never sends anything else, so frames
 * that do not parse this way are somebody else's and pass untouched (a later fragment's payload is no UDP header).
 */
#ifndef XDPFLEET_TG_MATCH_H
#define XDPFLEET_TG_MATCH_H

#include "xdpfleet_parse.h"
#include "trafficgen_abi.h"

struct tg_frame {
	struct ethhdr *eth;
	void *l3;         /* struct iphdr or struct ipv6hdr, as ipv6 says */
	int ipv6;         /* a flag rather than two pointers, one NULL: the verifier follows a flag per path */
	struct udphdr *udp;
};

static __always_inline int tg_parse(struct xdp_md *ctx, struct tg_frame *f)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct xf_cursor cur;
	int proto;

	xf_cursor_init(&cur, ctx);
	proto = xf_parse_ethhdr(&cur, data_end, &f->eth, NULL);
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip4;

		if (xf_parse_iphdr(&cur, data_end, &ip4) != IPPROTO_UDP || ip4->ihl != 5 ||
		    ip4->frag_off & bpf_htons(XF_IP_FRAGMENT))
			return -1;
		f->l3 = ip4;
		f->ipv6 = 0;
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6;

		if (xf_parse_ip6hdr(&cur, data_end, &ip6) != IPPROTO_UDP)
			return -1;
		f->l3 = ip6;
		f->ipv6 = 1;
	} else {
		return -1;
	}
	return xf_parse_udphdr(&cur, data_end, &f->udp) < 0 ? -1 : 0;
}

static __always_inline int tg_port_in(__be16 port, __u16 lo, __u16 hi)
{
	__u16 p = bpf_ntohs(port);

	return p >= lo && p <= hi;
}

static __always_inline void tg_count(void *counters, __u64 len)
{
	__u32 zero = 0;
	struct tg_counter *c = bpf_map_lookup_elem(counters, &zero);

	/* Per-CPU value: no other CPU writes it. */
	if (c) {
		c->packets++;
		c->bytes += len;
	}
}

#endif /* XDPFLEET_TG_MATCH_H */
