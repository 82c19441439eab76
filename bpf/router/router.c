// SPDX-License-Identifier: GPL-2.0-only
/*
 * router: IPv4 and IPv6 forwarding in XDP with the kernel's own routes and neighbours.
 *
 * Each frame is looked up in the kernel's FIB with bpf_fib_lookup (routes, policy rules, neighbour table and the
 * egress MTU, as the kernel's forwarding path sees them), so a route or neighbour changed with `ip` takes effect at
 * once, with no program or map change. A frame the lookup resolves to a next hop whose MAC is known, out of one of
 * the router's ports, gets its TTL / hop limit decremented (IPv4 checksum updated incrementally), the next hop's
 * and the egress port's MACs, and is redirected out of that port through router_ports.
 *
 * Bytes past the IP packet's length (Ethernet padding) are trimmed first, as the kernel's forwarding does.
 *
 * Everything else goes to the kernel unchanged (XDP_PASS), which forwards, answers or drops it as it would without
 * XDP: ARP and ND (non-IP, or ICMPv6 for this host), TTL expiry (the kernel sends ICMP time exceeded), IPv4 options
 * and IPv6 hop-by-hop headers, frames for this host, broadcast, multicast and link-local (by MAC, or by an
 * address the kernel checks itself: loopback, unspecified, martians), IPv4 from one of the host's own addresses
 * (see source_is_local), an IPv4 header checksum that is wrong or an IP length past the frame (the kernel drops
 * those), next hops without a neighbour entry yet (the kernel resolves
 * them; the next frames are forwarded here), frames over the egress MTU (the kernel fragments or sends ICMP too
 * big), VLAN-tagged frames, and routes out of interfaces that are not router ports. Fragments are forwarded like
 * any packet: routing reads no L4 header.
 *
 * A unicast destination MAC is not checked against the port's: a port is expected to receive only frames for it, as a NIC does outside
 * promiscuous mode (the kernel drops the others as PACKET_OTHERHOST; this router would route them).
 *
 * Maps:
 *   router_ports   DEVMAP_HASH ifindex -> ifindex: the ports frames may be redirected to (written from the
 *                  module's interfaces; a route out of any other interface is left to the kernel)
 *   router_stats   per-CPU array indexed by enum router_verdict (router_abi.h): packets and bytes
 *
 * Build: clang -O2 -g -target bpf -I/usr/include/x86_64-linux-gnu -Ibpf/include -c bpf/router/router.c
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "xdpfleet_csum.h"
#include "xdpfleet_parse.h"
#include "router_abi.h"

#define RT_AF_INET 2
#define RT_AF_INET6 10
#define RT_IPV6_FLOWINFO_MASK bpf_htonl(0x0fffffff)
#define RT_NEXTHDR_HOP 0
#define RT_IPV6_LOOPBACK_LOW bpf_htonl(1)

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, RT_PORTS_MAX);
	__type(key, __u32);
	__type(value, __u32);
} router_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RT_VERDICTS);
	__type(key, __u32);
	__type(value, struct router_counter);
} router_stats SEC(".maps");

static __always_inline void count(struct xdp_md *ctx, enum router_verdict verdict)
{
	struct router_counter *cnt;
	__u32 key = verdict;

	cnt = bpf_map_lookup_elem(&router_stats, &key);
	if (!cnt)
		return;
	/* Per-CPU value: no other CPU writes it, plain adds are enough. */
	cnt->packets++;
	cnt->bytes += ctx->data_end - ctx->data;
}

static __always_inline int pass(struct xdp_md *ctx, enum router_verdict verdict)
{
	count(ctx, verdict);
	return XDP_PASS;
}

/* What to do with a FIB lookup that did not give a next hop with a MAC: the verdict of the frame passed on. */
static __always_inline enum router_verdict fib_verdict(int rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return RT_PASS_LOCAL;
	case BPF_FIB_LKUP_RET_BLACKHOLE:
	case BPF_FIB_LKUP_RET_UNREACHABLE:
	case BPF_FIB_LKUP_RET_PROHIBIT:
		return RT_PASS_NO_ROUTE;
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return RT_PASS_NO_NEIGH;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return RT_PASS_MTU;
	case BPF_FIB_LKUP_RET_FWD_DISABLED:
		return RT_PASS_FWD_DISABLED;
	default:
		return RT_PASS_FIB_OTHER;
	}
}

/* The FIB's next hop for the frame in params: -1 when it leaves by one of the router's ports (params then holds its
 * MACs and egress ifindex), else the verdict of the frame passed to the kernel. Asked before the frame changes, so a
 * frame passed on is as it came. */
