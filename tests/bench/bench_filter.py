#!/usr/bin/env python3
"""Benchmark: the packet filter (bpf/filter) at XDP against the same filter at tc, per kind of input, in one run.

XDP saves work over tc only where it runs before the kernel builds an skb (Hoiland-Jorgensen et al., The eXpress
Data Path, CoNEXT 2018). On veth that depends on what arrives, so two kinds of input are measured, each at both hooks:

  xdp frames    the project's live-frames sender (plugins/module_utils/trafficgen, XDP_TX out of `src`): the frames
                reach `dut` as XDP frames; native XDP drops them before any skb exists, tc sees the skb veth builds
  socket frames a process (tests/bench/native/packet_sender.c) sends the same frame through an AF_PACKET socket
                into `src`: the frames are skbs before either hook runs (native XDP on veth runs on the skb)

One namespace <prefix>-flt-<pid> with a veth pair src -> dut. The filter runs on dut's ingress with two rules: a
count rule that never matches (tcp port 22) and `drop udp dst_port 9`, which every frame matches (udp4, 64 bytes).
The sender is pinned to CPU 0. dut's NAPI is threaded and its kthread pinned to CPU 1, and dut has GRO on so that it
has NAPI at both hooks (veth takes XDP frames only with NAPI, and queues a socket's skbs on it); src has TSO off,
because veth queues an skb on the peer's NAPI only then (veth_skb_is_eligible_for_gro): otherwise it delivers the
socket's skbs with netif_rx in the sender's context on CPU 0, and the receive CPU's time would not be the filter's.
The drop rate per core is frames dropped (the rule's counter) per second of CPU time of dut's NAPI kthread and CPU
1's ksoftirqd. Points alternate (XDP, tc, XDP, tc, ...); medians reported, and the ratio XDP/tc per input kind.

Skbs: the reference measurement counted them with kprobes on __netif_receive_skb_core and __alloc_skb. This kernel
has no kprobes, and a tracing (fentry) program fails to load with EPERM (tests/bench/README.md), so the bench cannot
count skbs built. It prints instead the packets each CPU's receive core processed (/proc/net/softnet_stat, column 1:
incremented in __netif_receive_skb_core, the function the reference measurement probed), per frame dropped.

make bench-filter runs it (BENCH_ARGS="--seconds 1 --rounds 1" for a short try).
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import signal
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
sys.path.insert(0, str(REPO / "tests" / "bench"))

from bench_cli import cannot_run, interrupt_on, measuring_parser
from bench_vtep import compile_bpf, ksoftirqd, napi_threads, nsx, print_table, runtime_ns, sh
from l2lib import netns
from vtep_netns import port_facts

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import layouts, rules, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt

PREFIX = os.environ.get("XDPFLEET_TEST_LAB_PREFIX", "xk")
BUILD = REPO / ".build"
SENDER_CPU, DUT_CPU = 0, 1
BPF_TCX_INGRESS = 46
RULES = [
    {"name": "ssh", "action": "count", "protocol": "tcp", "dst_port": 22},
    {"name": "discard", "action": "drop", "protocol": "udp", "dst_port": 9},
]
INPUTS = ("xdp frames", "socket frames")
HOOKS = ("xdp", "tc")
# The reference measurement's XDP/tc figures per kind of input (tests/bench/README.md).
REFERENCE = {
    "xdp frames": ("+40% (virtio-net native, no skb)", 1.40),
    "socket frames": ("-1.7% (veth, skb input)", 0.983),
}


def softnet_processed() -> list[int]:
    """Packets each CPU's receive core processed (/proc/net/softnet_stat, column 1, hex)."""
    return [int(line.split()[0], 16) for line in Path("/proc/net/softnet_stat").read_text().splitlines()]


