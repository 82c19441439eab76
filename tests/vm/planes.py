"""Every data plane in one booted VM: its object loads, it attaches in each mode asked for, and frames cross it,
injected and captured on the host's ends of the guest's virtio-net NICs and checked as the kernel tests check them.

Each data plane gives three cells (load, attach, frames); attach and frames hold one status per mode. A status is
"ok", "refused: <message>" (the collection said no before changing anything: its own error, not one from the kernel
or libbpf, and no XDP program left on the NICs) or "failed: <what>".

Addresses (198.51.100.224/28, the control link is .224/30): router ports .229/30 and .233/30 with the host's taps
as their neighbours .230 and .234; the VTEP's tunnel address .237 with remote VTEPs .238 and .239.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from l2lib import Capture, mac, send
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw
from vmlib import GuestError, Vm

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build

REPO = Path(__file__).resolve().parents[2]
# The six objects the modules build: (data plane, source under bpf/).
OBJECTS = {
    "counter": "counter/counter.c",
    "echo": "trafficgen/echo.c",
    "sender": "trafficgen/sender.c",
    "filter": "filter/filter.c",
    "router": "router/router.c",
    "vtep": "vtep/vtep_xdp.c",
}
# The VTEP's tc backend also loads the tc program's own object (compiled beside the others, so the guest finds it).
VTEP_TC_SOURCE = "vtep/vtep_tc.c"
# The modes each data plane is tried in on virtio-net: XDP native and generic, and the tc hook where it has one
# (the filter at tc; the VTEP's tc backend: XDP classifies, tc replicates).
MODES = {
    "counter": ("native", "generic"),
    "echo": ("native", "generic"),
    "sender": ("native", "generic"),
    "filter": ("native", "generic", "tc"),
    "router": ("native", "generic"),
    "vtep": ("native", "generic", "tc"),
}
# The collection's own errors: a refusal is one of these not caused by the kernel (libbpf) or a compile.
REFUSALS = {"FilterError", "RouterError", "VtepError", "TrafficgenError", "XdpProgramError", "TemplateError"}
NOT_REFUSALS = {"LibbpfError", "CompileError", "OSError"}
SETTLE = 0.3  # seconds without a new frame before a capture is taken as complete

ROUTER_PORTS = ("198.51.100.229/30", "198.51.100.233/30")
ROUTER_FAR = ("198.51.100.230", "198.51.100.234")
VTEP_LOCAL, VTEP_PEERS = "198.51.100.237", ("198.51.100.238", "198.51.100.239")
PEER_MACS = {VTEP_PEERS[0]: "02:00:00:e0:01:38", VTEP_PEERS[1]: "02:00:00:e0:01:39"}
UPLINK_MTU = 1600  # room for VXLAN's 50 bytes around a 1500-byte frame of the access port
FAR_HOST = "02:00:00:e0:02:01"  # a host behind remote VTEP .238, in its static FDB
LOCAL_HOST = "02:00:00:e0:02:02"  # a host on the access port
FILTER_RULES = [
    {"name": "udp-9999", "action": "drop", "protocol": "udp", "dst_port": 9999},
    {"name": "icmp", "action": "count", "protocol": "icmp"},
    {"name": "host-99", "action": "drop", "dst": "198.51.100.99"},
]


def compile_objects(cache_dir: str) -> dict[str, str]:
    """The six objects, compiled on the host as the modules compile them (bpf/build.py, one cache), once; and the
    VTEP's tc object into the same cache."""
    include = [str(REPO / "bpf" / "include")]
    bpf_build.compile_object(str(REPO / "bpf" / VTEP_TC_SOURCE), cache_dir, include)
    return {
        plane: bpf_build.compile_object(str(REPO / "bpf" / source), cache_dir, include)[0]
        for plane, source in OBJECTS.items()
    }


def status(exc: GuestError) -> str:
    message = " ".join(str(exc).split())
    if exc.kind in REFUSALS and not NOT_REFUSALS & set(exc.chain):
        return f"refused: {message}"
    return f"failed: {message}"


