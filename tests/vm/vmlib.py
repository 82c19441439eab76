"""A QEMU VM booted with one of Debian's kernels, its NICs on tap devices in a network namespace of the test's own.

The guest (machine microvm, software emulation: KVM guests print nothing on these machines) runs this machine's
root file system read-only over 9p, so it runs this machine's Python and the collection's code from the checkout.
Its /init (initramfs.py) starts tests/vm/guest_agent.py, which connects back over a control NIC and runs what the
host asks, one JSON line per call. The data NICs are virtio-net (native XDP); their far ends are taps in namespace
`ns`, where the host injects and captures frames (tests/l2lib.py).

Addresses: the control link is 198.51.100.224/30 (host .225, guest .226); the data planes use the rest of
198.51.100.224/28 (planes.py).
"""

from __future__ import annotations

import compileall
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import initramfs
from kernels import Kernel
from l2lib import in_netns

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tests" / "vm" / "guest_agent.py"
PYTHON = REPO / ".venv" / "bin" / "python"
CONTROL_HOST, CONTROL_GUEST, CONTROL_PREFIX = "198.51.100.225", "198.51.100.226", 30
CONTROL_PORT = 7531
CONTROL_MAC = "02:00:00:e0:00:ff"
# Data NICs: guest MAC and the tap (its far end on the host) of each; the guest finds its NICs by these MACs.
DATA_MACS = ("02:00:00:e0:00:01", "02:00:00:e0:00:02")
# virtio_net runs XDP_TX and redirects on queues of their own, one per CPU, next to the stack's: with 2 vCPUs,
# 4 queue pairs (fewer still works, in a slower shared mode with a lock).
VCPUS = 2
QUEUES = 2 * VCPUS
MEMORY_MB = 1024
# microvm has no HPET or ACPI PM timer, so the kernel calibrates the TSC against the PIT; on a busy host under TCG
# that fails and the boot spins forever before init (tests/vm/README.md, QEMU; at load 8 here, every boot).
# Told the TSC's rate, it calibrates nothing. The value only scales the guest's own delay loops.
TSC_KHZ = "tsc_early_khz=2000000"
BOOT_SECONDS = 90  # from QEMU's start to the agent's connection: a boot that takes longer hung (tests/vm/README.md)
CALL_SECONDS = 300


class GuestError(RuntimeError):
    """A call failed in the guest; the message is the guest's exception."""

    def __init__(self, message: str, kind: str, chain: list[str]):
        super().__init__(message)
        self.kind = kind  # the exception's class name
        self.chain = chain  # class names of it and its causes


