"""Filter rules: validation (every problem named by its field's path and the rule), the encoding the data plane
reads, and where XDP saves work over tc (probe.xdp_before_skb). No root, no kernel."""

import ipaddress

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import abi, rules, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter.deploy import Filter, FilterError, attach_mode
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.probe import xdp_before_skb


def problems(items) -> list[str]:
    with pytest.raises(rules.RulesError) as caught:
        rules.validate(items)
    return caught.value.problems


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        (
            {"name": "a", "action": "drop", "src": "198.51.100.1/24"},
            'rules[0].src: "198.51.100.1/24" has host bits set: the prefix is 198.51.100.0/24 (rule "a")',
        ),
        ({"name": "a", "action": "drop", "dst": "198.51.100.300"}, 'rules[0].dst: "198.51.100.300" is not an IPv4'),
        (
            {"name": "a", "action": "drop", "protocol": "udp", "dst_port": "2000-1000"},
            'rules[0].dst_port: the range 2000-1000 is reversed (write 1000-2000) (rule "a")',
        ),
        (
            {"name": "a", "action": "drop", "dst_port": 53},
            'rules[0].dst_port: ports need protocol tcp or udp (the rule\'s protocol is any) (rule "a")',
        ),
        (
            {"name": "a", "action": "drop", "protocol": "icmp", "src_port": 1},
            "rules[0].src_port: ports need protocol tcp or udp (the rule's protocol is icmp)",
        ),
        ({"name": "a", "action": "drop", "protocol": "udp", "dst_port": 70000}, "rules[0].dst_port: 70000 is outside"),
        ({"name": "a", "action": "drop", "protocol": "udp", "dst_port": "53-"}, "is not a port or a range"),
        ({"name": "a", "action": "drop", "protocol": "gre"}, 'rules[0].protocol: "gre" is not one of'),
        ({"name": "a", "action": "drop", "protocol": 300}, "rules[0].protocol: 300 is not an IP protocol number"),
        (
            {"name": "a", "action": "drop", "src": "198.51.100.0/24", "dst": "2001:db8::/32"},
            "rules[0].dst: 2001:db8::/32 is IPv6, src 198.51.100.0/24 is not",
        ),
        (
            {"name": "a", "action": "drop", "family": "ipv6", "dst": "198.51.100.0/24"},
            "rules[0].family: ipv6 contradicts the rule's IPv4 prefixes",
        ),
        ({"name": "a b", "action": "drop"}, 'rules[0].name: "a b" is not a rule name'),
        ({"name": "x" * 32, "action": "drop"}, "is not a rule name (1-31 letters"),
        ({"name": "a", "action": "reject"}, 'rules[0].action: "reject" is not one of count, drop'),
        ({"name": "a"}, "rules[0]: missing required key 'action'"),
        ({"name": "a", "action": "drop", "dport": 53}, "rules[0]: unknown key 'dport' (did you mean 'dst_port'?)"),
    ],
)
def test_a_bad_rule_is_refused_naming_its_field(rule, expected):
    found = problems([rule])
    assert any(p.startswith(expected) or expected in p for p in found), found


def test_every_problem_is_reported_at_once_and_duplicate_names_are_refused():
    found = problems(
        [
            {"name": "a", "action": "drop", "protocol": "udp", "dst_port": "9-1"},
            {"name": "b", "action": "count", "src": "198.51.100.1/30"},
            {"name": "a", "action": "count"},
        ]
    )
    assert [p.split(":")[0] for p in found] == ["rules[0].dst_port", "rules[1].src", "rules[2].name"]
    assert found[2] == 'rules[2].name: "a" is already the name of rules[0]'


def test_too_many_rules_are_refused():
    many = [{"name": f"r{n}", "action": "count"} for n in range(abi.FILTER_MAX_RULES + 1)]
    assert problems(many) == [
        f"rules: lists {abi.FILTER_MAX_RULES + 1}, more than the maximum {abi.FILTER_MAX_RULES} "
        f"(at most {abi.FILTER_MAX_RULES} rules (the data plane's FILTER_MAX_RULES))"
    ]


def test_encoding_masks_prefixes_in_network_order_and_sets_flags():
    [rule] = rules.validate(
        [{"name": "web", "action": "drop", "src": "198.51.100.64/27", "protocol": "tcp", "dst_port": "80-443"}]
    )
    value = rule.encode()
    assert bytes(value.src)[:4] == ipaddress.ip_address("198.51.100.64").packed
    assert bytes(value.src_mask)[:4] == b"\xff\xff\xff\xe0" and bytes(value.src_mask)[4:] == bytes(12)
    assert bytes(value.dst_mask) == bytes(16)  # any destination
    assert (value.sport_lo, value.sport_hi, value.dport_lo, value.dport_hi) == (0, 0xFFFF, 80, 443)
    assert value.flags == abi.RULE_IPV4 | abi.RULE_PORTS and value.proto == 6 and value.action == abi.FILTER_DROP
    assert bytes(value.name).rstrip(b"\0") == b"web"


@pytest.mark.parametrize(
    "item",
    [
        {"name": "v6", "action": "count", "dst": "2001:db8:1::/48", "protocol": "udp", "src_port": 5000},
        {"name": "any", "action": "drop"},
        {"name": "fam", "action": "drop", "family": "ipv4", "protocol": 47},
        {"name": "host", "action": "drop", "dst": "198.51.100.99"},
    ],
)
def test_a_rule_read_back_from_its_encoding_reads_as_written(item):
    [rule] = rules.validate([item])
    assert rules.decode(rule.encode()) == rule


def test_unparsed_switches_with_the_order_and_says_so():
    """What frames the rules cannot decide get lives in the order, so a change of it alone rewrites the order."""
    desired = rules.validate([{"name": "ssh", "action": "drop", "protocol": "tcp", "dst_port": 22}])
    current = writer.Current(0, [writer.Installed(5, desired[0].encode())], "drop")
    assert not writer.plan(current, desired, "filter f").changed
    update = writer.plan(current, desired, "filter f", "pass")
    assert update.changes.steps == ["unparsed frames: drop -> pass"] and not update.writes and update.slots == [5]
    diff = update.changes.diff()
    assert (diff["before"], diff["after"]) == ("unparsed frames: drop\n", "unparsed frames: pass\n")


def test_an_unknown_unparsed_is_refused_before_anything():
    with pytest.raises(FilterError, match=r"unparsed: 'accept' is not one of drop, pass"):
        Filter(xp.InstancePaths("f", "/nonexistent/bpffs", "/nonexistent/state"), "/nonexistent/cache", rules=[],
               interfaces=["eth0"], unparsed="accept").deploy()  # fmt: skip


def test_generic_xdp_is_refused_unless_allowed():
    with pytest.raises(FilterError, match=r"mode: generic XDP runs on the skb .* set allow_generic: true"):
        attach_mode("xdp", "generic", allow_generic=False)
    assert attach_mode("xdp", "generic", allow_generic=True) == "generic"
    assert attach_mode("tc", "generic", allow_generic=False) == "tc"


@pytest.mark.parametrize(
    ("driver", "mode", "basic", "when"),
    [
        ("virtio_net", "native", True, "always"),
        ("ice", "native", None, "always"),
        ("mlx5_core", "generic", True, "never"),
        ("veth", "native", True, "xdp_frames_only"),
        ("veth", "generic", True, "never"),
        ("bridge", "native", False, "never"),
    ],
)
def test_where_xdp_runs_before_the_skb(driver, mode, basic, when):
    decision = xdp_before_skb(driver, mode, basic)
    assert decision["when"] == when and decision["why"]