@dataclass
class PlaneResult:
    load: str = "not run"
    attach: dict[str, str] = field(default_factory=dict)
    frames: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def statuses(self) -> list[str]:
        return [self.load, *self.attach.values(), *self.frames.values()]


@dataclass
class Guest:
    """The booted VM and what the data planes need to know of it."""

    vm: Vm
    objects: dict[str, str]
    cache_dir: str
    nics: list[str] = field(default_factory=list)  # guest names of the data NICs, in the order of vm.taps
    macs: dict[str, str] = field(default_factory=dict)  # guest NIC -> MAC
    tap_macs: list[str] = field(default_factory=list)
    release: str = ""

    def setup(self) -> None:
        facts = self.vm.call("setup")
        self.release, self.nics, self.macs = facts["release"], facts["nics"], facts["macs"]
        drivers = set(facts["drivers"].values())
        assert drivers == {"virtio_net"}, f"the guest's data NICs are driven by {drivers}, not virtio_net"
        self.tap_macs = [mac(self.vm.ns, tap) for tap in self.vm.taps]

    def exchange(self, tap_in: int, frames: list[bytes], tap_out: int, marker: bytes, expect: int) -> list[bytes]:
        """Send frames on one tap; the frames carrying `marker` that come out of another (or the same) tap."""
        with Capture(self.vm.ns, self.vm.taps[tap_out]) as capture:
            send(self.vm.ns, self.vm.taps[tap_in], frames)
            capture.wait_for(marker, expect, timeout=5.0)
            time.sleep(SETTLE)  # and nothing more than expected
        return [f.data for f in capture.with_marker(marker)]

    def nothing_attached(self) -> str | None:
        for ifname in self.nics:
            state = self.vm.call("xdp_state", ifname=ifname)
            if state["prog_id"]:
                return f"{ifname} runs XDP program {state['prog_id']} after the refusal"
        return None


def run_plane(guest: Guest, plane: str, modes: tuple[str, ...]) -> PlaneResult:
    result = PlaneResult()
    started = time.monotonic()
    try:
        guest.vm.call("load", object_path=guest.objects[plane])
        result.load = "ok"
    except GuestError as exc:
        result.load = status(exc)
    scenario = SCENARIOS[plane]
    for mode in modes:
        try:
            scenario.deploy(guest, mode)
            result.attach[mode] = "ok"
        except GuestError as exc:
            result.attach[mode] = status(exc)
            if result.attach[mode].startswith("refused") and (changed := guest.nothing_attached()):
                result.attach[mode] = f"failed: refused, yet {changed}"
            result.frames[mode] = "not run"
            scenario.remove(guest)
            continue
        try:
            problem = scenario.frames(guest, mode)
            result.frames[mode] = f"failed: {problem}" if problem else "ok"
        except GuestError as exc:
            result.frames[mode] = f"failed: {' '.join(str(exc).split())}"
        finally:
            scenario.remove(guest)
    result.seconds = time.monotonic() - started
    return result


# ---- the data planes ----------------------------------------------------------------------------------------------


def wait_count(read, expected: int, timeout: float = 5.0):
    """Poll a guest counter until it reaches `expected` (or the timeout), then once more after SETTLE."""
    deadline = time.monotonic() + timeout
    while read() < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(SETTLE)
    return read()


