"""Layer-2 traffic for overlay tests: raw Ethernet frames sent and captured in endpoint namespaces.

Frames are plain bytes, sent and received through AF_PACKET sockets (no packet library needed; tests may still use
scapy to build or check them). Every socket is opened inside the endpoint's network namespace by a short-lived
thread that enters the namespace (setns), opens and binds the socket and exits; the socket stays in that namespace
while the caller, in its own namespace, uses it. So the caller never changes namespace, and no helper process is
needed. Calls that act in the caller's own namespace (BPF links by ifindex, ioctls) run in `with netns(ns):`, which
moves the calling thread there and back.

VLAN tags: this kernel has no 802.1Q devices, so a trunk's far end sends tagged frames as raw bytes. On receive
the kernel moves the tag out of the frame into the skb; an AF_PACKET reader gets it in PACKET_AUXDATA
(tp_vlan_tci, TP_STATUS_VLAN_VALID, tp_vlan_tpid). Capture puts it back in place, so tests see frames as on the wire.

    marker = new_marker()
    frame = build_frame(BROADCAST, mac(ns_a, "eth0"), marker=marker, vlan=Vlan(10, pcp=5, dei=1))
    with Capture(ns_b, "eth0") as cap:
        send(ns_a, "eth0", [frame])
        [got] = cap.wait_for(marker)
    assert got.data == frame and got.vlan == Vlan(10, pcp=5, dei=1)

    bum_probe(Port("xe-a100", "eth0"), {"b100": Port("xe-b100", "eth0"), ...})  # -> {"b100", ...}
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

BROADCAST = "ff:ff:ff:ff:ff:ff"
ETH_P_ALL = 0x0003
ETH_P_8021Q = 0x8100
ETH_P_8021AD = 0x88A8
ETH_P_L2LIB = 0x88B5  # IEEE 802 local experimental ethertype 1: what test frames carry by default
ETH_ZLEN = 60  # minimum frame length without FCS

SOL_PACKET = 263
PACKET_AUXDATA = 8
PACKET_STATISTICS = 6
PACKET_OUTGOING = 4  # sll_pkttype of frames this host sent
SO_RCVBUFFORCE = 33  # SO_RCVBUF beyond net.core.rmem_max (needs CAP_NET_ADMIN)
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
_AUXDATA = struct.Struct("=IIIHHHH")  # struct tpacket_auxdata
_STATS = struct.Struct("=II")  # struct tpacket_stats: tp_packets, tp_drops
AUXDATA_SPACE = socket.CMSG_SPACE(_AUXDATA.size)  # recvmsg's ancillary buffer for PACKET_AUXDATA
CLONE_NEWNET = 0x40000000

T = TypeVar("T")


class Port(NamedTuple):
    """An interface in a network namespace (as named under /run/netns)."""

    ns: str
    ifname: str


def ports(prefix: str, names: Iterable[str], ifname: str = "eth0") -> dict[str, Port]:
    """Lab endpoints by name: {name: Port("<prefix>-<name>", ifname)}."""
    return {name: Port(f"{prefix}-{name}", ifname) for name in names}


# ---------------------------------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class Vlan:
    """An 802.1Q (or, with tpid 0x88a8, 802.1ad) tag."""

    vid: int
    pcp: int = 0
    dei: int = 0
    tpid: int = ETH_P_8021Q

    def __post_init__(self):
        if not (0 <= self.vid <= 4095 and 0 <= self.pcp <= 7 and self.dei in (0, 1)):
            raise ValueError(f"invalid VLAN tag {self}")

    @property
    def tci(self) -> int:
        return self.pcp << 13 | self.dei << 12 | self.vid

    @classmethod
    def from_tci(cls, tci: int, tpid: int = ETH_P_8021Q) -> Vlan:
        return cls(vid=tci & 0x0FFF, pcp=tci >> 13, dei=tci >> 12 & 1, tpid=tpid)

    def header(self) -> bytes:
        return struct.pack("!HH", self.tpid, self.tci)


def mac_bytes(mac: str | bytes) -> bytes:
    if isinstance(mac, bytes):
        if len(mac) != 6:
            raise ValueError(f"a MAC address has 6 bytes, got {mac!r}")
        return mac
    out = bytes.fromhex(mac.replace(":", "").replace("-", ""))
    if len(out) != 6:
        raise ValueError(f"not a MAC address: {mac!r}")
    return out


def mac_str(mac: bytes) -> str:
    return ":".join(f"{b:02x}" for b in mac)


def new_marker() -> bytes:
    """A unique marker (20 ASCII bytes) to put in a frame's payload and find it again."""
    return b"xdpf-l2:" + uuid.uuid4().hex[:12].encode()


