/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * xdpfleet_csum.h: Internet checksum helpers for XDP programs.
 *
 * All values are handled as they lie in the packet (network byte order).
 * The one's-complement sum does not depend on byte order as long as every
 * word is taken the same way, so no byte swapping is needed anywhere here.
 *
 * xf_ipv4_csum      full IPv4 header checksum (options included)
 * xf_csum_replace2  incremental update (RFC 1624, eqn. 3) for a 16-bit field
 * xf_csum_replace4  same for a 32-bit field (an IPv4 address)
 * xf_udp_csum_replace4  as above, keeping UDP's "0 = no checksum" rule
 * xf_ipv4_decrement_ttl  TTL - 1 with the header checksum updated to match
 */
#ifndef XDPFLEET_CSUM_H
#define XDPFLEET_CSUM_H

#include <linux/types.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>

/* Longest IPv4 header (IHL 15) in 16-bit words. */
#define XF_IPV4_MAX_WORDS 30
/* Shortest IPv4 header (IHL 5) in 16-bit words; iphdr.check is word 5. */
#define XF_IPV4_MIN_WORDS 10

/* Fold a 32-bit one's-complement accumulator to 16 bits (not inverted). */
static __always_inline __u16 xf_csum_fold_raw(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* Fold and invert: the value to store in a checksum field. */
static __always_inline __sum16 xf_csum_fold(__u32 sum)
{
	return (__sum16)~xf_csum_fold_raw(sum);
}

/*
 * IPv4 header checksum over ihl*4 bytes, with the check field taken as 0.
 * Store the result in iph->check. Returns 0 if the header runs past data_end
 * (callers have normally parsed it with xf_parse_iphdr already).
 *
 * The fixed 20 bytes are summed at constant offsets; options (IHL > 5) in a
 * bounded loop that re-checks each word against data_end. barrier_var keeps
 * clang from turning the pointer test into an index test the verifier cannot
 * relate to the packet.
 */
static __always_inline __sum16 xf_ipv4_csum(struct iphdr *iph, void *data_end)
{
	__u16 *w = (__u16 *)iph;
	__u16 *opt;
	__u32 nwords, sum = 0;
	int i;

	if ((void *)(iph + 1) > data_end)
		return 0;
	nwords = iph->ihl * 2;

	sum = (__u32)w[0] + w[1] + w[2] + w[3] + w[4] + w[6] + w[7] + w[8] + w[9];

	opt = (__u16 *)(iph + 1);
	for (i = XF_IPV4_MIN_WORDS; i < XF_IPV4_MAX_WORDS; i++) {
		if (i >= nwords)
			break;
		barrier_var(opt);
		if ((void *)(opt + 1) > data_end)
			return 0;
		sum += *opt;
		opt++;
	}
	return xf_csum_fold(sum);
}

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') for a 16-bit field changing from -> to. */
static __always_inline void xf_csum_replace2(__sum16 *sum, __be16 from, __be16 to)
{
	__u32 s = (__u16)~*sum;

	s += (__u16)~from;
	s += (__u16)to;
	*sum = xf_csum_fold(s);
}

/* As xf_csum_replace2 for a 32-bit field (both halves at once). */
static __always_inline void xf_csum_replace4(__sum16 *sum, __be32 from, __be32 to)
{
	__u32 s = (__u16)~*sum;
	__u32 nf = ~(__u32)from;

	s += nf & 0xffff;
	s += nf >> 16;
	s += (__u32)to & 0xffff;
	s += (__u32)to >> 16;
	*sum = xf_csum_fold(s);
}

/*
 * UDP over IPv4: a zero checksum means "none" and stays zero; a computed zero
 * is sent as 0xffff (the kernel's CSUM_MANGLED_0).
 */
static __always_inline void xf_udp_csum_replace4(__sum16 *sum, __be32 from, __be32 to)
{
	if (*sum == 0)
		return;
	xf_csum_replace4(sum, from, to);
	if (*sum == 0)
		*sum = (__sum16)0xffff;
}

static __always_inline void xf_udp_csum_replace2(__sum16 *sum, __be16 from, __be16 to)
{
	if (*sum == 0)
		return;
	xf_csum_replace2(sum, from, to);
	if (*sum == 0)
		*sum = (__sum16)0xffff;
}

/*
 * A forwarded IPv4 header's TTL - 1 (the caller checked TTL > 1). The TTL shares a 16-bit word with the
 * protocol, so the checksum is updated for that word.
 */
static __always_inline void xf_ipv4_decrement_ttl(struct iphdr *iph)
{
	__be16 *ttl_word = (__be16 *)&iph->ttl;
	__be16 before = *ttl_word;

	iph->ttl--;
	xf_csum_replace2(&iph->check, before, *ttl_word);
}

#endif /* XDPFLEET_CSUM_H */
