"""The XDP router's host logic that needs no kernel: the interfaces argument, the forwarding check, the devmap
difference, and the verdict names the counters are reported by."""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))

from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy as rd

HOST = {"p1": 5, "p2": 6}


def problems(interfaces):
    return rd.interface_problems(interfaces, ifindex_of=lambda name: HOST.get(name, 0))


def test_interfaces_are_checked_each_by_its_index():
    assert problems(["p1", "p2"]) == []
    assert problems([]) == ["interfaces: give at least one interface to route between"]
    assert problems(["p1", "p1", "p9", "bad name"]) == [
        "interfaces[1]: p1 is listed twice",
        "interfaces[2]: p9 does not exist on this host",
        f"interfaces[3]: {rd.names.ifname_problem('bad name')}",
    ]
    assert problems([f"p{n}" for n in range(abi.RT_PORTS_MAX + 1)])[0].startswith("interfaces: 257 given, the router")


def sysctls(values: dict):
    return lambda path: values.get(path)


def test_a_port_that_does_not_forward_is_named_with_its_sysctl():
    on = {"ipv4/conf/p1/forwarding": "1", "ipv6/conf/p1/forwarding": "1", "ipv6/conf/p1/disable_ipv6": "0"}
    assert rd.forwarding_problems(["p1"], sysctls(on)) == []
    (v4,) = rd.forwarding_problems(["p1"], sysctls({**on, "ipv4/conf/p1/forwarding": "0"}))
    assert "IPv4 on p1 (net.ipv4.conf.p1.forwarding is not 1; set net.ipv4.ip_forward=1)" in v4
    (v6,) = rd.forwarding_problems(["p1"], sysctls({**on, "ipv6/conf/p1/forwarding": "0"}))
    assert "IPv6 on p1 (net.ipv6.conf.p1.forwarding" in v6


def test_ipv6_forwarding_is_not_asked_where_ipv6_is_off():
    v4_only = {"ipv4/conf/p1/forwarding": "1", "ipv6/conf/p1/disable_ipv6": "1", "ipv6/conf/p1/forwarding": "0"}
    assert rd.forwarding_problems(["p1"], sysctls(v4_only)) == []
    no_ipv6 = {"ipv4/conf/p1/forwarding": "1"}  # a kernel without IPv6: no ipv6/ directory at all
    assert rd.forwarding_problems(["p1"], sysctls(no_ipv6)) == []


def test_the_devmap_difference_adds_and_removes_ports():
    added, removed, changes = rd.port_changes({5: 5, 7: 7}, {5: 5, 6: 6}, {5: "p1", 6: "p2", 7: "gone"}, "router r")
    assert (added, removed) == ([6], [7])
    assert changes.steps == ["+ port p2 (ifindex 6)", "- port gone (ifindex 7)"]
    assert changes.diff()["before"] == "port gone (ifindex 7)\n" and changes.diff()["after"] == "port p2 (ifindex 6)\n"
    assert rd.port_changes({5: 5}, {5: 5}, {5: "p1"}, "router r")[2].changed is False


def test_verdicts_are_reported_by_their_c_names():
    assert abi.VERDICT_NAMES[abi.VERDICTS["RT_FORWARDED_V4"]] == "forwarded_v4"
    assert abi.VERDICT_NAMES[abi.VERDICTS["RT_PASS_NO_NEIGH"]] == "pass_no_neigh"
    assert len(abi.VERDICT_NAMES) == abi.VERDICTS["RT_VERDICTS"]