class CounterPlane:
    """xdp_program's path (program.converge) with count_only_proto 17: UDP frames counted, TCP and ARP not."""

    def deploy(self, guest: Guest, mode: str) -> None:
        guest.vm.call("counter_deploy", ifname=guest.nics[0], mode=mode, object_path=guest.objects["counter"],
                      count_only_proto=17)  # fmt: skip

    def frames(self, guest: Guest, mode: str) -> str | None:
        base = Ether(dst=guest.macs[guest.nics[0]], src=guest.tap_macs[0]) / IP(src="198.51.100.230",
                                                                               dst="198.51.100.229")  # fmt: skip
        udp = [bytes(base / UDP(sport=1000 + n, dport=53) / Raw(b"xv-counter")) for n in range(20)]
        other = [bytes(base / TCP(dport=80)) for _ in range(10)] + [bytes(Ether(src=guest.tap_macs[0]) / ARP())] * 5
        before = guest.vm.call("counter_read")
        send(guest.vm.ns, guest.vm.taps[0], udp + other)
        counted = wait_count(lambda: guest.vm.call("counter_read") - before, len(udp))
        return None if counted == len(udp) else f"counted {counted} of {len(udp)} UDP frames (and 15 others sent)"

    def remove(self, guest: Guest) -> None:
        guest.vm.call("remove", name="counter")


class EchoPlane:
    """The echo server as the trafficgen module keeps it: UDP to its port comes back with addresses swapped."""

    PORT = 7000

    def deploy(self, guest: Guest, mode: str) -> None:
        guest.vm.call("echo_deploy", ifname=guest.nics[0], mode=mode, ports=[self.PORT, self.PORT],
                      addresses=["198.51.100.229"], cache_dir=guest.cache_dir)  # fmt: skip

    def frames(self, guest: Guest, mode: str) -> str | None:
        guest_mac, tap_mac = guest.macs[guest.nics[0]], guest.tap_macs[0]
        marker = f"xv-echo-{mode}".encode()
        sent = [
            bytes(Ether(dst=guest_mac, src=tap_mac) / IP(src="198.51.100.230", dst="198.51.100.229")
                  / UDP(sport=1024 + n, dport=self.PORT) / Raw(marker))
            for n in range(16)
        ]  # fmt: skip
        before = guest.vm.call("echo_read", ifname=guest.nics[0])
        back = guest.exchange(0, sent, 0, marker, len(sent))
        expected = Counter(
            bytes(Ether(dst=tap_mac, src=guest_mac) / IP(src="198.51.100.229", dst="198.51.100.230")
                  / UDP(sport=self.PORT, dport=1024 + n) / Raw(marker))
            for n in range(16)
        )  # fmt: skip
        echoed = guest.vm.call("echo_read", ifname=guest.nics[0]) - before
        if Counter(back) != expected or echoed != len(sent):
            return f"{len(back)} frames came back ({sum((Counter(back) & expected).values())} as expected), " \
                   f"the echo server counted {echoed}, of {len(sent)} sent"  # fmt: skip
        return None

    def remove(self, guest: Guest) -> None:
        guest.vm.call("echo_remove", ifname=guest.nics[0])


class SenderPlane:
    """The live-frames sender (its return counter attached in the mode): the template's frames leave the NIC."""

    COUNT = 128

    def __init__(self):
        self.sent: dict | None = None

    def deploy(self, guest: Guest, mode: str) -> None:
        # Loading, attaching and sending are one call in the guest: a capture must be running before it.
        from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt

        self.capture = Capture(guest.vm.ns, guest.vm.taps[0]).start()
        try:
            self.sent = guest.vm.call("sender_run", ifname=guest.nics[0], mode=mode,
                                      object_path=guest.objects["sender"], template=pt.EXAMPLES["udp4-64flows"],
                                      dst_mac=guest.tap_macs[0], count=self.COUNT)  # fmt: skip
        except GuestError:
            self.capture.stop()
            raise

    def frames(self, guest: Guest, mode: str) -> str | None:
        time.sleep(SETTLE)
        frames = [f.data for f in self.capture.stop()]
        template = [bytes.fromhex(f) for f in self.sent["frames"]]
        expected = Counter(template[k % len(template)] for k in range(self.COUNT))
        got = Counter(f for f in frames if f in expected)
        if self.sent["sent"] != self.COUNT or got != expected:
            return f"the sender reports {self.sent['sent']} sent; {sum(got.values())} template frames arrived " \
                   f"of {self.COUNT}"  # fmt: skip
        return None

    def remove(self, guest: Guest) -> None:
        pass  # the sender's return counter goes with its object, at the end of the call


