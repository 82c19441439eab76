"""The XDP router (bpf/router) fuzzed against the kernel's own forwarding, in the namespaces e1 -- r -- e2
(router_netns.py; fuzzlib has the run's size and seed).

The oracle is the kernel of r, with the router detached:
- the kernel's answers: for every (ingress port, destination) of the fuzz, one clean UDP frame is really forwarded
  through r without XDP and caught on the far side with a packet socket: whether the kernel forwards it, out of which
  port, with which MACs, and the whole egress frame, which must be the model's transformation of the frame sent
  (MACs, TTL or hop limit down by one, IPv4 checksum, bytes past the IP length trimmed, the rest unchanged);
- every fuzzed frame runs once through the router with BPF_PROG_TEST_RUN (not live), on the ingress port of r's
  namespace: it must hand the frame to the kernel unchanged (XDP_PASS), or forward it (XDP_REDIRECT) as the kernel
  would: only a frame the kernel forwards (its destination forwarded in the answers, and a frame the kernel's
  input path keeps: untagged, a valid IP header, checksum and lengths, TTL above 1, no IPv4 options or hop-by-hop
  header, no martian, loopback, link-local or multicast address, no IPv4 source that is one of r's own addresses, to
  the port's MAC or any unicast MAC), and exactly
  as the kernel's answer for its destination transforms it. Never DROP, TX or ABORTED;
- every LIVE_EVERY-th frame (at most LIVE_MAX) is then sent for real from the endpoint on its ingress side, once
  with the router detached and once attached, and what leaves r on either far side is compared byte for byte.

Unicast destination MACs other than the port's are left to the NIC (router.c): the kernel drops them as
PACKET_OTHERHOST, a port outside promiscuous mode never receives them. The live sample sends to the port's MAC.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import struct
import time

import fuzzlib as fz
import pytest
from conftest import LAB_PREFIX
from l2lib import netns
from router_netns import E1_V4, E1_V6, E2_V4, E2_V6, INCLUDE_DIRS, SOURCE, RouterNetns

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import layouts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

LIVE_EVERY = 200
LIVE_MAX = 1000
LIVE_WAIT = 0.03  # s a live frame has to come out of r (veth to veth: well under a millisecond)
ENDPOINT = {"p1": "e1", "p2": "e2"}
# Routes of r besides its two connected /30 and /64: behind e2, unreachable (and np, a veth that is no port).
ROUTES = (
    ("198.51.100.80/28", "via", E2_V4),
    ("2001:db8:64:80::/64", "via", E2_V6),
    ("unreachable", "198.51.100.96/28"),
    ("unreachable", "2001:db8:64:99::/64"),
)
DESTINATIONS_V4 = [E1_V4, E2_V4, "198.51.100.81", "198.51.100.94", "198.51.100.97", "198.51.100.113", "198.51.100.114",
                   "198.51.100.65", "198.51.100.69", "198.51.100.67", "198.51.100.200",
                   "127.0.0.1", "224.0.0.1", "239.1.1.1", "255.255.255.255", "169.254.1.1", "0.0.0.5"]  # fmt: skip
DESTINATIONS_V6 = [E1_V6, E2_V6, "2001:db8:64:80::5", "2001:db8:64:99::1", "2001:db8:64:1::1", "2001:db8:64:2::1",
                   "2001:db8:ff::1", "fe80::1", "ff02::1", "ff0e::1", "::1", "::"]  # fmt: skip
# r's own addresses (its ports' and np's): the kernel refuses them as an IPv4 source (fib_validate_source) and
# forwards an IPv6 frame from them.
ROUTER_V4 = ("198.51.100.65", "198.51.100.69", "198.51.100.113")
ROUTER_V6 = ("2001:db8:64:1::1", "2001:db8:64:2::1")
SOURCES_V4 = [E1_V4, E2_V4, "198.51.100.82", "198.51.100.30", "127.0.0.2", "169.254.7.7", "0.0.0.0", "224.0.0.5",
              "255.255.255.255", *ROUTER_V4]  # fmt: skip
SOURCES_V6 = [E1_V6, E2_V6, "2001:db8:64:80::9", "2001:db8:77::1", "fe80::5", "::", "::1", "ff02::2", *ROUTER_V6]
SPECIAL_V4 = [ipaddress.ip_network(n) for n in ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4")]
SPECIAL_V6 = [ipaddress.ip_network(n) for n in ("::/128", "::1/128", "fe80::/10", "ff00::/8")]
PROTO_HOP, EXT_HEADERS = 0, (43, 44, 60)


def special(addr: bytes) -> bool:
    ip = ipaddress.ip_address(addr)
    if ip.version == 4:
        return ip == ipaddress.ip_address("255.255.255.255") or any(ip in n for n in SPECIAL_V4)
    return any(ip in n for n in SPECIAL_V6)


def ipv4_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


# --- frames ---------------------------------------------------------------------------------------------------


def build(rng, macs: dict) -> tuple[str, bytes]:
    """(ingress port, frame): IPv4 or IPv6 from a source and to a destination of the lists above, TTL 0-255,
    sometimes tagged, with options, extension headers, fragments, wrong lengths or checksums, then maybe mutated."""
    port = "p1" if rng.random() < 0.75 else "p2"
    payload = fz.rand_bytes(rng, rng.choice((0, 8, rng.randint(0, 120), rng.randint(0, 1400))))
    proto = rng.choice((fz.PROTO_UDP, fz.PROTO_UDP, fz.PROTO_TCP, fz.PROTO_ICMP, rng.getrandbits(8)))
    ttl = rng.choice((0, 1, 2, 64, 64, 64, 64, 64, 255))
    # Mostly the endpoints' sources and destinations that are routed (the lists' heads), else any of them.
    sources, destinations = (4, 4) if rng.random() < 0.7 else (None, None)
    if rng.random() < 0.65:
        src = fz.ip4(rng.choice(SOURCES_V4[:sources]))
        dst = fz.ip4(rng.choice(DESTINATIONS_V4[:destinations]))
        ethertype, ip = fz.ETH_IP, bytearray(fz.ipv4(rng, src, dst, proto, len(payload)))
        ip[8] = ttl
        if rng.random() < 0.9:  # mostly a right checksum: the kernel drops the others
            ip[10:12] = b"\0\0"
            ip[10:12] = struct.pack("!H", ipv4_checksum(bytes(ip)))
    else:
        src = ipaddress.ip_address(rng.choice(SOURCES_V6[:sources])).packed
        dst = ipaddress.ip_address(rng.choice(DESTINATIONS_V6[:destinations])).packed
        ext = b""
        next_header = proto
        if rng.random() < 0.2:  # one extension header: hop-by-hop, routing, fragment, destination options
            ext_type = rng.choice((PROTO_HOP, *EXT_HEADERS))
            ext, next_header = bytes([proto, 0]) + fz.rand_bytes(rng, 6), ext_type
        ethertype, ip = fz.ETH_IPV6, bytearray(fz.ipv6(rng, src, dst, next_header, len(ext) + len(payload)) + ext)
        ip[7] = ttl
    tags = fz.vlan_stack(rng) if rng.random() < 0.1 else []
    dmac = macs[("r", port)] if rng.random() < 0.9 else rng.choice((fz.BROADCAST, b"\x33\x33\0\0\0\1",
                                                                    fz.rand_bytes(rng, 6)))  # fmt: skip
    smac = macs[(ENDPOINT[port], "eth0")] if rng.random() < 0.9 else fz.rand_bytes(rng, 6)
    frame = fz.ethernet(dmac, smac, ethertype, tags) + bytes(ip) + payload
    if rng.random() < 0.05:
        frame += bytes(rng.randint(1, 30))  # Ethernet padding, or bytes past the IP length
    return port, fz.mutate(rng, frame) if rng.random() < 0.25 else frame


# --- the model --------------------------------------------------------------------------------------------------


def kernel_keeps(frame: bytes) -> str | None:
    """Why the kernel's input path would not forward this frame, or None: what ip_rcv_core / ip6_rcv_core, the
    route input (martians) and ip_forward / ip6_forward check before the destination's route counts."""
    if len(frame) < 14 or frame[0] & 1:
        return "no Ethernet header, or a group MAC"
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == fz.ETH_IP:
        ip = frame[14:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[0] & 15 < 5:
            return "no IPv4 header"
        if ip[0] & 15 != 5:
            return "IPv4 options"
        total = int.from_bytes(ip[2:4], "big")
        if ipv4_checksum(ip[:20]) != 0 or total < 20 or total > len(ip):
            return "IPv4 checksum or length"
        if special(ip[12:16]) or special(ip[16:20]):
            return "special address"
        if ipaddress.ip_address(ip[12:16]).compressed in ROUTER_V4:
            return "a source of r's own"
        return "TTL" if ip[8] <= 1 else None
    if ethertype == fz.ETH_IPV6:
        ip = frame[14:]
        if len(ip) < 40 or ip[0] >> 4 != 6:
            return "no IPv6 header"
        if 40 + int.from_bytes(ip[4:6], "big") > len(ip):
            return "IPv6 payload length"
        if special(ip[8:24]) or special(ip[24:40]):
            return "special address"
        if ip[6] == PROTO_HOP:
            return "hop-by-hop"
        return "hop limit" if ip[7] <= 1 else None
    return "not untagged IP"


def destination(frame: bytes) -> str:
    if int.from_bytes(frame[12:14], "big") == fz.ETH_IP:
        return str(ipaddress.ip_address(frame[30:34]))
    return str(ipaddress.ip_address(frame[38:54]))


def forwarded(frame: bytes, answer: dict) -> bytes:
    """The frame as the kernel forwards it: its answer's MACs, bytes past the IP length gone, TTL or hop limit down
    by one, the IPv4 checksum again."""
    ip = bytearray(frame[14:])
    if int.from_bytes(frame[12:14], "big") == fz.ETH_IP:
        del ip[int.from_bytes(ip[2:4], "big") :]
        ip[8] -= 1
        ip[10:12] = b"\0\0"
        ip[10:12] = struct.pack("!H", ipv4_checksum(bytes(ip[:20])))
    else:
        del ip[40 + int.from_bytes(ip[4:6], "big") :]
        ip[7] -= 1
    return answer["dmac"] + answer["smac"] + frame[12:14] + bytes(ip)


# --- the lab ----------------------------------------------------------------------------------------------------


class Lab:
    """The namespaces, the endpoints silenced (their replies would be forwarded back and counted as egress frames),
    packet sockets on both endpoints, and the kernel's answers."""

    def __init__(self, netns_lab: RouterNetns):
        self.ns = netns_lab
        self.macs = {(node, ifname): netns_lab.mac(node, ifname)
                     for node, ifname in (("r", "p1"), ("r", "p2"), ("e1", "eth0"), ("e2", "eth0"))}  # fmt: skip
        self.sockets = {port: netns_lab.packet_socket(ENDPOINT[port], "eth0") for port in ENDPOINT}
        self.answers: dict[tuple[str, str], dict] = {}

    def send(self, port: str, frame: bytes) -> dict[str, list[bytes]]:
        """Send from the endpoint on `port`'s side; the frames that come out of r on each side within LIVE_WAIT,
        those r sends itself left out (ARP, ND, ICMP errors: from one of r's addresses)."""
        for sock in self.sockets.values():
            RouterNetns.received(sock, b"", 0)
        self.sockets[port].send(frame)
        out = {}
        for egress, sock in self.sockets.items():
            got = RouterNetns.received(sock, b"", LIVE_WAIT)
            out[egress] = [f for f in got if f[6:12] == self.macs[("r", egress)] and not self.from_router(f)]
        return out

    @staticmethod
    def from_router(frame: bytes) -> bool:
        """Whether r sent the frame itself. Its ICMP errors differ between two runs (IP ID, rate limits). A fuzzed
        frame from r's addresses is left out too: the kernel drops one over IPv4, and over IPv6 forwards it both
        times alike (with the router detached and attached), so what the live sample misses there the model checks."""
        ethertype = int.from_bytes(frame[12:14], "big")
        if ethertype == fz.ETH_IP:
            return ipaddress.ip_address(frame[26:30]).compressed in ROUTER_V4
        if ethertype == fz.ETH_IPV6:
            src = ipaddress.ip_address(frame[22:38])
            return src.is_link_local or src.compressed in ROUTER_V6
        return True  # ARP

    def answer(self, port: str, dst: str) -> dict:
        """The kernel's answer, learnt when first asked (a mutation may have made any destination)."""
        if (port, dst) not in self.answers:
            self.answers[(port, dst)] = self.learn(port, dst)
        return self.answers[(port, dst)]

    def learn(self, port: str, dst: str) -> dict:
        """The kernel's answer for a destination from a port: a clean UDP frame forwarded without XDP."""
        v6 = ":" in dst
        src = {"p1": (E1_V4, E1_V6), "p2": (E2_V4, E2_V6)}[port][v6]
        payload = struct.pack("!HHHH", 9, 9, 24, 0) + b"xr-router-oracle"
        if v6:
            ip = struct.pack("!IHBB16s16s", 0x60000000, len(payload), fz.PROTO_UDP, 64,
                             ipaddress.ip_address(src).packed, ipaddress.ip_address(dst).packed)  # fmt: skip
        else:
            head = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, 0x4000, 64, fz.PROTO_UDP,
                                         0, fz.ip4(src), fz.ip4(dst)))  # fmt: skip
            head[10:12] = struct.pack("!H", ipv4_checksum(bytes(head)))
            ip = bytes(head)
        frame = fz.ethernet(self.macs[("r", port)], self.macs[(ENDPOINT[port], "eth0")],
                            fz.ETH_IPV6 if v6 else fz.ETH_IP) + ip + payload + bytes(6)  # fmt: skip
        out = self.send(port, frame)
        egress = [(e, f) for e, frames in out.items() for f in frames]
        if not egress:
            return {"forwarded": False}
        assert len(egress) == 1, f"{port} -> {dst}: the kernel sent {len(egress)} frames"
        egress_port, sent = egress[0]
        answer = {"forwarded": True, "egress": egress_port, "dmac": sent[:6], "smac": sent[6:12]}
        assert sent == forwarded(frame, answer), f"{port} -> {dst}: the kernel's frame is not the model's"
        return answer


