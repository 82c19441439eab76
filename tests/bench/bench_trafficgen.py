#!/usr/bin/env python3
"""Benchmark: the live-frames sender (bpf/trafficgen) on a 2-queue veth at 64 B, against itself and other senders.

Not a test (pytest does not collect bench_*.py): it prints a table of ratios from one run. Needs root.

One namespace xk-<pid>-tg with a 2-queue veth pair tgs (the sender's end) and tge, where an XDP program counts and
drops every frame (the sink): the rate is what the sink counted per second. Senders, each pinned (CPU 0; CPUs 0
and 1 for two threads):

  fixed      xdpfleet sender, one packet (template udp4)
  sweep      xdpfleet sender, 64 flows (template udp4-64flows: the diff engine writes the source port and checksum)
  sweep x2   the same from two threads (CPUs 0 and 1)
  C fixed    xdp-trafficgen (xdp-tools, C), one thread, one packet
  C sweep    xdp-trafficgen with --dyn-ports 64 (the C generator varies the port in its program)
  sendmmsg   an AF_PACKET socket, sendmmsg() of 1024 frames per call (the 64 flows, prebuilt)

The veth peer's NAPI runs on the sending CPU, so a sender's core also carries the sink. The busy share of the
sender's own CPUs is read from /proc/stat over each window (the other CPU may be busy with anything else on this
shared machine): Mpps per core = Mpps / that share. Scenarios alternate within each round; medians.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "kernel"))

from bench_cli import cannot_run, interrupt_on, measuring_parser
from l2lib import netns
from vtep_netns import port_facts

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout, TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt

PREFIX = "xk"
CACHE = str(REPO / ".build" / "bench-cache")
SCENARIOS = ("fixed", "sweep", "sweep x2", "C fixed", "C sweep", "sendmmsg")


class _Counter(ctypes.Structure):
    _fields_ = [("packets", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


def sh(*argv: str) -> str:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{shlex.join(argv)}: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def cpu_busy() -> dict[int, tuple[int, int]]:
    """(busy, total) jiffies per CPU from /proc/stat."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        m = re.match(r"cpu(\d+) (.*)", line)
        if m:
            v = [int(x) for x in m.group(2).split()[:8]]
            out[int(m.group(1))] = (sum(v) - v[3] - v[4], sum(v))
    return out


@dataclass
class Point:
    scenario: str
    mpps: float
    cores: float

    @property
    def per_core(self) -> float:
        return self.mpps / self.cores if self.cores else 0.0