def build_frame(
    dst: str | bytes,
    src: str | bytes,
    payload: bytes = b"",
    *,
    marker: bytes | None = None,
    vlan: Vlan | Iterable[Vlan] | None = None,
    ethertype: int = ETH_P_L2LIB,
    pad: bool = True,
) -> bytes:
    """An Ethernet frame (without FCS): dst, src, the tag(s) of `vlan` (outermost first), ethertype, then the
    marker followed by the payload, zero-padded to 60 bytes unless pad is False."""
    tags = [] if vlan is None else [vlan] if isinstance(vlan, Vlan) else list(vlan)
    frame = mac_bytes(dst) + mac_bytes(src) + b"".join(t.header() for t in tags)
    frame += struct.pack("!H", ethertype) + (marker or b"") + payload
    if pad and len(frame) < ETH_ZLEN:
        frame += bytes(ETH_ZLEN - len(frame))
    return frame


def frame_vlan(frame: bytes) -> Vlan | None:
    """The outermost tag of a frame as on the wire, or None when untagged."""
    if len(frame) >= 18:
        tpid, tci = struct.unpack_from("!HH", frame, 12)
        if tpid in (ETH_P_8021Q, ETH_P_8021AD):
            return Vlan.from_tci(tci, tpid)
    return None


# ---------------------------------------------------------------------------------------------------- namespaces


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python >= 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def netns(ns: str):
    """The block runs with this thread in network namespace `ns` (/run/netns/<ns>), which returns to its own after
    it. Sockets made in the block stay in `ns`."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


def in_netns(ns: str, fn: Callable[[], T]) -> T:
    """fn() run in network namespace `ns` (/run/netns/<ns>) by a thread of its own, which exits afterwards: the
    caller's thread never changes namespace. Sockets fn() makes stay in `ns`."""
    box: dict = {}

    def run():
        try:
            with netns(ns):
                box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"l2lib-netns-{ns}", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def packet_socket(port: Port, proto: int = 0) -> socket.socket:
    """An AF_PACKET socket bound to port.ifname in port.ns, receiving `proto` (0: nothing, a socket to send on)."""

    def make():
        # Opened with protocol 0 (receives nothing) and bound to one interface, so that no frame of another
        # interface is ever queued on it.
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            sock.bind((port.ifname, proto))
        except OSError as exc:
            sock.close()
            raise OSError(exc.errno, f"{port.ns}: cannot bind to {port.ifname}: {exc.strerror}") from None
        return sock

    return in_netns(port.ns, make)


def receiving_socket(port: Port, rcvbuf: int, *, force: bool = False) -> socket.socket:
    """A socket receiving every frame on the port, a tag the kernel takes out of a frame reported in PACKET_AUXDATA
    (receive() puts it back), with a receive buffer of `rcvbuf` bytes (force: beyond net.core.rmem_max)."""
    sock = packet_socket(port, ETH_P_ALL)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE if force else socket.SO_RCVBUF, rcvbuf)
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
    except OSError:
        sock.close()
        raise
    return sock


