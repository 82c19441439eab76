// SPDX-License-Identifier: GPL-2.0-only
/*
 * The VTEP's TC backend (XDP + TC) at tc ingress: its own object, so that the XDP backend's object
 * (vtep_xdp.c) needs nothing newer than XDP does. Both objects run on the same maps (vtep_shared.h).
 *
 * vtep_ingress_tc (vtep_xdp.c) classifies, admits, decapsulates and learns as the XDP backend's ingress does, but
 * where that one redirects it leaves a command in the frame's metadata (struct tc_command) and passes the frame to
 * the stack, which hands it, as an skb with that metadata, to vtep_replicate at tc ingress of the same port (tcx,
 * or cls_bpf in direct-action mode). That program sends known unicast on, and replicates a flooded frame: the local
 * copies first, then the Outer added once and, per peer, its addresses written and the copy sent. It walks the
 * VNI's members in vni_members (a devmap cannot be iterated from BPF).
 *
 * What tx_packets and tx_bytes mean here. A flooded frame leaves as clones (bpf_clone_redirect), the last copy too,
 * and the frame itself is consumed (TC_ACT_STOLEN): the clone's result comes back to this program, so a copy is
 * counted sent only when the kernel took it, and tx_failed when it refused it (its port gone or down). Known unicast
 * is the frame itself, redirected (see tc_send): counted sent when handed to the kernel, which counts what it drops
 * after that. For both, what the port drops further on (a full queue, a veth whose peer is down) is in the port's
 * own statistics (ip -s link), as for any frame the host sends.
 */
#include <linux/pkt_cls.h>

#include "vtep_shared.h"

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
	long sent;

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
	sent = bpf_clone_redirect(skb, ifindex, 0);
	if (vid && bpf_skb_vlan_pop(skb))
		return DROP_MALFORMED;
	if (sent) /* negative: no copy made; positive: the device dropped it */
		return DROP_TX_FAILED;
	count_sent(port->slot, vs, len);
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

/* The tunnel copies: each peer's addresses into the one Outer, then the copy out. Every copy is a clone, the last
 * one too: bpf_clone_redirect's result says at once whether the kernel took it (a bpf_redirect of the frame itself
 * would fail after this program, where nothing here can count it), and the frame itself is consumed. That one
 * clone more costs a flood to 2 peers 1264 -> 1699 ns per frame on veth (BPF_PROG_RUN, live frames; each clone also makes the
 * frame's head writable again), a price for floods that known unicast does not pay (see tc_send). */
static __always_inline void tc_tunnel_copies(struct __sk_buff *skb, struct vni_members *row, __u32 vni,
					     struct traffic_stats *vs, __u16 partial)
{
	__u32 ifindex, index, len, i;
	struct port_config *port;
	struct bpf_iter_num it;
	struct peer *peer;
	__u8 *data;
	int *n;

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
		len = skb->len;
		if (bpf_clone_redirect(skb, ifindex, 0)) { /* see tc_local_copy */
			drop(port->slot, vs, DROP_TX_FAILED);
			continue;
		}
		count_sent(port->slot, vs, len);
	}
	bpf_iter_num_destroy(&it);
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
	tc_tunnel_copies(skb, row, vni, vs, partial);
	return TC_ACT_STOLEN;
}

/* Known unicast, ready as the XDP backend sends it: the frame itself, redirected, and counted sent by the program
 * that sends it. Not a clone as the flood's copies are: a clone would make the kernel's answer known here, but it
 * cost 816 -> 1446 ns per 64-byte frame on veth (BPF_PROG_RUN, live frames), so a frame the kernel drops after this program is
 * counted sent here and dropped there: to a port that is down, in that port's tx_dropped (__dev_queue_xmit, a
 * device without a queue such as veth) or its qdisc's drops (tc -s qdisc); to a port deleted since the VTEP was
 * configured, in skb_do_redirect (a kfree_skb, in no interface counter). */
static __always_inline int tc_send(struct __sk_buff *skb, struct tc_command *cmd)
{
	__u32 ifindex = cmd->ifindex, slot = cmd->vni_slot;
	__u32 len = skb->len + (skb->vlan_present ? VLAN_HLEN : 0); /* as on the wire */
	struct port_config *port = bpf_map_lookup_elem(&port_config, &ifindex);

	if (!port)
		return TC_ACT_SHOT; /* the port left the configuration since ingress chose it */
	count_sent(port->slot, bpf_map_lookup_elem(&vni_stats, &slot), len);
	return bpf_redirect(ifindex, 0);
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
		return tc_send(skb, cmd);
	if (cmd->op == TC_FLOOD)
		return tc_flood(skb, cmd);
	return TC_ACT_UNSPEC;
}
char LICENSE[] SEC("license") = "GPL";