class FilterPlane:
    """filter/deploy.py with three rules: what each rule dropped or counted, frame by frame of real traffic."""

    def deploy(self, guest: Guest, mode: str) -> None:
        hook, xdp_mode = ("tc", "native") if mode == "tc" else ("xdp", mode)
        guest.vm.call("filter_deploy", ifname=guest.nics[0], hook=hook, mode=xdp_mode, rules=FILTER_RULES,
                      cache_dir=guest.cache_dir)  # fmt: skip

    def frames(self, guest: Guest, mode: str) -> str | None:
        eth = Ether(dst=guest.macs[guest.nics[0]], src=guest.tap_macs[0])

        def ip(dst="198.51.100.229"):
            return eth / IP(src="198.51.100.230", dst=dst)

        frames = (
            [bytes(ip() / UDP(dport=9999) / Raw(b"xv"))] * 5
            + [bytes(ip() / ICMP())] * 3
            + [bytes(ip() / UDP(dport=53) / Raw(b"xv"))] * 4
            + [bytes(ip("198.51.100.99") / UDP(dport=53) / Raw(b"xv"))] * 2
        )
        expected = {"udp-9999": 5, "icmp": 3, "no_rule": 4, "host-99": 2}
        before = guest.vm.call("filter_read")
        send(guest.vm.ns, guest.vm.taps[0], frames)

        def moved() -> dict:
            after = guest.vm.call("filter_read")
            return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}

        wait_count(lambda: sum(moved().values()), len(frames))
        got = moved()
        return None if got == expected else f"counters moved {got}, expected {expected}"

    def remove(self, guest: Guest) -> None:
        guest.vm.call("remove", name="filter")


class RouterPlane:
    """router/deploy.py between the two NICs: IPv4 forwarded by XDP (bpf_fib_lookup), MACs rewritten, TTL down."""

    def deploy(self, guest: Guest, mode: str) -> None:
        guest.vm.call(
            "addresses",
            assign={nic: [cidr] for nic, cidr in zip(guest.nics, ROUTER_PORTS, strict=True)},
            neighbours=[[ip, m, nic] for ip, m, nic in zip(ROUTER_FAR, guest.tap_macs, guest.nics, strict=True)],
            forwarding=True,
        )
        guest.vm.call("router_deploy", interfaces=guest.nics, mode=mode, cache_dir=guest.cache_dir)

    def frames(self, guest: Guest, mode: str) -> str | None:
        marker = f"xv-router-{mode}".encode()
        sent = [
            bytes(Ether(dst=guest.macs[guest.nics[0]], src=guest.tap_macs[0])
                  / IP(src=ROUTER_FAR[0], dst=ROUTER_FAR[1], ttl=64) / UDP(sport=2000 + n, dport=53) / Raw(marker))
            for n in range(10)
        ]  # fmt: skip
        before = guest.vm.call("router_read")
        out = guest.exchange(0, sent, 1, marker, len(sent))
        forwarded = guest.vm.call("router_read")["forwarded_v4"] - before["forwarded_v4"]
        wrong = [
            f for f in out
            if Ether(f).src != guest.macs[guest.nics[1]] or Ether(f).dst != guest.tap_macs[1] or Ether(f)[IP].ttl != 63
        ]  # fmt: skip
        if len(out) != len(sent) or wrong or forwarded != len(sent):
            return f"{len(out)} of {len(sent)} frames left the other port ({len(wrong)} with wrong MACs or TTL); " \
                   f"the router counted {forwarded} forwarded by XDP"  # fmt: skip
        return None

    def remove(self, guest: Guest) -> None:
        guest.vm.call("remove", name="router")


