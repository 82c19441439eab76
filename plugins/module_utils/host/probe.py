# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What `xdperf probe` tells, as data: can this host and each of its interfaces run XDP and live-frames TX?

Host facts (kernel, BTF, bpffs, libbpf, CPUs, live-frames support) and per-interface facts (driver, queues,
channels, XDP features, the program attached now) are read without changing anything. Two tests change the
interface for a moment and run only when asked, because attaching XDP can reset a real NIC's rings:
- attach test: a PASS program is attached through bpf_link in native and in generic mode and detached at once;
  skipped when the interface already has an XDP program (bpf_link_create never replaces one anyway).
- live-frames test: ONE broadcast frame of the local-experimental ethertype 0x88B5 goes out of the interface
  through BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES and an XDP_TX program; the interface's counters tell
  whether it left.

The probe's programs are built here from raw instructions (`mov r0, ACTION; exit`) and loaded with
bpf_prog_load: no compiler, kernel headers or object files are needed on the host being probed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import platform
import re
import struct
import time

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.insn import BPF_EXIT, BPF_MOV64_IMM, bpf_insn
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import mounts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev

XDP_DROP, XDP_PASS, XDP_TX = 1, 2, 3
PROBE_ETHERTYPE = 0x88B5  # IEEE 802 local experimental ethertype 1: no protocol handler anywhere takes it
LIVE_FRAMES = features.feature("flag", "BPF_F_TEST_XDP_LIVE_FRAMES")
KERNEL_BTF = "/sys/kernel/btf/vmlinux"
BPFFS = "/sys/fs/bpf"
DOWN_STATES = ("down", "lowerlayerdown", "notpresent")
DEFAULT_TIMEOUT = 2.0

# ethtool -S counters that count XDP frames a driver transmitted (veth: tx_queue_N_xdp_xmit, mlx5: tx_xdp_xmit,
# ...) and the ones that count failures to transmit them.
_XDP_TX_COUNTER = re.compile(r"xdp.*(xmit|tx)|(xmit|tx).*xdp", re.IGNORECASE)
_XDP_TX_FAILURE = re.compile(r"err|drop|full|fail", re.IGNORECASE)


# ---- where XDP runs -----------------------------------------------------------------------------------------

# Drivers whose virtual devices receive what another device's stack already made into skbs: their native XDP runs
# on those skbs (veth: veth_xdp_rcv_skb), and before an skb only for frames that reach them as XDP frames.
SKB_FED_DRIVERS = ("veth",)


def xdp_before_skb(driver: str | None, mode: str, announces_basic: bool | None = None) -> dict:
    """Whether XDP in `mode` runs on frames from the wire before the kernel builds an skb, and why: the whole saving
    of XDP over tc (Hoiland-Jorgensen et al., The eXpress Data Path, CoNEXT 2018). A pure function of the driver,
    the mode and whether the driver announces native XDP (xdp_features "basic"; None where the kernel does not say).

    when: "always" (native XDP in a driver that runs it on the received buffer), "xdp_frames_only" (veth: frames
    redirected into it, sent with XDP_TX or as live frames arrive as XDP frames; frames a socket or the stack sends
    are skbs already) or "never" (generic mode runs after the skb is built; a driver without native XDP has only
    generic)."""
    if mode == "generic":
        return {"when": "never", "why": "generic XDP runs on the skb the kernel has already built (after tc would)"}
    if driver in SKB_FED_DRIVERS:
        return {
            "when": "xdp_frames_only",
            "why": f"{driver} runs native XDP before an skb only for frames that arrive as XDP frames (redirected, "
            "XDP_TX, live frames); frames its peer's stack or a socket sends are skbs already",
        }
    if announces_basic is False:
        return {"when": "never", "why": f"driver {driver or 'unknown'} has no native XDP (only generic, on the skb)"}
    return {"when": "always", "why": f"driver {driver or 'unknown'} runs native XDP on the received buffer"}


# ---- the programs ------------------------------------------------------------------------------------------


def xdp_return_program(action: int) -> bytes:
    """`r0 = action; exit`: the smallest XDP program, returning one fixed action."""
    return bpf_insn(BPF_MOV64_IMM, dst=0, imm=action) + bpf_insn(BPF_EXIT)