@pytest.fixture(scope="module")
def lab():
    netns_lab = RouterNetns.create(f"{LAB_PREFIX}fr")
    try:
        for route in ROUTES:
            netns_lab.exec("r", "ip", "route", "add", *route)
        netns_lab.exec("r", "ip", "link", "add", "np", "type", "veth", "peer", "name", "npeer")
        netns_lab.exec("r", "ip", "addr", "add", "198.51.100.113/30", "dev", "np")
        netns_lab.exec("r", "ip", "link", "set", "np", "up")
        netns_lab.exec("r", "ip", "neigh", "add", "198.51.100.114", "lladdr", "02:00:00:00:00:72", "dev", "np")
        for node, peer in (("e1", E2_V4), ("e1", E2_V6), ("e2", E1_V4), ("e2", E1_V6)):
            assert netns_lab.exec(node, "ping", "-c", "1", "-W", "1", peer, check=False).returncode == 0
        for node in ("e1", "e2"):  # silent endpoints: no replies or errors of theirs to be forwarded back
            netns_lab.exec(node, "nft", "add table inet xrquiet; add chain inet xrquiet out { type filter hook output "
                           "priority 0; policy drop; }; add rule inet xrquiet out icmpv6 type { nd-neighbor-solicit, "
                           "nd-neighbor-advert } accept")  # fmt: skip
        yield Lab(netns_lab)
    finally:
        netns_lab.close()


