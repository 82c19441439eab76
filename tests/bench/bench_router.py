#!/usr/bin/env python3
"""Benchmark: the XDP router (bpf/router) against the kernel's forwarding, with and without a conntrack rule, and
against xdp-tools' xdp-forward, in one run (the reference measurement's table, tests/bench/README.md).

Not a test (pytest does not collect bench_*.py): it prints a table of ratios from one run. Needs root.

The namespaces of the router's kernel tests (tests/kernel/router_netns.py): e1 -- p1 [r] p2 -- e2, r forwarding
(its neighbour for e2 static: the sink answers no ARP). Scenarios, one at a time on the same namespaces:

  kernel            r's kernel forwards (no XDP on r)
  kernel+conntrack  the same with an nftables forward rule that tracks connections (`ct state new,established
                    accept`, what an `iptables -m conntrack` rule does)
  xdp router        the collection's router on p1 and p2, deployed by router/deploy.py
  xdp-forward       xdp-tools' xdp-forward (`xdp-forward load p1 p2`, fib mode), given by --xdp-forward PATH or
                    XDPFLEET_XDP_FORWARD; built outside the project (tests/bench/README.md), "not measured" without it

Offered load: the collection's live-frames sender (trafficgen/generator.py) in e1, a thread pinned to CPU 0, sends
64-byte UDP frames of 64 flows (source ports) to e2 out of e1's eth0, so they arrive on r:p1. p1's NAPI is threaded
and pinned to CPU 1, which does all the forwarding (and the sink's receive). The sink, an XDP program on e2's eth0
(tests/bench/bpf/bench.c), counts and drops. Per point: the rate at the sink, and per core: the frames counted per
second of CPU time of p1's NAPI thread and CPU 1's ksoftirqd (the forwarding's CPU). Points alternate through the
scenarios (A B C D A B C D ...); medians; ratios to the kernel's forwarding.

Against the reference measurement (+6 % over the kernel, +43 % with conntrack, measured in pps with pktgen): pktgen
hands veth skbs, so its XDP forwarder still paid for an skb per frame; the live-frames sender hands p1 XDP frames,
which the router forwards without ever building an skb while the kernel must build one (The eXpress Data Path,
CoNEXT 2018), so the gap here is larger.
The ratio kernel+conntrack / kernel is the one that compares like with like.

make bench-router runs it (BENCH_ARGS="--seconds 1 --rounds 1" for a short try).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import statistics
import struct
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
sys.path.insert(0, str(REPO / "tests" / "bench"))

from bench_cli import cannot_run, interrupt_on, measuring_parser
from bench_vtep import compile_bpf, cpu_times, ksoftirqd, napi_threads, runtime_ns
from l2lib import netns
from router_netns import E1_V4, E2_V4, RouterNetns
from vtep_netns import port_facts

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt

PREFIX = "xrb"
SENDER_CPU, DUT_CPU = 0, 1
SCENARIOS = ("kernel", "kernel+conntrack", "xdp router", "xdp-forward")
FLOWS = 64
CONNTRACK_RULESET = (
    "add table inet xrbench; add chain inet xrbench forward { type filter hook forward priority 0; }; "
    "add rule inet xrbench forward ct state new,established accept"
)
# The reference measurement's figures (pps on veth, kernel 6.8, tests/bench/README.md): the XDP forwarder against
# the kernel, without and with conntrack.
REFERENCE = {"kernel": 283040, "xdp vs kernel": 301884, "kernel+conntrack": 210708, "xdp vs conntrack": 302602}


@dataclass
class Point:
    scenario: str
    mpps: float  # at the sink
    per_core: float  # Mpps per second of the forwarding CPU's time
    busy: float  # % of CPU 1 busy (anything on it)


class Bench:
    def __init__(self, prefix: str, batch: int, xdp_forward: str | None):
        self.batch = batch
        self.xdp_forward = xdp_forward
        self.lab = RouterNetns.create(prefix)
        self.sink_link = None
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self) -> None:
        lab = self.lab
        for node in ("e1", "e2"):
            lab.exec(node, "sysctl", "-qw", "net.ipv6.conf.eth0.disable_ipv6=1")  # no ND or MLD alongside
        with netns(lab.ns["e2"]):
            sink_mac = port_facts("eth0").mac
        with netns(lab.ns["r"]):
            p1_mac = port_facts("p1").mac
        lab.exec("r", "ip", "neigh", "replace", E2_V4, "lladdr", sink_mac, "dev", "p2", "nud", "permanent")
        include = [REPO / "bpf" / "include"]
        self.sink = libbpf.BpfObject(compile_bpf(REPO / "tests" / "bench" / "bpf" / "bench.c", include))
        self.sink.load()
        with netns(lab.ns["e2"]):
            self.sink_link = libbpf.xdp_link_create(self.sink.program("bench_sink").fd, xp.ifindex_of("eth0"), "native")
        before = napi_threads("p1")
        lab.exec("r", "ethtool", "-K", "p1", "gro", "on")  # a veth has NAPI (to thread) with GRO or XDP on
        lab.exec("r", "sh", "-c", "echo 1 > /sys/class/net/p1/threaded")
        deadline = time.monotonic() + 2
        while set(napi_threads("p1")) == set(before) and time.monotonic() < deadline:
            time.sleep(0.02)
        new = set(napi_threads("p1")) - set(before)
        if len(new) != 1:
            raise RuntimeError(f"expected one new napi/p1-* kthread, found {sorted(new)}")
        self.napi_pid = new.pop()
        os.sched_setaffinity(self.napi_pid, {DUT_CPU})
        self.softirqd = ksoftirqd(DUT_CPU)
        headers = [{"ethernet": {}}, {"ipv4": {"src": E1_V4, "dst": E2_V4}}, {"udp": {"src": 1024, "dst": 9}}]
        doc = {
            "name": "router-bench",
            "packets": [{"headers": headers}],
            "variations": [{"field": "udp.src", "range": [1024, 1024 + FLOWS - 1]}],
        }
        with netns(lab.ns["e1"]):
            self.template = pt.build(doc, src_mac=port_facts("eth0").mac, dst_mac=p1_mac)
        self.sender_obj = compile_bpf(REPO / "bpf" / "trafficgen" / "sender.c", include)

    def sunk(self) -> int:
        raw = self.sink.map("sink_counters").lookup(struct.pack("<I", 0))
        return sum(struct.unpack_from("<Q", raw, off)[0] for off in range(0, len(raw), 16))

    # --- Scenarios: set up, measure, take down -------------------------------------------------------------------

    def unavailable(self, scenario: str) -> str | None:
        if scenario == "xdp-forward" and not self.xdp_forward:
            return "no xdp-forward given (--xdp-forward PATH or XDPFLEET_XDP_FORWARD; tests/bench/README.md builds one)"
        if scenario == "xdp-forward" and not os.access(self.xdp_forward, os.X_OK):
            return f"{self.xdp_forward} is not an executable"
        return None

    def start(self, scenario: str) -> None:
        if scenario == "kernel+conntrack":
            self.lab.exec("r", "nft", CONNTRACK_RULESET)
        elif scenario == "xdp router":
            self.lab.deploy()
        elif scenario == "xdp-forward":
            self.lab.exec("r", self.xdp_forward, "load", "p1", "p2")

    def stop(self, scenario: str) -> None:
        if scenario == "kernel+conntrack":
            self.lab.exec("r", "nft", "delete", "table", "inet", "xrbench", check=False)
        elif scenario == "xdp router":
            self.lab.remove()
        elif scenario == "xdp-forward":
            self.lab.exec("r", self.xdp_forward, "unload", "p1", "p2", check=False)

    def check(self, scenario: str) -> str:
        """What runs on p1 in this scenario, to be sure each measures what it says."""
        xdp = json.loads(self.lab.exec("r", "ip", "-j", "link", "show", "p1").stdout)[0].get("xdp")
        name = xdp["prog"]["name"] if xdp and "prog" in xdp else ("libxdp dispatcher" if xdp else "none")
        return name

    def measure(self, scenario: str, warmup: float, seconds: float) -> Point:
        with netns(self.lab.ns["e1"]):
            sender = tg.Sender(self.sender_obj, self.template, "eth0", [SENDER_CPU], self.batch)
        stop = threading.Event()
        box: dict = {}

        def run():
            with netns(self.lab.ns["e1"]):
                try:
                    box["run"] = sender.run(seconds=warmup + seconds + 10, stop=stop)
                except Exception as exc:  # reported after the window
                    box["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        try:
            time.sleep(warmup)
            n0, c0, t0 = self.sunk(), cpu_times(DUT_CPU), time.monotonic()
            r0 = runtime_ns(self.napi_pid) + runtime_ns(self.softirqd)
            time.sleep(seconds)
            n1, c1, t1 = self.sunk(), cpu_times(DUT_CPU), time.monotonic()
            r1 = runtime_ns(self.napi_pid) + runtime_ns(self.softirqd)
        finally:
            stop.set()
            thread.join()
            sender.close()
        if "error" in box:
            raise box["error"]
        frames, cpu_s = n1 - n0, (r1 - r0) / 1e9
        busy = 100 * (c1[0] - c0[0]) / max(1, c1[1] - c0[1])
        return Point(scenario, frames / (t1 - t0) / 1e6, frames / cpu_s / 1e6 if cpu_s > 0 else 0.0, busy)

    def close(self) -> None:
        if self.sink_link is not None:
            os.close(self.sink_link)
        self.lab.close()


def report(points: list[Point], command: str, unavailable: dict[str, str], running: dict[str, str]) -> None:
    def med(scenario: str, attr: str) -> float:
        values = [getattr(p, attr) for p in points if p.scenario == scenario]
        return statistics.median(values) if values else 0.0

    print(f"\n$ {command}")
    rounds = len(points) // max(1, len(running))
    print(f"64 B UDP frames, {FLOWS} flows, e1 -> p1 [r] p2 -> e2 on veth; sender on CPU {SENDER_CPU}, p1's NAPI on "
          f"CPU {DUT_CPU}; sink = XDP count-and-drop on e2; medians of {rounds} points")  # fmt: skip
    print(f"{'scenario':<18} {'on p1':<18} {'Mpps':>7} {'CPU1 busy':>9} {'Mpps/core':>9} {'/ kernel':>8}")
    base = med("kernel", "per_core")
    for s in SCENARIOS:
        if s in unavailable:
            print(f"{s:<18} not measured: {unavailable[s]}")
            continue
        ratio = f"{med(s, 'per_core') / base:8.2f}" if base else f"{'n/a':>8}"
        mpps, busy, per_core = med(s, "mpps"), med(s, "busy"), med(s, "per_core")
        print(f"{s:<18} {running[s]:<18} {mpps:7.3f} {busy:8.0f}% {per_core:9.3f} {ratio}")

    def ratio(a: str, b: str) -> str:
        top, bottom = med(a, "per_core"), med(b, "per_core")
        return f"{top / bottom:.2f}" if top and bottom else "n/a"

    print()
    print(f"xdp router / kernel (per core):            {ratio('xdp router', 'kernel')}"
          f"   reference: {REFERENCE['xdp vs kernel'] / REFERENCE['kernel']:.2f}")  # fmt: skip
    print(f"xdp router / kernel+conntrack (per core):  {ratio('xdp router', 'kernel+conntrack')}"
          f"   reference: {REFERENCE['xdp vs conntrack'] / REFERENCE['kernel+conntrack']:.2f}")  # fmt: skip
    print(f"kernel+conntrack / kernel (per core):      {ratio('kernel+conntrack', 'kernel')}"
          f"   reference: {REFERENCE['kernel+conntrack'] / REFERENCE['kernel']:.2f}")  # fmt: skip
    print(f"xdp router / xdp-forward (per core):       {ratio('xdp router', 'xdp-forward')}")


def main() -> int:
    parser = measuring_parser(__doc__, "rounds over all scenarios", batch=64)
    parser.add_argument(
        "--xdp-forward",
        default=os.environ.get("XDPFLEET_XDP_FORWARD"),
        help="path of xdp-tools' xdp-forward (default: $XDPFLEET_XDP_FORWARD); without it that row is not measured",
    )
    args = parser.parse_args()
    if refusal := cannot_run("bench_router", "sender on CPU 0, forwarding on CPU 1"):
        print(refusal, file=sys.stderr)
        return 1
    command = shlex.join([sys.executable, *sys.argv])
    interrupt_on(signal.SIGTERM)
    os.sched_setaffinity(0, {SENDER_CPU})  # keep this process off the forwarding CPU
    prefix = f"{PREFIX}{os.getpid()}"
    bench = Bench(prefix, args.batch, args.xdp_forward)
    points: list[Point] = []
    unavailable: dict[str, str] = {}
    running: dict[str, str] = {}
    try:
        for s in SCENARIOS:
            if why := bench.unavailable(s):
                unavailable[s] = why
        for n in range(args.rounds):
            for s in SCENARIOS:
                if s in unavailable:
                    continue
                try:
                    bench.start(s)
                except subprocess.CalledProcessError as exc:
                    unavailable[s] = f"setting it up failed: {(exc.stderr or exc.stdout or str(exc)).strip()}"
                    bench.stop(s)
                    continue
                try:
                    running[s] = bench.check(s)
                    point = bench.measure(s, args.warmup, args.seconds)
                finally:
                    bench.stop(s)
                points.append(point)
                print(f"round {n + 1} {s:<18} {point.mpps:7.3f} Mpps  {point.per_core:7.3f} Mpps/core  "
                      f"CPU1 {point.busy:3.0f}%", flush=True)  # fmt: skip
    finally:
        bench.close()
    report(points, command, unavailable, running)
    return 0


if __name__ == "__main__":
    sys.exit(main())