def probe_frame(src_mac: str | None) -> bytes:
    """60 bytes: broadcast destination, the interface's MAC as source, ethertype 0x88B5, a marker payload."""
    try:
        src = bytes.fromhex((src_mac or "").replace(":", ""))
    except ValueError:
        src = b""
    if len(src) != 6:
        src = b"\x02\x00\x00\x00\x00\x01"
    return (b"\xff" * 6 + src + struct.pack("!H", PROBE_ETHERTYPE) + b"xdpfleet probe").ljust(60, b"\0")


def xdp_md(frame_len: int, ingress_ifindex: int, rx_queue_index: int = 0) -> bytes:
    """struct xdp_md as BPF_PROG_RUN's ctx_in: data 0, data_end = frame length, the ingress device and queue."""
    return struct.pack("=6I", 0, frame_len, 0, ingress_ifindex, rx_queue_index, 0)


# ---- small helpers -----------------------------------------------------------------------------------------


def parse_kernel_release(release: str) -> tuple[int, int, int]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release)
    if not m:
        return (0, 0, 0)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def result(ok: bool | None, error: str | None = None, **extra) -> dict:
    out = {"ok": ok, "error": error, "skipped": False}
    out.update(extra)
    return out


def skipped(reason: str) -> dict:
    return {"ok": None, "error": None, "skipped": True, "reason": reason}


