"""Seeded frame fuzzing for the data planes: frame builders and mutations (plain bytes, no scapy: a million frames
per data plane must be built in seconds), the run's size and seed, and the report of a failing frame.

Frame i of a run comes from its own generator, random.Random(seed << 32 | i): one frame can be rebuilt alone, and
a run repeats exactly with the same FUZZ_SEED and FUZZ_FRAMES. `make fuzz` runs FUZZ_FRAMES (1,000,000) frames per
data plane; `make test` runs the same tests at DEFAULT_FRAMES.
"""

from __future__ import annotations

import contextlib
import os
import random
import struct
import sys
import time
from dataclasses import dataclass, field

DEFAULT_FRAMES = 8000
FRAMES = int(os.environ.get("FUZZ_FRAMES", DEFAULT_FRAMES))
SEED = int(os.environ.get("FUZZ_SEED", 1))

ETH_IP, ETH_IPV6, ETH_ARP, ETH_8021Q, ETH_8021AD = 0x0800, 0x86DD, 0x0806, 0x8100, 0x88A8
PROTO_TCP, PROTO_UDP, PROTO_ICMP = 6, 17, 1
BROADCAST = b"\xff" * 6
# XDP never sees a frame shorter than an Ethernet header: BPF_PROG_TEST_RUN refuses one (EINVAL), as drivers do.
SHORTEST = 14
XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT = range(5)
VERDICTS = ("ABORTED", "DROP", "PASS", "TX", "REDIRECT")


def frame_rng(seed: int, index: int) -> random.Random:
    return random.Random(seed << 32 | index)


def rand_bytes(rng: random.Random, n: int) -> bytes:
    return rng.getrandbits(8 * n).to_bytes(n, "little") if n > 0 else b""


def mac(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def ip4(text: str) -> bytes:
    return bytes(int(part) for part in text.split("."))


def ethernet(dst: bytes, src: bytes, ethertype: int, tags=()) -> bytes:
    """An Ethernet header with a VLAN stack: tags are (TPID, TCI), outermost first."""
    head = dst + src
    for tpid, tci in tags:
        head += struct.pack("!HH", tpid, tci)
    return head + struct.pack("!H", ethertype)


def vlan_stack(rng: random.Random, vids=(0, 1, 4095)) -> list[tuple[int, int]]:
    """0 to 3 tags, each 802.1Q or 802.1ad, with a VID from `vids` or any, and any PCP/DEI."""
    tags = []
    for _ in range(rng.choice((0, 0, 1, 1, 1, 2, 3))):
        vid = rng.choice(vids) if rng.random() < 0.8 else rng.getrandbits(12)
        tags.append((ETH_8021Q if rng.random() < 0.75 else ETH_8021AD, rng.getrandbits(4) << 12 | vid))
    return tags


def ipv4(rng: random.Random, src: bytes, dst: bytes, proto: int, payload_len: int) -> bytes:
    """An IPv4 header: mostly well formed, sometimes with options, fragment bits or a wrong total length. The
    checksum is not computed: no data plane here checks it."""
    ihl = 5 if rng.random() < 0.8 else rng.randint(6, 15)
    total = 4 * ihl + payload_len
    if rng.random() < 0.15:
        total = rng.choice((0, 20, total - 1, total + 1, total + 100, 0xFFFF, rng.getrandbits(16)))
    frag = 0x4000 if rng.random() < 0.7 else rng.choice((0, 0x2000, 0x0001, 0x2000 | rng.getrandbits(13), 0x8000))
    head = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, rng.getrandbits(8), total & 0xFFFF, rng.getrandbits(16), frag,
                       rng.choice((1, 64, 255)), proto, rng.getrandbits(16), src, dst)  # fmt: skip
    options = bytes([1] * (4 * ihl - 20)) if rng.random() < 0.5 else rand_bytes(rng, 4 * ihl - 20)
    if rng.random() < 0.03:  # not version 4, or an IHL below 5
        head = bytes([rng.choice((0x65, 0x44, 0x40))]) + head[1:]
    return head + options


