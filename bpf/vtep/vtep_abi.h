/* SPDX-License-Identifier: GPL-2.0-only */

/*
 * Generated from plugins/module_utils/vtep/abi.py and plugins/module_utils/vtep/layouts.py by `make abi`: edit those
 * files, not this one (tests/unit/test_abi.py fails when they differ). The VXLAN VTEP's limits, enums and encodings,
 * shared by the data plane and user space.
 */

#ifndef XDPFLEET_VTEP_ABI_H
#define XDPFLEET_VTEP_ABI_H

#include <linux/types.h>

/* Sizes and limits: the maps are sized by them, and a configuration is validated against them. */
enum vtep_limits {
	VXLAN_PORT = 4789, /* the UDP destination port of VXLAN (IANA) */
	VXLAN_OVERHEAD = 50, /* outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8 */
	VTEP_MAX_PORTS = 256, /* ports of all kinds: the slots of port_stats, copy_state and header_cache */
	/*
	 * port_config is an array indexed by ifindex (an index, not a hash lookup, on the per-frame and per-copy
	 * paths): a VTEP port's ifindex must be below this
	 */
	VTEP_MAX_IFINDEX = 16384,
	VTEP_MAX_VNIS = 4096, /* the slots of vni_stats and flood_settings, and of each group map (arrays by slot) */
	VTEP_MAX_MEMBERS = 256, /* devmap entries per VNI: local ports plus remote peers */
	VTEP_MAX_PEERS = 65536, /* tunnel_peers entries, all VNIs and tunnel ports together (16 per VNI on average) */
	/*
	 * Broadcast walks every bucket of a DEVMAP_HASH, so a group's capacity costs per frame: groups of up to this
	 * many members live in maps of that size (vni_flood, vni_local), larger ones in the *_large maps
	 */
	VTEP_SMALL_GROUP = 16,
	VTEP_MAX_STATIC_FDB = 16384, /* static FDB entries, all VNIs together (fdb_static) */
	VTEP_MAX_VLAN_BINDINGS = 16384, /* vlan_bindings entries: a (trunk, VID) pair each, all VNIs together */
	/*
	 * port_vnis entries: a (VNI, port) pair each, all VNIs together: every access port and trunk of a VNI, and
	 * every tunnel port its peers are via
	 */
	VTEP_MAX_PORT_VNIS = 16384,
	FDB_SIZE_MIN = 16, /* the smallest learned FDB (fdb_size) */
	FDB_SIZE_DEFAULT = 65536, /* learned MACs of all VNIs together when the document gives no fdb_size */
	FDB_SIZE_MAX = 1048576, /* the largest learned FDB (about 100 MB of kernel memory) */
	FDB_AGING_DEFAULT = 300, /* seconds a learned MAC stays without a frame from it (the Linux bridge's default) */
	FDB_AGING_MAX = 1000000, /* the longest aging time, in seconds */
	/*
	 * a learned entry's time is written again at most this often: a busy MAC does not write its entry per frame
	 * (its age is exact to this)
	 */
	FDB_REFRESH_NS = 1000000000,
};

/* port_config[ifindex].kind: what the VTEP does with a port's frames. */
enum port_kind {
	PORT_NONE = 0, /* not a VTEP port */
	PORT_ACCESS = 1, /* fixed VNI: every frame belongs to port_config.vni, tags pass untouched */
	PORT_TRUNK = 2, /* VLAN-aware: (ifindex, VID) of the outer 802.1Q tag selects the VNI */
	PORT_TUNNEL = 3, /* VXLAN underlay: decap on ingress, encap per peer on egress */
};

