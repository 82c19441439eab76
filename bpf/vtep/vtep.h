/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * VXLAN VTEP in XDP: the map keys and values shared by the programs and by user space.
 *
 * Python declares the same layouts once, in plugins/module_utils/vtep/layouts.py, and checks them against this
 * object's BTF at load: a change here that Python does not follow fails the load, it never writes wrong bytes.
 * The limits, the enums and the peer member key come from vtep_abi.h, which is generated from
 * plugins/module_utils/vtep/abi.py.
 */
#ifndef XDPFLEET_VTEP_H
#define XDPFLEET_VTEP_H

#include <linux/types.h>

#include "vtep_abi.h"

/* port_config[ifindex]; kind PORT_NONE: not a VTEP port. Slots are small indexes that user space assigns, so that per-port and per-VNI state
 * lives in arrays (an index, not a hash lookup, on the per-copy path). */
struct port_config {
	__u32 kind;      /* enum port_kind */
	__u32 vni;       /* PORT_ACCESS: the port's VNI */
	__be32 local_ip; /* PORT_TUNNEL: outer source address */
	__u16 mtu;       /* the interface's MTU: tunnel copies longer than this are dropped */
	__u8 mac[6];     /* PORT_TUNNEL: outer source MAC */
	__u16 slot;      /* index in port_stats, copy_state and header_cache */
	__u16 vni_slot;  /* PORT_ACCESS: its VNI's index in vni_stats */
};

/* vlan_bindings values: a VNI and its slot */
struct vni_ref {
	__u32 vni;
	__u32 vni_slot;
};

/* vlan_bindings[{ifindex, vid}] = struct vni_ref */
struct vlan_key {
	__u32 ifindex;
	__u16 vid;
	__u16 pad;
};

/* port_vnis[{vni, ifindex}]: a port's membership in a VNI. Egress lets a local copy leave a port only when the
 * port is a member of the copy's VNI, and on a trunk only with the VID bound to that VNI; ingress accepts VXLAN
 * on a tunnel port only for the VNIs it is a member of; on a tunnel port it also says where the VNI's peers
 * behind that port are in tunnel_peers. */
struct port_vni_key {
	__u32 vni;
	__u32 ifindex;
};

struct port_vni {
	__u16 vid;        /* trunk: the VID of this VNI on the port; otherwise 0 */
	__u16 vni_slot;   /* the VNI's index in vni_stats */
	__u16 peers;      /* tunnel: the VNI's peers behind this port, one per copy */
	__u16 pad;
	__u32 first_peer; /* tunnel: tunnel_peers index of the peer that copy 0 goes to; copy n gets first_peer + n */
};

/* tunnel_peers[index]: a remote VTEP, an array so that each copy costs an index, not a hash lookup. A devmap
 * entry per peer makes the copies; all entries of a port run the same egress program, so a copy's peer comes
 * from its position among the frame's copies (see copy_state), not from which entry made it. An all-zero
 * entry is no peer. */
struct peer {
	__be32 remote_ip;
	__u8 mac[6]; /* next hop */
	__u16 pad;
};

/* vni_tunnels[vni slot]: a copy of port_vnis' row for the VNI's first tunnel port (the lowest ifindex), so that
 * ingress hands it to egress in the command and copies to that port need no hash lookup. */
struct vni_tunnel {
	__u32 vni;     /* whose row this is: while a slot passes to another VNI during an update, it is not used */
	__u32 ifindex; /* the tunnel port */
	__u32 first_peer;
	__u32 peers;
};

/* peer_admission[{vni, remote_ip}] = 1: VXLAN for a VNI is accepted only from a configured peer of it, and only on
 * a tunnel port that is a member of the VNI (port_vnis). */
struct peer_addr_key {
	__u32 vni;
	__be32 addr;
};

/* The command that ingress hands to the egress program of every copy: in the frame's metadata (native mode)
 * or, where the kernel gives egress no metadata (generic mode), in the per-CPU map current_command. */
#define VTEP_COMMAND_MAGIC 0x76746570 /* "vtep" */
#define COMMAND_FROM_TUNNEL 0x1       /* decapsulated: never back into a tunnel (split horizon) */

struct command {
	__u32 magic;
	__u32 vni;
	__u32 seq;         /* per-CPU frame number: numbers the copies of one frame on a tunnel port */
	__u16 vni_slot;
	__be16 udp_source; /* outer UDP source port, from a hash of the Inner flow: computed once per frame */
	__u16 inner_len;
	__u16 flags;
	__u32 tunnel_ifindex; /* vni_tunnels: copies to this port find their peers here (0: look them up) */
	__u32 first_peer;
	__u32 peers;
} __attribute__((aligned(8))); /* 32 bytes, the metadata's limit; copied as four 8-byte words */

struct traffic_stats {
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 tx_packets; /* copies sent */
	__u64 tx_bytes;
	__u64 drops[DROP_REASONS];
};

/* copy_state[port slot], per CPU: the frame whose copies are being numbered, the next copy number, and the
 * VNI's peers behind the port (from the command, or port_vnis), found once per frame instead of once per copy. */
struct copy_state {
	__u32 seq;
	__u32 next_copy;
	__u32 first_peer;
	__u32 peers;
};

#endif