class Bed:
    def __init__(self, ns: str, batch: int):
        self.ns = ns
        self.batch = batch
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", "tgs", "numtxqueues", "2", "numrxqueues", "2", "type", "veth",
           "peer", "name", "tge", "numtxqueues", "2", "numrxqueues", "2")  # fmt: skip
        for end in ("tgs", "tge"):
            sh("ip", "-n", ns, "link", "set", end, "up")
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{end}.disable_ipv6=1")
        with netns(ns):
            self.src_mac, self.dst_mac = port_facts("tgs").mac, port_facts("tge").mac
            self.sink_ifindex = socket.if_nametoindex("tge")
        sink_path, _ = bpf_build.compile_object(
            str(REPO / "tests" / "bench" / "bpf" / "bench.c"), CACHE, [str(REPO / "bpf" / "include")]
        )
        self.sink = libbpf.BpfObject(sink_path)
        self.sink.load()
        with netns(ns):
            self.sink_link = libbpf.xdp_link_create(self.sink.program("bench_sink").fd, self.sink_ifindex, "native")
        self.sink_counters = TypedMap(
            self.sink.map("sink_counters"), MapLayout("sink_counters", ctypes.c_uint32, _Counter)
        )
        self.sender_obj, _ = bpf_build.compile_object(
            str(REPO / "bpf" / "trafficgen" / "sender.c"), CACHE, [str(REPO / "bpf" / "include")]
        )

    def sunk(self) -> int:
        return sum(v.packets for v in self.sink_counters.get(0))

    def template(self, name: str) -> pt.Expanded:
        return pt.build(pt.EXAMPLES[name], src_mac=self.src_mac, dst_mac=self.dst_mac)

    def window(self, start, stop, warmup: float, seconds: float, scenario: str, cpus: list[int]) -> Point:
        """Start a sender, let it warm up, count at the sink and the sender's CPUs over `seconds`, stop it.
        Only the sender's CPUs count: the peer's NAPI (the sink) runs there too, and the other CPU may be busy
        with anything else on this shared machine."""
        start()
        try:
            time.sleep(warmup)
            n0, c0, t0 = self.sunk(), cpu_busy(), time.monotonic()
            time.sleep(seconds)
            n1, c1, t1 = self.sunk(), cpu_busy(), time.monotonic()
        finally:
            stop()
        cores = sum((c1[c][0] - c0[c][0]) / max(1, c1[c][1] - c0[c][1]) for c in cpus)
        return Point(scenario, (n1 - n0) / (t1 - t0) / 1e6, cores)

    def xdpfleet(self, template: str, cpus: list[int], warmup: float, seconds: float, scenario: str) -> Point:
        with netns(self.ns):
            sender = tg.Sender(self.sender_obj, self.template(template), "tgs", cpus, self.batch)
        stop = threading.Event()
        box: dict = {}

        def run():
            with netns(self.ns):
                try:
                    box["run"] = sender.run(seconds=warmup + seconds + 5, stop=stop)
                except Exception as exc:  # reported after the window
                    box["error"] = exc

        thread = threading.Thread(target=run)
        try:
            return self.window(thread.start, lambda: (stop.set(), thread.join()), warmup, seconds, scenario, cpus)
        finally:
            sender.close()
            if "error" in box:
                raise box["error"]

    def c_generator(self, ports: int, warmup: float, seconds: float, scenario: str) -> Point:
        argv = ["ip", "netns", "exec", self.ns, "taskset", "-c", "0", "xdp-trafficgen", "udp", "-t", "1",
                "-m", self.dst_mac, "-M", self.src_mac, "tgs"]  # fmt: skip
        if ports > 1:
            argv[-1:-1] = ["-d", str(ports)]
        proc = None

        def start():
            nonlocal proc
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

        def stop():
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

        point = self.window(start, stop, warmup, seconds, scenario, [0])
        if point.mpps == 0:
            lines = proc.stderr.read().strip().splitlines()
            raise Unavailable(f"xdp-trafficgen sent nothing: {lines[-1] if lines else 'no message'}")
        return point

    def sendmmsg(self, warmup: float, seconds: float) -> Point:
        frames = [self.template("udp4-64flows").frame(k) for k in range(64)]
        with netns(self.ns):
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            sock.bind(("tgs", 0))
        libc = ctypes.CDLL(None, use_errno=True)
        vlen = 1024
        buffers = [ctypes.create_string_buffer(f, len(f)) for f in frames]
        iovs = (Iovec * vlen)(*[Iovec(ctypes.addressof(buffers[i % 64]), len(frames[i % 64])) for i in range(vlen)])
        msgs = (Mmsghdr * vlen)()
        for i in range(vlen):
            msgs[i].msg_hdr.msg_iov = ctypes.pointer(iovs[i])
            msgs[i].msg_hdr.msg_iovlen = 1
        stop = threading.Event()

        def send():
            os.sched_setaffinity(0, {0})
            while not stop.is_set():
                if libc.sendmmsg(sock.fileno(), msgs, vlen, 0) < 0 and ctypes.get_errno() not in (11, 105):
                    raise OSError(ctypes.get_errno(), "sendmmsg")

        thread = threading.Thread(target=send)
        try:
            return self.window(thread.start, lambda: (stop.set(), thread.join()), warmup, seconds, "sendmmsg", [0])
        finally:
            sock.close()

    def close(self) -> None:
        os.close(self.sink_link)
        self.sink.close()
        subprocess.run(["ip", "netns", "del", self.ns], check=False)


class Unavailable(RuntimeError):
    """A sender that cannot run on this machine: reported, and left out of the later rounds."""