/* Drop reasons, counted per port and, where the VNI is known, per VNI: traffic_stats.drops[reason]. */
enum drop_reason {
	DROP_MALFORMED = 0, /* truncated Ethernet, IP or VXLAN header */
	DROP_UNTAGGED = 1, /* trunk: no 802.1Q tag */
	DROP_VID_RESERVED = 2, /* trunk: VID 0 or 4095 */
	DROP_VID_UNKNOWN = 3, /* trunk: no binding for (port, VID) */
	DROP_QINQ = 4, /* trunk: 802.1ad outer tag, or a second tag */
	DROP_NOT_ADMITTED = 5, /* tunnel: VNI not admitted on this port */
	DROP_NOT_PEER = 6, /* tunnel: outer source is not a peer of the VNI */
	DROP_NO_GROUP = 7, /* no replication group for the VNI */
	DROP_VID_MISMATCH = 8, /* egress: trunk copy without the VNI's VID */
	DROP_MTU = 9, /* a copy exceeds its port's MTU (a tunnel copy with its Outer) */
	DROP_NO_PEER = 10, /* egress: more copies than peers on the port (during an update) */
	DROP_NOT_MEMBER = 11, /* egress: port is not a member of the copy's VNI */
	DROP_NO_OUTER = 12, /* egress: a copy without the Outer that ingress puts on every flooded frame */
	DROP_SPLIT_HORIZON = 13, /* a decapsulated frame towards a tunnel */
	DROP_HAIRPIN = 14, /* known unicast: the destination is behind the port the frame came from */
	DROP_FRAGMENT = 15, /* tunnel: the first fragment of VXLAN to the tunnel address (never admitted) */
	/* tc backend: the kernel refused a copy (bpf_clone_redirect failed: its port is gone or down) */
	DROP_TX_FAILED = 16,
	/*
	 * tunnel: VXLAN to the tunnel address but another host's unicast MAC (the kernel drops it as not its own):
	 * never decapsulated
	 */
	DROP_OTHER_HOST = 17,
	/*
	 * tunnel: the outer IP total length or UDP length is not the frame's (the kernel drops a frame shorter than
	 * they say and trims a longer one; the VTEP decapsulates neither)
	 */
	DROP_OUTER_LENGTH = 18,
	DROP_REASONS = 19,
};

/* Forwarding events, counted per VNI: traffic_stats.fdb[event]. */
enum fdb_event {
	FDB_LEARNED = 0, /* a new MAC learned */
	FDB_MOVED = 1, /* a learned MAC seen at another place (port or remote VTEP) and learned there */
	FDB_AGED_OUT = 2, /* a learned MAC found older than the aging time, and removed */
	FDB_STATIC_CONFLICT = 3, /* a frame from a MAC that a static entry puts elsewhere: not learned */
	FDB_KNOWN_UNICAST = 4, /* a frame to a known MAC, sent to exactly one place */
	FDB_FLOODED = 5, /* a frame flooded to the VNI's members (broadcast, multicast, unknown unicast) */
	FDB_EVENTS = 6,
};

/* Flags of a VNI on a port (vlan_bindings, port_vnis). */
enum vni_flag {
	VNI_PRESERVE_VLAN = 1, /* vlan_mode preserve: a trunk's tag stays inside the tunnelled frame */
};

/*
 * A VNI's group (a DEVMAP_HASH) is keyed by member: a local port by its ifindex, a remote peer by a member key made of
 * PEER_MEMBER_BIT, the tunnel port's ifindex and the copy number, one entry per copy the port sends of each frame (see
 * peer_member_key).
 */
enum peer_member {
	PEER_MEMBER_BIT = 0x80000000u, /* set in a peer's key only: an ifindex is below VTEP_MAX_IFINDEX */
	PEER_MEMBER_IFINDEX_SHIFT = 16, /* the tunnel port's ifindex sits above the copy number */
};

/* The devmap key of a remote peer's entry (see enum peer_member). */
static inline __u32 peer_member_key(__u32 ifindex, __u32 copy)
{
	return PEER_MEMBER_BIT | ifindex << PEER_MEMBER_IFINDEX_SHIFT | copy;
}

_Static_assert(VTEP_MAX_IFINDEX <= 1u << (31 - PEER_MEMBER_IFINDEX_SHIFT), "an ifindex stays below the bit");
_Static_assert(VTEP_MAX_MEMBERS <= 1u << PEER_MEMBER_IFINDEX_SHIFT, "a copy number stays below the ifindex");

/*
 * port_config[ifindex]; kind PORT_NONE: not a VTEP port. Slots are small indexes that user space assigns, so that
 * per-port and per-VNI state lives in arrays (an index, not a hash lookup, on the per-frame and per-copy paths).
 */