def kprobes_available() -> bool:
    return any(Path(d, "kprobe_events").exists() for d in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"))


@dataclass
class Point:
    input: str
    hook: str
    mpps: float  # frames dropped per wall second
    per_core: float  # frames dropped per second of the receive CPU's time (NAPI kthread + ksoftirqd/1)
    rx_share: float  # % of the wall time the receive work ran
    offered: float  # frames the sender sent per wall second
    stack: dict[int, float]  # CPU -> packets through its receive core per frame dropped


class Bed:
    def __init__(self, ns: str):
        self.ns = ns
        self.links: list[int] = []
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "add", "src", "type", "veth", "peer", "name", "dut")
        for dev in ("src", "dut"):
            nsx(ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        nsx(ns, "ethtool", "-K", "src", "tso", "off")
        nsx(ns, "ethtool", "-K", "dut", "gro", "on")
        with netns(ns):
            self.dut_ifindex = port_facts("dut").ifindex
            self.src_mac, self.dut_mac = port_facts("src").mac, port_facts("dut").mac
        before = set(napi_threads("dut"))
        nsx(ns, "sh", "-c", "echo 1 > /sys/class/net/dut/threaded")
        deadline = time.monotonic() + 2
        while not (new := set(napi_threads("dut")) - before) and time.monotonic() < deadline:
            time.sleep(0.02)
        if len(new) != 1:
            raise RuntimeError(f"{ns}: expected one new napi/dut-* kthread, found {sorted(new)}")
        self.napi_pid = new.pop()
        os.sched_setaffinity(self.napi_pid, {DUT_CPU})
        self.filter = libbpf.BpfObject(compile_bpf(REPO / "bpf" / "filter" / "filter.c", [REPO / "bpf" / "include"]))
        for layout in layouts.LAYOUTS.values():
            layout.check_object(self.filter)
        self.filter.load()
        self.maps = writer.typed({name: self.filter.map(name) for name in layouts.MAP_NAMES})
        writer.apply(self.maps, writer.plan(writer.read(self.maps), rules.validate(RULES), "bench"))
        self.template = pt.build(pt.EXAMPLES["udp4"], src_mac=self.src_mac, dst_mac=self.dut_mac)
        self.sender_obj = compile_bpf(REPO / "bpf" / "trafficgen" / "sender.c", [REPO / "bpf" / "include"])
        self.packet_sender = str(BUILD / "packet_sender")
        sh("clang", "-O2", "-o", self.packet_sender, str(REPO / "tests" / "bench" / "native" / "packet_sender.c"))

    def attach(self, hook: str) -> int:
        prog = self.filter.program(layouts.PROGRAMS[hook]).fd
        with netns(self.ns):
            if hook == "xdp":
                return libbpf.xdp_link_create(prog, self.dut_ifindex, "native")
            opts = libbpf._LinkCreateOpts(sz=ctypes.sizeof(libbpf._LinkCreateOpts))
            fd = libbpf.lib().bpf_link_create(prog, self.dut_ifindex, BPF_TCX_INGRESS, opts)
            return libbpf._check("bpf_link_create(tcx ingress dut)", fd)

    def dropped(self) -> int:
        return next(r["packets"] for r in writer.counters(self.maps)["rules"] if r["name"] == "discard")

    def start_xdp_frames(self):
        """The live-frames sender on CPU 0 until stopped; returns stop() -> frames sent."""
        with netns(self.ns):
            sender = tg.Sender(self.sender_obj, self.template, "src", [SENDER_CPU])
        stop, box = threading.Event(), {}

        def run():
            with netns(self.ns):
                try:
                    box["run"] = sender.run(seconds=3600, stop=stop)
                except Exception as exc:  # reported by stop()
                    box["error"] = exc

        thread = threading.Thread(target=run, daemon=True)
        thread.start()

        def finish() -> int:
            stop.set()
            thread.join()
            sender.close()
            if "error" in box:
                raise box["error"]
            return box["run"].sent

        return finish

    def start_socket_frames(self):
        argv = ["ip", "netns", "exec", self.ns, "taskset", "-c", str(SENDER_CPU), self.packet_sender, "src",
                self.template.frame(0).hex()]  # fmt: skip
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def finish() -> int:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=10)
            if proc.returncode:
                raise RuntimeError(f"{shlex.join(argv)}: {err.strip()}")
            return int(out.split()[-1])

        return finish

    def measure(self, kind: str, hook: str, seconds: float, warmup: float, softirqd: int) -> Point:
        link = self.attach(hook)
        started = time.monotonic()
        finish = self.start_xdp_frames() if kind == "xdp frames" else self.start_socket_frames()
        try:
            time.sleep(warmup)
            d0, s0, r0, t0 = self.dropped(), softnet_processed(), self.rx_time(softirqd), time.monotonic()
            time.sleep(seconds)
            d1, s1, r1, t1 = self.dropped(), softnet_processed(), self.rx_time(softirqd), time.monotonic()
        finally:
            sent = finish()
            os.close(link)
        dropped, rx = d1 - d0, (r1 - r0) / 1e9
        return Point(
            kind,
            hook,
            dropped / (t1 - t0) / 1e6,
            dropped / rx / 1e6 if rx else 0.0,
            100 * rx / (t1 - t0),
            sent / (time.monotonic() - started) / 1e6,
            {cpu: (s1[cpu] - s0[cpu]) / dropped if dropped else 0.0 for cpu in range(len(s0))},
        )

    def rx_time(self, softirqd: int) -> int:
        return runtime_ns(self.napi_pid) + runtime_ns(softirqd)

    def close(self) -> None:
        self.filter.close()
        subprocess.run(["ip", "netns", "del", self.ns], check=False, capture_output=True)


