"""The traffic generator's XDP programs fuzzed through BPF_PROG_TEST_RUN with seeded random and mutated frames
(fuzzlib has the run's size and seed), each checked against a model of the frames it may act on:

- the echo server (xdp_echo) answers, with MACs, addresses and ports swapped and nothing else changed, exactly the
  UDP frames addressed to its host (its MAC, an address in its range) with a destination port in its range, and
  counts each; every other frame passes unchanged and uncounted (a broadcast, a frame for another host or port, a
  fragment's payload, anything that does not parse);
- the return counter (xdp_count_return) drops and counts exactly the UDP frames from the echo port range;
- the sender (xdp_send) takes whatever the reused page holds (live frames recycle pages with the last user's
  bytes) and always sends the template's next frame, byte for byte.

No verifier or runtime error: every run succeeds with the verdicts the model allows.
"""

from __future__ import annotations

import ipaddress
import os
import struct

import fuzzlib as fz
import pytest
from conftest import LAB_PREFIX
from l2lib import netns
from vtep_netns import REPO, port_facts, sh

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import TypedMap, set_rodata
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import layouts as tg_layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.echo import echo_constants

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="XDP needs root")

HOST_MAC = "02:00:00:00:0e:01"
HOST_V4 = ("198.51.100.2", "198.51.100.9")  # the range the echo answers for
HOST_V6 = ("2001:db8::2", "2001:db8::2")
PORTS = (9, 12)
V4 = [fz.ip4(a) for a in ("198.51.100.2", "198.51.100.5", "198.51.100.9", "198.51.100.1", "198.51.100.10")]
V6 = [bytes.fromhex(f"20010db8{'0' * 22}{n:02x}") for n in (2, 1, 3)]


def compile_object(name: str, cache_dir: str) -> libbpf.BpfObject:
    path, _ = bpf_build.compile_object(
        str(REPO / "bpf" / "trafficgen" / name), cache_dir, [str(REPO / "bpf" / "include")]
    )
    return libbpf.BpfObject(path)


def udp_frame(rng) -> bytes:
    """A UDP frame towards the echo host or near it: its MAC or another, its address or a neighbour's, its ports or
    others, 0-3 tags, IPv4 (options, fragments, wrong lengths) or IPv6, or something else altogether."""
    dst = rng.choice((fz.mac(HOST_MAC), fz.mac(HOST_MAC), fz.mac(HOST_MAC), fz.BROADCAST, b"\x01\x00\x5e\x00\x00\x09",
                      fz.mac("02:00:00:00:0e:02"), fz.rand_bytes(rng, 6)))  # fmt: skip
    tags = fz.vlan_stack(rng, vids=(100, 0))
    payload = fz.rand_bytes(rng, rng.choice((0, 18, rng.randint(0, 64), rng.randint(0, 1400))))
    dport = rng.choice((*range(PORTS[0] - 1, PORTS[1] + 2), rng.getrandbits(16)))
    l4 = fz.udp(rng, rng.choice((*PORTS, 1024)), dport, len(payload)) + payload
    proto = fz.PROTO_UDP if rng.random() < 0.9 else rng.choice((fz.PROTO_TCP, fz.PROTO_ICMP))
    kind = rng.random()
    if kind < 0.6:
        ip = fz.ipv4(
            rng, rng.choice(V4), rng.choice(V4) if rng.random() < 0.9 else fz.rand_bytes(rng, 4), proto, len(l4)
        )
        frame = fz.ethernet(dst, fz.mac("02:00:00:00:0e:09"), fz.ETH_IP, tags) + ip + l4
    elif kind < 0.9:
        ip = fz.ipv6(rng, rng.choice(V6), rng.choice(V6), proto, len(l4))
        frame = fz.ethernet(dst, fz.mac("02:00:00:00:0e:09"), fz.ETH_IPV6, tags) + ip + l4
    else:
        frame = fz.ethernet(dst, fz.mac("02:00:00:00:0e:09"), rng.choice((fz.ETH_ARP, rng.getrandbits(16))), tags) + l4
    return fz.mutate(rng, frame)


def parse_udp(frame: bytes):
    """The model of a test frame: Ethernet, up to two tags, IPv4 without options and not a fragment, or IPv6,
    then a UDP header with a length of at least 8. (IP offset, version, UDP offset) or None."""
    at = 12
    for _ in range(2):
        if len(frame) >= at + 2 and int.from_bytes(frame[at : at + 2], "big") in (fz.ETH_8021Q, fz.ETH_8021AD):
            at += 4
    if len(frame) < at + 2:
        return None
    ethertype, ip = int.from_bytes(frame[at : at + 2], "big"), at + 2
    if ethertype == fz.ETH_IP:
        if len(frame) < ip + 20 or frame[ip] != 0x45 or frame[ip + 9] != fz.PROTO_UDP:
            return None
        if int.from_bytes(frame[ip + 6 : ip + 8], "big") & 0x3FFF:  # the generator sends no fragments
            return None
        udp, version = ip + 20, 4
    elif ethertype == fz.ETH_IPV6:
        if len(frame) < ip + 40 or frame[ip] >> 4 != 6 or frame[ip + 6] != fz.PROTO_UDP:
            return None
        udp, version = ip + 40, 6
    else:
        return None
    if len(frame) < udp + 8 or int.from_bytes(frame[udp + 4 : udp + 6], "big") < 8:
        return None
    return ip, version, udp