def ipv6(rng: random.Random, src: bytes, dst: bytes, next_header: int, payload_len: int) -> bytes:
    if rng.random() < 0.15:
        payload_len = rng.getrandbits(16)
    return struct.pack("!IHBB16s16s", 0x60000000 | rng.getrandbits(20), payload_len & 0xFFFF, next_header, 64,
                       src.rjust(16, b"\0"), dst.rjust(16, b"\0"))  # fmt: skip


def udp(rng: random.Random, sport: int, dport: int, payload_len: int) -> bytes:
    length = 8 + payload_len
    if rng.random() < 0.15:
        length = rng.choice((0, 7, 8, length - 1, length + 1, 0xFFFF, rng.getrandbits(16)))
    return struct.pack("!HHHH", sport, dport, length & 0xFFFF, rng.getrandbits(16))


def vxlan(rng: random.Random, vni: int) -> bytes:
    """A VXLAN header: the I flag and zero reserved bits mostly, else any flags and reserved bits."""
    flags = 0x08000000
    if rng.random() < 0.2:
        flags = rng.choice((0, 0x08000000 | rng.getrandbits(24), rng.getrandbits(32), 0xF7000000))
    reserved = 0 if rng.random() < 0.8 else rng.getrandbits(8)
    return struct.pack("!II", flags, (vni & 0xFFFFFF) << 8 | reserved)


def mutate(rng: random.Random, frame: bytes) -> bytes:
    """None to a few of: a truncation, flipped bytes, random bytes at a header offset, appended garbage."""
    data = bytearray(frame)
    for _ in range(rng.choice((0, 0, 0, 1, 1, 2, 3))):
        kind = rng.random()
        if kind < 0.3:
            del data[rng.randint(min(SHORTEST, len(data)), len(data)) :]
        elif kind < 0.75 and data:
            at = rng.randrange(min(len(data), 96))
            data[at] = rng.getrandbits(8) if rng.random() < 0.5 else data[at] ^ 1 << rng.randrange(8)
        elif kind < 0.9 and data:
            at = rng.randrange(len(data))
            data[at : at + 4] = rand_bytes(rng, min(4, len(data) - at))
        else:
            data += rand_bytes(rng, rng.randint(1, 64))
    return bytes(data)


@contextlib.contextmanager
def one_cpu():
    """Run the block on one CPU (BPF_PROG_TEST_RUN runs on the caller's: its per-CPU counters are the ones that
    move); yields the CPU."""
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)


def truncations(frame: bytes):
    """The frame cut at every offset, from an Ethernet header to one byte short."""
    for n in range(SHORTEST, len(frame)):
        yield frame[:n]


@dataclass
class Run:
    """One data plane's fuzz run: counts frames and time, and fails with a replayable report."""

    name: str
    seed: int = SEED
    frames: int = 0
    started: float = field(default_factory=time.perf_counter)
    notes: dict[str, int] = field(default_factory=dict)

    def note(self, what: str) -> None:
        self.notes[what] = self.notes.get(what, 0) + 1

    def fail(self, index: int, where: str, frame: bytes, problem: str) -> None:
        raise AssertionError(
            f"{self.name}: FUZZ_SEED={self.seed} frame {index} ({where}): {problem}\n"
            f"  replay: FUZZ_SEED={self.seed} FUZZ_FRAMES={index + 1} (frame {index} is the run's last)\n"
            f"  frame ({len(frame)} bytes): {frame.hex()}"
        )

    def report(self) -> str:
        seconds = time.perf_counter() - self.started
        notes = ", ".join(f"{k} {v}" for k, v in sorted(self.notes.items()))
        line = (f"fuzz {self.name}: {self.frames} frames, seed {self.seed}, {seconds:.1f} s, "
                f"{self.frames / max(seconds, 1e-9):.0f} frames/s, 0 violations ({notes})")  # fmt: skip
        print(line, file=sys.stderr)
        return line