def remove_stale() -> None:
    """Namespaces of an earlier run whose process is gone (<prefix>-flt-<pid>)."""
    for line in sh("ip", "netns", "list").splitlines():
        m = re.match(rf"({re.escape(PREFIX)}-flt-(\d+))\b", line)
        if m and not Path(f"/proc/{m.group(2)}").exists():
            subprocess.run(["ip", "netns", "del", m.group(1)], check=False, capture_output=True)


def report(points: list[Point], command: str) -> None:
    def median(kind: str, hook: str, attr: str) -> float:
        return statistics.median(getattr(p, attr) for p in points if (p.input, p.hook) == (kind, hook))

    def stack(kind: str, hook: str, cpu: int) -> float:
        return statistics.median(p.stack.get(cpu, 0.0) for p in points if (p.input, p.hook) == (kind, hook))

    rounds = len(points) // (len(INPUTS) * len(HOOKS))
    print(f"\nPacket filter, XDP against tc, drop of every frame (udp4 64 B, rule 2 of 2), {rounds} rounds, medians")
    print(f"command: {command}\n")
    rows = [("input", "hook", "Mpps dropped", "Mpps per core (CPU 1)", "CPU 1 busy", "offered Mpps",
             "stack pkts/frame CPU 0", "CPU 1")]  # fmt: skip
    for kind in INPUTS:
        for hook in HOOKS:
            rows.append(
                (
                    kind,
                    hook,
                    f"{median(kind, hook, 'mpps'):.3f}",
                    f"{median(kind, hook, 'per_core'):.3f}",
                    f"{median(kind, hook, 'rx_share'):.0f}%",
                    f"{median(kind, hook, 'offered'):.3f}",
                    f"{stack(kind, hook, SENDER_CPU):.2f}",
                    f"{stack(kind, hook, DUT_CPU):.2f}",
                )
            )
    print_table(rows)
    print()
    # Agreement is on the finding, not the figure: XDP saves (more than 10% per core) or it does not.
    rows = [("input", "XDP/tc per core", "XDP/tc Mpps", "reference", "same finding (XDP saves > 10%)")]
    for kind in INPUTS:
        ratio = median(kind, "xdp", "per_core") / median(kind, "tc", "per_core")
        said, reference = REFERENCE[kind]
        agrees = "yes" if (ratio > 1.1) == (reference > 1.1) else "no"
        rows.append((kind, f"{ratio:.2f}", f"{median(kind, 'xdp', 'mpps') / median(kind, 'tc', 'mpps'):.2f}", said,
                     agrees))  # fmt: skip
    print_table(rows)
    print(
        "\nWhere the receive work runs: dut's NAPI kthread on CPU 1 for both inputs (socket frames reach it because"
        "\nsrc has TSO off and dut GRO on; otherwise veth hands a socket's skbs to netif_rx on the sender's CPU 0)."
        "\nSkbs built cannot be counted here: "
        + ("kprobes exist but this bench does not use them" if kprobes_available() else "this kernel has no kprobes")
        + ", and tracing (fentry) programs fail to load with EPERM."
        "\n'stack pkts/frame' is /proc/net/softnet_stat's processed column (one per skb through"
        " __netif_receive_skb_core) per frame dropped."
    )


def main() -> int:
    args = measuring_parser(__doc__, "A/B rounds").parse_args()
    if refusal := cannot_run("bench_filter", "sender on CPU 0, the filter on CPU 1"):
        print(refusal, file=sys.stderr)
        return 1
    interrupt_on(signal.SIGTERM)
    BUILD.mkdir(exist_ok=True)
    remove_stale()
    bed = Bed(f"{PREFIX}-flt-{os.getpid()}")
    softirqd = ksoftirqd(DUT_CPU)
    points = []
    try:
        for _ in range(args.rounds):
            for kind in INPUTS:
                for hook in HOOKS:
                    points.append(bed.measure(kind, hook, args.seconds, args.warmup, softirqd))
                    p = points[-1]
                    print(f"  {kind:13} {hook:3}: {p.mpps:.3f} Mpps dropped, {p.per_core:.3f} per core, "
                          f"CPU 1 {p.rx_share:.0f}%", flush=True)  # fmt: skip
    finally:
        bed.close()
    report(points, shlex.join([sys.executable, *sys.argv]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
