"""The traffic generator against the real kernel: the live-frames sender, its return counter and the echo server on
a 2-queue veth pair in a private network namespace, driven from the test process (no Ansible)."""

import os
import socket

import pytest
from l2lib import PACKET_OUTGOING, Port, netns, receive, receiving_socket
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from vtep_netns import REPO, port_facts, sh

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import TypedMap, set_rodata
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.probe import XDP_PASS, xdp_return_program
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import layouts as tg_layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import sender as tg_sender
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.echo import echo_constants

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

SENDER, ECHO = "tgs", "tge"


def compile_source(name: str, cache_dir: str) -> str:
    path, _ = bpf_build.compile_object(
        str(REPO / "bpf" / "trafficgen" / name), cache_dir, [str(REPO / "bpf" / "include")]
    )
    return path


class Pair:
    """A 2-queue veth pair in namespace `ns`; the echo end may run the echo server or a plain PASS program."""

    def __init__(self, ns: str, cache_dir: str):
        self.ns = ns
        self.cache_dir = cache_dir
        self.echo_obj = None
        self.echo_link = None
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", SENDER, "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
           "peer", "name", ECHO, "numtxqueues", "2", "numrxqueues", "2")  # fmt: skip
        for end in (SENDER, ECHO):
            sh("ip", "-n", ns, "link", "set", end, "up")
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1")
        with netns(ns):
            self.sender_mac, self.echo_mac = port_facts(SENDER).mac, port_facts(ECHO).mac

    def start_echo(self, template: pt.Expanded, mode: str = "native") -> None:
        self.stop_echo()
        self.echo_obj = libbpf.BpfObject(compile_source("echo.c", self.cache_dir))
        for layout in tg_layouts.ECHO_LAYOUTS:
            layout.check_object(self.echo_obj)
        set_rodata(self.echo_obj, echo_constants(self.echo_mac, template.udp_dst_ports, template.dst_addresses))
        self.echo_obj.load()
        with netns(self.ns):
            self.echo_link = libbpf.xdp_link_create(
                self.echo_obj.program("xdp_echo").fd, socket.if_nametoindex(ECHO), mode
            )

    def pass_on_echo_end(self) -> None:
        """A PASS program on the echo end: XDP frames reach its stack, where a packet socket sees them."""
        self.stop_echo()
        prog = libbpf.prog_load(6, xdp_return_program(XDP_PASS), "tg_pass")  # BPF_PROG_TYPE_XDP
        with netns(self.ns):
            self.echo_link = libbpf.xdp_link_create(prog, socket.if_nametoindex(ECHO), "native")
        os.close(prog)

    def echoed(self) -> int:
        values = TypedMap(self.echo_obj.map("echo_counters"), tg_layouts.ECHO_LAYOUTS[0]).get(0)
        return sum(v.packets for v in values)

    def stop_echo(self) -> None:
        if self.echo_link is not None:
            os.close(self.echo_link)
            self.echo_link = None
        if self.echo_obj is not None:
            self.echo_obj.close()
            self.echo_obj = None

    def sender(self, template: pt.Expanded, cpus=(0,)) -> tg.Sender:
        with netns(self.ns):
            return tg.Sender(compile_source("sender.c", self.cache_dir), template, SENDER, list(cpus))

    def run(self, sender: tg.Sender, **kwargs) -> tg.RunResult:
        with netns(self.ns):  # the sending threads start here, so they inherit the namespace
            return sender.run(**kwargs)

    def capture(self, sender: tg.Sender, count: int) -> list[bytes]:
        sock = receiving_socket(Port(self.ns, ECHO), 16 << 20, force=True)  # the whole burst
        sock.settimeout(0.5)
        try:
            self.run(sender, count=count)
            frames = []
            while True:
                try:
                    frame, pkttype = receive(sock)  # as on the wire
                except TimeoutError:
                    return frames
                if pkttype != PACKET_OUTGOING:
                    frames.append(frame)
        finally:
            sock.close()

    def close(self) -> None:
        self.stop_echo()
        sh("ip", "netns", "del", self.ns)


@pytest.fixture(scope="module")
def pair(bpf_cache):
    p = Pair(f"xg-{os.getpid()}", bpf_cache)
    try:
        yield p
    finally:
        p.close()


def build(pair: Pair, name: str, **changes) -> pt.Expanded:
    doc = {**pt.EXAMPLES[name], **changes}
    return pt.build(doc, src_mac=pair.sender_mac, dst_mac=pair.echo_mac)


def checksums_valid(frame: bytes) -> bool:
    """scapy's verdict: the frame equals itself rebuilt with every IPv4 and UDP checksum recomputed."""
    packet = Ether(frame)
    rebuilt = packet.copy()
    for layer in (IP, UDP):
        n = 1
        while rebuilt.getlayer(layer, n) is not None:
            del rebuilt.getlayer(layer, n).chksum
            n += 1
    return bytes(rebuilt) == frame


def test_below_capacity_every_frame_is_echoed_and_returned(pair):
    template = build(pair, "udp4-64flows")
    pair.start_echo(template)
    with pair.sender(template, cpus=(0, 1)) as sender:
        run = pair.run(sender, seconds=1.0, rate_pps=20000)
    assert 10000 < run.sent < 25000, "about a second at 20000 frames/s"
    assert run.sent == pair.echoed() == run.received
    assert set(run.per_cpu) == {0, 1} and all(c["sent"] > 0 for c in run.per_cpu.values())
    assert run.samples and run.samples[0]["tx_pps"] > 0


