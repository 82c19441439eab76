"""Three network namespaces for the XDP router: e1 -- r -- e2, where r routes between its ports p1 and p2 (the
kernel's forwarding on, addresses and routes as in the lab's e1 - a - e2), and the router deployed on r by the
collection's own code (router/deploy.py) with its pins on a bpffs of the test's own. Used by the kernel tests and
the benchmark."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from l2lib import ETH_P_ALL, PACKET_OUTGOING, Port, mac, mac_bytes, netns, packet_socket
from vtep_netns import sh

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy

REPO = Path(__file__).resolve().parents[2]
SOURCE = str(REPO / "bpf" / "router" / "router.c")
INCLUDE_DIRS = [str(REPO / "bpf" / "include")]
PORTS = ("p1", "p2")
# (router port address, endpoint address) per side; the endpoints route the other side's prefixes via the router.
SIDES = {
    "p1": ("e1", ("198.51.100.65/30", "198.51.100.66/30"), ("2001:db8:64:1::1/64", "2001:db8:64:1::2/64")),
    "p2": ("e2", ("198.51.100.69/30", "198.51.100.70/30"), ("2001:db8:64:2::1/64", "2001:db8:64:2::2/64")),
}
E1_V4, E2_V4 = "198.51.100.66", "198.51.100.70"
E1_V6, E2_V6 = "2001:db8:64:1::2", "2001:db8:64:2::2"
R_P1_V4, R_P1_V6 = "198.51.100.65", "2001:db8:64:1::1"


def addr(value: str) -> str:
    return value.split("/")[0]


class RouterNetns:
    """Namespaces <prefix>-e1, <prefix>-r, <prefix>-e2; close() removes them and the bpffs."""

    def __init__(self, prefix: str):
        self.ns = {node: f"{prefix}-{node}" for node in ("e1", "r", "e2")}
        self.work = Path(tempfile.mkdtemp(prefix=f"{prefix}-router-"))
        self.bpffs = self.work / "bpffs"
        self.paths = xp.InstancePaths("router", str(self.bpffs / "xdpfleet"), str(self.work / "state"))
        self.cache_dir = str(self.work / "cache")

    @classmethod
    def create(cls, prefix: str, queues: int = 1) -> RouterNetns:
        self = cls(prefix)
        try:
            self._build(queues)
        except BaseException:
            self.close()
            raise
        return self

    def _build(self, queues: int) -> None:
        self.bpffs.mkdir()
        sh("mount", "-t", "bpf", "bpf", str(self.bpffs))
        for node, name in self.ns.items():
            sh("ip", "netns", "add", name)
            self.exec(node, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
            self.exec(node, "ip", "link", "set", "lo", "up")
        self.exec("r", "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
        q = ["numrxqueues", str(queues), "numtxqueues", str(queues)]
        for port, (endpoint, v4, v6) in SIDES.items():
            sh("ip", "-n", self.ns["r"], "link", "add", port, *q, "type", "veth", "peer", "name", "eth0", *q,
               "netns", self.ns[endpoint])  # fmt: skip
            for node, ifname, index in (("r", port, 0), (endpoint, "eth0", 1)):
                self.exec(node, "ip", "addr", "add", v4[index], "dev", ifname)
                self.exec(node, "ip", "addr", "add", v6[index], "dev", ifname, "nodad")
                self.exec(node, "ip", "link", "set", ifname, "up")
            # A veth takes redirected frames only with NAPI on at the receiving end (the kernel's drivers/net/veth.c,
            # veth_xdp_xmit); GRO turns NAPI on without an XDP program there (Linux 5.13 and later), as in the lab.
            self.exec(endpoint, "ethtool", "-K", "eth0", "gro", "on")
            self.exec(endpoint, "ip", "route", "add", "198.51.100.64/26", "via", addr(v4[0]))
            self.exec(endpoint, "ip", "-6", "route", "add", "2001:db8:64::/48", "via", addr(v6[0]))

    def exec(self, node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ip", "netns", "exec", self.ns[node], *argv], check=check, capture_output=True, text=True
        )

    @contextlib.contextmanager
    def inside(self):
        """The block runs in the router's namespace (this thread)."""
        with netns(self.ns["r"]):
            yield

    def deploy(
        self, interfaces=PORTS, mode: str = "native", check_mode: bool = False, bypass_forwarding_rules: bool = False
    ) -> dict:
        with self.inside():
            return deploy.Router(
                self.paths, self.cache_dir, interfaces=list(interfaces), mode=mode, source=SOURCE,
                include_dirs=INCLUDE_DIRS, check_mode=check_mode, bypass_forwarding_rules=bypass_forwarding_rules,
            ).deploy()  # fmt: skip

    def mac(self, node: str, ifname: str) -> bytes:
        return mac_bytes(mac(self.ns[node], ifname))

    def packet_socket(self, node: str, ifname: str) -> socket.socket:
        """A raw socket on the node's interface that sends frames and receives every frame it sees (ETH_P_ALL)."""
        return packet_socket(Port(self.ns[node], ifname), ETH_P_ALL)

    @staticmethod
    def received(sock: socket.socket, marker: bytes, seconds: float = 0.5) -> list[bytes]:
        """The frames holding `marker` the socket receives within `seconds`."""
        frames, end = [], time.monotonic() + seconds
        while select.select([sock], [], [], max(0.0, end - time.monotonic()))[0]:
            frame, (_, _, pkttype, *_) = sock.recvfrom(65536)
            if marker in frame and pkttype != PACKET_OUTGOING:
                frames.append(frame)
        return frames

    def remove(self) -> None:
        with self.inside():
            xp.remove(self.paths, check_mode=False)

    def counters(self) -> dict[str, int]:
        """Packets per verdict."""
        return {verdict: c["packets"] for verdict, c in deploy.Router.read_counters(self.paths).items()}

    def prog_id(self, port: str) -> int:
        with self.inside():
            return libbpf.xdp_query(xp.ifindex_of(port)).prog_id

    def close(self) -> None:
        for name in self.ns.values():
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        if os.path.ismount(self.bpffs):
            subprocess.run(["umount", str(self.bpffs)], check=False)
        subprocess.run(["rm", "-rf", str(self.work)], check=False)
