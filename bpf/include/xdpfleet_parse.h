/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * xdpfleet_parse.h: bounds-checked header parsing for XDP programs.
 *
 * A struct xf_cursor walks the frame from ctx->data towards ctx->data_end.
 * Every xf_parse_* function checks that the whole header lies before
 * data_end before it reads a byte, advances the cursor past the header on
 * success and leaves it untouched on failure, so the verifier accepts the
 * reads and the caller can decide what to do with a short frame.
 *
 * Return values follow one rule: a negative value means "frame too short or
 * malformed", anything else is the header's next-protocol field.
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf/include
 */
#ifndef XDPFLEET_PARSE_H
#define XDPFLEET_PARSE_H

#include <stddef.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef ETH_P_8021Q
#define ETH_P_8021Q 0x8100
#endif
#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

/* IPv4 frag_off (host order): more fragments follow; the fragment's offset. Any of the two: a fragment. */
#define XF_IP_MF 0x2000
#define XF_IP_OFFSET 0x1fff
#define XF_IP_FRAGMENT (XF_IP_MF | XF_IP_OFFSET)

/* At most this many stacked VLAN tags are parsed (802.1ad outer + 802.1Q inner). */
#define XF_VLAN_MAX_DEPTH 2
#define XF_VLAN_VID_MASK 0x0fff

struct xf_cursor {
	void *pos;
};

/* One 802.1Q/802.1ad tag as it appears on the wire after the MAC addresses. */
struct xf_vlan_hdr {
	__be16 tci;
	__be16 encap_proto;
};

/* VLAN tags found by xf_parse_ethhdr, outermost first, VIDs in host order. */
struct xf_vlans {
	__u16 count;
	__u16 vid[XF_VLAN_MAX_DEPTH];
	__u16 tpid[XF_VLAN_MAX_DEPTH]; /* ETH_P_8021Q or ETH_P_8021AD, host order */
};

static __always_inline void xf_cursor_init(struct xf_cursor *c, struct xdp_md *ctx)
{
	c->pos = (void *)(long)ctx->data;
}

static __always_inline int xf_proto_is_vlan(__u16 h_proto)
{
	return h_proto == bpf_htons(ETH_P_8021Q) || h_proto == bpf_htons(ETH_P_8021AD);
}

/*
 * Parse the Ethernet header and up to XF_VLAN_MAX_DEPTH VLAN tags.
 * Returns the inner EtherType in network byte order, or -1.
 * *ethp points at the Ethernet header; vlans (may be NULL) receives the tags.
 * A frame with more tags than XF_VLAN_MAX_DEPTH returns the next TPID
 * (0x8100/0x88a8), which callers treat as "not IP".
 */
static __always_inline int xf_parse_ethhdr(struct xf_cursor *c, void *data_end, struct ethhdr **ethp,
					   struct xf_vlans *vlans)
{
	struct ethhdr *eth = c->pos;
	struct xf_vlan_hdr *vh;
	__u16 h_proto;
	int i;

	if ((void *)(eth + 1) > data_end)
		return -1;

	if (vlans)
		vlans->count = 0;

	vh = (void *)(eth + 1);
	h_proto = eth->h_proto;

#pragma unroll
	for (i = 0; i < XF_VLAN_MAX_DEPTH; i++) {
		if (!xf_proto_is_vlan(h_proto))
			break;
		if ((void *)(vh + 1) > data_end)
			return -1;
		if (vlans) {
			vlans->vid[i] = bpf_ntohs(vh->tci) & XF_VLAN_VID_MASK;
			vlans->tpid[i] = bpf_ntohs(h_proto);
			vlans->count = i + 1;
		}
		h_proto = vh->encap_proto;
		vh++;
	}

	c->pos = vh;
	*ethp = eth;
	return h_proto;
}

/*
 * Parse an IPv4 header including options. Returns the IP protocol, or -1
 * for a short frame or an IHL below 5.
 */
static __always_inline int xf_parse_iphdr(struct xf_cursor *c, void *data_end, struct iphdr **iphp)
{
	struct iphdr *iph = c->pos;
	int hdrsize;

	if ((void *)(iph + 1) > data_end)
		return -1;
	if (iph->version != 4)
		return -1;

	hdrsize = iph->ihl * 4;
	if (hdrsize < (int)sizeof(*iph))
		return -1;
	if (c->pos + hdrsize > data_end)
		return -1;

	c->pos += hdrsize;
	*iphp = iph;
	return iph->protocol;
}

/*
 * Parse the fixed IPv6 header. Returns its next-header field, or -1.
 * Extension headers are not walked: callers that need the upper-layer
 * protocol behind them must do so themselves.
 */
static __always_inline int xf_parse_ip6hdr(struct xf_cursor *c, void *data_end, struct ipv6hdr **ip6hp)
{
	struct ipv6hdr *ip6h = c->pos;

	if ((void *)(ip6h + 1) > data_end)
		return -1;
	if (ip6h->version != 6)
		return -1;

	c->pos = ip6h + 1;
	*ip6hp = ip6h;
	return ip6h->nexthdr;
}

/*
 * Parse a UDP header. Returns the payload length taken from the UDP length
 * field (host order), or -1 for a short frame or a length below 8.
 */
static __always_inline int xf_parse_udphdr(struct xf_cursor *c, void *data_end, struct udphdr **udphp)
{
	struct udphdr *h = c->pos;
	int len;

	if ((void *)(h + 1) > data_end)
		return -1;

	len = bpf_ntohs(h->len);
	if (len < (int)sizeof(*h))
		return -1;

	c->pos = h + 1;
	*udphp = h;
	return len - (int)sizeof(*h);
}

/*
 * Convenience: parse Ethernet (+VLANs) and the IP header that follows.
 * Returns the L4 protocol (IPPROTO_*) or -1 when the frame is not IPv4/IPv6
 * or too short. *l3_proto receives the EtherType (host order) when >= 0.
 */
static __always_inline int xf_parse_to_l4(struct xf_cursor *c, void *data_end, struct xf_vlans *vlans,
					  __u16 *l3_proto)
{
	struct ethhdr *eth;
	struct iphdr *iph;
	struct ipv6hdr *ip6h;
	int proto;

	proto = xf_parse_ethhdr(c, data_end, &eth, vlans);
	if (proto < 0)
		return -1;
	*l3_proto = bpf_ntohs(proto);

	if (proto == bpf_htons(ETH_P_IP))
		return xf_parse_iphdr(c, data_end, &iph);
	if (proto == bpf_htons(ETH_P_IPV6))
		return xf_parse_ip6hdr(c, data_end, &ip6h);
	return -1;
}

#endif /* XDPFLEET_PARSE_H */
