#!/usr/bin/env python3
"""Benchmark: BUM replication to 2 remote VTEPs behind one uplink, XDP VTEP against the ceiling and the kernel.

Not a test (pytest does not collect bench_*.py): it prints a table of ratios from one run. Needs root.

Three namespaces, one per data plane, each with an access port `acc` (veth; the sender's end `accp`) and one
uplink `ul` (veth, MTU 1600; far end `ulp`) behind which two remote VTEPs live (next-hop MACs given, no ARP):

  A  xk-<pid>-a  the XDP VTEP (bpf/vtep, native mode on acc and ul), configured by the vtep module's writer.update()
  B  xk-<pid>-b  the ceiling: a minimal XDP program on acc broadcasting through a devmap with 2 entries on ul,
                 no rewrite, no egress program
  C  xk-<pid>-c  the Linux kernel: acc and a vxlan device (VNI 100, head-end replication by two all-zeros FDB
                 entries) in a bridge, static neighbours for the peers; no XDP on acc, GRO on (for NAPI)
  D  xk-<pid>-d  the design's floor: B's broadcast plus only what the VTEP's design makes every copy pay (a 32-byte
                 command in the metadata, an egress program per copy that takes it off and pushes a constant 50-byte
                 Outer); no lookups, no counters. VTEP/floor is the VTEP's own work, floor/ceiling the design's.

Offered load: bench_tx (XDP_TX) run with BPF_PROG_RUN + live frames, ctx ingress ifindex = accp, from a thread
pinned to CPU 0, so frames leave accp into acc. acc's NAPI is threaded and its kthread pinned to CPU 1: CPU 1 does
the whole data plane (and the sink, whose NAPI softirq runs there too). The sink on ulp counts and drops; the rate
is copies counted / 2 / seconds, i.e. input Mpps replicated. Points alternate A B C D A B C D ...; medians reported.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import re
import shlex
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))
sys.path.insert(0, str(REPO / "tests" / "kernel"))

from vtep_netns import netns, port_facts

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    AccessPort,
    Peer,
    TunnelPort,
    Vni,
    VtepConfig,
)

PREFIX = "xk"
CACHE = str(REPO / ".build" / "bench-cache")  # inside the checkout: `make clean` removes it
SENDER_CPU, DUT_CPU = 0, 1
COPIES = 2
VNI = 100
LOCAL_IP = "198.51.100.1"
PEERS = {"198.51.100.10": "02:00:00:00:00:0a", "198.51.100.11": "02:00:00:00:00:0b"}
# Unknown unicast (BUM for both data planes) rather than broadcast: a broadcast would also be delivered to the
# kernel bridge's own stack, work that head-end replication does not need.
INNER_DST_MAC, INNER_SRC_MAC = "02:00:00:00:ee:02", "02:00:00:00:ee:01"
BPF_TCX_INGRESS = 46
SCENARIOS = {"A": "XDP VTEP", "B": "ceiling", "C": "Linux", "D": "floor"}


def sh(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{shlex.join(argv)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def nsx(ns: str, *argv: str) -> str:
    return sh("ip", "netns", "exec", ns, *argv)


def compile_bpf(source: Path, include: list[Path] | None = None, defines: dict | None = None) -> str:
    path, _ = bpf_build.compile_object(str(source), CACHE, [str(d) for d in include or []], defines)
    return path


def frame(size: int) -> bytes:
    """An IPv4/UDP frame of `size` bytes (without FCS) to an unknown unicast MAC."""
    mac = bytes.fromhex(INNER_DST_MAC.replace(":", "")) + bytes.fromhex(INNER_SRC_MAC.replace(":", ""))
    ip_len = size - 14
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        ip_len,
        0,
        0x4000,
        64,
        17,
        0,
        socket.inet_aton("198.51.100.170"),
        socket.inet_aton("198.51.100.171"),
    )
    words = struct.unpack("!10H", ip)
    csum = sum(words)
    csum = (csum & 0xFFFF) + (csum >> 16)
    csum = (csum & 0xFFFF) + (csum >> 16)
    ip = ip[:10] + struct.pack("!H", ~csum & 0xFFFF) + ip[12:]
    udp = struct.pack("!HHHH", 1234, 5678, ip_len - 20, 0)
    out = mac + b"\x08\x00" + ip + udp
    return out + bytes(size - len(out))


def napi_threads(dev: str) -> dict[int, str]:
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            comm = Path(entry.path, "comm").read_text().strip()
            if comm.startswith(f"napi/{dev}-"):
                found[int(entry.name)] = comm
    return found


def runtime_ns(pid: int) -> int:
    """CPU time of a task (ns, from schedstat): with tick accounting and no IRQ time accounting, the softirqs it
    runs when it re-enables bottom halves (the sink's NAPI) are in it too."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def ksoftirqd(cpu: int) -> int:
    for pid, comm in ((int(e.name), Path(e.path, "comm")) for e in os.scandir("/proc") if e.name.isdigit()):
        with contextlib.suppress(OSError):
            if comm.read_text().strip() == f"ksoftirqd/{cpu}":
                return pid
    return 0


def cpu_times(cpu: int) -> tuple[int, int]:
    """(busy, total) jiffies of one CPU from /proc/stat."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            v = [int(x) for x in line.split()[1:9]]
            return sum(v) - v[3] - v[4], sum(v)
    raise RuntimeError(f"cpu{cpu} not in /proc/stat")


@dataclass
class Bed:
    """One namespace: acc/accp, ul/ulp, the bench object (sender, sink, ceiling), and what the scenario adds."""

    key: str
    ns: str
    linux_sink: str = "tc"
    obj: libbpf.BpfObject | None = None
    vtep: libbpf.BpfObject | None = None
    vtep_maps: dict = field(default_factory=dict)
    links: list[int] = field(default_factory=list)
    ifindex: dict[str, int] = field(default_factory=dict)
    napi_pid: int = 0

    def create(self, bench_obj: str) -> None:
        sh("ip", "netns", "add", self.ns)
        sh("ip", "-n", self.ns, "link", "add", "acc", "type", "veth", "peer", "name", "accp")
        sh(
            "ip",
            "-n",
            self.ns,
            "link",
            "add",
            "ul",
            "mtu",
            "1600",
            "type",
            "veth",
            "peer",
            "name",
            "ulp",
            "mtu",
            "1600",
        )
        nsx(self.ns, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        for dev in ("acc", "accp", "ul", "ulp"):
            nsx(self.ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            sh("ip", "-n", self.ns, "link", "set", dev, "up")
        with netns(self.ns):
            self.ifindex = {dev: socket.if_nametoindex(dev) for dev in ("acc", "accp", "ul", "ulp")}
        self.obj = libbpf.BpfObject(bench_obj)
        self.obj.load()
        getattr(self, f"setup_{self.key.lower()}")()
        self.attach_sink()
        self.thread_napi()

    def link(self, prog: str | int, dev: str, obj: libbpf.BpfObject | None = None) -> None:
        fd = prog if isinstance(prog, int) else (obj or self.obj).program(prog).fd
        with netns(self.ns):
            self.links.append(libbpf.xdp_link_create(fd, self.ifindex[dev], "native"))

    def attach_sink(self) -> None:
        if self.key == "C" and self.linux_sink == "tc":
            opts = libbpf._LinkCreateOpts(sz=ctypes.sizeof(libbpf._LinkCreateOpts))
            with netns(self.ns):  # the target ifindex is resolved in the caller's namespace
                fd = libbpf.lib().bpf_link_create(
                    self.obj.program("bench_sink_tc").fd, self.ifindex["ulp"], BPF_TCX_INGRESS, opts
                )
            self.links.append(libbpf._check("bpf_link_create(tcx ingress ulp)", fd))
        else:
            self.link("bench_sink", "ulp")

    def setup_a(self) -> None:
        """The XDP VTEP, brought up as tests/kernel/vtep_netns.py does: ports from the namespace, maps by the
        vtep module's own writer.update()."""
        self.vtep = libbpf.BpfObject(compile_bpf(REPO / "bpf" / "vtep" / "vtep.c", [REPO / "bpf" / "include"]))
        for layout in layouts.LAYOUTS.values():
            layout.check_object(self.vtep)
        self.vtep.load()
        self.vtep_maps = {n: self.vtep.map(n) for n in layouts.MAP_NAMES}
        ingress = self.vtep.program("vtep_ingress").fd
        self.link(ingress, "acc")
        self.link(ingress, "ul")
        config = VtepConfig(
            tunnel_ports=(TunnelPort("ul", LOCAL_IP),),
            vnis=(
                Vni(VNI, (AccessPort("acc"),), (), tuple(Peer(ip, "ul", mac) for ip, mac in sorted(PEERS.items()))),
            ),
        )
        with netns(self.ns):  # devmap entries resolve their ifindex in the writer's namespace
            ports = {name: port_facts(name) for name in ("acc", "ul")}
            with writer.update(self.vtep_maps, self.vtep.program("vtep_egress"), config, ports, {}):
                pass

    def setup_b(self) -> None:
        with netns(self.ns):
            flood = self.obj.map("flood")
            for member in range(1, COPIES + 1):
                flood.update(struct.pack("<I", member), struct.pack("<I", self.ifindex["ul"]))
        self.link("bench_flood", "acc")

    def setup_d(self) -> None:
        egress = self.obj.program("bench_bare_encap_egress").fd
        with netns(self.ns):
            flood = self.obj.map("flood_encap")
            for member in range(1, COPIES + 1):
                flood.update(struct.pack("<I", member), bytes(layouts.DevmapVal(self.ifindex["ul"], egress)))
        self.link("bench_bare_encap", "acc")

    def setup_c(self) -> None:
        ip = ("ip", "-n", self.ns)
        sh(*ip, "addr", "add", f"{LOCAL_IP}/24", "dev", "ul")
        for peer, mac in PEERS.items():
            sh(*ip, "neigh", "replace", peer, "lladdr", mac, "dev", "ul", "nud", "permanent")
        # br_netfilter is built into this kernel and on by default: without rules it only costs time.
        for table in ("iptables", "ip6tables", "arptables"):
            if Path(f"/proc/sys/net/bridge/bridge-nf-call-{table}").exists():
                nsx(self.ns, "sysctl", "-qw", f"net.bridge.bridge-nf-call-{table}=0")
        sh(*ip, "link", "add", "xkbr0", "type", "bridge")
        sh(
            *ip,
            "link",
            "add",
            "xkvx0",
            "type",
            "vxlan",
            "id",
            str(VNI),
            "dstport",
            "4789",
            "local",
            LOCAL_IP,
            "dev",
            "ul",
            "nolearning",
        )
        for dev in ("xkbr0", "xkvx0"):
            nsx(self.ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
        for peer in PEERS:
            sh("bridge", "-n", self.ns, "fdb", "append", "00:00:00:00:00:00", "dev", "xkvx0", "dst", peer)
        sh(*ip, "link", "set", "acc", "master", "xkbr0")
        sh(*ip, "link", "set", "xkvx0", "master", "xkbr0")
        sh(*ip, "link", "set", "xkvx0", "up")
        sh(*ip, "link", "set", "xkbr0", "up")
        nsx(self.ns, "ethtool", "-K", "acc", "gro", "on")  # veth receives XDP_TX frames only with NAPI (XDP or GRO)

    def thread_napi(self) -> None:
        """acc's NAPI in a kthread of its own, pinned to the DUT CPU."""
        before = napi_threads("acc")
        nsx(self.ns, "sh", "-c", "echo 1 > /sys/class/net/acc/threaded")
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            new = set(napi_threads("acc")) - set(before)
            if new:
                break
            time.sleep(0.02)
        if len(new) != 1:
            raise RuntimeError(f"{self.ns}: expected one new napi/acc-* kthread, found {sorted(new)}")
        self.napi_pid = new.pop()
        os.sched_setaffinity(self.napi_pid, {DUT_CPU})

    def sink(self) -> tuple[int, int]:
        raw = self.obj.map("sink_counters").lookup(struct.pack("<I", 0))
        packets = bytes_ = 0
        for off in range(0, len(raw), 16):
            p, b = struct.unpack_from("<QQ", raw, off)
            packets, bytes_ = packets + p, bytes_ + b
        return packets, bytes_

    def close(self) -> None:
        for fd in self.links:
            with contextlib.suppress(OSError):
                libbpf.link_detach(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self.links.clear()
        for obj in (self.vtep, self.obj):
            if obj:
                obj.close()
        self.vtep = self.obj = None
        subprocess.run(["ip", "netns", "del", self.ns], check=False, capture_output=True)


@dataclass
class Point:
    scenario: str
    size: int
    mpps: float
    per_core: float  # Mpps per second of CPU time of the data plane's kthread (and ksoftirqd)
    dut_share: float  # % of the wall time that the data plane's kthread (and ksoftirqd) ran
    cpu1: float
    offered: float
    copy_len: float


def measure(bed: Bed, size: int, seconds: float, warmup: float, repeat: int, batch: int, softirqd: int) -> Point:
    data = frame(size)
    ctx = struct.pack("<6I", 0, len(data), 0, bed.ifindex["accp"], 0, 0)
    prog = bed.obj.program("bench_tx").fd
    stop = threading.Event()
    sent: list[tuple[int, float]] = []
    errors: list[BaseException] = []

    def sender() -> None:
        try:
            os.sched_setaffinity(0, {SENDER_CPU})  # this thread only
            with netns(bed.ns):
                while not stop.is_set():
                    t = time.monotonic()
                    libbpf.prog_test_run(
                        prog, data, repeat=repeat, flags=libbpf.BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=batch, ctx=ctx
                    )
                    sent.append((repeat, time.monotonic() - t))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    thread = threading.Thread(target=sender, name=f"sender-{bed.key}", daemon=True)
    thread.start()
    try:
        time.sleep(warmup)
        p0, b0 = bed.sink()
        c0, t0 = cpu_times(DUT_CPU), time.monotonic()
        r0 = runtime_ns(bed.napi_pid) + runtime_ns(softirqd)
        time.sleep(seconds)
        p1, b1 = bed.sink()
        c1, t1 = cpu_times(DUT_CPU), time.monotonic()
        r1 = runtime_ns(bed.napi_pid) + runtime_ns(softirqd)
    finally:
        stop.set()
        thread.join()
    if errors:
        raise RuntimeError(f"sender in {bed.ns}: {errors[0]}")
    packets = p1 - p0
    offered = sum(n for n, _ in sent) / sum(d for _, d in sent) / 1e6 if sent else 0.0
    busy = (c1[0] - c0[0]) / max(1, c1[1] - c0[1])
    dut = (r1 - r0) / 1e9
    rate = packets / COPIES / 1e6
    return Point(
        bed.key,
        size,
        rate / (t1 - t0),
        rate / dut if dut > 0 else 0.0,
        100 * dut / (t1 - t0),
        100 * busy,
        offered,
        (b1 - b0) / packets if packets else 0,
    )


def cost_ns(bed: Bed, size: int, repeat: int) -> float:
    """ns per input frame of the data plane itself: its ingress program run by BPF_PROG_RUN with live frames as if
    the frame had arrived on acc (redirect, copies, egress programs, xmit to ulp and the sink's NAPI included; the
    veth receive path not). The kernel's test timer counts only the loop's own time, so other load on the CPU
    barely moves it. Batches of 64: 128 copies per flush fit ulp's ring of 256."""
    ingress = {"A": "vtep_ingress", "B": "bench_flood", "D": "bench_bare_encap"}[bed.key]
    prog = (bed.vtep or bed.obj).program(ingress).fd
    data = frame(size)
    ctx = struct.pack("<6I", 0, len(data), 0, bed.ifindex["acc"], 0, 0)
    out: list = []

    def run() -> None:
        try:
            os.sched_setaffinity(0, {DUT_CPU})
            with netns(bed.ns):
                r = libbpf.prog_test_run(
                    prog, data, repeat=repeat, flags=libbpf.BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=64, ctx=ctx
                )
            out.append(r.duration_ns)
        except BaseException as e:
            out.append(e)

    thread = threading.Thread(target=run, name=f"cost-{bed.key}", daemon=True)
    thread.start()
    thread.join()
    if isinstance(out[0], BaseException):
        raise RuntimeError(f"cost run in {bed.ns}: {out[0]}")
    return float(out[0])


def remove_stale() -> None:
    """Namespaces of an earlier run of this benchmark whose process is gone (xk-<pid>-<scenario>)."""
    for line in sh("ip", "netns", "list").splitlines():
        m = re.match(rf"({PREFIX}-(\d+)-[abcd])\b", line)
        if m and not Path(f"/proc/{m.group(2)}").exists():
            subprocess.run(["ip", "netns", "del", m.group(1)], check=False, capture_output=True)


def vtep_oddities(bed: Bed) -> list[str]:
    names = {bed.ifindex["acc"]: "acc", bed.ifindex["ul"]: "ul"}
    counters = writer.counters(bed.vtep_maps, writer.read(bed.vtep_maps), names)
    out = []
    for kind in ("ports", "vnis"):
        for name, c in counters[kind].items():
            if c["drops"]:
                out.append(f"VTEP {kind[:-1]} {name} drops: {c['drops']}")
    return out


def report(points: list[Point], costs: dict, args, command: str, oddities: list[str]) -> None:
    def summary(key: str, size: int, attr: str, pick=statistics.median) -> float:
        values = [getattr(p, attr) for p in points if p.scenario == key and p.size == size]
        return pick(values) if values else float("nan")

    def ratio(x: float, y: float, suffix: str = "") -> str:
        return f"{x / y:.2f}{suffix}" if y else "-"

    def table(attr: str, unit: str, pick=statistics.median) -> None:
        rows = [
            (
                "frame size",
                f"XDP VTEP {unit}",
                f"floor {unit}",
                f"ceiling {unit}",
                f"Linux {unit}",
                "XDP/ceiling",
                "floor/ceiling",
                "XDP/Linux",
                "ceiling/Linux",
            )
        ]
        for size in args.sizes:
            a, b, c, d = (summary(k, size, attr, pick) for k in "ABCD")
            label = f"{size} B" + (f" ({size + 50} B copies)" if size < 1514 else "")
            rows.append(
                (
                    label,
                    f"{a:.3f}",
                    f"{d:.3f}",
                    f"{b:.3f}",
                    f"{c:.3f}",
                    ratio(a, b),
                    ratio(d, b),
                    ratio(a, c, "x"),
                    ratio(b, c, "x"),
                )
            )
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        for i, r in enumerate(rows):
            print("| " + " | ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) + " |")
            if i == 0:
                print("|" + "|".join("-" * (w + 2) for w in widths) + "|")

    print()
    print(
        f"Input Mpps replicated to {COPIES} peers (copies counted at the sink / {COPIES}), medians of {args.rounds} "
        f"rounds x {args.seconds:g} s; data plane on CPU {DUT_CPU}, sender on CPU {SENDER_CPU}:"
    )
    table("mpps", "Mpps")
    print()
    print(
        f"The same per second of CPU time of the data plane (acc's NAPI kthread + ksoftirqd/{DUT_CPU}, from "
        "schedstat): what one whole core would do, less sensitive to other load on the CPU:"
    )
    table("per_core", "Mpps/core")
    print()
    print(
        "The best round of each (other tenants of a shared machine only ever slow a round down, so the best is the "
        "closest to what the data plane can do), Mpps/core:"
    )
    table("per_core", "Mpps/core", max)
    print()
    if costs:
        print()
        print(
            "Cost per input frame of the data plane alone (ingress program run by BPF_PROG_RUN, live frames, as if "
            "from acc; the kernel's test timer; medians):"
        )
        for size in args.sizes:
            a, b, d = (statistics.median(costs[(k, size)]) for k in "ABD")
            print(
                f"  {size:>5} B  XDP VTEP {a:.0f} ns, floor {d:.0f} ns, ceiling {b:.0f} ns: XDP/ceiling {b / a:.2f}, "
                f"floor/ceiling {b / d:.2f} (rate ratios); the design adds {d - b:.0f} ns, the VTEP's own work "
                f"{a - d:.0f} ns"
            )
    print()
    print(f"CPU {DUT_CPU} busy (/proc/stat), the data plane's share of it, offered Mpps, bytes per copy (medians):")
    for size in args.sizes:
        for k in "ABCD":
            print(
                f"  {size:>5} B  {SCENARIOS[k]:<8}  CPU{DUT_CPU} {summary(k, size, 'cpu1'):3.0f}%  data plane "
                f"{summary(k, size, 'dut_share'):3.0f}%  offered {summary(k, size, 'offered'):5.2f}  "
                f"{summary(k, size, 'copy_len'):.0f} B/copy"
            )
    print("per round, Mpps (Mpps/core):")
    for size in args.sizes:
        for k in "ABCD":
            values = [f"{p.mpps:.3f} ({p.per_core:.3f})" for p in points if p.scenario == k and p.size == size]
            print(f"  {size:>5} B  {SCENARIOS[k]:<8}  {'  '.join(values)}")
    for attr, what, pick in (
        ("mpps", "Mpps, medians", statistics.median),
        ("per_core", "Mpps/core, medians", statistics.median),
        ("per_core", "Mpps/core, best rounds", max),
    ):
        goals = []
        for size in args.sizes:
            a, b, c = (summary(k, size, attr, pick) for k in "ABC")
            goals.append(f"{size} B {'met' if a >= 0.9 * b and a >= 5 * c else 'MISSED'}")
        print(f"goal (XDP >= 0.90 x ceiling and >= 5 x Linux), {what}: " + ", ".join(goals))
    for line in oddities:
        print("note: " + line)
    print(f"command: {command}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per point (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of A B C D per frame size (default 3)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1514], help="frame sizes without FCS")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each measurement")
    parser.add_argument("--repeat", type=int, default=2_000_000, help="frames per BPF_PROG_RUN call")
    parser.add_argument("--batch", type=int, default=256, help="live-frames batch size (<= 256)")
    parser.add_argument(
        "--linux-sink",
        choices=("tc", "xdp"),
        default="tc",
        help="the kernel data plane's sink on ulp: tcx ingress (default: no skb-to-XDP copy) or XDP",
    )
    parser.add_argument(
        "--cost-repeat", type=int, default=1_000_000, help="frames per per-frame cost run (0 skips the cost section)"
    )
    parser.add_argument(
        "--ceiling-devmap-size",
        type=int,
        default=16,
        help="max_entries of the ceiling's devmap (broadcast walks every bucket; the VTEP's is 256)",
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_vtep: needs root (network namespaces, XDP, BPF_PROG_RUN)", file=sys.stderr)
        return 1
    if os.cpu_count() is None or os.cpu_count() < 2:
        print("bench_vtep: needs 2 CPUs (sender on CPU 0, data plane on CPU 1)", file=sys.stderr)
        return 1
    for size in args.sizes:
        if not 60 <= size <= 1514:
            parser.error(f"--sizes: {size} is outside 60..1514 (acc's MTU is 1500)")
    if not 1 <= args.batch <= 256:
        parser.error("--batch: 1..256")
    command = shlex.join([sys.executable, *sys.argv])

    def terminate(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminate)
    os.sched_setaffinity(0, {SENDER_CPU})  # keep this process off the data plane's CPU
    remove_stale()
    bench_obj = compile_bpf(
        REPO / "tests" / "bench" / "bpf" / "bench.c", defines={"FLOOD_MAX_ENTRIES": args.ceiling_devmap_size}
    )
    beds = [Bed(k, f"{PREFIX}-{os.getpid()}-{k.lower()}", args.linux_sink) for k in "ABCD"]
    points: list[Point] = []
    costs: dict[tuple[str, int], list[float]] = {}
    softirqd = ksoftirqd(DUT_CPU)
    try:
        for bed in beds:
            bed.create(bench_obj)
        print(
            f"namespaces {', '.join(b.ns for b in beds)}; acc NAPI kthreads "
            f"{', '.join(f'{b.key}={b.napi_pid}' for b in beds)} on CPU {DUT_CPU}",
            flush=True,
        )
        for rnd in range(1, args.rounds + 1):
            for size in args.sizes:
                for bed in beds:
                    p = measure(bed, size, args.seconds, args.warmup, args.repeat, args.batch, softirqd)
                    points.append(p)
                    print(
                        f"round {rnd} {size:>5} B {SCENARIOS[bed.key]:<8} {p.mpps:7.3f} Mpps  CPU{DUT_CPU} "
                        f"{p.cpu1:3.0f}% (DUT {p.dut_share:3.0f}%, {p.per_core:.3f} Mpps/core)  "
                        f"offered {p.offered:.2f} Mpps  {p.copy_len:.0f} B/copy",
                        flush=True,
                    )
                    if p.mpps == 0:
                        raise RuntimeError(f"{bed.ns}: nothing reached the sink")
                if args.cost_repeat:
                    for bed in (b for b in beds if b.key != "C"):
                        ns_per_frame = cost_ns(bed, size, args.cost_repeat)
                        costs.setdefault((bed.key, size), []).append(ns_per_frame)
                        print(
                            f"round {rnd} {size:>5} B {SCENARIOS[bed.key]:<8} {ns_per_frame:7.0f} ns per input frame "
                            f"(BPF_PROG_RUN on CPU {DUT_CPU})",
                            flush=True,
                        )
        oddities = vtep_oddities(beds[0])
    finally:
        for bed in beds:
            bed.close()
    report(points, costs, args, command, oddities)
    return 0


if __name__ == "__main__":
    sys.exit(main())
