# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP data plane's numbers, declared once for C and Python: the limits its maps are sized by (a document is
validated against them before anything on a host changes), what a port's kind and a drop reason's number mean,
and how a remote peer's devmap key is made.

bpf/vtep/vtep_abi.h is generated from this file and the structs of layouts.py (`make abi`), and bpf/vtep/vtep.h
includes it. The map layouts in layouts.py carry ABI, so loading the object, and reading a deployed VTEP's pinned
maps, checks these numbers against the BTF (see bpf/abi.py). Nothing here needs the object: validation and vtep_info
use the numbers without one.
"""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi

LIMITS = abi.Enum(
    "vtep_limits",
    "Sizes and limits: the maps are sized by them, and a configuration is validated against them.",
    (
        ("VXLAN_PORT", 4789, "the UDP destination port of VXLAN (IANA)"),
        ("VXLAN_OVERHEAD", 50, "outer Ethernet 14 + IPv4 20 + UDP 8 + VXLAN 8"),
        ("VTEP_MAX_PORTS", 256, "ports of all kinds: the slots of port_stats, copy_state and header_cache"),
        (
            "VTEP_MAX_IFINDEX",
            16384,
            "port_config is an array indexed by ifindex (an index, not a hash lookup, on the per-frame and "
            "per-copy paths): a VTEP port's ifindex must be below this",
        ),
        ("VTEP_MAX_VNIS", 4096, "the slots of vni_stats and flood_settings, and of each group map (arrays by slot)"),
        ("VTEP_MAX_MEMBERS", 256, "devmap entries per VNI: local ports plus remote peers"),
        (
            "VTEP_MAX_PEERS",
            65536,
            "tunnel_peers entries, all VNIs and tunnel ports together (16 per VNI on average)",
        ),
        (
            "VTEP_SMALL_GROUP",
            16,
            "Broadcast walks every bucket of a DEVMAP_HASH, so a group's capacity costs per frame: groups of up to "
            "this many members live in maps of that size (vni_flood, vni_local), larger ones in the *_large maps",
        ),
        ("VTEP_MAX_STATIC_FDB", 16384, "static FDB entries, all VNIs together (fdb_static)"),
        ("VTEP_MAX_VLAN_BINDINGS", 16384, "vlan_bindings entries: a (trunk, VID) pair each, all VNIs together"),
        (
            "VTEP_MAX_PORT_VNIS",
            16384,
            "port_vnis entries: a (VNI, port) pair each, all VNIs together: every access port and trunk of a VNI, and "
            "every tunnel port its peers are via",
        ),
        ("FDB_SIZE_MIN", 16, "the smallest learned FDB (fdb_size)"),
        ("FDB_SIZE_DEFAULT", 65536, "learned MACs of all VNIs together when the document gives no fdb_size"),
        ("FDB_SIZE_MAX", 1048576, "the largest learned FDB (about 100 MB of kernel memory)"),
        ("FDB_AGING_DEFAULT", 300, "seconds a learned MAC stays without a frame from it (the Linux bridge's default)"),
        ("FDB_AGING_MAX", 1000000, "the longest aging time, in seconds"),
        (
            "FDB_REFRESH_NS",
            1000000000,
            "a learned entry's time is written again at most this often: a busy MAC does not write its entry per "
            "frame (its age is exact to this)",
        ),
    ),
)
VXLAN_PORT = LIMITS["VXLAN_PORT"]
VXLAN_OVERHEAD = LIMITS["VXLAN_OVERHEAD"]
VTEP_MAX_PORTS = LIMITS["VTEP_MAX_PORTS"]
VTEP_MAX_IFINDEX = LIMITS["VTEP_MAX_IFINDEX"]
VTEP_MAX_VNIS = LIMITS["VTEP_MAX_VNIS"]
VTEP_MAX_MEMBERS = LIMITS["VTEP_MAX_MEMBERS"]
VTEP_MAX_PEERS = LIMITS["VTEP_MAX_PEERS"]
VTEP_SMALL_GROUP = LIMITS["VTEP_SMALL_GROUP"]
VTEP_MAX_STATIC_FDB = LIMITS["VTEP_MAX_STATIC_FDB"]
VTEP_MAX_VLAN_BINDINGS = LIMITS["VTEP_MAX_VLAN_BINDINGS"]
VTEP_MAX_PORT_VNIS = LIMITS["VTEP_MAX_PORT_VNIS"]
FDB_SIZE_MIN = LIMITS["FDB_SIZE_MIN"]
FDB_SIZE_DEFAULT = LIMITS["FDB_SIZE_DEFAULT"]
FDB_SIZE_MAX = LIMITS["FDB_SIZE_MAX"]
FDB_AGING_DEFAULT = LIMITS["FDB_AGING_DEFAULT"]
FDB_AGING_MAX = LIMITS["FDB_AGING_MAX"]
NS_PER_S = 1_000_000_000

PORT_KIND = abi.Enum(
    "port_kind",
    "port_config[ifindex].kind: what the VTEP does with a port's frames.",
    (
        ("PORT_NONE", 0, "not a VTEP port"),
        ("PORT_ACCESS", 1, "fixed VNI: every frame belongs to port_config.vni, tags pass untouched"),
        ("PORT_TRUNK", 2, "VLAN-aware: (ifindex, VID) of the outer 802.1Q tag selects the VNI"),
        ("PORT_TUNNEL", 3, "VXLAN underlay: decap on ingress, encap per peer on egress"),
    ),
)
PORT_NONE = PORT_KIND["PORT_NONE"]
PORT_ACCESS = PORT_KIND["PORT_ACCESS"]
PORT_TRUNK = PORT_KIND["PORT_TRUNK"]
PORT_TUNNEL = PORT_KIND["PORT_TUNNEL"]
PORT_KINDS = {kind: label for kind, label in PORT_KIND.labels("PORT_").items() if kind != PORT_NONE}

DROP_REASON = abi.Enum(
    "drop_reason",
    "Drop reasons, counted per port and, where the VNI is known, per VNI: traffic_stats.drops[reason].",
    (
        ("DROP_MALFORMED", 0, "truncated Ethernet, IP or VXLAN header"),
        ("DROP_UNTAGGED", 1, "trunk: no 802.1Q tag"),
        ("DROP_VID_RESERVED", 2, "trunk: VID 0 or 4095"),
        ("DROP_VID_UNKNOWN", 3, "trunk: no binding for (port, VID)"),
        ("DROP_QINQ", 4, "trunk: 802.1ad outer tag, or a second tag"),
        ("DROP_NOT_ADMITTED", 5, "tunnel: VNI not admitted on this port"),
        ("DROP_NOT_PEER", 6, "tunnel: outer source is not a peer of the VNI"),
        ("DROP_NO_GROUP", 7, "no replication group for the VNI"),
        ("DROP_VID_MISMATCH", 8, "egress: trunk copy without the VNI's VID"),
        ("DROP_MTU", 9, "a copy exceeds its port's MTU (a tunnel copy with its Outer)"),
        ("DROP_NO_PEER", 10, "egress: more copies than peers on the port (during an update)"),
        ("DROP_NOT_MEMBER", 11, "egress: port is not a member of the copy's VNI"),
        ("DROP_NO_OUTER", 12, "egress: a copy without the Outer that ingress puts on every flooded frame"),
        ("DROP_SPLIT_HORIZON", 13, "a decapsulated frame towards a tunnel"),
        ("DROP_HAIRPIN", 14, "known unicast: the destination is behind the port the frame came from"),
        ("DROP_FRAGMENT", 15, "tunnel: the first fragment of VXLAN to the tunnel address (never admitted)"),
        (
            "DROP_TX_FAILED",
            16,
            "tc backend: the kernel refused a copy (bpf_clone_redirect failed: its port is gone or down)",
        ),
        (
            "DROP_OTHER_HOST",
            17,
            "tunnel: VXLAN to the tunnel address but another host's unicast MAC (the kernel drops it as not its own): "
            "never decapsulated",
        ),
        (
            "DROP_OUTER_LENGTH",
            18,
            "tunnel: the outer IP total length or UDP length is not the frame's (the kernel drops a frame shorter than "
            "they say and trims a longer one; the VTEP decapsulates neither)",
        ),
    ),
    count="DROP_REASONS",
)
DROP_REASONS = tuple(DROP_REASON.labels("DROP_").values())  # the counters' names, by reason number

FDB_EVENT = abi.Enum(
    "fdb_event",
    "Forwarding events, counted per VNI: traffic_stats.fdb[event].",
    (
        ("FDB_LEARNED", 0, "a new MAC learned"),
        ("FDB_MOVED", 1, "a learned MAC seen at another place (port or remote VTEP) and learned there"),
        ("FDB_AGED_OUT", 2, "a learned MAC found older than the aging time, and removed"),
        ("FDB_STATIC_CONFLICT", 3, "a frame from a MAC that a static entry puts elsewhere: not learned"),
        ("FDB_KNOWN_UNICAST", 4, "a frame to a known MAC, sent to exactly one place"),
        ("FDB_FLOODED", 5, "a frame flooded to the VNI's members (broadcast, multicast, unknown unicast)"),
    ),
    count="FDB_EVENTS",
)
FDB_EVENTS = tuple(FDB_EVENT.labels("FDB_").values())  # the counters' names, by event number

VNI_FLAG = abi.Enum(
    "vni_flag",
    "Flags of a VNI on a port (vlan_bindings, port_vnis).",
    (("VNI_PRESERVE_VLAN", 1, "vlan_mode preserve: a trunk's tag stays inside the tunnelled frame"),),
)
VNI_PRESERVE_VLAN = VNI_FLAG["VNI_PRESERVE_VLAN"]

PEER_MEMBER = abi.Enum(
    "peer_member",
    "A VNI's group (a DEVMAP_HASH) is keyed by member: a local port by its ifindex, a remote peer by a member "
    "key made of PEER_MEMBER_BIT, the tunnel port's ifindex and the copy number, one entry per copy the port "
    "sends of each frame (see peer_member_key).",
    (
        ("PEER_MEMBER_BIT", 1 << 31, "set in a peer's key only: an ifindex is below VTEP_MAX_IFINDEX"),
        ("PEER_MEMBER_IFINDEX_SHIFT", 16, "the tunnel port's ifindex sits above the copy number"),
    ),
)
PEER_MEMBER_BIT = PEER_MEMBER["PEER_MEMBER_BIT"]
PEER_MEMBER_IFINDEX_SHIFT = PEER_MEMBER["PEER_MEMBER_IFINDEX_SHIFT"]


def peer_member_key(ifindex: int, copy: int) -> int:
    """The devmap key of a remote peer's entry: one entry per copy a tunnel port sends of each frame."""
    return PEER_MEMBER_BIT | (ifindex << PEER_MEMBER_IFINDEX_SHIFT) | copy