static __always_inline int next_hop(struct xdp_md *ctx, struct bpf_fib_lookup *params)
{
	int rc = bpf_fib_lookup(ctx, params, sizeof(*params), 0);
	__u32 ifindex = params->ifindex;

	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_verdict(rc);
	if (!bpf_map_lookup_elem(&router_ports, &ifindex))
		return RT_PASS_NOT_PORT;
	return -1;
}

/* Bytes past the IP packet's own length (Ethernet padding of a short packet, or trailing garbage): the kernel trims
 * them before it forwards (ip_rcv_core, ip6_rcv_core), so a frame forwarded here loses them too. Returns the Ethernet
 * header again (the frame's pointers change) with the IP header of ip_len bytes after it in bounds, NULL if the frame
 * cannot be trimmed (it was that long before, so only a failed adjust_tail gives NULL). */
static __always_inline struct ethhdr *trim(struct xdp_md *ctx, int extra, __u32 ip_len)
{
	struct ethhdr *eth;

	if (extra > 0 && bpf_xdp_adjust_tail(ctx, -extra))
		return NULL;
	eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) + ip_len > (void *)(long)ctx->data_end)
		return NULL;
	return eth;
}

static __always_inline int redirect(struct xdp_md *ctx, struct ethhdr *eth, struct bpf_fib_lookup *params,
				    enum router_verdict verdict)
{
	__builtin_memcpy(eth->h_dest, params->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, params->smac, ETH_ALEN);
	count(ctx, verdict);
	return bpf_redirect_map(&router_ports, params->ifindex, 0);
}

/* Whether the FIB holds an IPv4 source as this host's: a reverse lookup (the source as destination, from the ingress
 * port) answers "not forwarded" for a local address (and for a local broadcast address, or a source it has no route
 * back to). The kernel refuses an IPv4 source that is one of its own addresses before it forwards
 * (fib_validate_source, unless accept_local) and bpf_fib_lookup checks no source, so such a frame goes to the
 * kernel, which decides as it would without XDP. Asked of the FIB, not of a list written at deploy, so an address
 * added later counts at once; asked only of a frame about to be forwarded here, so the others pay no second lookup
 * (a forwarded frame pays about 130 ns more, by BPF_PROG_TEST_RUN). Flags 0: nothing newer than the helper itself (4.18).
 * IPv6 has no such check (ip6_forward forwards a frame from one of the host's own addresses), so it is not asked
 * there: it would cost about 300 ns per forwarded IPv6 frame and change no frame's fate. */
static __always_inline int source_is_local(struct xdp_md *ctx, struct bpf_fib_lookup *reverse)
{
	reverse->ifindex = ctx->ingress_ifindex;
	return bpf_fib_lookup(ctx, reverse, sizeof(*reverse), 0) == BPF_FIB_LKUP_RET_NOT_FWDED;
}

/* Addresses the kernel checks itself before it forwards (martian sources and destinations, multicast, broadcast,
 * link-local), and bpf_fib_lookup does not: 0.0.0.0/8, 127.0.0.0/8, 169.254.0.0/16, 224.0.0.0/4 and
 * 255.255.255.255. A frame from or to one of them goes to the kernel, which drops, delivers or forwards it. */
static __always_inline int ipv4_kernel_only(__be32 addr)
{
	__u32 host = bpf_ntohl(addr);

	return host >> 24 == 0 || host >> 24 == 127 || host >> 16 == 0xa9fe || host >> 28 == 0xe || host == 0xffffffff;
}

/* The same for IPv6: ::, ::1, fe80::/10 and ff00::/8. */
static __always_inline int ipv6_kernel_only(const struct in6_addr *addr)
{
	const __be32 *word = addr->in6_u.u6_addr32;
	__u32 first = bpf_ntohl(word[0]);

	if (first >> 24 == 0xff || (first & 0xffc00000) == 0xfe800000)
		return 1;
	return !word[0] && !word[1] && !word[2] && (!word[3] || word[3] == RT_IPV6_LOOPBACK_LOW);
}

/* A 16-bit length field in host order, bounded where the verifier can see it: before Linux 6.x a byte swap leaves
 * the register unbounded (seen on 6.1), and the length checks below become a packet pointer plus that register,
 * which it refuses. barrier_var keeps the mask, which the compiler would drop as a no-op. */
static __always_inline __u32 length_field(__be16 field)
{
	__u32 len = bpf_ntohs(field);

	barrier_var(len);
	return len & 0xffff;
}

