"""A VTEP data plane in one network namespace, driven from the test process (no Ansible): veth pairs whose
inner ends are VTEP ports and whose outer ends are where tests inject and capture frames.

The test process enters the namespace (l2lib.netns) for BPF calls; the taps are l2lib's receiving sockets, which
keep their namespace.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from l2lib import PACKET_OUTGOING, Port, netns, receive, receiving_socket

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import cls_bpf, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts, plan, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import AccessPort, Peer, VtepConfig

REPO = Path(__file__).resolve().parents[2]
SIOCGIFMTU = 0x8921
SIOCGIFHWADDR = 0x8927
# What the tests that hold both backends to the same assertions run: the XDP backend, and the TC backend with its
# tc program attached each way the collection attaches one (tcx, and cls_bpf where a kernel has no tcx).
ATTACHMENTS = [("xdp", None), ("tc", xp.TC_ATTACH_TCX), ("tc", xp.TC_ATTACH_CLS_BPF)]
ATTACHMENT_IDS = ["xdp", "tc-tcx", "tc-cls_bpf"]


def peer_mac(ip: str) -> str:
    """The MAC the tests give the next hop to a peer VTEP: 02:00:00:00:00 and the last byte of its address."""
    return f"02:00:00:00:00:{int(ip.split('.')[-1]):02x}"


def peers(ips, via: str = "ul") -> tuple[Peer, ...]:
    """Peer VTEPs at `ips`, in that order, behind tunnel port `via`, each next hop's MAC its peer_mac()."""
    return tuple(Peer(ip, via, peer_mac(ip)) for ip in ips)


def access(*names: str) -> tuple[AccessPort, ...]:
    return tuple(AccessPort(name) for name in names)


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def port_facts(name: str) -> plan.Port:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16s16x", name.encode())
        mtu = struct.unpack("16si12x", fcntl.ioctl(s, SIOCGIFMTU, ifreq))[1]
        hw = fcntl.ioctl(s, SIOCGIFHWADDR, ifreq)[18:24]
    return plan.Port(name, socket.if_nametoindex(name), mtu, ":".join(f"{b:02x}" for b in hw))


@dataclass
class Tap:
    """A raw socket on the outer end of a veth: inject frames, collect what the VTEP sent out of the port."""

    ifname: str
    sock: socket.socket

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def drain(self, settle: float = 0.3) -> list[bytes]:
        """Frames that arrived until none came for `settle` seconds, each as on the wire (VLAN tag put back)."""
        frames, deadline = [], time.monotonic() + settle
        while time.monotonic() < deadline:
            try:
                frame, pkttype = receive(self.sock)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            if pkttype != PACKET_OUTGOING:  # what the test itself sent is not what the VTEP sent
                frames.append(frame)
            deadline = time.monotonic() + settle
        return frames