def echoed(frame: bytes) -> bytes | None:
    """The echo server's answer to `frame` by the model, or None when it must pass the frame."""
    parsed = parse_udp(frame)
    if parsed is None or frame[:6] != fz.mac(HOST_MAC):
        return None
    ip, version, udp = parsed
    if not PORTS[0] <= int.from_bytes(frame[udp + 2 : udp + 4], "big") <= PORTS[1]:
        return None
    src, dst, size = (ip + 12, ip + 16, 4) if version == 4 else (ip + 8, ip + 24, 16)
    low, high = (int(ipaddress.ip_address(a)) for a in (HOST_V4 if version == 4 else HOST_V6))
    if not low <= int.from_bytes(frame[dst : dst + size], "big") <= high:
        return None
    out = bytearray(frame)
    out[0:6], out[6:12] = frame[6:12], frame[0:6]
    out[src : src + size], out[dst : dst + size] = frame[dst : dst + size], frame[src : src + size]
    out[udp : udp + 2], out[udp + 2 : udp + 4] = frame[udp + 2 : udp + 4], frame[udp : udp + 2]
    return bytes(out)


def run(prog_fd: int, meta: int, frame: bytes) -> libbpf.TestRunResult:
    data = bytes(meta) + frame
    ctx = struct.pack("<6I", meta, len(data), 0, 0, 0, 0)
    return libbpf.prog_test_run(prog_fd, data, ctx=ctx, data_out_size=len(data) + 64)


def packets(counter: TypedMap) -> int:
    return sum(v.packets for v in counter.get(0))


@pytest.fixture(scope="module")
def echo(bpf_cache):
    obj = compile_object("echo.c", bpf_cache)
    with obj:
        for layout in tg_layouts.ECHO_LAYOUTS:
            layout.check_object(obj)
        set_rodata(obj, echo_constants(HOST_MAC, PORTS, (*HOST_V4, *HOST_V6)))
        obj.load()
        yield obj


def test_fuzz_echo(echo):
    fuzz = fz.Run("echo")
    prog_fd, counter = echo.program("xdp_echo").fd, TypedMap(echo.map("echo_counters"), tg_layouts.ECHO_LAYOUTS[0])
    with fz.one_cpu():  # BPF_PROG_TEST_RUN runs on the calling CPU: its counter is the one that moves
        count = packets(counter)
        for index in range(fz.FRAMES):
            rng = fz.frame_rng(fuzz.seed, index)
            frame, meta = udp_frame(rng), rng.choice((0, 0, 8, 32))
            where = f"{meta} bytes of metadata"
            answer = echoed(frame)
            result = run(prog_fd, meta, frame)
            out = result.data_out[meta:]
            if answer is None and (result.retval != fz.XDP_PASS or out != frame):
                fuzz.fail(index, where, frame, f"verdict {result.retval}: must pass it unchanged")
            if answer is not None and (result.retval != fz.XDP_TX or out != answer):
                fuzz.fail(index, where, frame, f"verdict {result.retval}, {out.hex()}: must echo {answer.hex()}")
            fuzz.note("TX" if answer is not None else "PASS")
            if index % 64 == 0 or answer is not None:  # the counter moves by the frames echoed
                moved = packets(counter) - count
                if moved != fuzz.notes.get("TX", 0):
                    fuzz.fail(index, where, frame, f"echo_counters moved by {moved}, {fuzz.notes.get('TX')} echoed")
    fuzz.frames = fz.FRAMES
    fuzz.report()


def udp_to_echo(dst_mac: str = HOST_MAC, dst_ip: str = "198.51.100.2", frag_off: int = 0x4000) -> bytes:
    """A 64-byte UDP frame to port 9 (the FCS left out), from 198.51.100.1."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 46, 0, frag_off, 64, 17, 0, fz.ip4("198.51.100.1"), fz.ip4(dst_ip))
    return (
        fz.ethernet(fz.mac(dst_mac), fz.mac("02:00:00:00:0e:09"), fz.ETH_IP)
        + ip
        + struct.pack("!HHHH", 1024, 9, 26, 0)
        + bytes(18)
    )


@pytest.mark.parametrize(
    ("what", "frame"),
    [
        ("broadcast", udp_to_echo(dst_mac="ff:ff:ff:ff:ff:ff")),
        ("another host's MAC", udp_to_echo(dst_mac="02:00:00:00:0e:02")),
        ("another host's address", udp_to_echo(dst_ip="198.51.100.10")),
        ("a later fragment: its payload, no UDP header", udp_to_echo(frag_off=0x0010)),
    ],
)
def test_the_echo_answers_only_its_own_hosts_udp(echo, what, frame):
    """Before, any frame whose bytes looked like UDP to an echoed port came back: a broadcast was answered from the
    broadcast address, and a fragment's payload had two of its words swapped as if they were ports."""
    assert run(echo.program("xdp_echo").fd, 0, frame).retval == fz.XDP_PASS, what
    assert run(echo.program("xdp_echo").fd, 0, udp_to_echo()).retval == fz.XDP_TX


