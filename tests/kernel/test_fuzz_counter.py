"""The counter (bpf/counter) fuzzed through BPF_PROG_TEST_RUN with seeded random and mutated frames (fuzzlib has
the run's size and seed): it passes every frame unchanged, counts every frame (count_only_proto 0) or exactly the
IPv4/IPv6 frames of one protocol (17) behind up to two VLAN tags, and never fails at run time."""

from __future__ import annotations

import os
import struct

import fuzzlib as fz
import pytest
from vtep_netns import REPO

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import set_rodata

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="XDP needs root")


def frame(rng) -> bytes:
    tags = fz.vlan_stack(rng)
    payload = fz.rand_bytes(rng, rng.choice((0, 8, rng.randint(0, 100), rng.randint(0, 1500))))
    proto = rng.choice((fz.PROTO_UDP, fz.PROTO_UDP, fz.PROTO_TCP, fz.PROTO_ICMP, rng.getrandbits(8)))
    kind = rng.random()
    if kind < 0.5:
        body = fz.ipv4(rng, fz.rand_bytes(rng, 4), fz.rand_bytes(rng, 4), proto, len(payload))
        ethertype = fz.ETH_IP
    elif kind < 0.8:
        body, ethertype = fz.ipv6(rng, b"\x20\x01\x0d\xb8", b"\x20\x01\x0d\xb8\x02", proto, len(payload)), fz.ETH_IPV6
    else:
        body, ethertype = b"", rng.choice((fz.ETH_ARP, rng.getrandbits(16)))
    return fz.mutate(rng, fz.ethernet(fz.rand_bytes(rng, 6), fz.rand_bytes(rng, 6), ethertype, tags) + body + payload)


def protocol(frame: bytes) -> int | None:
    """The model: the IP protocol (IPv6: next header) behind Ethernet and at most two tags, or None."""
    at = 12
    for _ in range(2):
        if int.from_bytes(frame[at : at + 2], "big") in (fz.ETH_8021Q, fz.ETH_8021AD):
            if len(frame) < at + 6:
                return None
            at += 4
    ethertype, ip = int.from_bytes(frame[at : at + 2], "big"), at + 2
    if ethertype == fz.ETH_IP:
        ok = len(frame) >= ip + 20 and frame[ip] >> 4 == 4 and frame[ip] & 15 >= 5
        return frame[ip + 9] if ok and len(frame) >= ip + 4 * (frame[ip] & 15) else None
    if ethertype == fz.ETH_IPV6:
        return frame[ip + 6] if len(frame) >= ip + 40 and frame[ip] >> 4 == 6 else None
    return None


@pytest.mark.parametrize("only", [0, fz.PROTO_UDP])
def test_fuzz_counter(tmp_path, only):
    fuzz = fz.Run(f"counter (count_only_proto {only})")
    path, _ = bpf_build.compile_object(
        str(REPO / "bpf" / "counter" / "counter.c"), str(tmp_path), [str(REPO / "bpf" / "include")]
    )
    with libbpf.BpfObject(path) as obj:
        set_rodata(obj, {"count_only_proto": only})
        obj.load()
        prog_fd, counters = obj.program("xdp_count").fd, obj.map("xdp_counters")

        def counted() -> int:
            raw = counters.lookup(bytes(4))
            return sum(
                struct.unpack_from("<Q", raw, cpu * counters.value_stride)[0]
                for cpu in range(len(raw) // counters.value_stride)
            )

        with fz.one_cpu():
            before = counted()
            for index in range(fz.FRAMES):
                rng = fz.frame_rng(fuzz.seed, index)
                data, meta = frame(rng), rng.choice((0, 0, 4, 32))
                ctx = struct.pack("<6I", meta, meta + len(data), 0, 0, 0, 0)
                result = libbpf.prog_test_run(prog_fd, bytes(meta) + data, ctx=ctx)
                if result.retval != fz.XDP_PASS or result.data_out[meta:] != data:
                    fuzz.fail(
                        index, f"{meta} bytes of metadata", data, f"verdict {result.retval}, or the frame changed"
                    )
                counts = only == 0 or protocol(data) == only
                fuzz.note("counted" if counts else "not counted")
                if index % 64 == 0 or counts:
                    moved = counted() - before
                    if moved != fuzz.notes.get("counted", 0):
                        fuzz.fail(index, "counter", data, f"counted {moved}, the model {fuzz.notes.get('counted', 0)}")
    fuzz.frames = fz.FRAMES
    fuzz.report()