@dataclass
class VtepNetns:
    """Namespace `name` with VTEP ports (inner ends) and taps (outer ends, named <port>p)."""

    name: str
    ports: dict[str, plan.Port] = field(default_factory=dict)
    taps: dict[str, Tap] = field(default_factory=dict)
    links: dict[str, int] = field(default_factory=dict)
    tc_links: dict[str, int] = field(default_factory=dict)
    tc_filters: list[int] = field(default_factory=list)  # ifindexes with our cls_bpf filter (and clsact)
    obj: libbpf.BpfObject | None = None  # the XDP programs (vtep_xdp.c)
    tc_obj: libbpf.BpfObject | None = None  # the TC backend's tc program (vtep_tc.c), on obj's maps
    maps: dict[str, libbpf.Map] = field(default_factory=dict)
    current: plan.MapContents | None = None
    backend: str = "xdp"
    tc_attach: str | None = None

    @classmethod
    def create(cls, name: str, port_mtus: dict[str, int], macs: dict[str, str] | None = None) -> VtepNetns:
        """macs: the MAC of a port where a test needs to know it beforehand (the others are random)."""
        sh("ip", "netns", "add", name)
        lab = cls(name)
        for port, mtu in port_mtus.items():
            address = ("address", macs[port]) if macs and port in macs else ()
            sh("ip", "-n", name, "link", "add", port, *address, "mtu", str(mtu), "type", "veth", "peer", "name",
               f"{port}p", "mtu", str(mtu))  # fmt: skip
            for end in (port, f"{port}p"):
                sh("ip", "-n", name, "link", "set", end, "up")
            # Redirected frames reach a veth only when its peer runs XDP or has GRO (NAPI) on.
            sh("ip", "netns", "exec", name, "ethtool", "-K", f"{port}p", "gro", "on")
            sh("ip", "netns", "exec", name, "sysctl", "-qw", f"net.ipv6.conf.{port}p.disable_ipv6=1")
            sh("ip", "netns", "exec", name, "sysctl", "-qw", f"net.ipv6.conf.{port}.disable_ipv6=1")
        with netns(name):
            for port in port_mtus:
                lab.ports[port] = port_facts(port)
        for port in port_mtus:
            sock = receiving_socket(Port(name, f"{port}p"), 64 << 20, force=True)  # whole bursts of copies
            sock.setblocking(False)
            lab.taps[port] = Tap(f"{port}p", sock)
        return lab

    @classmethod
    @contextlib.contextmanager
    def loaded(
        cls,
        name: str,
        port_mtus: dict[str, int],
        cache_dir: str,
        config: VtepConfig | None = None,
        macs: dict[str, str] | None = None,
        fdb_size: int | None = None,
    ):
        """The namespace of create(), the data plane loaded in native XDP mode (and configured to `config`) for the
        block, removed after it."""
        lab = cls.create(name, port_mtus, macs)
        try:
            lab.load("native", cache_dir, fdb_size=fdb_size)
            if config is not None:
                lab.configure(config)
            yield lab
        finally:
            lab.close()

    def load(self, mode: str, cache_dir: str, fdb_size: int | None = None) -> None:
        """Compile and load the data plane, both objects on one set of maps (its learned FDB sized as a document's
        fdb_size would), and attach the backend's programs (the XDP backend's, unless attach() says otherwise) to
        every port."""
        include = [str(REPO / "bpf" / "include")]
        path, _ = bpf_build.compile_object(str(REPO / "bpf" / "vtep" / "vtep_xdp.c"), cache_dir, include)
        tc_path, _ = bpf_build.compile_object(str(REPO / "bpf" / "vtep" / "vtep_tc.c"), cache_dir, include)
        self.obj = libbpf.BpfObject(path)
        self.tc_obj = libbpf.BpfObject(tc_path)
        for layout in layouts.LAYOUTS.values():
            layout.check_object(self.obj)
        if fdb_size:
            self.obj.map(layouts.LEARNED_FDB).set_max_entries(fdb_size)
        self.obj.load()
        for name, m in self.tc_obj.maps.items():
            if not m.internal:
                m.reuse_fd(self.obj.map(name).fd)
        self.tc_obj.load()
        self.maps = {n: self.obj.map(n) for n in layouts.MAP_NAMES}
        self.current = writer.read(self.maps)
        self.attach(mode)

    def attach(self, mode: str, backend: str | None = None, tc_attach: str | None = None) -> None:
        """Attach the backend's programs (default: the one attached last) in XDP mode `mode`: the XDP backend's
        ingress program, or the TC backend's ingress program and its tc program at tc ingress, through a tcx link or
        a cls_bpf filter (tc_attach; default: as last time, else tcx)."""
        self.detach()
        self.backend = backend or self.backend
        self.tc_attach = (tc_attach or self.tc_attach or xp.TC_ATTACH_TCX) if self.backend == "tc" else None
        ingress = self.obj.program(layouts.ingress_program(self.backend, mode)).fd
        with netns(self.name):
            for port in self.ports.values():
                self.links[port.name] = libbpf.xdp_link_create(ingress, port.ifindex, mode)
                if self.backend != "tc":
                    continue
                tc_program = self.tc_obj.program(layouts.TC_PROGRAM).fd
                if self.tc_attach == xp.TC_ATTACH_CLS_BPF:
                    cls_bpf.add_clsact(port.ifindex)
                    self.tc_filters.append(port.ifindex)
                    cls_bpf.attach(port.ifindex, tc_program, cls_bpf.FIRST_PRIORITY, cls_bpf.owner_name(self.name))
                else:
                    self.tc_links[port.name] = libbpf.tcx_link_create(tc_program, port.ifindex)

    def detach(self) -> None:
        for links in (self.links, self.tc_links):
            for fd in links.values():
                libbpf.link_detach(fd)
                os.close(fd)
            links.clear()
        with netns(self.name):
            for ifindex in self.tc_filters:
                cls_bpf.delete_clsact(ifindex)  # with the filter on it
        self.tc_filters.clear()

    def configure(self, config: VtepConfig, peer_macs=None, ports=None) -> plan.MapDiff:
        """Bring the maps to `config` as the vtep module does; `ports` (default: the namespace's) may be altered."""
        egress = self.obj.program(layouts.EGRESS_PROGRAM)
        # Devmap entries resolve their ifindex in the writer's namespace.
        with netns(self.name), writer.update(self.maps, egress, config, ports or self.ports, peer_macs or {}) as done:
            difference = done.diff
        self.current = writer.read(self.maps)
        return difference

    def counters(self) -> dict:
        return writer.counters(self.maps, self.current, {p.ifindex: n for n, p in self.ports.items()})

    def drain_all(self) -> None:
        for tap in self.taps.values():
            tap.drain(settle=0.05)

    def test_run(self, port: str, frame: bytes, *, live: bool = False, repeat: int = 1) -> int:
        ctx = struct.pack("<6I", 0, len(frame), 0, self.ports[port].ifindex, 0, 0)
        with netns(self.name):
            flags = libbpf.BPF_F_TEST_XDP_LIVE_FRAMES if live else 0
            ingress = self.obj.program(layouts.ingress_program(self.backend, "native")).fd
            return libbpf.prog_test_run(ingress, frame, repeat=repeat, flags=flags, ctx=ctx).retval

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.detach()
        for tap in self.taps.values():
            tap.sock.close()
        for obj in (self.tc_obj, self.obj):
            if obj:
                obj.close()
        subprocess.run(["ip", "netns", "del", self.name], check=False)
