/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * VXLAN VTEP in XDP: the map keys and values shared by the programs and by user space.
 *
 * Python declares the same layouts once, in plugins/module_utils/vtep/maps.py, and checks them against this
 * object's BTF at load: a change here that Python does not follow fails the load, it never writes wrong bytes.
 */
#ifndef XDPFLEET_VTEP_H
#define XDPFLEET_VTEP_H

#include <linux/types.h>

#define VXLAN_PORT 4789
#define VXLAN_OVERHEAD 50 /* outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8 */
#define VTEP_MAX_PORTS 256
/* port_config is an array indexed by ifindex (an index, not a hash lookup, on the per-frame and per-copy paths):
 * a VTEP port's ifindex must be below this. */
#define VTEP_MAX_IFINDEX 16384
#define VTEP_MAX_VNIS 4096
#define VTEP_MAX_MEMBERS 256 /* devmap entries per VNI: local ports plus remote peers */
#define VTEP_MAX_PEERS 65536 /* tunnel_peers entries, all VNIs and tunnel ports together (16 per VNI on average) */
/* Broadcast walks every bucket of a DEVMAP_HASH, so a group's capacity costs per frame: groups of up to
 * VTEP_SMALL_GROUP members live in maps of that size (vni_flood, vni_local), larger ones in *_large maps. */
#define VTEP_SMALL_GROUP 16

enum port_kind {
	PORT_NONE = 0,
	PORT_ACCESS = 1, /* fixed VNI: every frame belongs to port_config.vni, tags pass untouched */
	PORT_TRUNK = 2,  /* VLAN-aware: (ifindex, VID) selects the VNI; only single 802.1Q tags */
	PORT_TUNNEL = 3, /* VXLAN underlay: decap on ingress, encap per peer on egress */
};

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

/* Drop reasons, counted per port and, where the VNI is known, per VNI. */
enum drop_reason {
	DROP_MALFORMED = 0,      /* truncated Ethernet, IP or VXLAN header */
	DROP_UNTAGGED = 1,       /* trunk: no 802.1Q tag */
	DROP_VID_RESERVED = 2,   /* trunk: VID 0 or 4095 */
	DROP_VID_UNKNOWN = 3,    /* trunk: no binding for (port, VID) */
	DROP_QINQ = 4,           /* trunk: 802.1ad outer tag, or a second tag */
	DROP_NOT_ADMITTED = 5,   /* tunnel: VNI not admitted on this port */
	DROP_NOT_PEER = 6,       /* tunnel: outer source is not a peer of the VNI */
	DROP_NO_GROUP = 7,       /* no replication group for the VNI */
	DROP_VID_MISMATCH = 8,   /* egress: trunk copy without the VNI's VID */
	DROP_MTU = 9,            /* egress: the encapsulated copy exceeds the tunnel port's MTU */
	DROP_NO_PEER = 10,       /* egress: more copies than peers on the port (during an update) */
	DROP_NOT_MEMBER = 11,    /* egress: port is not a member of the copy's VNI */
	DROP_BAD_COMMAND = 12,   /* egress: no valid command */
	DROP_SPLIT_HORIZON = 13, /* egress: a decapsulated frame towards a tunnel */
	DROP_REASONS = 14,
};

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