class Iovec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class Msghdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.POINTER(Iovec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class Mmsghdr(ctypes.Structure):
    _fields_ = [("msg_hdr", Msghdr), ("msg_len", ctypes.c_uint)]


def measure(bed: Bed, scenario: str, warmup: float, seconds: float) -> Point:
    if scenario == "fixed":
        return bed.xdpfleet("udp4", [0], warmup, seconds, scenario)
    if scenario == "sweep":
        return bed.xdpfleet("udp4-64flows", [0], warmup, seconds, scenario)
    if scenario == "sweep x2":
        return bed.xdpfleet("udp4-64flows", [0, 1], warmup, seconds, scenario)
    if scenario == "C fixed":
        return bed.c_generator(1, warmup, seconds, scenario)
    if scenario == "C sweep":
        return bed.c_generator(64, warmup, seconds, scenario)
    return bed.sendmmsg(warmup, seconds)


def report(points: list[Point], command: str, unavailable: dict[str, str]) -> None:
    def med(scenario: str, attr: str) -> float:
        values = [getattr(p, attr) for p in points if p.scenario == scenario]
        return statistics.median(values) if values else 0.0

    print(f"\n$ {command}")
    print("64 B frames (60 B + FCS), 2-queue veth, sink = XDP count-and-drop on the peer; medians")
    print(f"{'sender':<10} {'Mpps':>8} {'CPUs busy':>10} {'Mpps/core':>10}")
    for s in SCENARIOS:
        if s in unavailable:
            print(f"{s:<10} {'unavailable here: ' + unavailable[s]}")
        else:
            print(f"{s:<10} {med(s, 'mpps'):8.3f} {med(s, 'cores'):10.2f} {med(s, 'per_core'):10.3f}")

    def ratio(a: str, b: str, attr: str) -> str:
        top, bottom = med(a, attr), med(b, attr)
        return f"{top / bottom:.2f}" if bottom else "n/a"

    print()
    print(f"sweep / fixed (Mpps, goal >= 0.95):                 {ratio('sweep', 'fixed', 'mpps')}")
    print(f"2 threads / 1 thread (Mpps):                        {ratio('sweep x2', 'sweep', 'mpps')}")
    print(f"sweep / C sweep (Mpps per core, goal >= 1.0):       {ratio('sweep', 'C sweep', 'per_core')}")
    print(f"fixed / C fixed (Mpps per core):                    {ratio('fixed', 'C fixed', 'per_core')}")
    print(f"sweep / sendmmsg (Mpps per core):                   {ratio('sweep', 'sendmmsg', 'per_core')}")


def main() -> int:
    parser = measuring_parser(__doc__, "rounds over all senders", batch=64)
    args = parser.parse_args()
    if refusal := cannot_run("bench_trafficgen", "the senders and the sink"):
        print(refusal, file=sys.stderr)
        return 1
    command = shlex.join([sys.executable, *sys.argv])
    interrupt_on(signal.SIGTERM)
    for line in sh("ip", "netns", "list").splitlines():  # namespaces of an earlier run whose process is gone
        m = re.match(rf"({PREFIX}-(\d+)-tg)\b", line)
        if m and not Path(f"/proc/{m.group(2)}").exists():
            subprocess.run(["ip", "netns", "del", m.group(1)], check=False)
    bed = Bed(f"{PREFIX}-{os.getpid()}-tg", args.batch)
    points, unavailable = [], {}
    try:
        for rnd in range(1, args.rounds + 1):
            for scenario in SCENARIOS:
                if scenario in unavailable:
                    continue
                try:
                    p = measure(bed, scenario, args.warmup, args.seconds)
                except Unavailable as exc:
                    unavailable[scenario] = str(exc)
                    print(f"round {rnd} {scenario:<9} unavailable: {exc}", flush=True)
                    continue
                points.append(p)
                print(f"round {rnd} {scenario:<9} {p.mpps:7.3f} Mpps  {p.cores:4.2f} CPUs  "
                      f"{p.per_core:6.3f} Mpps/core", flush=True)  # fmt: skip
    finally:
        bed.close()
    report(points, command, unavailable)
    return 0


if __name__ == "__main__":
    sys.exit(main())
