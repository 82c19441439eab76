"""tests/l2lib.py on a veth pair between two namespaces <prefix>-l2a and <prefix>-l2b (needs root).

The prefix is the test lab's (tests/conftest.py LAB_PREFIX), so that two test sessions or workers never share them.
"""

import os
import subprocess
import time

import l2lib
import pytest
from conftest import LAB_PREFIX
from l2lib import BROADCAST, Capture, Port, Vlan, build_frame, bum_probe, mac, new_marker, probe, send
from scapy.layers.l2 import Dot1Q, Ether

NS_A, NS_B = f"{LAB_PREFIX}-l2a", f"{LAB_PREFIX}-l2b"
OWN_NETNS = os.readlink("/proc/thread-self/ns/net")


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _remove():
    for ns in (NS_A, NS_B):
        if os.path.exists(f"/run/netns/{ns}"):
            _ip("netns", "del", ns)


@pytest.fixture(scope="module")
def pair():
    """eth0 in NS_A <-> eth0 in NS_B, up, IPv6 off (no router solicitations or MLD reports in the captures)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, AF_PACKET)")
    _remove()  # a leftover of a killed session
    try:
        for ns in (NS_A, NS_B):
            _ip("netns", "add", ns)
            no_ipv6 = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
            _ip("netns", "exec", ns, "sysctl", "-q", "-w", *no_ipv6)
        _ip("-n", NS_A, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", NS_B)
        for ns in (NS_A, NS_B):
            _ip("-n", ns, "link", "set", "eth0", "up")
        yield Port(NS_A, "eth0"), Port(NS_B, "eth0")
    finally:
        _remove()
    assert not any(os.path.exists(f"/run/netns/{ns}") for ns in (NS_A, NS_B))


def test_frames_are_built_as_on_the_wire():
    marker = new_marker()
    frame = build_frame("02:00:00:00:00:02", "02:00:00:00:00:01", b"hello", marker=marker, vlan=Vlan(10, 5, 1))
    parsed = Ether(frame)
    assert parsed.dst == "02:00:00:00:00:02" and parsed.src == "02:00:00:00:00:01"
    assert (parsed[Dot1Q].vlan, parsed[Dot1Q].prio, parsed[Dot1Q].dei) == (10, 5, 1)
    assert parsed[Dot1Q].type == l2lib.ETH_P_L2LIB
    assert bytes(parsed[Dot1Q].payload).startswith(marker + b"hello")
    assert len(frame) == 60 and l2lib.frame_vlan(frame) == Vlan(10, pcp=5, dei=1)
    untagged = build_frame(BROADCAST, "02:00:00:00:00:01", ethertype=0x0800, pad=False)
    assert untagged == bytes.fromhex("ffffffffffff 020000000001 0800") and l2lib.frame_vlan(untagged) is None
    # 802.1ad outside 802.1Q, outermost first.
    qinq = build_frame(BROADCAST, "02:00:00:00:00:01", vlan=[Vlan(100, tpid=l2lib.ETH_P_8021AD), Vlan(10)])
    assert qinq[12:20] == bytes.fromhex("88a8 0064 8100 000a")
    with pytest.raises(ValueError):
        Vlan(4096)


def test_mac_reads_the_interface_address_in_its_namespace(pair):
    a, b = pair
    out = _ip("-n", a.ns, "-o", "link", "show", "eth0").stdout
    assert f"link/ether {mac(*a)} " in out
    assert mac(*a) != mac(*b)
    # The caller's namespace is untouched: this process still sees its own interfaces, not the pair's.
    assert os.readlink("/proc/thread-self/ns/net") == OWN_NETNS


def test_untagged_frame_round_trips(pair):
    a, b = pair
    marker = new_marker()
    frame = build_frame(mac(*b), mac(*a), b"untagged", marker=marker)
    with Capture(*b) as cap:
        assert send(*a, [frame]) == 1
        [got] = cap.wait_for(marker)
    assert got.data == frame
    assert got.vlan is None and not got.tag_from_auxdata and got.pkttype == 0  # PACKET_HOST
    assert got.src == mac(*a) and got.dst == mac(*b)


@pytest.mark.parametrize("tag", [Vlan(10, pcp=5, dei=1), Vlan(20), Vlan(4094, pcp=7)])
def test_tagged_frame_round_trips_with_its_tag(pair, tag):
    a, b = pair
    marker = new_marker()
    frame = build_frame(BROADCAST, mac(*a), b"tagged", marker=marker, vlan=tag)
    with Capture(*b) as cap:
        send(*a, frame)
        [got] = cap.wait_for(marker)
    # The kernel took the tag out of the frame; Capture put it back from PACKET_AUXDATA.
    assert got.tag_from_auxdata
    assert got.data == frame and got.vlan == tag
    parsed = Ether(got.data)
    assert (parsed[Dot1Q].vlan, parsed[Dot1Q].prio, parsed[Dot1Q].dei) == (tag.vid, tag.pcp, tag.dei)
    assert got.pkttype == 1  # PACKET_BROADCAST


def test_capture_keeps_a_burst_in_order_and_leaves_out_its_own_sends(pair):
    a, b = pair
    markers = [new_marker() for _ in range(200)]
    src = mac(*a)
    frames = [build_frame(BROADCAST, src, marker=m, vlan=Vlan(10) if i % 2 else None) for i, m in enumerate(markers)]
    with Capture(*a) as sent_side, Capture(*a, outgoing=True) as sent_all, Capture(*b) as cap:
        send(*a, frames)
        cap.wait_for(markers[-1])
    assert [f.data for f in cap.frames if f.data in frames] == frames
    assert cap.kernel_drops == 0
    assert not any(f.data in frames for f in sent_side.frames)  # outgoing left out by default
    assert sum(f.data in frames for f in sent_all.frames) == len(frames)


def test_capture_stops_by_itself_after_max_seconds(pair):
    _, b = pair
    cap = Capture(*b, max_seconds=0.3).start()
    time.sleep(0.5)
    assert not cap.running
    assert cap.stop() == []
    start = time.monotonic()
    assert cap.wait_for(b"never", timeout=5) == []  # returns at once: nothing can arrive any more
    assert time.monotonic() - start < 0.5


def test_bum_probe_reports_who_received_the_broadcast(pair):
    a, b = pair
    # b's loopback is down (never brought up): a receiver that gets nothing. a sent the frame: its own copy is
    # outgoing, not received.
    receivers = {"b": b, "b-lo": Port(b.ns, "lo"), "a": a}
    assert bum_probe(a, receivers, timeout=0.5) == {"b"}
    found = probe(a, {"b": b}, vlan=Vlan(20, pcp=3))
    assert [f.vlan for f in found["b"]] == [Vlan(20, pcp=3)]
    assert bum_probe(b, {"a": a}) == {"a"}


def test_errors_name_the_namespace_and_interface(pair):
    a, _ = pair
    with pytest.raises(OSError, match=f"{a.ns}: cannot bind to nope0"):
        send(a.ns, "nope0", b"x" * 60)
    with pytest.raises(FileNotFoundError):
        Capture(f"{LAB_PREFIX}-l2-missing", "eth0").start()
    with pytest.raises(ValueError, match="marker"):
        probe(a, {}, build_frame(BROADCAST, mac(*a)))