struct port_config {
	__u32 kind; /* enum port_kind */
	__u32 vni; /* PORT_ACCESS: the port's VNI */
	__be32 local_ip; /* PORT_TUNNEL: outer source address */
	__u16 mtu; /* the interface's MTU: tunnel copies longer than this are dropped */
	__u8 mac[6]; /* PORT_TUNNEL: outer source MAC */
	__u16 slot; /* index in port_stats and copy_state */
	__u16 vni_slot; /* PORT_ACCESS: its VNI's slot */
};
_Static_assert(sizeof(struct port_config) == 24, "the size of PortConfig in Python");

/* vlan_bindings values: a VNI, its slot and its flags (enum vni_flag) */
struct vni_ref {
	__u32 vni;
	__u16 vni_slot;
	__u16 flags;
};
_Static_assert(sizeof(struct vni_ref) == 8, "the size of VniRef in Python");

/* vlan_bindings[{ifindex, vid}] = struct vni_ref */
struct vlan_key {
	__u32 ifindex;
	__u16 vid;
	__u16 pad;
};
_Static_assert(sizeof(struct vlan_key) == 8, "the size of VlanKey in Python");

/*
 * port_vnis[{vni, ifindex}]: a port's membership in a VNI. Nothing leaves a local port for a VNI it is not a member of
 * (on a trunk: it leaves with the VID bound to that VNI); ingress accepts VXLAN on a tunnel port only for the VNIs it
 * is a member of, and finds there where the VNI's peers behind that port are in tunnel_peers.
 */
struct port_vni_key {
	__u32 vni;
	__u32 ifindex;
};
_Static_assert(sizeof(struct port_vni_key) == 8, "the size of PortVniKey in Python");

struct port_vni {
	__u16 vid; /* trunk: the VID of this VNI on the port; otherwise 0 */
	__u16 vni_slot; /* the VNI's slot */
	__u16 peers; /* tunnel: the VNI's peers behind this port, one per copy */
	__u16 flags; /* enum vni_flag */
	__u32 first_peer; /* tunnel: tunnel_peers index of the peer that copy 0 goes to; copy n gets first_peer + n */
};
_Static_assert(sizeof(struct port_vni) == 12, "the size of PortVni in Python");

/*
 * tunnel_peers[index]: a remote VTEP of a VNI, an array so that each copy costs an index, not a hash lookup. A devmap
 * entry per peer makes the copies; all entries of a port run the same egress program, so a copy's peer comes from its
 * position among the frame's copies (see copy_state), not from which entry made it. An all-zero entry is no peer. The
 * FDB names a remote MAC's VTEP by index too; vni and remote_ip tell a stale index.
 */
struct peer {
	__be32 remote_ip;
	__u8 mac[6]; /* next hop */
	__u16 pad;
	__u32 vni;
};
_Static_assert(sizeof(struct peer) == 16, "the size of PeerValue in Python");

/*
 * flood_settings[vni slot]: what ingress needs to flood a frame of the VNI, in an array by slot (no hash lookup):
 * - frame_limit: the longest frame every local member of the VNI accepts from a devmap (its MTU + 18: the kernel drops
 *   a longer one before the egress program runs) and every tunnel port of the VNI sends (its MTU + 14: a longer tunnel
 *   copy must reach egress to be dropped and counted). A flooded frame that fits with its Outer carries the Outer to
 *   every copy; a longer one carries a 4-byte stamp, and tunnel copies get their Outer in egress. A frame from
 *   tightest_port (the local member that sets frame_limit) is not copied back to it: others_limit is its limit;
 * - copy_limit: the longest copy that the device of every member of the VNI (local ports, and tunnel ports of its
 *   peers) takes from a devmap, its MTU + 18. Only a longer flooded frame can lose copies in the kernel (a stamped one,
 *   longer than frame_limit): ingress then finds in vni_members which, and counts them;
 * - a copy of port_vnis' row for the VNI's first tunnel port (the lowest ifindex; 0: none), so that ingress stamps it
 *   on a flooded frame and copies to that port need no hash lookup.
 */
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
_Static_assert(sizeof(struct flood_settings) == 24, "the size of FloodSettings in Python");