@pytest.fixture(scope="module")
def sender(bpf_cache):
    """A loaded sender with the imix template (3 bases, 16 flows) on a veth in a namespace of its own."""
    ns = f"{LAB_PREFIX}fg-{os.getpid()}"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "-n", ns, "link", "add", "tgs", "type", "veth", "peer", "name", "tge")
        with netns(ns):
            template = pt.build(pt.EXAMPLES["imix"], src_mac=port_facts("tgs").mac, dst_mac=HOST_MAC)
            source = REPO / "bpf" / "trafficgen" / "sender.c"
            path, _ = bpf_build.compile_object(str(source), bpf_cache, [str(REPO / "bpf" / "include")])
            with tg.Sender(path, template, "tgs", [0]) as loaded:
                yield loaded
    finally:
        sh("ip", "netns", "del", ns)


def test_fuzz_sender(sender):
    """xdp_send on pages holding anything: random bytes, another frame, a frame the echo swapped."""
    fuzz = fz.Run("sender")
    length = len(sender.data_in)
    sender.maps["tg_cpu"].set(0, sender._controls(None, None))
    with fz.one_cpu() as cpu:
        for index in range(fz.FRAMES):
            fuzz_send(fuzz, index, sender, length)
        sent = sender.maps["tg_cpu"].get(0)[cpu].tx_packets
    assert sent == fz.FRAMES, f"tx_packets {sent}, {fz.FRAMES} frames sent"
    fuzz.frames = fz.FRAMES
    fuzz.report()


def fuzz_send(fuzz: fz.Run, index: int, sender: tg.Sender, length: int) -> None:
    """Frame `index` of the sender's run: the page it starts from, and the template's frame it must become. A live
    frame's page holds data_in, but its header window as the last user left it: random bytes, another entry's
    frame (mutated), or one the echo server swapped. Nobody writes past the window."""
    template, entries = sender.template, len(sender.template.entries)
    rng = fz.frame_rng(fuzz.seed, index)
    kind = rng.random()
    if kind < 0.4:
        window = fz.rand_bytes(rng, template.header_len)
    else:
        other = template.frame(rng.randrange(entries))
        window = fz.mutate(rng, other) if kind < 0.7 else echoed(other) or other
    window = window[: template.header_len].ljust(template.header_len, b"\0")
    page = window + sender.data_in[template.header_len :]
    result = libbpf.prog_test_run(sender.send_fd, page, data_out_size=length + 64)
    wanted = template.frame(index % entries)
    if result.retval != fz.XDP_TX or result.data_out != wanted:
        fuzz.fail(index, f"entry {index % entries}", page, f"verdict {result.retval}, sent {result.data_out.hex()}, "
                  f"the template's frame is {wanted.hex()}")  # fmt: skip
    fuzz.note(f"{len(wanted)} bytes")


def test_fuzz_return_counter(sender):
    """xdp_count_return drops and counts exactly the UDP frames from the echo port range."""
    fuzz = fz.Run("return counter")
    prog_fd = sender.obj.program("xdp_count_return").fd
    returned = sender.maps["tg_returned"]
    low, high = sender.template.udp_dst_ports
    with fz.one_cpu():
        count = sum(v.packets for v in returned.get(0))
        for index in range(fz.FRAMES):
            rng = fz.frame_rng(fuzz.seed, index)
            frame, meta = udp_frame(rng), rng.choice((0, 0, 8, 32))
            parsed = parse_udp(frame)
            ours = parsed is not None and low <= int.from_bytes(frame[parsed[2] : parsed[2] + 2], "big") <= high
            result = run(prog_fd, meta, frame)
            if result.retval != (fz.XDP_DROP if ours else fz.XDP_PASS) or result.data_out[meta:] != frame:
                fuzz.fail(index, f"{meta} bytes of metadata", frame, f"verdict {result.retval}, the model: "
                          f"{'a returned frame' if ours else 'not a returned frame'}")  # fmt: skip
            fuzz.note("DROP" if ours else "PASS")
            if index % 64 == 0 or ours:
                moved = sum(v.packets for v in returned.get(0)) - count
                if moved != fuzz.notes.get("DROP", 0):
                    fuzz.fail(index, "counter", frame, f"tg_returned moved by {moved}, {fuzz.notes['DROP']} returned")
    fuzz.frames = fz.FRAMES
    fuzz.report()
