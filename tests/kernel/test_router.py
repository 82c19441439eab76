"""The XDP router (bpf/router, deployed by router/deploy.py) against the real kernel, in namespaces e1 -- r -- e2:
traffic forwarded by XDP both ways over IPv4 and IPv6 (its counters and the kernel's own forwarding counter say who
forwarded it), a kernel route change followed with the same program, and what it hands to the kernel: TTL expiry
(the kernel's ICMP time exceeded comes back), a next hop without a neighbour entry (the kernel resolves it, XDP
forwards what follows), a frame over the egress MTU; a host that does not forward is refused."""

import os
import re

import pytest
from router_netns import E1_V4, E1_V6, E2_V4, E2_V6, R_P1_V4, R_P1_V6, RouterNetns

from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

PREFIX = os.environ.get("XDPFLEET_TEST_LAB_PREFIX", "xt")
TARGET = "198.51.100.80"  # an address behind e2 (on its loopback), routed by r through a route of its own


@pytest.fixture(scope="module")
def router():
    lab = RouterNetns.create(f"{PREFIX}rt")
    try:
        first = lab.deploy()
        assert first["changed"] and first["program"] == {"p1": "attach", "p2": "attach"}, first
        yield lab
    finally:
        lab.close()


def ping(lab, src: str, dst: str, *args: str, count: int = 5):
    return lab.exec(src, "ping", "-n", "-c", str(count), "-i", "0.05", "-W", "1", *args, dst, check=False)


def forwarded_by_kernel(lab) -> int:
    """IPv4 and IPv6 datagrams the router namespace's kernel forwarded (its SNMP counters)."""
    out = lab.exec("r", "nstat", "-asz", "IpForwDatagrams", "Ip6OutForwDatagrams").stdout
    return sum(int(line.split()[1]) for line in out.splitlines() if line.startswith(("Ip", "Ip6")))


# What the namespaces' own IPv6 control traffic (ND, MLD reports with a hop-by-hop header) may add at any time.
CONTROL = ("pass_not_ip", "pass_local", "pass_options")


def delta(before: dict, after: dict) -> dict:
    """Verdicts whose count moved, IPv6 control traffic left out."""
    return {k: after[k] - before[k] for k in after if after[k] != before[k] and k not in CONTROL}


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_traffic_both_ways_is_forwarded_by_xdp(router, family):
    src_dst = {"ipv4": (E1_V4, E2_V4), "ipv6": (E1_V6, E2_V6)}[family]
    for src, dst in (("e1", src_dst[1]), ("e2", src_dst[0])):
        assert ping(router, src, dst, count=1).returncode == 0  # neighbours resolved
        before, kernel_before = router.counters(), forwarded_by_kernel(router)
        assert ping(router, src, dst).returncode == 0
        moved = delta(before, router.counters())
        # 5 requests one way, 5 replies the other; ND may run alongside (passed to the kernel, never forwarded).
        assert moved.get(f"forwarded_{family[-2:]}") == 10, moved
        assert forwarded_by_kernel(router) == kernel_before, "the kernel forwarded none of it"


def test_a_route_change_takes_effect_with_the_same_program(router):
    router.exec("e2", "ip", "addr", "add", f"{TARGET}/32", "dev", "lo")
    router.exec("r", "ip", "route", "add", f"{TARGET}/32", "via", "198.51.100.70")
    prog = router.prog_id("p1")
    try:
        before = router.counters()
        assert ping(router, "e1", TARGET, count=3).returncode == 0
        assert delta(before, router.counters()).get("forwarded_v4") == 6

        router.exec("r", "ip", "route", "replace", "unreachable", f"{TARGET}/32")
        before = router.counters()
        unreachable = ping(router, "e1", TARGET, count=3)
        assert unreachable.returncode != 0 and "Destination Host Unreachable" in unreachable.stdout, unreachable
        assert delta(before, router.counters()) == {"pass_no_route": 3}

        router.exec("r", "ip", "route", "replace", f"{TARGET}/32", "via", "198.51.100.70")
        before = router.counters()
        assert ping(router, "e1", TARGET, count=3).returncode == 0
        assert delta(before, router.counters()).get("forwarded_v4") == 6
        assert router.prog_id("p1") == router.prog_id("p2") == prog, "no program or map was touched"
    finally:
        router.exec("r", "ip", "route", "del", f"{TARGET}/32", check=False)
        router.exec("e2", "ip", "addr", "del", f"{TARGET}/32", "dev", "lo", check=False)


