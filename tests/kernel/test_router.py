"""The XDP router (bpf/router, deployed by router/deploy.py) against the real kernel, in namespaces e1 -- r -- e2:
traffic forwarded by XDP both ways over IPv4 and IPv6 (its counters and the kernel's own forwarding counter say who
forwarded it), a kernel route change followed with the same program, and what it hands to the kernel: TTL expiry
(the kernel's ICMP time exceeded comes back), a next hop without a neighbour entry (the kernel resolves it, XDP
forwards what follows), a frame over the egress MTU; a host that does not forward is refused."""

import os
import re

import pytest
from conftest import LAB_PREFIX
from router_netns import E1_V4, E1_V6, E2_V4, E2_V6, R_P1_V4, R_P1_V6, RouterNetns

from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

TARGET = "198.51.100.80"  # an address behind e2 (on its loopback), routed by r through a route of its own


@pytest.fixture(scope="module")
def router():
    lab = RouterNetns.create(f"{LAB_PREFIX}rt")
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
CONTROL = ("pass_not_ip", "pass_local", "pass_options", "pass_special_addr")


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


MARKER = b"xr-martian-probe"


def udp_frame(lab, src: str, dst: str) -> bytes:
    """A UDP datagram from e1 to r's p1, with the marker; built by scapy (the kernel computes nothing here)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    ip = IPv6(src=src, dst=dst) if ":" in dst else IP(src=src, dst=dst)
    return bytes(Ether(src=lab.mac("e1", "eth0"), dst=lab.mac("r", "p1")) / ip / UDP(sport=9, dport=9) / MARKER)


def send_one(router, src: str, dst: str) -> tuple[dict, dict, list[bytes]]:
    """One UDP frame from src to dst sent by e1 to r's p1: the router's counters before and after, and what reached
    e2. A default route via e2 makes every destination routed."""
    router.exec("r", "ip", "route", "add", "default", "via", E2_V4)
    tx, rx = router.packet_socket("e1", "eth0"), router.packet_socket("e2", "eth0")
    try:
        assert ping(router, "e1", E2_V6 if ":" in dst else E2_V4, count=1).returncode == 0  # neighbours resolved
        before = router.counters()
        tx.send(udp_frame(router, src, dst))
        arrived = router.received(rx, MARKER)
        return before, router.counters(), arrived
    finally:
        tx.close()
        rx.close()
        router.exec("r", "ip", "route", "del", "default", check=False)


@pytest.mark.parametrize(
    "src,dst,kernel_forwards",
    [
        ("127.0.0.2", E2_V4, False),  # a martian source: the kernel drops it
        ("169.254.1.1", E2_V4, True),  # link-local: the kernel forwards it, XDP leaves that to it
        ("198.51.100.66", "224.1.1.1", False),  # multicast, routed by a default route in the FIB
        ("198.51.100.66", "255.255.255.255", False),  # limited broadcast, the same
        ("fe80::5", E2_V6, False),  # the kernel answers "beyond scope of source address"
        ("::", E2_V6, False),
    ],
)
def test_a_martian_or_link_local_frame_goes_to_the_kernel(router, src, dst, kernel_forwards):
    """bpf_fib_lookup checks no source, and routes multicast and broadcast destinations like unicast: such frames
    are the kernel's, counted pass_special_addr; what reaches e2 is what the kernel forwards without XDP."""
    before, after, arrived = send_one(router, src, dst)
    # IPv6 control traffic (ND from link-local sources, MLD to multicast) may be counted alongside.
    assert after["pass_special_addr"] > before["pass_special_addr"], (before, after)
    assert delta(before, after) == {}, "nothing else moved, nothing was forwarded in XDP"
    assert bool(arrived) == kernel_forwards, arrived


R_P2_V4, R_P2_V6 = "198.51.100.69", "2001:db8:64:2::1"
R_LATER_V4, R_LATER_V6 = "198.51.100.90", "2001:db8:64:90::1"  # put on r's loopback after the deploy


@pytest.mark.parametrize(
    "src,dst,verdict,kernel_forwards",
    [
        (R_P2_V4, E2_V4, "pass_local_source", False),  # r's address on the other port: fib_validate_source drops it
        (R_P1_V4, E2_V4, "pass_local_source", False),  # r's address on the ingress port
        (R_LATER_V4, E2_V4, "pass_local_source", False),  # an address r got after the router was deployed
        ("198.51.100.67", E2_V4, "pass_local_source", True),  # p1's subnet broadcast: not r's, the kernel forwards it
        (R_P2_V6, E2_V6, "forwarded_v6", True),  # IPv6 has no such check: the kernel forwards it, so does XDP
        (R_P1_V6, E2_V6, "forwarded_v6", True),
        (R_LATER_V6, E2_V6, "forwarded_v6", True),
    ],
)
def test_a_frame_from_one_of_the_routers_own_addresses_is_judged_as_the_kernel_would(
    router, src, dst, verdict, kernel_forwards
):
    """bpf_fib_lookup checks no source, and the kernel refuses an IPv4 source that is its own before it forwards
    (rp_filter off, accept_local off): such a frame is the kernel's, counted pass_local_source, and does not reach
    e2. The check reads the FIB, so an address added after the deploy counts; a local broadcast source goes to the
    kernel too, which forwards it. The kernel forwards IPv6 from its own addresses, and so does the router.
    kernel_forwards is what r's kernel does without XDP (tried on 6.18)."""
    later = R_LATER_V6 + "/128" if ":" in src else R_LATER_V4 + "/32"
    router.exec("r", "ip", "addr", "add", later, "dev", "lo")
    try:
        before, after, arrived = send_one(router, src, dst)
    finally:
        router.exec("r", "ip", "addr", "del", later, "dev", "lo", check=False)
    assert delta(before, after) == {verdict: 1}
    assert bool(arrived) == kernel_forwards, arrived