class VtepPlane:
    """vtep/deploy.py, VNI 100: access port NIC 0, tunnel port NIC 1 with two remote VTEPs. A broadcast is flooded
    to both (VXLAN, their MACs), a tunnelled frame is decapsulated to the access port, and a frame to a MAC of the
    static FDB goes to its one remote VTEP."""

    def document(self, guest: Guest) -> dict:
        access, uplink = guest.nics
        peers = [{"ip": ip, "via": uplink, "mac": PEER_MACS[ip]} for ip in VTEP_PEERS]
        return {
            "tunnel_ports": [{"port": uplink, "local_ip": VTEP_LOCAL}],
            "vnis": [{"vni": 100, "access_ports": [access], "peers": peers,
                      "fdb": [{"mac": FAR_HOST, "remote": VTEP_PEERS[0]}]}],
        }  # fmt: skip

    def deploy(self, guest: Guest, mode: str) -> None:
        backend, xdp_mode = ("tc", "native") if mode == "tc" else ("xdp", mode)
        guest.vm.call("set_mtu", ifname=guest.nics[1], mtu=UPLINK_MTU)
        # QEMU's virtio-net drops unicast to MACs the guest has not asked for (README.md): the access port must take
        # frames for the remote hosts' MACs.
        guest.vm.call("set_promisc", ifname=guest.nics[0], on=True)
        guest.vm.call("vtep_deploy", document=self.document(guest), mode=xdp_mode, backend=backend,
                      cache_dir=guest.cache_dir)  # fmt: skip

    def frames(self, guest: Guest, mode: str) -> str | None:
        uplink_mac = guest.macs[guest.nics[1]]
        problems = []
        marker = f"xv-vtep-bum-{mode}".encode()
        bum = bytes(Ether(dst="ff:ff:ff:ff:ff:ff", src=LOCAL_HOST) / IP(src="198.51.100.100", dst="198.51.100.101")
                    / UDP(dport=5000) / Raw(marker))  # fmt: skip
        copies = guest.exchange(0, [bum], 1, marker, 2)
        outers = sorted((Ether(c)[IP].dst, Ether(c).dst, Ether(c)[VXLAN].vni) for c in copies if VXLAN in Ether(c))
        wanted = sorted((ip, PEER_MACS[ip], 100) for ip in VTEP_PEERS)
        if outers != wanted or any(bytes(Ether(c)[VXLAN].payload) != bum or Ether(c).src != uplink_mac
                                   for c in copies):  # fmt: skip
            problems.append(f"BUM: {len(copies)} copies, outer (dst, mac, vni) {outers}, expected {wanted}")

        marker = f"xv-vtep-decap-{mode}".encode()
        inner = bytes(Ether(dst=LOCAL_HOST, src=FAR_HOST) / IP(src="198.51.100.101", dst="198.51.100.100")
                      / UDP(dport=5000) / Raw(marker))  # fmt: skip
        tunnelled = bytes(Ether(dst=uplink_mac, src=PEER_MACS[VTEP_PEERS[0]])
                          / IP(src=VTEP_PEERS[0], dst=VTEP_LOCAL) / UDP(sport=49152, dport=4789)
                          / VXLAN(vni=100) / Raw(inner))  # fmt: skip
        out = guest.exchange(1, [tunnelled], 0, marker, 1)
        if out != [inner]:
            problems.append(f"decapsulation: {len(out)} frames reached the access port, expected the inner frame")

        marker = f"xv-vtep-unicast-{mode}".encode()
        unicast = bytes(Ether(dst=FAR_HOST, src=LOCAL_HOST) / IP(src="198.51.100.100", dst="198.51.100.101")
                        / UDP(dport=5000) / Raw(marker))  # fmt: skip
        copies = guest.exchange(0, [unicast], 1, marker, 1)
        if [Ether(c)[IP].dst for c in copies] != [VTEP_PEERS[0]]:
            problems.append(f"known unicast: copies to {[Ether(c)[IP].dst for c in copies]}, expected "
                            f"[{VTEP_PEERS[0]}]")  # fmt: skip
        if problems:
            problems.append(f"the VTEP's drops: {guest.vm.call('vtep_drops')}")
        return "; ".join(problems) or None

    def remove(self, guest: Guest) -> None:
        guest.vm.call("remove", name="vtep")
        guest.vm.call("set_promisc", ifname=guest.nics[0], on=False)