/*
 * vni_members[vni slot]: the VNI's members as the TC backend walks them to replicate a frame, and as the XDP backend's
 * ingress walks them to count the copies a devmap drops for their length (a devmap cannot be iterated from BPF): the
 * local ports first (ifindex), then one entry per peer (its tunnel port's ifindex and its tunnel_peers index), written
 * from the same plan as the VNI's flood group. A row is written while frames read it; each copy is checked as the XDP
 * backend's egress checks it (membership, VID, the peer's VNI), so a row read half old, half new never sends a frame
 * where its VNI does not go.
 */
struct vni_member {
	__u32 ifindex;
	__u32 peer; /* a peer: its tunnel_peers index */
};
_Static_assert(sizeof(struct vni_member) == 8, "the size of VniMember in Python");

struct vni_members {
	__u32 vni; /* whose row this is: while a slot passes to another VNI during an update, it is not used */
	__u16 locals; /* members[0, locals) are local ports */
	__u16 count; /* members[locals, count) are peers */
	struct vni_member members[VTEP_MAX_MEMBERS];
};
_Static_assert(sizeof(struct vni_members) == 2056, "the size of VniMembers in Python");

/*
 * peer_admission[{vni, remote_ip}] = the peer's tunnel_peers index: VXLAN for a VNI is accepted only from a configured
 * peer of it, and only on a tunnel port that is a member of the VNI (port_vnis).
 */
struct peer_addr_key {
	__u32 vni;
	__be32 addr;
};
_Static_assert(sizeof(struct peer_addr_key) == 8, "the size of PeerAddrKey in Python");

/* The FDB: fdb_static (the document's entries, never aged) and fdb (learned, an LRU of fdb_size entries). */
struct fdb_key {
	__u32 vni;
	__u8 mac[6];
	__u16 pad;
};
_Static_assert(sizeof(struct fdb_key) == 12, "the size of FdbKey in Python");

struct fdb_entry {
	/*
	 * learned: CLOCK_MONOTONIC (coarse) of the last frame from the MAC, refreshed every FDB_REFRESH_NS; 0 in a
	 * static entry
	 */
	__u64 seen_ns;
	__u32 ifindex; /* the local port, or the tunnel port towards the remote VTEP */
	__be32 remote_ip; /* the remote VTEP; 0: the MAC is behind the local port */
	__u32 peer; /* remote: that VTEP's tunnel_peers index for the VNI */
	__u16 vid; /* learned on a trunk: the frame's VID */
	__u16 pad;
};
_Static_assert(sizeof(struct fdb_entry) == 24, "the size of FdbEntry in Python");

/* settings[0]: the VTEP's own settings. */
struct vtep_settings {
	__u64 aging_ns; /* a learned entry older than this is gone */
	__u32 static_entries; /* entries in fdb_static: none, no lookup */
	__u32 pad;
};
_Static_assert(sizeof(struct vtep_settings) == 16, "the size of VtepSettings in Python");

/* port_stats[port slot] and vni_stats[vni slot], per CPU. */
struct traffic_stats {
	__u64 rx_packets;
	__u64 rx_bytes;
	__u64 tx_packets; /* copies sent */
	__u64 tx_bytes;
	__u64 drops[DROP_REASONS];
	__u64 fdb[FDB_EVENTS]; /* per VNI only */
};
_Static_assert(sizeof(struct traffic_stats) == 232, "the size of TrafficStats in Python");

/*
 * Every enum above as a member, so that each reaches the object's BTF, where user space compares it with
 * plugins/module_utils/vtep/abi.py. Nothing reads the variable; its section is not one that libbpf loads, so it costs
 * no map and no instruction.
 */
struct vtep_abi {
	enum vtep_limits vtep_limits;
	enum port_kind port_kind;
	enum drop_reason drop_reason;
	enum fdb_event fdb_event;
	enum vni_flag vni_flag;
	enum peer_member peer_member;
};
static const struct vtep_abi vtep_abi __attribute__((section(".xdpfleet_abi"), used));

#endif /* XDPFLEET_VTEP_ABI_H */
