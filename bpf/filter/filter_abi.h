/* SPDX-License-Identifier: GPL-2.0-only */

/*
 * Generated from plugins/module_utils/filter/abi.py and plugins/module_utils/filter/layouts.py by `make abi`: edit
 * those files, not this one (tests/unit/test_abi.py fails when they differ). The packet filter's limits and enums,
 * shared by the data plane and user space.
 */

#ifndef XDPFLEET_FILTER_ABI_H
#define XDPFLEET_FILTER_ABI_H

#include <linux/types.h>

/* Sizes: the maps are sized by them, and a rule list is validated against them. */
enum filter_limits {
	/* rules of one filter: the slots of filter_rules and filter_counters, and the length of an order */
	FILTER_MAX_RULES = 128,
	/* filter_order holds two orders: user space writes the one not in use, then switches filter_active to it */
	FILTER_GENERATIONS = 2,
	FILTER_NAME_LEN = 32, /* bytes of a rule's name in filter_rules, the terminating NUL included */
	/* IPv6 extension headers walked to find the upper-layer protocol; behind more, the protocol is unparsed */
	FILTER_MAX_EXT_HEADERS = 8,
	/*
	 * at tc, a frame whose headers run past the skb's linear part is pulled up to this many bytes and parsed again;
	 * headers past them are unparsed
	 */
	FILTER_PULL_BYTES = 1024,
};

/* filter_rule.action: what a frame that matches the rule gets (after the rule's counters count it). */
enum filter_action {
	FILTER_COUNT = 0, /* count and pass on */
	FILTER_DROP = 1, /* count and drop */
};

/* filter_rule.flags. */
enum filter_rule_flag {
	RULE_IPV4 = 1, /* matches IPv4 packets */
	RULE_IPV6 = 2, /* matches IPv6 packets */
	/*
	 * has a port range: matches only packets whose ports are known (not a non-first fragment, not a truncated
	 * TCP/UDP header)
	 */
	RULE_PORTS = 4,
};

/*
 * Frames no rule decided, by reason: filter_unmatched[reason]. They pass, but for unparsed ones: see filter_unparsed.
 */
enum filter_unmatched {
	UNMATCHED_NO_RULE = 0, /* an IPv4 or IPv6 packet that no rule matched */
	/*
	 * neither IPv4 nor IPv6 (ARP, more than two VLAN tags, cut short before its EtherType, ...): rules match IP
	 * only
	 */
	UNMATCHED_NOT_IP = 1,
	UNMATCHED_MALFORMED = 2, /* an IP header cut short or with a bad version or length */
	/*
	 * the first rule that could match needs the protocol or ports, and the filter could not reach them (behind more
	 * than FILTER_MAX_EXT_HEADERS IPv6 extension headers, cut short, or at tc past FILTER_PULL_BYTES)
	 */
	UNMATCHED_UNPARSED = 3,
	UNMATCHED_REASONS = 4,
};

/*
 * filter_order.unparsed: what a frame counted UNMATCHED_UNPARSED gets. Zero drops: a frame the rules cannot decide
 * never passes unless user space said so.
 */
enum filter_unparsed {
	UNPARSED_DROP = 0, /* drop it */
	UNPARSED_PASS = 1, /* pass it on */
};

struct filter_rule {
	__u32 src[4]; /* network order, already masked */
	__u32 src_mask[4];
	__u32 dst[4];
	__u32 dst_mask[4];
	__u16 sport_lo; /* host order, inclusive */
	__u16 sport_hi;
	__u16 dport_lo;
	__u16 dport_hi;
	__u8 proto; /* 0: any */
	__u8 flags; /* enum filter_rule_flag */
	__u8 action; /* enum filter_action */
	__u8 pad;
	__u8 name[FILTER_NAME_LEN]; /* NUL-padded, for user space: a deployed filter's maps say which rule is which */
};
_Static_assert(sizeof(struct filter_rule) == 108, "the size of FilterRule in Python");

struct filter_order {
	__u32 count;
	__u16 slot[FILTER_MAX_RULES];
	__u8 unparsed; /* enum filter_unparsed: switched with the rules */
	__u8 pad;
};
_Static_assert(sizeof(struct filter_order) == 264, "the size of FilterOrder in Python");

struct filter_counter {
	__u64 packets;
	__u64 bytes;
};
_Static_assert(sizeof(struct filter_counter) == 16, "the size of FilterCounter in Python");

/*
 * Every enum above as a member, so that each reaches the object's BTF, where user space compares it with
 * plugins/module_utils/filter/abi.py. Nothing reads the variable; its section is not one that libbpf loads, so it costs
 * no map and no instruction.
 */
struct filter_abi {
	enum filter_limits filter_limits;
	enum filter_action filter_action;
	enum filter_rule_flag filter_rule_flag;
	enum filter_unmatched filter_unmatched;
	enum filter_unparsed filter_unparsed;
};
static const struct filter_abi filter_abi __attribute__((section(".xdpfleet_abi"), used));

#endif /* XDPFLEET_FILTER_ABI_H */