def mac(ns: str, ifname: str) -> str:
    """The MAC address of an interface in a namespace."""
    with contextlib.closing(packet_socket(Port(ns, ifname))) as sock:
        return mac_str(sock.getsockname()[4])


# ---------------------------------------------------------------------------------------------------- send


def send(ns: str, ifname: str, frames: bytes | Iterable[bytes]) -> int:
    """Transmit frames (as on the wire, tags inline) on an interface in a namespace; returns how many."""
    if isinstance(frames, bytes | bytearray):
        frames = [frames]
    count = 0
    with contextlib.closing(packet_socket(Port(ns, ifname))) as sock:
        for frame in frames:
            sock.send(frame)
            count += 1
    return count


# ---------------------------------------------------------------------------------------------------- receive


def auxdata_vlan(ancdata) -> Vlan | None:
    """The tag the kernel took out of a received frame, from its PACKET_AUXDATA (tpacket_auxdata), or None."""
    for level, kind, value in ancdata:
        if level == SOL_PACKET and kind == PACKET_AUXDATA and len(value) >= _AUXDATA.size:
            status, _, _, _, _, tci, tpid = _AUXDATA.unpack_from(value)
            if status & TP_STATUS_VLAN_VALID:
                return Vlan.from_tci(tci, tpid if status & TP_STATUS_VLAN_TPID_VALID and tpid else ETH_P_8021Q)
    return None


def with_vlan_tag(data: bytes, ancdata) -> bytes:
    """A received frame as it was on the wire: the tag the kernel had moved to PACKET_AUXDATA back in place."""
    tag = auxdata_vlan(ancdata)
    return data if tag is None else data[:12] + tag.header() + data[12:]


def receive(sock: socket.socket, flags: int = 0) -> tuple[bytes, int]:
    """The next frame of a receiving_socket() as it was on the wire, and its sll_pkttype (PACKET_OUTGOING: sent by
    this host). Raises what recvmsg raises: BlockingIOError or TimeoutError when none came."""
    data, ancdata, _, addr = sock.recvmsg(65536, AUXDATA_SPACE, flags)
    return with_vlan_tag(data, ancdata), addr[2]


# ---------------------------------------------------------------------------------------------------- capture


@dataclass(frozen=True)
class Captured:
    """One frame as it was on the wire (a tag the kernel had moved to metadata is back in place)."""

    data: bytes
    vlan: Vlan | None  # the outermost tag, None when untagged
    tag_from_auxdata: bool  # the kernel had taken the tag out of the frame (PACKET_AUXDATA)
    pkttype: int  # sll_pkttype: 0 host, 1 broadcast, 2 multicast, 3 other host, 4 outgoing
    time: float  # time.monotonic() when read

    @property
    def dst(self) -> str:
        return mac_str(self.data[0:6])

    @property
    def src(self) -> str:
        return mac_str(self.data[6:12])

    def has(self, marker: bytes) -> bool:
        return marker in self.data