def test_count_is_exact_and_rate_limit_holds(pair):
    template = build(pair, "udp4")
    pair.start_echo(template)
    with pair.sender(template) as sender:
        counted = pair.run(sender, count=12345)
        paced = pair.run(sender, seconds=2.0, rate_pps=50000)
    assert counted.sent == 12345 == counted.received
    rate = paced.sent / paced.seconds
    assert abs(rate - 50000) / 50000 < 0.05, f"paced at 50000/s, measured {rate:.0f}/s"
    assert paced.paced > 0, "pacing waits by dropping iterations that were not yet due"


def test_sweep_frames_on_the_wire_carry_the_declared_variation(pair):
    template = build(pair, "udp4-64flows")
    pair.pass_on_echo_end()
    with pair.sender(template) as sender:
        frames = pair.capture(sender, count=256)
    assert len(frames) == 256
    ports = [UDP in Ether(f) and Ether(f)[UDP].sport for f in frames]
    expected = {Ether(template.frame(k))[UDP].sport for k in range(len(template.entries))}
    assert len(expected) == 64 and set(ports) == expected
    assert all(checksums_valid(f) for f in frames)
    assert frames[:64] == [template.frame(k) for k in range(64)], "frames leave in entry order on one CPU"


def test_imix_vlan_and_vxlan_frames(pair):
    pair.pass_on_echo_end()
    imix = build(pair, "imix")
    with pair.sender(imix) as sender:
        frames = pair.capture(sender, count=240)
        lengths = sorted({len(f) for f in frames})
        assert lengths == sorted({len(b.frame) for b in imix.bases})
        # The weights hold on the wire: each length as often as its base's weight says.
        total = sum(b.weight for b in imix.bases)
        for base in imix.bases:
            assert sum(len(f) == len(base.frame) for f in frames) == 240 * base.weight // total
        assert all(checksums_valid(f) for f in frames)

        vxlan = build(pair, "vxlan-vni-sweep")
        sender.load_template(vxlan)  # the same loaded sender takes another template
        frames = pair.capture(sender, count=128)
    vnis = {Ether(f)[VXLAN].vni for f in frames}
    assert vnis == {Ether(vxlan.frame(k))[VXLAN].vni for k in range(len(vxlan.entries))} and len(vnis) == 64
    assert all(checksums_valid(f) for f in frames)

    tagged = build(pair, "udp4-vlan")
    with pair.sender(tagged) as sender:
        frames = pair.capture(sender, count=16)
    assert len(frames) == 16 and all(Ether(f)[Dot1Q].vlan == 100 for f in frames)
    assert frames == [tagged.frame(0)] * 16 and all(checksums_valid(f) for f in frames)


def test_a_checksum_in_the_last_two_bytes_of_a_frame_is_written(pair):
    """VXLAN with an inner IPv6/UDP header and no payload: the frame ends with the inner UDP checksum, which the
    sweep changes, and the frame is exactly as long as the rewritten header window (112 bytes)."""
    inner = [{"ethernet": {"src": "02:00:00:00:01:01", "dst": "02:00:00:00:01:02"}},
             {"ipv6": {"src": "2001:db8::1", "dst": "2001:db8::2"}}, {"udp": {"src": 1024, "dst": 9}}]  # fmt: skip
    outer = pt.EXAMPLES["vxlan-vni-sweep"]["packets"][0]["headers"][:4]
    doc = {"name": "edge", "frame_size": 116, "packets": [{"headers": outer + inner}],
           "variations": [{"field": "udp[1].src", "range": [1024, 1031]}]}  # fmt: skip
    template = pt.build(doc, src_mac=pair.sender_mac, dst_mac=pair.echo_mac)
    assert len(template.data_in()) == template.header_len == 112
    pair.pass_on_echo_end()
    with pair.sender(template) as sender:
        frames = pair.capture(sender, count=8)
    assert frames == [template.frame(k) for k in range(8)]
    assert all(checksums_valid(f) for f in frames) and len({f[-2:] for f in frames}) == 8


def test_the_veth_transmits_xdp_frames_only_while_its_peer_runs_xdp(pair):
    pair.stop_echo()
    sh("ip", "netns", "exec", pair.ns, "ethtool", "-K", ECHO, "gro", "off")
    template = build(pair, "udp4")
    with pair.sender(template):
        with netns(pair.ns):
            assert tg.can_transmit_xdp(SENDER) is False
        pair.start_echo(template)
        with netns(pair.ns):
            assert tg.can_transmit_xdp(SENDER) is True


def test_a_generic_program_on_the_veth_peer_does_not_let_it_transmit_xdp_frames(pair):
    """veth's ndo_xdp_xmit, like virtio_net's, takes frames only for a program attached natively (on the peer, for a
    veth; generic XDP runs on the skb, after the point where XDP frames are handed over): with the echo server
    attached in generic mode the sender's frames are all dropped, which the sender reports as the peer's problem."""
    sh("ip", "netns", "exec", pair.ns, "ethtool", "-K", ECHO, "gro", "off")
    template = build(pair, "udp4")
    pair.start_echo(template, mode="generic")
    with pair.sender(template) as sender:
        with netns(pair.ns):
            assert tg.can_transmit_xdp(SENDER) is False
        dropped = pair.run(sender, count=128)
    assert (dropped.received, pair.echoed()) == (0, 0)
    message = tg_sender.no_xmit_message(SENDER, {"driver": "veth", "peer": ECHO})
    assert "no XDP program attached natively (a generic one does not count)" in message
    assert "mode=echo, attach_mode: native" in message
    pair.start_echo(template)
    with pair.sender(template) as sender:
        with netns(pair.ns):
            assert tg.can_transmit_xdp(SENDER) is True
        sent = pair.run(sender, count=128)
    assert sent.received == pair.echoed() == 128