def test_fuzz_router(lab, tmp_path):
    fuzz = fz.Run("router")
    for port in ENDPOINT:
        for dst in DESTINATIONS_V4 + DESTINATIONS_V6:
            lab.answer(port, dst)
    assert lab.answers[("p1", E2_V4)]["forwarded"] and lab.answers[("p2", "2001:db8:64:80::5")]["egress"] == "p2"

    path, _ = bpf_build.compile_object(SOURCE, str(tmp_path), INCLUDE_DIRS)
    live: list[tuple[int, str, bytes]] = []
    with netns(lab.ns.ns["r"]), libbpf.BpfObject(path) as obj:
        obj.load()
        ports = TypedMap(obj.map(layouts.PORTS), layouts.LAYOUTS[layouts.PORTS])
        ifindex = {port: socket.if_nametoindex(port) for port in ENDPOINT}
        for index in ifindex.values():
            ports.set(index, ctypes.c_uint32(index))
        prog_fd = obj.program(layouts.PROGRAM).fd
        for index in range(fz.FRAMES):
            rng = fz.frame_rng(fuzz.seed, index)
            port, data = build(rng, lab.macs)
            ctx = struct.pack("<6I", 0, len(data), 0, ifindex[port], 0, 0)
            result = libbpf.prog_test_run(prog_fd, data, ctx=ctx)
            check(fuzz, lab, index, port, data, result)
            sendable = data[:6] == lab.macs[("r", port)] and len(data) <= 1514
            if index % LIVE_EVERY == 0 and len(live) < LIVE_MAX and sendable:
                live.append((index, port, data))
    fuzz.frames = fz.FRAMES
    fuzz.notes["kernel answers"] = len(lab.answers)
    compare_live(fuzz, lab, live)
    fuzz.report()