class Capture:
    """Record every frame arriving on an interface in a namespace, from __enter__ (or start()) to stop().

    The socket is bound before __enter__ returns, so every frame sent afterwards is seen. A reader thread keeps
    the frames; it stops at stop() / __exit__, or by itself after max_seconds (a test that forgets to stop it
    never leaves it running). Outgoing frames (sent by this interface) are left out unless outgoing=True.
    """

    def __init__(
        self, ns: str, ifname: str, *, outgoing: bool = False, max_seconds: float = 60.0, rcvbuf: int = 4 << 20
    ):
        self.port = Port(ns, ifname)
        self.outgoing = outgoing
        self.max_seconds = max_seconds
        self.rcvbuf = rcvbuf
        self._frames: list[Captured] = []
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.kernel_drops = 0  # frames the kernel dropped on this socket (its buffer was full)
        self.error: BaseException | None = None
        self.link_down_seen = False  # the interface was down at some point while capturing

    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> Capture:
        self._sock = receiving_socket(self.port, self.rcvbuf)
        self._thread = threading.Thread(target=self._read, name=f"l2lib-capture-{self.port.ns}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Captured]:
        """Stop recording (idempotent); returns every frame recorded."""
        self._stop.set()
        if self._thread:
            self._thread.join()
        if self.error:
            raise self.error
        return self.frames

    def _read(self) -> None:
        sock = self._sock
        deadline = time.monotonic() + self.max_seconds
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                ready, _, _ = select.select([sock], [], [], 0.02)
                if not ready:
                    continue
                # Drain what is queued before looking at the stop flag again.
                while True:
                    try:
                        data, ancdata, _, addr = sock.recvmsg(65536, AUXDATA_SPACE, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
                    except OSError as exc:
                        # The interface is (or went) down: the kernel reports it once; keep listening.
                        if exc.errno != errno.ENETDOWN:
                            raise
                        self.link_down_seen = True
                        break
                    if addr[2] == PACKET_OUTGOING and not self.outgoing:
                        continue
                    self._record(data, ancdata, addr[2])
            self.kernel_drops += _STATS.unpack(sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS.size))[1]
        except BaseException as exc:
            self.error = exc
        finally:
            sock.close()
            with self._cond:
                self._cond.notify_all()

    def _record(self, data: bytes, ancdata, pkttype: int) -> None:
        tag = auxdata_vlan(ancdata)
        if tag is not None:
            data = data[:12] + tag.header() + data[12:]
        item = Captured(data, tag or frame_vlan(data), tag is not None, pkttype, time.monotonic())
        with self._cond:
            self._frames.append(item)
            self._cond.notify_all()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def frames(self) -> list[Captured]:
        """A snapshot of what was recorded so far."""
        with self._cond:
            return list(self._frames)

    def with_marker(self, marker: bytes) -> list[Captured]:
        return [f for f in self.frames if f.has(marker)]

    def wait_for(self, marker: bytes, count: int = 1, timeout: float = 2.0) -> list[Captured]:
        """The frames carrying marker, once there are `count` of them or after timeout (then possibly fewer)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [f for f in self._frames if f.has(marker)]
                remaining = deadline - time.monotonic()
                if len(found) >= count or remaining <= 0 or not self.running:
                    return found
                self._cond.wait(remaining)


# ---------------------------------------------------------------------------------------------------- probes


def probe(
    sender: Port,
    receivers: Mapping[str, Port],
    frame: bytes | None = None,
    *,
    marker: bytes | None = None,
    vlan: Vlan | None = None,
    timeout: float = 1.0,
) -> dict[str, list[Captured]]:
    """Send one frame from `sender` while capturing on every receiver; {name: frames carrying the marker}.

    Without `frame`, a broadcast from the sender's MAC with a new marker (and the tag `vlan`) is sent. With a
    frame of your own, pass the marker it carries. Waits until every receiver has the frame or timeout has passed.
    """
    if frame is None:
        marker = marker or new_marker()
        frame = build_frame(BROADCAST, mac(*sender), marker=marker, vlan=vlan)
    elif not marker or marker not in frame:
        raise ValueError("probe: pass the marker the frame carries")
    with contextlib.ExitStack() as stack:
        caps = {name: stack.enter_context(Capture(*port)) for name, port in receivers.items()}
        send(*sender, [frame])
        deadline = time.monotonic() + timeout
        for cap in caps.values():
            cap.wait_for(marker, timeout=max(0.0, deadline - time.monotonic()))
    return {name: found for name, cap in caps.items() if (found := cap.with_marker(marker))}


def bum_probe(
    sender: Port, receivers: Mapping[str, Port], *, vlan: Vlan | None = None, timeout: float = 1.0
) -> set[str]:
    """Send one broadcast with a unique marker from `sender`; the names of the receivers that got it in time."""
    return set(probe(sender, receivers, vlan=vlan, timeout=timeout))
