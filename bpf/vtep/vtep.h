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

/* port_config[ifindex]; kind PORT_NONE: not a VTEP port. Slots are small indexes that user space assigns, so that
 * per-port and per-VNI state lives in arrays (an index, not a hash lookup, on the per-frame and per-copy paths). */
struct port_config {
	__u32 kind;      /* enum port_kind */
	__u32 vni;       /* PORT_ACCESS: the port's VNI */
	__be32 local_ip; /* PORT_TUNNEL: outer source address */
	__u16 mtu;       /* the interface's MTU: tunnel copies longer than this are dropped */
	__u8 mac[6];     /* PORT_TUNNEL: outer source MAC */
	__u16 slot;      /* index in port_stats and copy_state */
	__u16 vni_slot;  /* PORT_ACCESS: its VNI's slot */
};

/* vlan_bindings values: a VNI, its slot and its flags (enum vni_flag) */
struct vni_ref {
	__u32 vni;
	__u16 vni_slot;
	__u16 flags;
};

/* vlan_bindings[{ifindex, vid}] = struct vni_ref */
struct vlan_key {
	__u32 ifindex;
	__u16 vid;
	__u16 pad;
};

/* port_vnis[{vni, ifindex}]: a port's membership in a VNI. Nothing leaves a local port for a VNI it is not a
 * member of (on a trunk: it leaves with the VID bound to that VNI); ingress accepts VXLAN on a tunnel port only for
 * the VNIs it is a member of, and finds there where the VNI's peers behind that port are in tunnel_peers. */
struct port_vni_key {
	__u32 vni;
	__u32 ifindex;
};

struct port_vni {
	__u16 vid;        /* trunk: the VID of this VNI on the port; otherwise 0 */
	__u16 vni_slot;   /* the VNI's slot */
	__u16 peers;      /* tunnel: the VNI's peers behind this port, one per copy */
	__u16 flags;      /* enum vni_flag */
	__u32 first_peer; /* tunnel: tunnel_peers index of the peer that copy 0 goes to; copy n gets first_peer + n */
};

/* tunnel_peers[index]: a remote VTEP of a VNI, an array so that each copy costs an index, not a hash lookup. A
 * devmap entry per peer makes the copies; all entries of a port run the same egress program, so a copy's peer
 * comes from its position among the frame's copies (see copy_state), not from which entry made it. An all-zero
 * entry is no peer. The FDB names a remote MAC's VTEP by index too; vni and remote_ip tell a stale index. */
struct peer {
	__be32 remote_ip;
	__u8 mac[6]; /* next hop */
	__u16 pad;
	__u32 vni;
};

/* flood_settings[vni slot]: what ingress needs to flood a frame of the VNI, in an array by slot (no hash lookup):
 * - frame_limit: the longest frame every local member of the VNI accepts from a devmap (its MTU + 18: the kernel
 *   drops a longer one before the egress program runs) and every tunnel port of the VNI sends (its MTU
 *   + 14: a longer tunnel copy must reach egress to be dropped and counted). A flooded frame that fits with its
 *   Outer carries the Outer to every copy; a longer one carries a 4-byte stamp, and tunnel copies get their Outer
 *   in egress. A frame from tightest_port (the local member that sets frame_limit) is not copied back to it:
 *   others_limit is its limit;
 * - copy_limit: the longest copy that the device of every member of the VNI (local ports, and tunnel ports of its
 *   peers) takes from a devmap, its MTU + 18. Only a longer flooded frame can lose copies in the
 *   kernel (a stamped one, longer than frame_limit): ingress then finds in vni_members which, and counts them;
 * - a copy of port_vnis' row for the VNI's first tunnel port (the lowest ifindex; 0: none), so that ingress stamps it
 *   on a flooded frame and copies to that port need no hash lookup. */
struct flood_settings {
	__u32 vni; /* whose row this is: while a slot passes to another VNI during an update, it is not used */
	__u32 tunnel_ifindex;
	__u32 first_peer;
	__u16 peers;
	__u16 frame_limit;
	__u32 tightest_port;
	__u16 others_limit;
	__u16 copy_limit;
};

/* vni_members[vni slot]: the VNI's members as the TC backend walks them to replicate a frame, and as the XDP
 * backend's ingress walks them to count the copies a devmap drops for their length (a devmap cannot be iterated from
 * BPF): the local ports first (ifindex), then one entry per peer (its tunnel port's ifindex and its tunnel_peers
 * index), written from the same plan as the VNI's flood group. A row is written while frames read it;
 * each copy is checked as the XDP backend's egress checks it (membership, VID, the peer's VNI), so a row read half
 * old, half new never sends a frame where its VNI does not go. */
struct vni_member {
	__u32 ifindex;
	__u32 peer; /* a peer: its tunnel_peers index */
};

struct vni_members {
	__u32 vni; /* whose row this is: while a slot passes to another VNI during an update, it is not used */
	__u16 locals; /* members[0, locals) are local ports */
	__u16 count;  /* members[locals, count) are peers */
	struct vni_member members[VTEP_MAX_MEMBERS];
};

/* peer_admission[{vni, remote_ip}] = the peer's tunnel_peers index: VXLAN for a VNI is accepted only from a
 * configured peer of it, and only on a tunnel port that is a member of the VNI (port_vnis). */
struct peer_addr_key {
	__u32 vni;
	__be32 addr;
};

/* The FDB: fdb_static (the document's entries, never aged) and fdb (learned, an LRU of fdb_size entries). */
struct fdb_key {
	__u32 vni;
	__u8 mac[6];
	__u16 pad;
};

struct fdb_entry {
	__u64 seen_ns;   /* learned: CLOCK_MONOTONIC (coarse) of the last frame from the MAC, refreshed every FDB_REFRESH_NS */
	__u32 ifindex;   /* the local port, or the tunnel port towards the remote VTEP */
	__be32 remote_ip; /* the remote VTEP; 0: the MAC is behind the local port */
	__u32 peer;      /* remote: that VTEP's tunnel_peers index for the VNI */
	__u16 vid;       /* learned on a trunk: the frame's VID */
	__u16 pad;
};

/* settings[0]: the VTEP's own settings. */
struct vtep_settings {
	__u64 aging_ns;      /* a learned entry older than this is gone */
	__u32 static_entries; /* entries in fdb_static: none, no lookup */
	__u32 pad;
};

struct traffic_stats {
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 tx_packets; /* copies sent */
	__u64 tx_bytes;
	__u64 drops[DROP_REASONS];
	__u64 fdb[FDB_EVENTS]; /* per VNI only */
};

/* copy_state[port slot], per CPU: the flooded frame whose copies are being numbered (by its stamp), the next copy
 * number, and the VNI's peers behind the port, found once per frame instead of once per copy. */
struct copy_state {
	__u32 seq;
	__u32 next_copy;
	__u32 first_peer;
	__u32 peers;
};

#endif