class BootError(RuntimeError):
    pass


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@dataclass
class Vm:
    kernel: Kernel
    ns: str  # network namespace of the taps, prefix xv
    work: Path  # console logs
    taps: tuple[str, ...] = ()
    process: subprocess.Popen | None = None
    conn: socket.socket | None = None
    reader: object = None
    boot_seconds: float = 0.0
    attempts: list[str] = field(default_factory=list)

    @property
    def console(self) -> Path:
        return self.work / f"console-{self.kernel.suite}-{len(self.attempts)}.log"

    def qemu_argv(self, image: Path) -> list[str]:
        argv = [
            "qemu-system-x86_64", "-machine", "microvm,x-option-roms=off,rtc=on", "-accel", "tcg", "-cpu", "max",
            "-m", str(MEMORY_MB), "-smp", str(VCPUS), "-nodefaults", "-no-user-config", "-display", "none",
            "-no-reboot", "-serial", f"file:{self.console}",
            "-kernel", str(self.kernel.vmlinuz), "-initrd", str(image),
            "-append", f"console=ttyS0 rdinit=/init quiet {TSC_KHZ} xv.python={PYTHON} xv.agent={AGENT} xv.repo={REPO}",
            # multidevs=remap: / spans several file systems here, whose inode numbers would collide in the guest
            "-fsdev", "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-device,fsdev=root,mount_tag=hostroot",
            "-netdev", f"tap,id=ctl,ifname={self.ns}c,script=no,downscript=no,vhost=off",
            "-device", f"virtio-net-device,netdev=ctl,mac={CONTROL_MAC}",
        ]  # fmt: skip
        for n, tap in enumerate(self.taps):
            # vhost off: QEMU's own backend; ctrl_guest_offloads (QEMU's default) lets virtio_net turn the receive
            # offloads off, which native XDP needs; mq with QUEUES pairs gives XDP_TX queues of its own.
            argv += [
                "-netdev", f"tap,id=d{n},ifname={tap},script=no,downscript=no,vhost=off,queues={QUEUES}",
                "-device", f"virtio-net-device,netdev=d{n},mac={DATA_MACS[n]},mq=on,ctrl_guest_offloads=on",
            ]  # fmt: skip
        return argv

    def _network(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)  # a stale one of ours
        sh("ip", "netns", "add", self.ns)
        sh("ip", "-n", self.ns, "tuntap", "add", "dev", f"{self.ns}c", "mode", "tap")
        sh("ip", "-n", self.ns, "addr", "add", f"{CONTROL_HOST}/{CONTROL_PREFIX}", "dev", f"{self.ns}c")
        for tap in self.taps:
            sh("ip", "-n", self.ns, "tuntap", "add", "dev", tap, "mode", "tap", "multi_queue")
            # The host's own IPv6 chatter (router solicitations, MLD) would be frames on the guest's NICs.
            sh("ip", "netns", "exec", self.ns, "sysctl", "-qw", f"net.ipv6.conf.{tap}.disable_ipv6=1")
        for tap in (f"{self.ns}c", *self.taps):
            sh("ip", "-n", self.ns, "link", "set", tap, "up")

    def start(self) -> None:
        """Boot and wait for the agent; a boot that hangs is killed and tried once more."""
        image = initramfs.build(self.kernel)
        compile_bytecode()
        self._network()
        for attempt in range(2):
            started = time.monotonic()
            try:
                self._boot(image)
                self.boot_seconds = time.monotonic() - started
                return
            except BootError as exc:
                self.attempts.append(str(exc))
                self._kill()
                if attempt == 1:
                    raise

    def _boot(self, image: Path) -> None:
        listener = in_netns(self.ns, lambda: socket.create_server((CONTROL_HOST, CONTROL_PORT)))
        try:
            listener.settimeout(BOOT_SECONDS)
            console = self.console
            with open(console.with_suffix(".qemu"), "w") as qemu_messages:  # QEMU keeps its own copy of the fd
                self.process = subprocess.Popen(
                    ["ip", "netns", "exec", self.ns, *self.qemu_argv(image)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=qemu_messages,
                )  # fmt: skip
            try:
                self.conn, _ = listener.accept()
            except TimeoutError:
                raise BootError(f"no agent after {BOOT_SECONDS} s; console: {tail(console)}") from None
        finally:
            listener.close()
        self.conn.settimeout(CALL_SECONDS)
        self.reader = self.conn.makefile("r")

    def call(self, op: str, **args):
        """Run `op` in the guest (guest_agent.OPS); its result, or GuestError."""
        self.conn.sendall(json.dumps({"op": op, "args": args}).encode() + b"\n")
        try:
            line = self.reader.readline()
        except TimeoutError:
            raise GuestError(f"{op}: no answer in {CALL_SECONDS} s", "Timeout", []) from None
        if not line:
            raise GuestError(f"{op}: the guest went away; console: {tail(self.console)}", "Gone", [])
        answer = json.loads(line)
        if "error" in answer:
            raise GuestError(answer["error"], answer["kind"], answer["chain"])
        return answer["result"]

    def _kill(self) -> None:
        if self.conn:
            self.conn.close()
            self.conn = None
        stop_qemu(self.process)
        self.process = None

    def close(self) -> None:
        with contextlib.suppress(GuestError, OSError):
            if self.conn:
                self.call("quit")
        self._kill()
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)


def stop_qemu(process: subprocess.Popen | None) -> None:
    """SIGTERM, then SIGKILL after 10 s. `ip netns exec` execs QEMU: the process's pid is QEMU's."""
    if process and process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def compile_bytecode() -> None:
    """The .pyc of the code the agent imports, written here: the guest reads the checkout read-only, so without them
    it compiles every module from source on each boot, under TCG (PYTHONDONTWRITEBYTECODE may be set here too)."""
    for path in (REPO / "plugins", REPO / "tests" / "vm", REPO / "tests" / "l2lib.py"):
        ok = compileall.compile_dir(path, quiet=2) if path.is_dir() else compileall.compile_file(path, quiet=2)
        if not ok:
            raise BootError(f"compileall failed for {path}")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(none)"