def _err(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def counter_deltas(before: dict, after: dict) -> dict:
    return {
        k: after[k] - before[k]
        for k in after
        if k in before and after[k] is not None and before[k] is not None and after[k] != before[k]
    }


def judge_tx(deltas_sysfs: dict, deltas_ethtool: dict, has_xdp_tx_counters: bool) -> tuple[bool | None, dict]:
    """Did the frame leave? (True, counters) / (False, failure counters) / (None, {}) when nothing moved.

    XDP-specific driver counters are trusted first: a busy interface's tx_packets also counts other traffic.
    """
    failures = {k: v for k, v in deltas_ethtool.items() if _XDP_TX_COUNTER.search(k) and _XDP_TX_FAILURE.search(k)}
    sent = {k: v for k, v in deltas_ethtool.items() if _XDP_TX_COUNTER.search(k) and not _XDP_TX_FAILURE.search(k)}
    failures.update({f"statistics.{k}": v for k, v in deltas_sysfs.items() if k in ("tx_dropped", "tx_errors")})
    if sent:
        return True, sent
    if failures:
        return False, failures
    if not has_xdp_tx_counters and deltas_sysfs.get("tx_packets", 0) > 0:
        return True, {"statistics.tx_packets": deltas_sysfs["tx_packets"]}
    return None, {}


def live_frames_in_kernel() -> tuple[bool | None, str | None]:
    """Whether the running kernel has live frames, judged by its BTF as every module judges a feature (backports
    count, the version number does not), and the problem to report when it has not or its BTF cannot be read. None
    without BTF: what the kernel has is unknown (the host's problems say the BTF is missing)."""
    try:
        kernel = features.KernelFeatures.from_host()
    except features.KernelBtfMissing:
        return None, None
    except features.BtfError as exc:
        return None, f"kernel: live frames cannot be judged: {exc}"
    if LIVE_FRAMES.present(kernel):
        return True, None
    return False, f"kernel: live frames need {LIVE_FRAMES.describe()}; {LIVE_FRAMES.absence()}"


# ---- host facts --------------------------------------------------------------------------------------------


def host_facts() -> dict:
    uname = platform.uname()
    release = uname.release
    bpffs_type = mounts.mounted_type(BPFFS)
    return {
        "kernel": {
            "release": release,
            "version": uname.version,
            "version_tuple": list(parse_kernel_release(release)),
        },
        "kernel_btf": os.path.exists(KERNEL_BTF),
        "bpffs": {"path": BPFFS, "mounted": bpffs_type == mounts.BPFFS_TYPE, "fstype": bpffs_type},
    }


class Probe:
    """One probe run. Owns the fds of its programs; close() releases them (use as a context manager)."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT):
        self.timeout = timeout
        self.problems: list[str] = []
        self.libbpf = None
        self.libbpf_error: str | None = None
        self._progs: dict[int, int] = {}
        try:
            from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf

            libbpf.lib()
            self.libbpf = libbpf
        except OSError as exc:
            self.libbpf_error = f"loading libbpf.so.1: {_err(exc)}"

    def close(self) -> None:
        for fd in self._progs.values():
            os.close(fd)
        self._progs.clear()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)

    def program(self, action: int) -> int:
        """The fd of the probe's program returning `action`, loaded once per run."""
        if action not in self._progs:
            L = self.libbpf
            name = {XDP_DROP: "xdpfleet_drop", XDP_PASS: "xdpfleet_pass", XDP_TX: "xdpfleet_tx"}[action]
            self._progs[action] = L.prog_load(
                L.BPF_PROG_TYPE_XDP, xdp_return_program(action), name, "GPL", expected_attach_type=L.BPF_XDP
            )
        return self._progs[action]

    # -- host ---------------------------------------------------------------------------------------------

    def host(self) -> dict:
        facts = host_facts()
        facts["libbpf_version"] = None
        facts["possible_cpus"] = os.cpu_count()
        if self.libbpf is not None:
            facts["libbpf_version"] = self.libbpf.libbpf_version()
            with contextlib.suppress(OSError):
                facts["possible_cpus"] = self.libbpf.num_possible_cpus()
        else:
            self.problem(
                f"libbpf is not usable ({self.libbpf_error}): install libbpf1 (Debian/Ubuntu) or libbpf (RHEL/Fedora)"
            )
        if not facts["kernel_btf"]:
            self.problem(
                f"kernel BTF missing ({KERNEL_BTF}): use a kernel built with CONFIG_DEBUG_INFO_BTF=y "
                "(CO-RE and fentry programs need it)"
            )
        if not facts["bpffs"]["mounted"]:
            self.problem(f"bpffs not mounted at {BPFFS}: mount -t bpf bpf {BPFFS} (pinned maps and links need it)")
        facts["live_frames"] = self.live_frames_support()
        return facts

    def live_frames_support(self) -> dict:
        """The kernel's BTF, then one real BPF_PROG_RUN in live-frames mode with a DROP program (nothing is sent)."""
        kernel_ok, kernel_problem = live_frames_in_kernel()
        out = {"supported": False, "kernel_ok": kernel_ok, "ok": None, "error": None}
        if kernel_problem:
            self.problem(kernel_problem)
        if self.libbpf is None:
            out["error"] = self.libbpf_error
            return out
        L = self.libbpf
        try:
            frame = probe_frame(None)
            L.prog_test_run(self.program(XDP_DROP), frame, repeat=1, flags=L.BPF_F_TEST_XDP_LIVE_FRAMES)
            out.update(ok=True, supported=True)
        except OSError as exc:
            out.update(ok=False, error=_err(exc))
            if kernel_ok is not False:  # a kernel without them fails as expected: its problem is said above
                hint = ""
                if exc.errno == errno.EPERM:
                    hint = ": run as root (CAP_BPF and CAP_NET_ADMIN)"
                self.problem(f"BPF_PROG_RUN in live-frames mode failed ({_err(exc)}){hint}")
        return out

    # -- interfaces ---------------------------------------------------------------------------------------

    def xdp_state(self, ifindex: int) -> dict:
        out = {"mode": None, "prog_id": 0, "drv_prog_id": 0, "skb_prog_id": 0, "programs": [], "error": None}
        if self.libbpf is None:
            out["error"] = self.libbpf_error
            return out
        L = self.libbpf
        try:
            state = L.xdp_query(ifindex)
        except OSError as exc:
            out["error"] = _err(exc)
            return out
        out.update(mode=state.mode, prog_id=state.prog_id, drv_prog_id=state.drv_prog_id, skb_prog_id=state.skb_prog_id)
        ids = []
        for mode, pid in (("native", state.drv_prog_id), ("generic", state.skb_prog_id), ("any", state.prog_id)):
            if pid and pid not in [known for _mode, known in ids]:
                ids.append((state.mode if mode == "any" else mode, pid))
        for mode, pid in ids:
            prog = {"id": pid, "mode": mode, "name": None, "tag": None, "error": None}
            try:
                fd = L.prog_fd_by_id(pid)
                try:
                    info = L.prog_info(fd)
                    prog.update(name=info.name, tag=info.tag)
                finally:
                    os.close(fd)
            except OSError as exc:
                prog["error"] = _err(exc)
            out["programs"].append(prog)
        return out

    def attach_test(self, name: str, ifindex: int, xdp: dict) -> dict:
        busy = self._busy(xdp)
        if busy:
            self.problem(f"{name}: {busy}; attach test skipped (a probe never disturbs an existing program)")
            return {mode: skipped(busy) for mode in ("native", "generic")}
        if self.libbpf is None:
            return {mode: result(False, self.libbpf_error) for mode in ("native", "generic")}
        L = self.libbpf
        out = {}
        for mode in ("native", "generic"):
            try:
                link = L.xdp_link_create(self.program(XDP_PASS), ifindex, mode)
            except OSError as exc:
                out[mode] = result(False, _err(exc))
                continue
            try:
                L.link_detach(link)
                out[mode] = result(True)
            except OSError as exc:
                out[mode] = result(False, _err(exc))
            finally:
                os.close(link)
        if not out["native"]["ok"] and out["generic"]["ok"]:
            self.problem(
                f"{name}: native XDP attach failed ({out['native']['error']}): the driver has no native XDP here; "
                "generic mode works but is slow (skb path)"
            )
        elif not out["generic"]["ok"] and not out["native"]["ok"]:
            self.problem(f"{name}: XDP attach failed in both modes ({out['native']['error']})")
        return out

    @staticmethod
    def _busy(xdp: dict) -> str | None:
        if xdp.get("prog_id") or xdp.get("programs"):
            pid = xdp.get("prog_id") or xdp["programs"][0]["id"]
            return f"busy: program {pid} attached"
        return None

    def _counters(self, name: str, n_stats: int) -> tuple[dict, dict]:
        sysfs = netdev.statistics(name)
        try:
            driver = netdev.ethtool_stats(name, n_stats) if n_stats else {}
        except OSError:
            driver = {}
        return sysfs, driver

    def live_frames_test(self, name: str, facts: dict, live: dict) -> dict:
        """Send ONE frame out of `name` with XDP_TX in live-frames mode and watch the interface's counters."""
        if not live.get("supported"):
            reason = live.get("error") or "the kernel's BTF shows no live frames"
            return result(False, f"live frames unsupported on this host: {reason}")
        if facts.get("operstate") in DOWN_STATES:
            self.problem(f"{name}: interface is {facts['operstate']}: bring it up (ip link set {name} up)")
            return result(False, f"{name} is {facts['operstate']}: frames cannot leave")
        L = self.libbpf
        ifindex = facts["ifindex"]
        helper = None
        out = result(None, helper_program=False, counters={})
        if not self._busy(facts["xdp"]):
            # Drivers such as ice and mlx5 allocate their XDP TX rings only while a program is attached, as a
            # traffic generator's receive program would be; keep a PASS program on for the duration of the send.
            try:
                helper = L.xdp_link_create(self.program(XDP_PASS), ifindex, "native")
                out["helper_program"] = True
            except OSError as exc:
                out["helper_error"] = _err(exc)
        try:
            # Read now, with the helper program on: some drivers announce ndo-xmit only while XDP is attached.
            features = (netdev.xdp_features(ifindex) or {}).get("flags")
            no_xmit = features is not None and "ndo-xmit" not in features
            try:
                n_stats = netdev.drvinfo(name)["n_stats"]
            except OSError:
                n_stats = 0
            sys0, drv0 = self._counters(name, n_stats)
            has_xdp_tx = any(_XDP_TX_COUNTER.search(k) and not _XDP_TX_FAILURE.search(k) for k in drv0)
            frame = probe_frame(facts.get("mac"))
            try:
                L.prog_test_run(
                    self.program(XDP_TX),
                    frame,
                    repeat=1,
                    flags=L.BPF_F_TEST_XDP_LIVE_FRAMES,
                    ctx=xdp_md(len(frame), ifindex),
                )
            except OSError as exc:
                out.update(ok=False, error=_err(exc))
                self.problem(f"{name}: BPF_PROG_RUN live frames failed ({_err(exc)})")
                return out
            # Without the ndo-xmit XDP feature the frame cannot leave: one look at the counters is enough.
            deadline = time.monotonic() + (0 if no_xmit else self.timeout)
            verdict, moved = None, {}
            while True:
                sys1, drv1 = self._counters(name, n_stats)
                verdict, moved = judge_tx(counter_deltas(sys0, sys1), counter_deltas(drv0, drv1), has_xdp_tx)
                if verdict is not None or time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        finally:
            if helper is not None:
                try:
                    L.link_detach(helper)
                finally:
                    os.close(helper)
        out["counters"] = moved
        if verdict:
            out["ok"] = True
            return out
        out["ok"] = False
        if facts.get("driver") == "veth" and no_xmit:
            peer = (facts.get("peer") or {}).get("name") or "<peer>"
            out["error"] = "no XDP program on the veth peer: frames are dropped"
            self.problem(
                f"{name}: veth peer needs an XDP program or GRO to receive XDP_TX frames "
                f"(attach a native XDP program to {peer}, or `ethtool -K {peer} gro on`)"
            )
        elif no_xmit:
            out["error"] = f"driver {facts.get('driver')} does not transmit XDP frames now (no ndo-xmit XDP feature)"
            self.problem(f"{name}: driver {facts.get('driver')} cannot transmit XDP frames: live frames cannot send")
        elif moved:
            out["error"] = "the driver counted a transmit failure: " + ", ".join(f"{k} +{v}" for k, v in moved.items())
            self.problem(f"{name}: the driver failed to transmit the XDP frame ({out['error']})")
        else:
            out["error"] = f"no transmit counter of {name} moved within {self.timeout:g} s"
            self.problem(f"{name}: live-frames frame not seen leaving ({out['error']})")
        return out

    def interface(self, name: str, *, attach: bool, live: bool, live_support: dict, cpus: int | None) -> dict:
        facts = netdev.interface_facts(name)
        facts["name"] = name
        facts["xdp_features"] = netdev.xdp_features(facts["ifindex"]) if facts["ifindex"] else None
        facts["xdp"] = self.xdp_state(facts["ifindex"])
        basic = None if facts["xdp_features"] is None else "basic" in facts["xdp_features"]["flags"]
        facts["xdp_before_skb"] = {
            mode: xdp_before_skb(facts.get("driver"), mode, basic) for mode in ("native", "generic")
        }
        facts["attach_test"] = self.attach_test(name, facts["ifindex"], facts["xdp"]) if attach else None
        facts["live_frames_test"] = self.live_frames_test(name, facts, live_support) if live else None
        rxq = facts["queues"]["rx"]
        if facts.get("driver") == "veth" and rxq == 1 and (cpus or 1) > 1:
            self.problem(
                f"{name}: single-queue veth serializes receive on one CPU: create it with "
                "numrxqueues/numtxqueues (e.g. 2 or the CPU count)"
            )
        return facts


def probe(
    interfaces: list[str] | None = None,
    *,
    attach_test: bool = False,
    live_frames_test: bool = False,
    check_mode: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> dict:
    """All facts. `interfaces` must exist (the caller checks with unknown_interfaces() first)."""
    names = list(interfaces) if interfaces is not None else netdev.list_interfaces()
    tests_note = None
    if check_mode and (attach_test or live_frames_test):
        tests_note = "check mode: attach and live-frames tests not run"
        attach_test = live_frames_test = False
    with Probe(timeout=timeout) as p:
        facts = p.host()
        facts["interfaces"] = {
            n: p.interface(
                n,
                attach=attach_test,
                live=live_frames_test,
                live_support=facts["live_frames"],
                cpus=facts["possible_cpus"],
            )
            for n in names
        }
        facts["tests_skipped"] = tests_note
        facts["problems"] = list(p.problems)
    return facts


def unknown_interfaces(names: list[str]) -> list[str]:
    return [n for n in names if not netdev.exists(n)]