SCENARIOS = {
    "counter": CounterPlane(),
    "echo": EchoPlane(),
    "sender": SenderPlane(),
    "filter": FilterPlane(),
    "router": RouterPlane(),
    "vtep": VtepPlane(),
}


# ---- one VM, every data plane ---------------------------------------------------------------------------------


@dataclass
class Round:
    """One kernel's row of the matrix, from one boot."""

    kernel: str  # release (suite)
    release: str = ""
    boot_seconds: float = 0.0
    hung_boots: list[str] = field(default_factory=list)
    planes: dict[str, PlaneResult] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""  # the VM could not be used at all

    def failures(self) -> list[str]:
        found = [f"{self.kernel}: {self.error}"] if self.error else []
        for plane, result in self.planes.items():
            found += [f"{self.kernel} {plane}: {s}" for s in result.statuses() if s.startswith("failed")]
        return found


ROUNDS: list[Round] = []  # every round of the session, for the table printed at its end


def run_round(kernel, modes: dict[str, tuple[str, ...]], objects: dict[str, str], cache_dir: str, work: Path) -> Round:
    """Boot `kernel` once and run every data plane of `modes` in it."""
    from vmlib import BootError

    ns = f"xv-{kernel.suite}"
    row = Round(kernel.label)
    started = time.monotonic()
    vm = Vm(kernel, ns, work, taps=(f"{ns}0", f"{ns}1"))
    try:
        vm.start()
        row.boot_seconds, row.hung_boots = vm.boot_seconds, vm.attempts
        guest = Guest(vm, objects, cache_dir)
        guest.setup()
        row.release = guest.release
        for plane, plane_modes in modes.items():
            row.planes[plane] = run_plane(guest, plane, plane_modes)
    except (BootError, GuestError, AssertionError) as exc:
        row.hung_boots = vm.attempts
        row.error = " ".join(str(exc).split())
    finally:
        vm.close()
    row.seconds = time.monotonic() - started
    return row


def cell(statuses: dict[str, str] | str, notes: list[str]) -> str:
    """A matrix cell: "ok" when every mode is, else each mode's status with its message as a numbered note."""
    if isinstance(statuses, str):
        statuses = {"": statuses}
    if statuses and all(s == "ok" for s in statuses.values()):
        return "ok"
    parts = []
    for mode, text in statuses.items():
        word, _, message = text.partition(": ")
        if message:
            if message not in notes:
                notes.append(message)
            word = f"{word} [{notes.index(message) + 1}]"
        parts.append(f"{mode} {word}".strip())
    return ", ".join(parts) or "not run"


def table(rounds: list[Round]) -> str:
    """The matrix in Markdown: rows kernels, columns data plane x (load, attach, frames); notes below."""
    notes: list[str] = []
    planes = list(OBJECTS)
    lines = [
        "| kernel | boot s | round s | "
        + " | ".join(f"{p} {c}" for p in planes for c in ("load", "attach", "frames"))
        + " |",
        "|---" * (3 + 3 * len(planes)) + "|",
    ]
    for row in rounds:
        cells = []
        for plane in planes:
            r = row.planes.get(plane)
            cells += [cell(r.load, notes), cell(r.attach, notes), cell(r.frames, notes)] if r else ["not run"] * 3
        hung = f" ({len(row.hung_boots)} hung)" if row.hung_boots else ""
        lines.append(f"| {row.kernel} | {row.boot_seconds:.0f}{hung} | {row.seconds:.0f} | " + " | ".join(cells) + " |")
        if row.error:
            notes.append(f"{row.kernel}: {row.error}")
    lines += [""] + [f"[{n}] {text}" for n, text in enumerate(notes, 1)]
    return "\n".join(lines)
