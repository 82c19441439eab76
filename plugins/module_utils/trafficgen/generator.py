# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The traffic generator on a host (bpf/trafficgen): the pre-flight check, the sender and its trials.

A Sender loads bpf/trafficgen/sender.c once, attaches its return counter to the interface through a bpf_link
that only this process holds (so nothing stays behind when it exits, however it exits), and sends with
BPF_PROG_RUN in live-frames mode from one thread per chosen CPU. ctypes releases the GIL during the call, so the
threads run in parallel; each call is sized to last about CALL_SECONDS, because every call ends with ~24 ms of
kernel teardown. Between runs the template can change (a frame-size sweep reloads only the maps).

The echo server (bpf/trafficgen/echo.c) is an ordinary attached instance (xdp_program.Instance), kept by pins.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
import threading
import time
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import TypedMap, set_rodata
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.probe import Probe, xdp_md
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.layouts import (
    SENDER_LAYOUTS,
    TgBase,
    TgCounter,
    TgCpu,
    TgEntry,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.rfc2544 import Trial
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.templates import Expanded

BATCH_MAX = 256  # the kernel's limit for live-frames batches
CALL_SECONDS = 0.5  # one BPF_PROG_RUN call lasts about this long: the ~24 ms teardown stays under 5%
FIRST_REPEAT = 1 << 18
DRAIN_SECONDS = 1.0  # after sending, wait at most this long for frames still on their way back


class TrafficgenError(RuntimeError):
    """A refusal or failure, worded for the person running the playbook (it names the fix where there is one)."""


# ---- pre-flight ----------------------------------------------------------------------------------------------


# A running sender records its pid and start time in <run_dir>/trafficgen-<interface>.pid and appends each second's
# sample to trafficgen-<interface>.jsonl; it removes both when it ends. state=absent and teardown find senders by
# these, and signal only the process both numbers name (a pid alone may since belong to another process).
SENDER_RECORD_PREFIX = "trafficgen-"


def sender_pid_file(run_dir: str, ifname: str) -> str:
    return os.path.join(run_dir, f"{SENDER_RECORD_PREFIX}{ifname}.pid")


def sender_stats_file(run_dir: str, ifname: str) -> str:
    return os.path.join(run_dir, f"{SENDER_RECORD_PREFIX}{ifname}.jsonl")


def process_start_time(pid: int) -> int | None:
    """When a process started (clock ticks since boot, field 22 of /proc/<pid>/stat), None when there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])  # the fields after the name start at field 3
    except (OSError, IndexError, ValueError):
        return None


def record_sender(path: str) -> None:
    """Record this process as the running sender (pid and start time)."""
    files.write_private(path, f"{os.getpid()} {process_start_time(os.getpid())}\n")


def running_sender(path: str) -> int | None:
    """The pid recorded by a sender that is still alive, else None. The process must have the recorded start time
    too: a record left by a sender that was killed may name a pid the kernel has since given to another process."""
    try:
        with open(path) as f:
            pid, started = (int(word) for word in f.read().split())
    except (OSError, ValueError):  # no record, or one without a start time: nothing proves the process is ours
        return None
    if pid <= 0 or process_start_time(pid) != started:  # pid <= 0: kill() would reach a whole process group
        return None
    return pid


def preflight(ifname: str, threads: int, sends: bool = True) -> tuple[dict, list[str]]:
    """Refuse, naming the fix, where this host or interface cannot send live frames (sends: the echo server sends
    none, so it is not refused for them); return the facts the report needs (environment) and warnings for what
    works but is slow."""
    if not netdev.exists(ifname):
        raise TrafficgenError(f"interface: {ifname} does not exist on this host")
    with Probe() as probe:
        host = probe.host()
        iface = probe.interface(ifname, attach=False, live=False, live_support=host["live_frames"], cpus=threads)
    live = host["live_frames"]
    if sends and not live["supported"]:
        raise TrafficgenError(f"BPF_PROG_RUN in live-frames mode failed on this host: {live['error']}")
    if iface["operstate"] in ("down", "lowerlayerdown", "notpresent"):
        raise TrafficgenError(f"interface {ifname} is {iface['operstate']}: bring it up (ip link set {ifname} up)")
    warnings = []
    peer = iface.get("peer") or {}
    if iface.get("driver") == "veth" and threads > 1 and (iface["queues"]["tx"] or 1) < threads:
        warnings.append(
            f"{ifname}: a veth with {iface['queues']['tx']} queue(s) serializes {threads} sender threads on one "
            "receive queue of its peer: create the pair with numrxqueues/numtxqueues >= threads"
        )
    return environment(ifname, host, iface, peer), warnings


def environment(ifname: str, host: dict, iface: dict, peer: dict) -> dict:
    speed = netdev.read_text(f"/sys/class/net/{ifname}/speed")
    numa = netdev.read_text(f"/sys/class/net/{ifname}/device/numa_node")
    cpuinfo = netdev.read_text("/proc/cpuinfo") or ""
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), None
    )
    return {
        "kernel": host["kernel"]["release"],
        "cmdline": netdev.read_text("/proc/cmdline"),
        "driver": iface.get("driver"),
        "driver_version": iface.get("driver_version"),
        "firmware_version": iface.get("firmware_version"),
        "bus_info": iface.get("bus_info"),
        "speed_mbps": int(speed) if speed and speed.lstrip("-").isdigit() and int(speed) > 0 else None,
        "numa_node": int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
        "queues": iface["queues"],
        "channels": iface.get("channels"),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mac": iface.get("mac"),
        "peer": peer.get("name"),
    }


# Drivers whose ndo_xdp_xmit takes frames only while an XDP program is attached to the device natively: they set up
# their XDP transmit queues then (from the kernel's sources). The sender's live frames leave through ndo_xdp_xmit, so
# with its return counter attached in generic mode every frame is dropped, and not counted as sent-and-lost by the
# driver. mlx5 is not one: it opens a send queue for redirected frames with every channel, XDP program or not.
NATIVE_XMIT_DRIVERS = {
    "virtio_net": "virtnet_xdp_xmit refuses frames (ENXIO) while no program is attached natively",
    "ice": "its XDP transmit rings exist only while a program is attached natively",
    "i40e": "i40e_xdp_xmit refuses frames (ENXIO) while no program is attached natively",
    "ixgbe": "its XDP transmit rings exist only while a program is attached natively",
}


def generic_send_problem(ifname: str, driver: str | None, attach_mode: str) -> str | None:
    """Why the sender cannot send from ifname with its return counter attached in attach_mode; None when it can."""
    why = NATIVE_XMIT_DRIVERS.get(driver or "")
    if attach_mode != "generic" or why is None:
        return None
    return (
        f"attach_mode: generic cannot send from {ifname}: driver {driver} transmits XDP frames (ndo_xdp_xmit) only "
        f"while an XDP program is attached natively ({why}), so every frame would be dropped; use attach_mode: native"
    )


def can_transmit_xdp(ifname: str) -> bool | None:
    """Whether the driver announces ndo-xmit now (None: the kernel does not report XDP features)."""
    features = (netdev.xdp_features(socket.if_nametoindex(ifname)) or {}).get("flags")
    return None if features is None else "ndo-xmit" in features


# ---- the sender -----------------------------------------------------------------------------------------------


@dataclass
class RunResult:
    seconds: float
    sent: int
    sent_bytes: int
    received: int
    received_bytes: int
    paced: int
    per_cpu: dict[int, dict]
    samples: list[dict]
    interface: dict[str, int]

    def trial(self, rate_pps: float | None) -> Trial:
        return Trial(rate_pps=rate_pps, seconds=self.seconds, sent=self.sent, received=self.received)

    def as_dict(self) -> dict:
        return {
            "seconds": round(self.seconds, 3),
            "sent": self.sent,
            "sent_bytes": self.sent_bytes,
            "received": self.received,
            "received_bytes": self.received_bytes,
            "lost": self.sent - self.received,
            "tx_pps": round(self.sent / self.seconds) if self.seconds else 0,
            "rx_pps": round(self.received / self.seconds) if self.seconds else 0,
            "per_cpu": self.per_cpu,
            "samples": self.samples,
            "interface": self.interface,
        }


@dataclass
class _Totals:
    tx: dict[int, tuple[int, int]] = field(default_factory=dict)  # cpu -> (packets, bytes)
    paced: int = 0
    rx: tuple[int, int] = (0, 0)

    @property
    def sent(self) -> int:
        return sum(packets for packets, _octets in self.tx.values())

    @property
    def sent_bytes(self) -> int:
        return sum(octets for _packets, octets in self.tx.values())


def _interface_counters(ifname: str) -> dict[str, int]:
    counters = {f"sysfs.{k}": v for k, v in netdev.statistics(ifname).items() if v is not None}
    with contextlib.suppress(OSError):  # a driver without ethtool statistics
        counters.update({f"ethtool.{k}": v for k, v in netdev.ethtool_stats(ifname).items()})
    return counters


class Sender:
    """The loaded sender object, its return counter attached to `ifname`, and the threads that send."""

    def __init__(
        self,
        object_path: str,
        template: Expanded,
        ifname: str,
        cpus: list[int],
        batch_size: int = 64,
        attach_mode: str = "native",
    ):
        if not 1 <= batch_size <= BATCH_MAX:
            raise TrafficgenError(f"batch_size: {batch_size} is not in 1..{BATCH_MAX}")
        possible = libbpf.num_possible_cpus()
        allowed = os.sched_getaffinity(0)
        bad = [c for c in cpus if c not in allowed or c >= possible]
        if not cpus or bad:
            raise TrafficgenError(f"cpus: {bad or cpus} not usable here (this process may run on {sorted(allowed)})")
        self.ifname = ifname
        self.ifindex = socket.if_nametoindex(ifname)  # by ioctl: right in whatever network namespace this runs
        self.cpus = list(cpus)
        self.batch_size = batch_size
        self.link_fd: int | None = None
        self.obj = libbpf.BpfObject(object_path)
        try:
            for layout in SENDER_LAYOUTS.values():
                layout.check_object(self.obj)
            lo, hi = template.udp_dst_ports
            set_rodata(self.obj, {"return_port_lo": lo, "return_port_hi": hi})
            self.obj.map("tg_entries").set_max_entries(len(template.entries))
            self.obj.load()
            self.maps = {name: TypedMap(self.obj.map(name), layout) for name, layout in SENDER_LAYOUTS.items()}
            self.send_fd = self.obj.program("xdp_send").fd
            self.link_fd = libbpf.xdp_link_create(self.obj.program("xdp_count_return").fd, self.ifindex, attach_mode)
        except Exception:
            self.close()
            raise
        self.load_template(template)

    def close(self) -> None:
        if self.link_fd is not None:
            os.close(self.link_fd)  # the link is held by this fd only: closing it detaches the return counter
            self.link_fd = None
        self.obj.close()

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def load_template(self, template: Expanded) -> None:
        """Write the template's bases and entries; the same object serves every frame size of a sweep."""
        entries = self.maps["tg_entries"]
        if len(template.entries) > entries.map.max_entries:
            raise TrafficgenError(f"template {template.name}: more entries than the loaded sender holds")
        for index, base in enumerate(template.bases):
            header = TgBase()
            chunk = base.frame[: template.header_len]
            ctypes.memmove(header.header, chunk, len(chunk))
            self.maps["tg_bases"].set(index, header)
        rows = []
        for index, entry in enumerate(template.entries):
            value = TgEntry(
                base=entry.base, diff_count=len(entry.diffs), frame_len=len(template.bases[entry.base].frame)
            )
            for n, diff in enumerate(entry.diffs):
                value.diffs[n].offset = diff.offset
                value.diffs[n].size = len(diff.value)
                ctypes.memmove(value.diffs[n].value, diff.value, len(diff.value))
            rows.append((bytes(ctypes.c_uint32(index)), bytes(value)))
        entries.map.update_batch(rows)
        # data_in: the longest base, padded to the header region that every frame rewrites.
        self.data_in = template.data_in().ljust(template.header_len, b"\0")
        self.template = template

    def _controls(self, rate_pps: float | None, count: int | None) -> list[TgCpu]:
        n = len(self.cpus)
        per_cpu = []
        for cpu in range(libbpf.num_possible_cpus()):
            value = TgCpu(
                entry_count=len(self.template.entries),
                header_words=self.template.header_len // 8,
                data_len=len(self.data_in),
            )
            if cpu in self.cpus:
                share = self.cpus.index(cpu)
                if rate_pps:
                    value.interval_ns = max(1, round(n * 1e9 / rate_pps))
                if count:
                    value.limit = count // n + (1 if share < count % n else 0)
            per_cpu.append(value)
        return per_cpu

    def _totals(self) -> _Totals:
        cpus = self.maps["tg_cpu"].get(0)
        returned = self.maps["tg_returned"].get(0)
        return _Totals(
            tx={c: (cpus[c].tx_packets, cpus[c].tx_bytes) for c in self.cpus},
            paced=sum(v.paced for v in cpus),
            rx=(sum(v.packets for v in returned), sum(v.bytes for v in returned)),
        )

    def _thread(
        self,
        cpu: int,
        limit: int,
        paced: bool,
        deadline: float | None,
        stop: threading.Event,
        errors: list[str],
        spans: dict[int, tuple[float, float]],
    ) -> None:
        """Send from one CPU; record when its first call started and its last call ended in spans[cpu]."""
        try:
            os.sched_setaffinity(0, {cpu})  # 0 = the calling thread
            ctx = xdp_md(len(self.data_in), self.ifindex)
            repeat = FIRST_REPEAT
            while not stop.is_set():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    break
                n = repeat
                if limit:
                    left = limit - self.maps["tg_cpu"].get(0)[cpu].tx_packets
                    if left <= 0:
                        break
                    if not paced:
                        n = min(n, left)
                if deadline is not None:
                    n = min(n, max(1, int(repeat * (deadline - now) / CALL_SECONDS)))
                started = time.monotonic()
                spans[cpu] = (spans.get(cpu, (started, 0))[0], 0)
                libbpf.prog_test_run(
                    self.send_fd,
                    self.data_in,
                    repeat=n,
                    flags=libbpf.BPF_F_TEST_XDP_LIVE_FRAMES,
                    batch_size=self.batch_size,
                    ctx=ctx,
                )
                ended = time.monotonic()
                spans[cpu] = (spans[cpu][0], ended)
                took = max(ended - started, 1e-3)
                repeat = max(BATCH_MAX, min(int(n * CALL_SECONDS / took), 0xFFFFFFFF))
        except OSError as exc:
            errors.append(f"cpu {cpu}: {exc}")
            stop.set()

    def run(
        self,
        *,
        seconds: float | None = None,
        count: int | None = None,
        rate_pps: float | None = None,
        stop: threading.Event | None = None,
        sample_every: float = 1.0,
        on_sample=None,
    ) -> RunResult:
        """Send for `seconds`, or until `count` frames left, at `rate_pps` (None: as fast as possible)."""
        if not seconds and not count:
            raise TrafficgenError("a run needs a duration or a count")
        stop = stop or threading.Event()
        controls = self._controls(rate_pps, count)
        self.maps["tg_cpu"].set(0, controls)
        self.maps["tg_returned"].set(0, TgCounter())
        iface_before = _interface_counters(self.ifname)
        errors: list[str] = []
        spans: dict[int, tuple[float, float]] = {}
        started = time.monotonic()
        deadline = started + seconds if seconds else None
        threads = [
            threading.Thread(
                target=self._thread,
                args=(cpu, controls[cpu].limit, bool(rate_pps), deadline, stop, errors, spans),
                name=f"tg-send-{cpu}",
                daemon=True,
            )
            for cpu in self.cpus
        ]
        for t in threads:
            t.start()
        samples, last, last_at = [], self._totals(), started
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=max(0.0, last_at + sample_every - time.monotonic()))
            now_totals, now = self._totals(), time.monotonic()
            samples.append(_sample(now - started, now - last_at, last, now_totals))
            if on_sample:
                on_sample(samples[-1])
            last, last_at = now_totals, now
        if errors:
            raise TrafficgenError("sending failed: " + "; ".join(errors))
        totals = self._drain()
        iface_after = _interface_counters(self.ifname)
        return RunResult(
            # from the first call's start to the last call's end: thread start-up is not sending time
            seconds=max((end for _start, end in spans.values()), default=0)
            - min((start for start, _end in spans.values()), default=0),
            sent=totals.sent,
            sent_bytes=totals.sent_bytes,
            received=totals.rx[0],
            received_bytes=totals.rx[1],
            paced=totals.paced,
            per_cpu={c: {"sent": p, "sent_bytes": b} for c, (p, b) in totals.tx.items()},
            samples=samples,
            interface={k: v - iface_before.get(k, 0) for k, v in iface_after.items() if v != iface_before.get(k, 0)},
        )

    def _drain(self) -> _Totals:
        """Frames still in flight come back within milliseconds: wait until the return count settles."""
        totals, until = self._totals(), time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < until and totals.rx[0] < totals.sent:
            time.sleep(0.05)
            again = self._totals()
            if again.rx == totals.rx:
                break
            totals = again
        return totals


def _sample(at: float, dt: float, before: _Totals, after: _Totals) -> dict:
    dt = max(dt, 1e-6)
    per_cpu = {cpu: round((after.tx[cpu][0] - before.tx.get(cpu, (0, 0))[0]) / dt) for cpu in after.tx}
    tx_bytes = after.sent_bytes - before.sent_bytes
    rx_packets, rx_bytes = after.rx[0] - before.rx[0], after.rx[1] - before.rx[1]
    return {
        "t": round(at, 2),
        "tx_pps": round((after.sent - before.sent) / dt),
        "rx_pps": round(rx_packets / dt),
        # bit rates on the wire: 24 bytes per frame of FCS, preamble and inter-frame gap that no counter sees
        "tx_bps": round((tx_bytes + 24 * (after.sent - before.sent)) * 8 / dt),
        "rx_bps": round((rx_bytes + 24 * rx_packets) * 8 / dt),
        "tx_pps_per_cpu": per_cpu,
    }
