"""The XDP router's host logic that needs no kernel: the interfaces argument, the forwarding check, the devmap
difference, and the verdict names the counters are reported by."""

from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy as rd
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import forwarding_policy as fp

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


def chain(family, table, name, hook=None, policy="accept", **extra):
    base = {"type": "filter", "hook": hook, "prio": 0, "policy": policy} if hook else {}
    return {"chain": {"family": family, "table": table, "name": name, **base, **extra}}


def rule(family, table, name):
    return {"rule": {"family": family, "table": table, "chain": name, "expr": []}}


def test_only_chains_on_the_forwarding_path_that_can_decide_are_netfilter_findings():
    ruleset = {"nftables": [
        {"metainfo": {"version": "1.0.6"}},
        chain("inet", "filter", "input", "input", policy="drop"),  # local delivery: the router passes those frames
        chain("inet", "filter", "forward", "forward"),  # empty, accept: decides nothing
        chain("ip", "nat", "POSTROUTING", "postrouting"), rule("ip", "nat", "POSTROUTING"),  # iptables-nft's NAT
        chain("ip6", "raw", "PREROUTING", "prerouting", policy="drop"),
        chain("inet", "filter", "jumped"), rule("inet", "filter", "jumped"),  # no hook: judged by its base chain
        chain("netdev", "edge", "other", "ingress", dev="eth9"), rule("netdev", "edge", "other"),
        chain("netdev", "edge", "port", "ingress", dev="p1"), rule("netdev", "edge", "port"),
        chain("netdev", "edge", "unnamed", "egress", policy="drop"),  # nft < 1.0.7 leaves "dev" out of its JSON
    ]}  # fmt: skip
    assert fp.nftables_findings(ruleset, ["p1", "p2"]) == [
        "nftables table ip nat chain POSTROUTING (hook postrouting): 1 rule, policy accept",
        "nftables table ip6 raw chain PREROUTING (hook prerouting): 0 rules, policy drop",
        "nftables table netdev edge chain port (hook ingress on p1): 1 rule, policy accept",
        "nftables table netdev edge chain unnamed (hook egress on a device nft does not name): 0 rules, policy drop",
    ]


def test_the_refusal_names_what_it_found_and_the_option():
    class Listed:
        returncode, stderr = 0, ""
        stdout = '{"nftables": [{"chain": {"family": "inet", "table": "t", "name": "fw", "hook": "forward", ' \
                 '"policy": "drop"}}]}'  # fmt: skip

    tables = {"/proc/net/ip6_tables_names": "mangle\n"}
    (problem,) = fp.netfilter_problems(["p1"], run=lambda: Listed, read=tables.get)
    assert problem.startswith("bypass_forwarding_rules: the kernel's forwarding path has netfilter rules"), problem
    assert "table inet t chain fw (hook forward): 0 rules, policy drop; legacy ip6tables table mangle exists" in problem
    assert fp.netfilter_problems(["p1"], run=lambda: Listed, read={}.get) == [problem.replace(
        "; legacy ip6tables table mangle exists (/proc/net/ip6_tables_names; its rules cannot be read without "
        "ip6tables)", "")]  # fmt: skip

    def no_nft():
        raise FileNotFoundError("nft")

    (missing,) = fp.netfilter_problems(["p1"], run=no_nft, read={}.get)
    assert (
        "nft (Debian and EL package nftables) is not installed" in missing
        and "bypass_forwarding_rules: true" in missing
    )


def test_rp_filter_counts_as_the_larger_of_all_and_the_port():
    assert fp.rp_filter_problems(["p1"], sysctls({"ipv4/conf/all/rp_filter": "0"})) == []
    (strict,) = fp.rp_filter_problems(
        ["p1", "p2"], sysctls({"ipv4/conf/all/rp_filter": "0", "ipv4/conf/p2/rp_filter": "1"})
    )
    assert "reverse-path filtering is on for p2 (strict: the larger of net.ipv4.conf.all.rp_filter=0 and " \
           "net.ipv4.conf.p2.rp_filter=1)" in strict  # fmt: skip
    assert len(fp.rp_filter_problems(["p1", "p2"], sysctls({"ipv4/conf/all/rp_filter": "2"}))) == 2