# The same encoding in C, and the limits that keep its parts apart.
_PEER_MEMBER_KEY_C = (
    "/* The devmap key of a remote peer's entry (see enum peer_member). */\n"
    "static inline __u32 peer_member_key(__u32 ifindex, __u32 copy)\n"
    "{\n"
    "\treturn PEER_MEMBER_BIT | ifindex << PEER_MEMBER_IFINDEX_SHIFT | copy;\n"
    "}\n"
    "\n"
    '_Static_assert(VTEP_MAX_IFINDEX <= 1u << (31 - PEER_MEMBER_IFINDEX_SHIFT), "an ifindex stays below the bit");\n'
    '_Static_assert(VTEP_MAX_MEMBERS <= 1u << PEER_MEMBER_IFINDEX_SHIFT, "a copy number stays below the ifindex");\n'
)

ABI = abi.Abi(
    name="vtep",
    header="bpf/vtep/vtep_abi.h",
    source="plugins/module_utils/vtep/abi.py",
    doc="The VXLAN VTEP's limits, enums and encodings, shared by the data plane and user space.",
    enums=(LIMITS, PORT_KIND, DROP_REASON, FDB_EVENT, VNI_FLAG, PEER_MEMBER),
    c_helpers=_PEER_MEMBER_KEY_C,
)
