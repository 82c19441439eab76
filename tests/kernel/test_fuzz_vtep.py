"""The VTEP data plane fuzzed through BPF_PROG_TEST_RUN: seeded random and mutated frames on every kind of port,
each checked against an independent model of what the VTEP may do with it (fuzzlib has the run's size and seed).

Every frame runs once through vtep_ingress (not live): its verdict, the frame it leaves and the drop counters. Every
LIVE_EVERY-th frame then runs again with BPF_F_TEST_XDP_LIVE_FRAMES: its copies really go through the devmap
broadcast and vtep_egress to the veths, where the taps collect each copy and check it.

Invariants, on every frame:
- no verifier or runtime error: the run succeeds, the verdict is DROP, PASS or REDIRECT;
- every drop counted under a reason: the ports' drop counters move by exactly the frames (and copies) dropped;
- a frame the VTEP may not forward (malformed, untagged on a trunk, an unbound VID, VXLAN for a VNI not admitted on
  the port or from a source that is not a peer of the VNI, to another host's MAC, or whose outer IP or UDP length is
  not the frame's) is never redirected, and a local port's frame is never
  handed to the host;
- what is redirected carries the frame's own VNI (Outer, stamp or tag) and its Inner unchanged;
- a copy leaves only through a member of the frame's VNI, never through the port the frame came in on, never into a
  tunnel when the frame came out of one (split horizon), and a tunnel copy goes to a peer of the frame's VNI behind
  that port, each peer at most once;
- every copy that leaves is counted (tx), and a flooded frame's copies are all accounted for (sent or dropped and
  counted): none vanishes uncounted in the kernel.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass

import fuzzlib as fz
import pytest
from conftest import LAB_PREFIX
from l2lib import PACKET_OUTGOING, netns, receive
from vtep_netns import VtepNetns, peer_mac, peers

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    AccessPort,
    FdbEntry,
    TrunkBinding,
    TunnelPort,
    Vni,
    VtepConfig,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import INGRESS_PROGRAMS, TrafficStats

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

LIVE_EVERY = 4
PORTS = {"a1": 1500, "a2": 1500, "a3": 1500, "a4": 1500, "tr": 1500, "ul": 1600, "ul2": 1600}
LOCAL_IPS = {"ul": "198.51.100.1", "ul2": "198.51.100.2"}
STATIONS = [fz.mac(f"02:00:00:00:5a:{n:02x}") for n in range(1, 9)]


# Every kind of port and VNI: access ports, a trunk with preserved and translated VIDs, two tunnel ports, a peer that
# serves two VNIs (198.51.100.10), static entries local and remote.
CONFIG = VtepConfig(
    tunnel_ports=(TunnelPort("ul", LOCAL_IPS["ul"]), TunnelPort("ul2", LOCAL_IPS["ul2"])),
    vnis=(
        Vni(100, (AccessPort("a1"), AccessPort("a2")), (),
            peers(("198.51.100.10", "198.51.100.11", "198.51.100.12", "198.51.100.13"))
            + peers(("198.51.100.60",), "ul2"),
            fdb=(FdbEntry(fz.mac("02:00:00:00:5a:07").hex(":"), "a2", None),
                 FdbEntry(fz.mac("02:00:00:00:5a:08").hex(":"), None, "198.51.100.12"))),
        Vni(200, (AccessPort("a3"),), (), peers(("198.51.100.40", "198.51.100.41"))),
        Vni(110, (), (TrunkBinding("tr", 10),), peers(("198.51.100.10",)), vlan_mode="preserve"),
        Vni(210, (), (TrunkBinding("tr", 20),), (), vlan_mode="preserve"),
        Vni(120, (AccessPort("a4"),), (TrunkBinding("tr", 30),), peers(("198.51.100.42",), "ul2")),
    ),
)  # fmt: skip
VNIS = {v.vni: v for v in CONFIG.vnis}
TRUNK_VIDS = {b.vid: v.vni for v in CONFIG.vnis for b in v.trunks}
ADMITTED = {(v.vni, fz.ip4(p.ip)) for v in CONFIG.vnis for p in v.peers}
PEER_IPS = sorted({fz.ip4(p.ip) for v in CONFIG.vnis for p in v.peers})


@dataclass
class Expect:
    """What the model allows for a frame: verdicts, and for a frame of a VNI its Inner as it travels."""

    verdicts: frozenset
    vni: int | None = None
    inner: bytes = b""
    from_tunnel: bool = False
    why: str = ""


HOST = lambda why: Expect(frozenset({fz.XDP_PASS}), why=why)  # noqa: E731
DROP = lambda why: Expect(frozenset({fz.XDP_DROP}), why=why)  # noqa: E731


def expect(port: str, frame: bytes, ports) -> Expect:
    """The model: what the VTEP may do with `frame` arriving on `port`, from the configuration (and the tunnel
    ports' MACs) alone."""
    if port in LOCAL_IPS:
        return expect_tunnel(port, frame, fz.mac(ports[port].mac))
    if len(frame) < 14:
        return DROP("short Ethernet")
    vni_of_port = {a.port: v.vni for v in CONFIG.vnis for a in v.access_ports}
    if port in vni_of_port:
        return Expect(frozenset({fz.XDP_REDIRECT, fz.XDP_DROP}), vni_of_port[port], frame)
    ethertype = int.from_bytes(frame[12:14], "big")
    if ethertype == fz.ETH_8021AD:
        return DROP("802.1ad on a trunk")
    if ethertype != fz.ETH_8021Q:
        return DROP("untagged on a trunk")
    if len(frame) < 18:
        return DROP("short tag")
    if int.from_bytes(frame[16:18], "big") in (fz.ETH_8021Q, fz.ETH_8021AD):
        return DROP("second tag on a trunk")
    vid = int.from_bytes(frame[14:16], "big") & 0xFFF
    if vid not in TRUNK_VIDS:
        return DROP(f"VID {vid} not bound")
    vni = TRUNK_VIDS[vid]
    inner = frame if VNIS[vni].vlan_mode == "preserve" else frame[:12] + frame[16:]
    return Expect(frozenset({fz.XDP_REDIRECT, fz.XDP_DROP}), vni, inner)


def expect_tunnel(port: str, frame: bytes, port_mac: bytes) -> Expect:
    at = 12
    for _ in range(2):  # the underlay may be tagged: two tags are looked through
        if len(frame) < at + 2:
            return HOST("short Ethernet")
        if int.from_bytes(frame[at : at + 2], "big") not in (fz.ETH_8021Q, fz.ETH_8021AD):
            break
        at += 4
    if len(frame) < at + 2 or int.from_bytes(frame[at : at + 2], "big") != fz.ETH_IP:
        return HOST("not IPv4")
    ip = at + 2
    if len(frame) < ip + 20 or frame[ip] >> 4 != 4 or frame[ip] & 15 < 5 or len(frame) < ip + 4 * (frame[ip] & 15):
        return HOST("no IPv4 header")
    if frame[ip + 9] != fz.PROTO_UDP or frame[ip + 16 : ip + 20] != fz.ip4(LOCAL_IPS[port]):
        return HOST("not UDP to the tunnel address")
    fragment = int.from_bytes(frame[ip + 6 : ip + 8], "big")
    if fragment & 0x1FFF:
        return HOST("a later fragment")
    udp = ip + 4 * (frame[ip] & 15)
    if len(frame) < udp + 8 or int.from_bytes(frame[udp + 4 : udp + 6], "big") < 8:
        return HOST("no UDP header")
    if int.from_bytes(frame[udp + 2 : udp + 4], "big") != 4789:
        return HOST("not the VXLAN port")
    if not frame[0] & 1 and frame[:6] != port_mac:
        return DROP("another host's MAC")
    if fragment & 0x2000:
        return DROP("the first fragment of VXLAN")
    vx = udp + 8
    if len(frame) < vx + 8 or not frame[vx] & 0x08:
        return DROP("no VXLAN header, or no I flag")
    ip_length, udp_length = (int.from_bytes(frame[at + 2 : at + 4], "big") for at in (ip, udp + 2))
    if ip_length != len(frame) - ip or udp_length != len(frame) - udp:
        return DROP("outer lengths are not the frame's")
    vni = int.from_bytes(frame[vx + 4 : vx + 7], "big")
    if vni not in VNIS or port not in {p.via for p in VNIS[vni].peers}:
        return DROP(f"VNI {vni} not admitted on {port}")
    if (vni, frame[ip + 12 : ip + 16]) not in ADMITTED:
        return DROP(f"not a peer of VNI {vni}")
    if len(frame) < vx + 8 + 14:
        return DROP("short Inner")
    return Expect(frozenset({fz.XDP_REDIRECT, fz.XDP_DROP}), vni, frame[vx + 8 :], from_tunnel=True)


# --- frames ---------------------------------------------------------------------------------------------------


def local_frame(rng, length_limit: int) -> bytes:
    """An Ethernet frame as a station sends it: known or unknown MACs, 0-3 tags, IPv4/IPv6/ARP/anything."""
    dst = rng.choice((fz.BROADCAST, b"\x01\x00\x5e\x00\x00\x01", b"\x33\x33\x00\x00\x00\x01", fz.rand_bytes(rng, 6),
                      *STATIONS, *STATIONS))  # fmt: skip
    src = rng.choice(STATIONS) if rng.random() < 0.85 else rng.choice((fz.rand_bytes(rng, 6), fz.BROADCAST))
    tags = fz.vlan_stack(rng, vids=(0, 4095, *TRUNK_VIDS, 40))
    payload = fz.rand_bytes(rng, rng.choice((0, 6, 18, 46, rng.randint(0, 200), rng.randint(0, length_limit))))
    kind = rng.random()
    if kind < 0.5:
        l4 = fz.udp(rng, rng.getrandbits(16), rng.choice((53, 4789, rng.getrandbits(16))), len(payload)) + payload
        body = fz.ipv4(rng, fz.rand_bytes(rng, 4), fz.rand_bytes(rng, 4), rng.choice((17, 17, 6, 1)), len(l4))
        frame = fz.ethernet(dst, src, fz.ETH_IP, tags) + body + l4
    elif kind < 0.65:
        l4 = fz.udp(rng, 1024, 9, len(payload)) + payload
        frame = fz.ethernet(dst, src, fz.ETH_IPV6, tags) + fz.ipv6(rng, b"\x20\x01\x0d\xb8", b"\x20\x01\x0d\xb8\x01",
                                                                    17, len(l4)) + l4  # fmt: skip
    elif kind < 0.8:
        frame = fz.ethernet(dst, src, fz.ETH_ARP, tags) + fz.rand_bytes(rng, 28)
    else:
        frame = fz.ethernet(dst, src, rng.getrandbits(16), tags) + payload
    return frame[: length_limit + 18]


def tunnel_frame(rng, port: str, ports) -> bytes:
    """VXLAN to one of the tunnel addresses (or not), from a peer of some VNI (or not), over IPv4 (or IPv6)."""
    inner = local_frame(rng, 1600 - 50)
    vni = rng.choice((*VNIS, *VNIS, 300, rng.getrandbits(24)))
    if rng.random() < 0.7:
        src = rng.choice([fz.ip4(p.ip) for p in VNIS[vni].peers] or PEER_IPS) if vni in VNIS else rng.choice(PEER_IPS)
    else:
        src = rng.choice((*PEER_IPS, fz.ip4("198.51.100.99"), fz.rand_bytes(rng, 4)))
    dst = fz.ip4(LOCAL_IPS[port]) if rng.random() < 0.8 else rng.choice((*map(fz.ip4, LOCAL_IPS.values()),
                                                                          fz.rand_bytes(rng, 4)))  # fmt: skip
    dport = 4789 if rng.random() < 0.85 else rng.choice((8472, 4790, 4788, rng.getrandbits(16)))
    payload = fz.vxlan(rng, vni) + inner
    l4 = fz.udp(rng, 49152 | rng.getrandbits(14), dport, len(payload)) + payload
    tags = fz.vlan_stack(rng) if rng.random() < 0.15 else []
    eth_dst = fz.mac(ports[port].mac) if rng.random() < 0.8 else rng.choice((fz.BROADCAST, fz.rand_bytes(rng, 6)))
    eth_src = fz.mac(peer_mac(".".join(map(str, src))))
    if rng.random() < 0.1:
        return fz.ethernet(eth_dst, eth_src, fz.ETH_IPV6, tags) + fz.ipv6(rng, src, dst, fz.PROTO_UDP, len(l4)) + l4
    return fz.ethernet(eth_dst, eth_src, fz.ETH_IP, tags) + fz.ipv4(rng, src, dst, fz.PROTO_UDP, len(l4)) + l4


INGRESS_PORTS = ("a1", "a2", "a3", "a4", "tr", "tr", "ul", "ul", "ul", "ul2")


def fuzz_frame(seed: int, index: int, ports) -> tuple[str, int, bytes]:
    """Frame `index` of the run: (ingress port, metadata length, frame)."""
    rng = fz.frame_rng(seed, index)
    port = rng.choice(INGRESS_PORTS)
    frame = tunnel_frame(rng, port, ports) if port in LOCAL_IPS else local_frame(rng, PORTS[port])
    if port == "tr" and rng.random() < 0.5:  # mostly a bound VID in the outer tag
        frame = frame[:12] + struct.pack("!HH", fz.ETH_8021Q, rng.choice(list(TRUNK_VIDS))) + frame[12:]
    meta = rng.choice((0, 0, 4, 8, 16, 32))
    return port, meta, fz.mutate(rng, frame)


def truncation_frames(seed: int, ports):
    """A well-formed frame of each ingress port cut at every offset (the frames' headers as deep as they go)."""
    rng = fz.frame_rng(seed, 1 << 31)
    for port in dict.fromkeys(INGRESS_PORTS):
        while True:
            frame = tunnel_frame(rng, port, ports) if port in LOCAL_IPS else local_frame(rng, 200)
            if port == "tr":
                frame = frame[:12] + struct.pack("!HH", fz.ETH_8021Q, 30) + frame[12:]
            if expect(port, frame, ports).vni is not None and len(frame) > 60:
                break
        for cut in fz.truncations(frame):
            yield port, 0, cut


# --- the data plane -------------------------------------------------------------------------------------------


STATS_SIZE = ctypes.sizeof(TrafficStats)


class Counters:
    """The ports' counters, summed over CPUs and ports: (drops, tx packets), and rx per port slot."""

    def __init__(self, lab: VtepNetns):
        self.map = lab.maps["port_stats"]
        self.keys = [slot.to_bytes(4, "little") for slot in sorted(lab.current.port_slots().values())]
        self.slot_of = {name: lab.current.port_slots()[p.ifindex] for name, p in lab.ports.items()}
        self.stride = self.map.value_stride

    def read(self) -> tuple[int, int, dict[int, int]]:
        drops = tx = 0
        rx = {}
        for slot, key in enumerate(self.keys):
            raw = memoryview(self.map.lookup(key))
            rx_slot = 0
            for cpu in range(len(raw) // self.stride):
                stats = TrafficStats.from_buffer_copy(raw[cpu * self.stride : cpu * self.stride + STATS_SIZE])
                rx_slot += stats.rx_packets
                tx += stats.tx_packets
                drops += sum(stats.drops)
            rx[slot] = rx_slot
        return drops, tx, rx


@pytest.fixture(scope="module")
def vtep(bpf_cache):
    name = f"{LAB_PREFIX}fv-{os.getpid()}"
    with VtepNetns.loaded(name, PORTS, bpf_cache, CONFIG) as lab:
        yield lab


def check_out(
    run: fz.Run, index: int, where: str, frame: bytes, exp: Expect, meta: bytes, out: bytes, slots: dict
) -> None:
    """A redirected frame as vtep_ingress left it (and its metadata): the Inner unchanged, behind the frame's own
    VNI. A flooded frame's metadata is its short stamp or nothing; other frames keep what they came with (zeros)."""
    inner, vni = exp.inner, exp.vni
    if any(meta):
        word = int.from_bytes(meta, "little")
        if len(meta) != 4 or out != inner:
            run.fail(index, where, frame, f"metadata {meta.hex()} left with {out.hex()}")
        elif (word >> 3) & 0xFFF != slots[vni] or bool(word & 2) != exp.from_tunnel:
            run.fail(index, where, frame, f"short stamp {word:#x} is not VNI {vni}'s")
        run.note("flooded (short stamp)")
        return
    if len(out) == len(inner) + 50 and out[50:] == inner:
        if int.from_bytes(out[46:49], "big") != vni:
            run.fail(index, where, frame, f"Outer of VNI {int.from_bytes(out[46:49], 'big')}, frame's VNI {vni}")
        if out[0] & 1:  # a flooded frame's stamp
            if out[4] | out[5] << 8 != slots[vni] or bool(out[10] & 1) != exp.from_tunnel:
                run.fail(index, where, frame, f"stamp {out[:12].hex()} is not VNI {vni}'s")
            run.note("flooded")
            return
        if exp.from_tunnel:
            run.fail(index, where, frame, "a decapsulated frame encapsulated again")
        if (vni, out[30:34]) not in ADMITTED or out[:6] != fz.mac(peer_mac(".".join(map(str, out[30:34])))):
            run.fail(index, where, frame, f"known unicast to {out[30:34].hex()}, not a peer of VNI {vni}")
        run.note("to a remote VTEP")
        return
    translated = {b.vid for b in VNIS[vni].trunks} if VNIS[vni].vlan_mode == "translate" else set()
    if out == inner or (out[:12] == inner[:12] and out[16:] == inner[12:] and out[12:14] == b"\x81\x00"
                        and int.from_bytes(out[14:16], "big") in translated):  # fmt: skip
        run.note("to a local port")
        return
    run.fail(index, where, frame, f"redirected as {out.hex()}: not the Inner of VNI {vni}")


# A copy longer than its member's MTU + 18 is dropped by the kernel before the egress program runs: a frame longer
# than a member of its VNI takes (a port of larger MTU in the VNI, a decapsulated frame from a tunnel of larger MTU)
# cannot reach that member, as on any switch. Ingress counts each such copy (mtu): the live check holds every copy
# to have left or been counted, and the run reports how many frames had such copies (Live.members).


@dataclass
class Live:
    """What the live run of a frame may send out of each port."""

    lab: VtepNetns
    slots: dict

    def members(self, exp: Expect, in_port: str) -> tuple[int, int]:
        """(copies the devmap makes, of them those the kernel drops before egress, which ingress counts: a member
        whose device takes no frame as long as the flooded one; the short stamp travels as metadata and adds
        nothing)."""
        group = self.lab.current.groups["local" if exp.from_tunnel else "flood"][exp.vni]
        mtus = {p.ifindex: p.mtu for p in self.lab.ports.values()}
        targets = [i for i in group.values() if i != self.lab.ports[in_port].ifindex]
        return len(targets), sum(len(exp.inner) > mtus[i] + 18 for i in targets)

    def copy_problem(self, port: str, copy: bytes, exp: Expect, in_port: str, seen: set) -> str | None:
        vni = exp.vni
        if vni is None:
            return "a copy of a frame the VTEP may not forward"
        if port == in_port:
            return "a copy back out of the port it came in on"
        config = VNIS[vni]
        if port in LOCAL_IPS:
            if exp.from_tunnel:
                return "a decapsulated frame sent into a tunnel"
            dst = ".".join(map(str, copy[30:34]))
            if int.from_bytes(copy[46:49], "big") != vni or copy[50:] != exp.inner:
                return f"tunnel copy {copy[:50].hex()} is not VNI {vni}'s"
            if not any(p.ip == dst and p.via == port for p in config.peers) or dst in seen:
                return f"tunnel copy to {dst}: not a peer of VNI {vni} behind {port}, or a second copy"
            if copy[:6] != fz.mac(peer_mac(dst)) or copy[26:30] != fz.ip4(LOCAL_IPS[port]):
                return f"tunnel copy to {dst} with wrong addresses {copy[:34].hex()}"
            seen.add(dst)
            return None
        if any(a.port == port for a in config.access_ports):
            return None if copy == exp.inner else "access copy differs from the Inner"
        binding = next((b for b in config.trunks if b.port == port), None)
        if binding is None:
            return f"a copy out of {port}, not a member of VNI {vni}"
        if config.vlan_mode == "preserve":
            ok = copy == exp.inner and int.from_bytes(copy[14:16], "big") & 0xFFF == binding.vid
        else:
            ok = (
                copy[:12] == exp.inner[:12]
                and copy[16:] == exp.inner[12:]
                and copy[12:14] == b"\x81\x00"
                and (int.from_bytes(copy[14:16], "big") & 0xFFF == binding.vid)
            )
        return None if ok else f"trunk copy not tagged with VID {binding.vid} of VNI {vni}"


def observable(port: str, frame: bytes, exp: Expect) -> bool:
    """Whether a live run's copies all reach the taps: the frame fits its port (a driver delivers no longer one),
    and no copy is shorter than Ethernet's 60 bytes (a wire pads them; veth does not, and the taps' stack drops some
    runts before a packet socket sees them, e.g. a tag and an EtherType with nothing behind)."""
    return len(frame) <= PORTS[port] + 18 and (exp.vni is None or len(exp.inner) >= 60)


def collect(lab: VtepNetns) -> list[tuple[str, bytes]]:
    """Every frame the VTEP sent out of a port since the last call (a live run's copies are queued when it returns)."""
    copies = []
    for name, tap in lab.taps.items():
        while True:
            try:
                frame, pkttype = receive(tap.sock)
            except BlockingIOError:
                break
            if pkttype != PACKET_OUTGOING:
                copies.append((name, frame))
    return copies


def run_frame(lab, prog_fd, port: str, meta: int, frame: bytes, live: bool):
    data = bytes(meta) + frame
    ctx = struct.pack("<6I", meta, len(data), 0, lab.ports[port].ifindex, 0, 0)
    flags = libbpf.BPF_F_TEST_XDP_LIVE_FRAMES if live else 0
    return libbpf.prog_test_run(prog_fd, data, flags=flags, ctx=ctx, data_out_size=len(data) + 320)


def test_fuzz_vtep(vtep):
    run = fz.Run("vtep")
    counters = Counters(vtep)
    slots = vtep.current.vni_slots()
    live = Live(vtep, slots)
    prog_fd = vtep.obj.program(INGRESS_PROGRAMS["native"]).fd
    vtep.drain_all()
    frames = truncation_frames(run.seed, vtep.ports)
    index = 0
    with netns(vtep.name):
        drops, tx, rx = counters.read()
        while index < fz.FRAMES:
            port, meta, frame = next(frames, None) or fuzz_frame(run.seed, index, vtep.ports)
            where = f"port {port}, {meta} bytes of metadata"
            exp = expect(port, frame, vtep.ports)
            try:
                result = run_frame(vtep, prog_fd, port, meta, frame, live=False)
            except OSError as e:
                run.fail(index, where, frame, f"BPF_PROG_TEST_RUN failed: {e}")
            verdict = result.retval
            if verdict not in exp.verdicts:
                allowed = sorted(fz.VERDICTS[v] for v in exp.verdicts)
                run.fail(index, where, frame, f"verdict {verdict}, the model allows {allowed} ({exp.why or exp.vni})")
            now = counters.read()
            meta_out = int.from_bytes(result.ctx_out[:4], "little")  # xdp_md.data: the metadata's length
            # a frame flooded with the short stamp (never 0: known unicast keeps the zeros it came with as its
            # metadata): ingress counts the copies too long for their members' devices
            stamped = verdict == fz.XDP_REDIRECT and meta_out and any(result.data_out[:meta_out])
            refused = live.members(exp, port)[1] if stamped else 0
            if now[0] - drops != (verdict == fz.XDP_DROP) + refused:
                run.fail(index, where, frame, f"{fz.VERDICTS[verdict]}, drop counters moved by {now[0] - drops}, "
                         f"{refused} copies too long for their members")  # fmt: skip
            if now[2][counters.slot_of[port]] != rx[counters.slot_of[port]] + 1:
                run.fail(index, where, frame, "not counted as received on its port")
            if verdict == fz.XDP_REDIRECT:
                check_out(run, index, where, frame, exp, result.data_out[:meta_out], result.data_out[meta_out:], slots)
            run.note(fz.VERDICTS[verdict])
            drops, tx, rx = now
            if index % LIVE_EVERY == 0 and observable(port, frame, exp):
                result = run_frame(vtep, prog_fd, port, meta, frame, live=True)
                copies = collect(vtep)
                now = counters.read()
                if now[1] - tx != len(copies):
                    run.fail(index, where, frame, f"live: {len(copies)} copies left, tx counters moved by "
                             f"{now[1] - tx}")  # fmt: skip
                seen: set = set()
                for out_port, copy in copies:
                    problem = live.copy_problem(out_port, copy, exp, port, seen)
                    if problem:
                        run.fail(index, where, frame, f"live: out of {out_port}: {problem}: {copy.hex()}")
                flooded = exp.vni is not None and exp.inner[0] & 1
                if flooded and verdict == fz.XDP_REDIRECT:
                    wanted, too_long = live.members(exp, port)
                    if len(copies) + now[0] - drops != wanted:
                        run.fail(index, where, frame, f"live: flooded to {wanted} members: {len(copies)} sent, "
                                 f"{now[0] - drops} dropped and counted ({too_long} too long for theirs)")  # fmt: skip
                    if too_long:  # see above class Live
                        run.note("copies longer than a member's MTU + 18, dropped by the kernel, counted")
                run.note("live")
                drops, tx, rx = now
            index += 1
    run.frames = index
    run.report()


# --- what the fuzz found, one frame each ----------------------------------------------------------------------


def drop_counts(lab: VtepNetns, port: str) -> dict:
    return lab.counters()["ports"][port].get("drops", {})


def vxlan_frame(src: str, dst: str, vni: int, inner: bytes, port_mac: str) -> bytes:
    payload = struct.pack("!II", 0x08000000, vni << 8) + inner
    l4 = struct.pack("!HHHH", 50000, 4789, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 0, 0x4000, 64, 17, 0, fz.ip4(src), fz.ip4(dst))
    return fz.mac(port_mac) + fz.mac(peer_mac(src)) + b"\x08\x00" + ip + l4


def test_a_peer_of_the_vni_behind_another_tunnel_port_is_not_admitted(vtep):
    """198.51.100.60 is VNI 100's peer behind ul2: its VXLAN on ul was decapsulated and its MACs learned behind ul,
    so frames to them left through ul, from ul's address (fuzz seed 1, frame 5100)."""
    inner = fz.ethernet(fz.BROADCAST, fz.mac("02:00:00:00:5b:01"), 0x0800) + bytes(46)
    before = drop_counts(vtep, "ul").get("not_peer", 0)
    with netns(vtep.name):
        frame = vxlan_frame("198.51.100.60", LOCAL_IPS["ul"], 100, inner, vtep.ports["ul"].mac)
        verdict = run_frame(vtep, vtep.obj.program(INGRESS_PROGRAMS["native"]).fd, "ul", 0, frame, False)
    assert verdict.retval == fz.XDP_DROP
    assert drop_counts(vtep, "ul")["not_peer"] == before + 1


def test_known_unicast_longer_than_its_local_port_takes_is_dropped_and_counted(vtep):
    """A decapsulated frame of 1529 bytes to a MAC behind a2 (MTU 1500: 1518 at most): the kernel dropped it after
    the redirect, while the VTEP counted it as sent (fuzz seed 1, frame 3984)."""
    inner = fz.ethernet(fz.mac("02:00:00:00:5a:07"), fz.mac("02:00:00:00:5b:02"), 0x0800) + bytes(1529 - 14)
    frame = vxlan_frame("198.51.100.10", LOCAL_IPS["ul"], 100, inner, vtep.ports["ul"].mac)
    before = drop_counts(vtep, "a2").get("mtu", 0)
    with netns(vtep.name):
        verdict = run_frame(vtep, vtep.obj.program(INGRESS_PROGRAMS["native"]).fd, "ul", 0, frame, False)
    assert verdict.retval == fz.XDP_DROP
    assert drop_counts(vtep, "a2")["mtu"] == before + 1


def test_a_full_size_frame_flooded_reaches_a_member_of_the_same_mtu(vtep):
    """A tagged 1518-byte frame from a1 (MTU 1500), flooded in VNI 100: too long for an Outer, it carries the short
    stamp. In front of the frame, the stamp made a2's copy 4 bytes longer than a2's MTU + 18, and the kernel dropped
    it before the egress program, uncounted (the fuzz's count of copies too long for a member, seed 1796161039). As
    metadata it adds nothing, and it does not leave with the copy."""
    frame = fz.ethernet(fz.BROADCAST, fz.mac("02:00:00:00:5b:03"), 0x0800, tags=((0x8100, 5),))
    frame += bytes(1518 - len(frame))
    vtep.drain_all()
    with netns(vtep.name):
        run_frame(vtep, vtep.obj.program(INGRESS_PROGRAMS["native"]).fd, "a1", 0, frame, live=True)
    copies = collect(vtep)
    assert ("a2", frame) in copies, [(port, len(copy)) for port, copy in copies]


def test_the_first_fragment_of_vxlan_is_dropped_and_a_later_one_left_to_the_host(vtep):
    """Fragments went to the host's stack, where a kernel VXLAN socket on the same host would reassemble and
    decapsulate them without admission (VNI 100 from its peer 198.51.100.10, here cut in two)."""
    inner = fz.ethernet(fz.BROADCAST, fz.mac("02:00:00:00:5b:04"), 0x0800) + bytes(46)
    frame = bytearray(vxlan_frame("198.51.100.10", LOCAL_IPS["ul"], 100, inner, vtep.ports["ul"].mac))
    first, later = bytearray(frame), bytearray(frame)
    first[20:22] = (0x2000).to_bytes(2, "big")  # more fragments, offset 0
    later[20:22] = (0x0008).to_bytes(2, "big")  # the last fragment, at byte 64
    before = drop_counts(vtep, "ul").get("fragment", 0)
    with netns(vtep.name):
        prog_fd = vtep.obj.program(INGRESS_PROGRAMS["native"]).fd
        assert run_frame(vtep, prog_fd, "ul", 0, bytes(first), False).retval == fz.XDP_DROP
        assert run_frame(vtep, prog_fd, "ul", 0, bytes(later), False).retval == fz.XDP_PASS
    assert drop_counts(vtep, "ul")["fragment"] == before + 1


def test_a_flooded_copy_too_long_for_its_trunk_once_tagged_is_dropped_and_counted(vtep):
    """A tagged 1518-byte frame from a4 (VNI 120, MTU 1500), flooded: the copy to tr gets tr's VID 30 and is then 4
    bytes over tr's MTU + 18. The device dropped it, uncounted, while the VTEP counted it as sent (fuzz seed 7,
    frame 33096); the tunnel copy still leaves."""
    frame = fz.ethernet(fz.BROADCAST, fz.mac("02:00:00:00:5b:05"), 0x0800, tags=((0x8100, 4095),))
    frame += bytes(1518 - len(frame))
    before = drop_counts(vtep, "tr").get("mtu", 0)
    vtep.drain_all()
    with netns(vtep.name):
        run_frame(vtep, vtep.obj.program(INGRESS_PROGRAMS["native"]).fd, "a4", 0, frame, live=True)
    assert [port for port, _ in collect(vtep)] == ["ul2"]
    assert drop_counts(vtep, "tr")["mtu"] == before + 1
