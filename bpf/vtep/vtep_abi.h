/* SPDX-License-Identifier: GPL-2.0-only */

/*
 * Generated from plugins/module_utils/vtep/abi.py by `make abi`: edit that file, not this one (tests/unit/test_abi.py
 * fails when the two differ). The VXLAN VTEP's limits, enums and encodings, shared by the data plane and user space.
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