def check(fuzz: fz.Run, lab: Lab, index: int, port: str, data: bytes, result) -> None:
    where = f"from {port}"
    if result.retval == fz.XDP_PASS:
        if result.data_out != data:
            fuzz.fail(index, where, data, "passed to the kernel changed")
        fuzz.note("passed")
        return
    if result.retval != fz.XDP_REDIRECT:
        fuzz.fail(index, where, data, f"verdict {fz.VERDICTS[result.retval]}")
    why = kernel_keeps(data)
    if why:
        fuzz.fail(index, where, data, f"forwarded in XDP, the kernel does not forward it ({why})")
    answer = lab.answer(port, destination(data))
    if not answer["forwarded"]:
        fuzz.fail(index, where, data, f"forwarded in XDP, the kernel forwards nothing to {destination(data)}")
    expected = forwarded(data, answer)
    if result.data_out != expected:
        fuzz.fail(index, where, data, f"forwarded as {result.data_out.hex()}, the kernel sends {expected.hex()}")
    fuzz.note("forwarded v4" if int.from_bytes(data[12:14], "big") == fz.ETH_IP else "forwarded v6")


def compare_live(fuzz: fz.Run, lab: Lab, live: list) -> None:
    """The sample sent for real, without and with the router: the same frames leave r on the same sides."""
    kernel = {index: lab.send(port, data) for index, port, data in live}
    lab.ns.deploy()
    try:
        time.sleep(0.1)
        for index, port, data in live:
            xdp = lab.send(port, data)
            if xdp != kernel[index]:
                fuzz.fail(index, f"live from {port}", data, f"with XDP {xdp}, without {kernel[index]}")
            fuzz.note("live, kernel forwarded" if any(kernel[index].values()) else "live, kernel sent nothing")
    finally:
        lab.ns.remove()