NFT_TABLE = "xrtest"


def test_a_forward_chain_with_policy_drop_is_refused_unless_bypassed(router):
    router.exec("r", "nft", f"add table inet {NFT_TABLE}")
    router.exec("r", "nft", f"add chain inet {NFT_TABLE} fw {{ type filter hook forward priority 0; policy drop; }}")
    try:
        refusal = rf"bypass_forwarding_rules: .*table inet {NFT_TABLE} chain fw \(hook forward\): 0 rules, policy drop"
        for check_mode in (True, False):
            with pytest.raises(deploy.RouterError, match=refusal):
                router.deploy(interfaces=["p1"], check_mode=check_mode)
        assert router.prog_id("p2"), "the refused deploy left the router as it was"
        assert ping(router, "e1", E2_V4, count=1).returncode == 0, "XDP forwards past the drop policy"

        bypassed = router.deploy(bypass_forwarding_rules=True)
        assert bypassed["ansible_facts"]["xdpfleet_router"]["bypass_forwarding_rules"] is True, bypassed
        with open(router.paths.state_file) as f:
            assert '"bypass_forwarding_rules": true' in f.read()
    finally:
        router.exec("r", "nft", f"delete table inet {NFT_TABLE}")
    router.remove()
    assert ping(router, "e1", E2_V4, count=1).returncode == 0
    router.exec("r", "nft", f"add table inet {NFT_TABLE}")
    router.exec("r", "nft", f"add chain inet {NFT_TABLE} fw {{ type filter hook forward priority 0; policy drop; }}")
    try:
        assert ping(router, "e1", E2_V4, count=1).returncode != 0, "the kernel applies the drop policy"
    finally:
        router.exec("r", "nft", f"delete table inet {NFT_TABLE}")
        assert router.deploy()["changed"]


def test_an_empty_accepting_forward_chain_is_not_refused(router):
    """Debian's /etc/nftables.conf has such chains: nothing in them decides, so nothing is refused."""
    router.exec("r", "nft", f"add table inet {NFT_TABLE}")
    router.exec("r", "nft", f"add chain inet {NFT_TABLE} fw {{ type filter hook forward priority 0; policy accept; }}")
    try:
        assert router.deploy()["changed"] is False
        router.exec("r", "nft", f"add rule inet {NFT_TABLE} fw ct state established accept")
        with pytest.raises(deploy.RouterError, match=r"chain fw \(hook forward\): 1 rule, policy accept"):
            router.deploy()
    finally:
        router.exec("r", "nft", f"delete table inet {NFT_TABLE}")


def test_rp_filter_is_refused_unless_bypassed(router):
    router.exec("r", "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=2")
    try:
        with pytest.raises(deploy.RouterError, match=r"reverse-path filtering is on for p1 \(loose: the larger of "
                           r"net\.ipv4\.conf\.all\.rp_filter=2 and net\.ipv4\.conf\.p1\.rp_filter=0\)"):  # fmt: skip
            router.deploy()
        assert router.deploy(bypass_forwarding_rules=True)["changed"]
    finally:
        router.exec("r", "sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0")
    assert router.deploy()["changed"], "the choice to bypass is recorded, and taken back"


def test_a_legacy_iptables_table_is_refused(router):
    """Legacy iptables' rules cannot be read without iptables: a table that exists is named. Asking the kernel for
    the table's info (IPT_SO_GET_INFO, what `iptables -L` does first) makes it exist in the namespace."""
    router.exec("r", "python3", "-c", LEGACY_FILTER_TABLE)
    with pytest.raises(deploy.RouterError, match=r"legacy iptables table filter exists \(/proc/net/ip_tables_names"):
        router.deploy()
    # The namespace keeps its table: the module fixture's other tests ran before, the lab goes with the module.


LEGACY_FILTER_TABLE = """
import ctypes, socket
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
info = ctypes.create_string_buffer(b"filter".ljust(84, b"\\0"), 84)
size = ctypes.c_uint(84)
assert ctypes.CDLL(None).getsockopt(sock.fileno(), socket.IPPROTO_IP, 64, info, ctypes.byref(size)) == 0
"""