@pytest.mark.parametrize(
    "dst,hop,answer",
    [(E2_V4, R_P1_V4, "Time to live exceeded"), (E2_V6, R_P1_V6, "Time exceeded: Hop limit")],
    ids=["ipv4", "ipv6"],
)
def test_ttl_expiry_is_answered_by_the_kernel(router, dst, hop, answer):
    before = router.counters()
    probe = ping(router, "e1", dst, "-t", "1", count=1)
    assert re.search(rf"From {re.escape(hop)}.*{answer}", probe.stdout), probe.stdout
    assert delta(before, router.counters()) == {"pass_ttl": 1}


@pytest.mark.parametrize("dst,verdict", [(E2_V4, "v4"), (E2_V6, "v6")], ids=["ipv4", "ipv6"])
def test_an_unknown_neighbour_goes_to_the_kernel_then_xdp_forwards(router, dst, verdict):
    router.exec("r", "ip", "neigh", "flush", "dev", "p2")
    router.exec("r", "ip", "-6", "neigh", "flush", "dev", "p2")
    before = router.counters()
    result = router.exec("e1", "ping", "-n", "-c", "4", "-i", "0.2", "-W", "1", dst, check=False)
    assert result.returncode == 0 and " 0% packet loss" in result.stdout, result.stdout
    moved = delta(before, router.counters())
    assert moved.get("pass_no_neigh", 0) >= 1, moved
    # The kernel forwarded the first request (and resolved e2); the rest and every reply went through XDP.
    assert moved.get(f"forwarded_{verdict}", 0) >= 8 - moved["pass_no_neigh"], moved


def test_a_frame_over_the_egress_mtu_goes_to_the_kernel(router):
    router.exec("r", "ip", "link", "set", "p2", "mtu", "1280")
    try:
        before = router.counters()
        too_big = ping(router, "e1", E2_V4, "-M", "do", "-s", "1400", count=1)
        assert "mtu = 1280" in too_big.stdout or "Frag needed" in too_big.stdout, too_big.stdout
        assert delta(before, router.counters()) == {"pass_mtu": 1}
    finally:
        router.exec("r", "ip", "link", "set", "p2", "mtu", "1500")


def test_a_second_deploy_changes_nothing_and_a_host_that_does_not_forward_is_refused(router):
    again = router.deploy()
    assert again["changed"] is False and again["changes"] == [], again
    assert set(again["ansible_facts"]["xdpfleet_router"]["counters"]) >= {"forwarded_v4", "pass_ttl"}
    router.exec("r", "sysctl", "-qw", "net.ipv4.conf.p2.forwarding=0")
    try:
        with pytest.raises(deploy.RouterError, match=r"interfaces: the kernel does not forward IPv4 on p2 "):
            router.deploy()
    finally:
        router.exec("r", "sysctl", "-qw", "net.ipv4.conf.p2.forwarding=1")


def test_only_the_routers_ports_are_egress_ports(router):
    """A route out of an interface that is not a port goes to the kernel; adding the port writes the devmap."""
    one_port = router.deploy(interfaces=["p1"])
    assert one_port["changes"][0] == "- port p2 (ifindex 3)" and one_port["program"]["p2"] == "detach", one_port
    try:
        assert ping(router, "e1", E2_V4, count=1).returncode == 0  # neighbours resolved
        before = router.counters()
        assert ping(router, "e1", E2_V4, count=3).returncode == 0, "the kernel forwards what the router passes"
        moved = delta(before, router.counters())
        assert moved.get("pass_not_port") == 3 and "forwarded_v4" not in moved, moved
    finally:
        both = router.deploy()
    assert both["changes"][0] == "+ port p2 (ifindex 3)" and both["program"]["p2"] == "attach", both