static __always_inline int route_ipv4(struct xdp_md *ctx, struct xf_cursor *cur, void *data_end, struct ethhdr *eth)
{
	struct bpf_fib_lookup params = {}, reverse = {};
	struct iphdr *iph;
	int verdict, extra;

	if (xf_parse_iphdr(cur, data_end, &iph) < 0)
		return pass(ctx, RT_PASS_MALFORMED);
	if (ipv4_kernel_only(iph->saddr) || ipv4_kernel_only(iph->daddr))
		return pass(ctx, RT_PASS_SPECIAL_ADDR);
	if (iph->ihl != 5)
		return pass(ctx, RT_PASS_OPTIONS);
	/* What the kernel drops before it routes (ip_rcv_core): a wrong header checksum, a total length below the
	 * header or past the frame. */
	extra = (int)(data_end - (void *)iph) - (int)length_field(iph->tot_len);
	if (xf_ipv4_csum(iph, data_end) != iph->check || length_field(iph->tot_len) < sizeof(*iph) || extra < 0)
		return pass(ctx, RT_PASS_MALFORMED);
	if (iph->ttl <= 1)
		return pass(ctx, RT_PASS_TTL);

	params.family = RT_AF_INET;
	params.tos = iph->tos;
	params.l4_protocol = iph->protocol;
	params.tot_len = bpf_ntohs(iph->tot_len);
	params.ipv4_src = iph->saddr;
	params.ipv4_dst = iph->daddr;
	params.ifindex = ctx->ingress_ifindex;

	verdict = next_hop(ctx, &params);
	if (verdict >= 0)
		return pass(ctx, verdict);
	reverse.family = RT_AF_INET;
	reverse.ipv4_src = iph->daddr;
	reverse.ipv4_dst = iph->saddr;
	if (source_is_local(ctx, &reverse))
		return pass(ctx, RT_PASS_LOCAL_SOURCE);
	eth = trim(ctx, extra, sizeof(*iph));
	if (!eth)
		return XDP_ABORTED;
	iph = (void *)(eth + 1);
	xf_ipv4_decrement_ttl(iph);
	return redirect(ctx, eth, &params, RT_FORWARDED_V4);
}

static __always_inline int route_ipv6(struct xdp_md *ctx, struct xf_cursor *cur, void *data_end, struct ethhdr *eth)
{
	struct bpf_fib_lookup params = {};
	struct ipv6hdr *ip6h;
	int verdict, extra;

	if (xf_parse_ip6hdr(cur, data_end, &ip6h) < 0)
		return pass(ctx, RT_PASS_MALFORMED);
	if (ipv6_kernel_only(&ip6h->saddr) || ipv6_kernel_only(&ip6h->daddr))
		return pass(ctx, RT_PASS_SPECIAL_ADDR);
	if (ip6h->nexthdr == RT_NEXTHDR_HOP)
		return pass(ctx, RT_PASS_OPTIONS);
	/* A payload past the frame: the kernel drops it (ip6_rcv_core). */
	extra = (int)(data_end - (void *)(ip6h + 1)) - (int)length_field(ip6h->payload_len);
	if (extra < 0)
		return pass(ctx, RT_PASS_MALFORMED);
	if (ip6h->hop_limit <= 1)
		return pass(ctx, RT_PASS_TTL);

	params.family = RT_AF_INET6;
	params.flowinfo = *(__be32 *)ip6h & RT_IPV6_FLOWINFO_MASK;
	params.l4_protocol = ip6h->nexthdr;
	params.tot_len = bpf_ntohs(ip6h->payload_len) + sizeof(*ip6h);
	__builtin_memcpy(params.ipv6_src, &ip6h->saddr, sizeof(params.ipv6_src));
	__builtin_memcpy(params.ipv6_dst, &ip6h->daddr, sizeof(params.ipv6_dst));
	params.ifindex = ctx->ingress_ifindex;

	verdict = next_hop(ctx, &params);
	if (verdict >= 0)
		return pass(ctx, verdict);
	eth = trim(ctx, extra, sizeof(*ip6h));
	if (!eth)
		return XDP_ABORTED;
	ip6h = (void *)(eth + 1);
	ip6h->hop_limit--;
	return redirect(ctx, eth, &params, RT_FORWARDED_V6);
}

SEC("xdp")
int xdp_router(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	struct xf_cursor cur;
	struct ethhdr *eth;
	int proto;

	xf_cursor_init(&cur, ctx);
	proto = xf_parse_ethhdr(&cur, data_end, &eth, NULL);
	if (proto < 0)
		return pass(ctx, RT_PASS_MALFORMED);
	if (eth->h_proto != (__be16)proto)
		return pass(ctx, RT_PASS_VLAN);
	/* Sent to a group (broadcast or multicast MAC): the kernel never forwards it (not PACKET_HOST). */
	if (eth->h_dest[0] & 1)
		return pass(ctx, RT_PASS_LOCAL);
	if (proto == bpf_htons(ETH_P_IP))
		return route_ipv4(ctx, &cur, data_end, eth);
	if (proto == bpf_htons(ETH_P_IPV6))
		return route_ipv6(ctx, &cur, data_end, eth);
	return pass(ctx, RT_PASS_NOT_IP);
}

char _license[] SEC("license") = "GPL";
