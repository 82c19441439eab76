# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The packet filter's numbers, declared once for C and Python: how many rules its maps hold, what a rule's action
and flags mean, and why a frame matched no rule.

bpf/filter/filter_abi.h is generated from this file and the structs of layouts.py (`make abi`), and
bpf/filter/filter.h includes it. The map layouts in layouts.py carry ABI, so loading the object, and reading a
deployed filter's pinned maps, checks these numbers against the BTF (see bpf/abi.py).
"""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi

LIMITS = abi.Enum(
    "filter_limits",
    "Sizes: the maps are sized by them, and a rule list is validated against them.",
    (
        (
            "FILTER_MAX_RULES",
            128,
            "rules of one filter: the slots of filter_rules and filter_counters, and the length of an order",
        ),
        (
            "FILTER_GENERATIONS",
            2,
            "filter_order holds two orders: user space writes the one not in use, then switches filter_active to it",
        ),
        ("FILTER_NAME_LEN", 32, "bytes of a rule's name in filter_rules, the terminating NUL included"),
        (
            "FILTER_MAX_EXT_HEADERS",
            8,
            "IPv6 extension headers walked to find the upper-layer protocol; behind more, the protocol is unparsed",
        ),
        (
            "FILTER_PULL_BYTES",
            1024,
            "at tc, a frame whose headers run past the skb's linear part is pulled up to this many bytes and parsed "
            "again; headers past them are unparsed",
        ),
    ),
)
FILTER_MAX_RULES = LIMITS["FILTER_MAX_RULES"]
FILTER_GENERATIONS = LIMITS["FILTER_GENERATIONS"]
FILTER_NAME_LEN = LIMITS["FILTER_NAME_LEN"]
FILTER_MAX_EXT_HEADERS = LIMITS["FILTER_MAX_EXT_HEADERS"]
FILTER_PULL_BYTES = LIMITS["FILTER_PULL_BYTES"]

ACTION = abi.Enum(
    "filter_action",
    "filter_rule.action: what a frame that matches the rule gets (after the rule's counters count it).",
    (
        ("FILTER_COUNT", 0, "count and pass on"),
        ("FILTER_DROP", 1, "count and drop"),
    ),
)
FILTER_COUNT = ACTION["FILTER_COUNT"]
FILTER_DROP = ACTION["FILTER_DROP"]
ACTIONS = {"count": FILTER_COUNT, "drop": FILTER_DROP}

RULE_FLAG = abi.Enum(
    "filter_rule_flag",
    "filter_rule.flags.",
    (
        ("RULE_IPV4", 1, "matches IPv4 packets"),
        ("RULE_IPV6", 2, "matches IPv6 packets"),
        (
            "RULE_PORTS",
            4,
            "has a port range: matches only packets whose ports are known (not a non-first fragment, not a "
            "truncated TCP/UDP header)",
        ),
    ),
)
RULE_IPV4 = RULE_FLAG["RULE_IPV4"]
RULE_IPV6 = RULE_FLAG["RULE_IPV6"]
RULE_PORTS = RULE_FLAG["RULE_PORTS"]

UNMATCHED = abi.Enum(
    "filter_unmatched",
    "Frames no rule decided, by reason: filter_unmatched[reason]. They pass, but for unparsed ones: see "
    "filter_unparsed.",
    (
        ("UNMATCHED_NO_RULE", 0, "an IPv4 or IPv6 packet that no rule matched"),
        (
            "UNMATCHED_NOT_IP",
            1,
            "neither IPv4 nor IPv6 (ARP, more than two VLAN tags, cut short before its EtherType, ...): rules match "
            "IP only",
        ),
        ("UNMATCHED_MALFORMED", 2, "an IP header cut short or with a bad version or length"),
        (
            "UNMATCHED_UNPARSED",
            3,
            "the first rule that could match needs the protocol or ports, and the filter could not reach them (behind "
            "more than FILTER_MAX_EXT_HEADERS IPv6 extension headers, cut short, or at tc past FILTER_PULL_BYTES)",
        ),
    ),
    count="UNMATCHED_REASONS",
)
UNMATCHED_REASONS = tuple(UNMATCHED.labels("UNMATCHED_").values())  # the counters' names, by reason number

UNPARSED = abi.Enum(
    "filter_unparsed",
    "filter_order.unparsed: what a frame counted UNMATCHED_UNPARSED gets. Zero drops: a frame the rules cannot "
    "decide never passes unless user space said so.",
    (
        ("UNPARSED_DROP", 0, "drop it"),
        ("UNPARSED_PASS", 1, "pass it on"),
    ),
)
UNPARSED_ACTIONS = {"drop": UNPARSED["UNPARSED_DROP"], "pass": UNPARSED["UNPARSED_PASS"]}

ABI = abi.Abi(
    name="filter",
    header="bpf/filter/filter_abi.h",
    source="plugins/module_utils/filter/abi.py",
    doc="The packet filter's limits and enums, shared by the data plane and user space.",
    enums=(LIMITS, ACTION, RULE_FLAG, UNMATCHED, UNPARSED),
)
