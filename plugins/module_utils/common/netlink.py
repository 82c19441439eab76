# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Netlink with the Python standard library only: attributes, and requests to the kernel that are acknowledged or
dumped. Used for the generic-netlink `netdev` family (host/netdev.py) and for tc (bpf/cls_bpf.py)."""

from __future__ import annotations

import errno
import os
import socket
import struct

NLMSG_HDR = struct.Struct("=IHHII")  # length, type, flags, sequence, port
NLMSG_ERROR = 0x2
NLMSG_DONE = 0x3
NLM_F_REQUEST = 0x1
NLM_F_ACK = 0x4
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400
NLM_F_DUMP = 0x300
NLA_F_NESTED = 0x8000
SOL_NETLINK = 270
NETLINK_EXT_ACK = 11
NLM_F_CAPPED = 0x100  # on an error message: only the request's header came back, not its payload
NLM_F_ACK_TLVS = 0x200  # on an error message: extended-ack attributes follow
NLMSGERR_ATTR_MSG = 1


class NetlinkError(OSError):
    """The kernel refused a request: the message names the request, the errno's meaning and the kernel's words."""

    def __init__(self, what: str, err: int, detail: str = ""):
        text = f"{what}: {os.strerror(err)} ({errno.errorcode.get(err, str(err))})"
        super().__init__(err, text + (f": {detail}" if detail else ""))

    def __str__(self) -> str:
        return str(self.strerror)


def nl_attrs(raw: bytes) -> dict[int, bytes]:
    """Parse netlink attributes (type -> payload); nested and byte-order flags are masked off the type."""
    attrs: dict[int, bytes] = {}
    off = 0
    while off + 4 <= len(raw):
        length, atype = struct.unpack_from("=HH", raw, off)
        if length < 4:
            break
        attrs[atype & 0x3FFF] = raw[off + 4 : off + length]
        off += (length + 3) & ~3
    return attrs


def nl_attr(atype: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, atype) + payload + b"\0" * (((length + 3) & ~3) - length)


class Netlink:
    """One netlink socket of a protocol (NETLINK_ROUTE, NETLINK_GENERIC) in the caller's network namespace."""

    def __init__(self, protocol: int):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, protocol)
        self.sock.settimeout(2.0)
        self.sock.bind((0, 0))
        self.sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)  # the kernel's reason comes with an error (4.12)
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Netlink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, mtype: int, flags: int, payload: bytes) -> int:
        self.seq += 1
        self.sock.send(NLMSG_HDR.pack(NLMSG_HDR.size + len(payload), mtype, flags, self.seq, 0) + payload)
        return self.seq

    def _replies(self, seq: int, what: str):
        """(type, body) of every reply to request `seq` until its ack, its end of dump, or its error (raised)."""
        while True:
            data = self.sock.recv(1 << 16)
            off = 0
            while off + NLMSG_HDR.size <= len(data):
                length, mtype, flags, got, _port = NLMSG_HDR.unpack_from(data, off)
                body = data[off + NLMSG_HDR.size : off + length]
                off += (length + 3) & ~3
                if got != seq:
                    continue
                if mtype == NLMSG_DONE:
                    return
                if mtype == NLMSG_ERROR:
                    err = -struct.unpack_from("=i", body)[0]
                    if not err:
                        return
                    raise NetlinkError(what, err, _ext_ack_message(body, flags))
                yield mtype, body

    def request(self, mtype: int, flags: int, payload: bytes, what: str) -> list[tuple[int, bytes]]:
        """Send one request and wait for the kernel's answer (its replies, then its ack); raises NetlinkError."""
        return list(self._replies(self._send(mtype, NLM_F_REQUEST | NLM_F_ACK | flags, payload), what))

    def dump(self, mtype: int, payload: bytes, what: str) -> list[tuple[int, bytes]]:
        return list(self._replies(self._send(mtype, NLM_F_REQUEST | NLM_F_DUMP, payload), what))


def _ext_ack_message(body: bytes, flags: int) -> str:
    """The kernel's text in an extended ack: after the error code and the request's header (and, unless the kernel
    capped it, the request's payload, which the header's length covers)."""
    if not flags & NLM_F_ACK_TLVS or len(body) < 4 + NLMSG_HDR.size:
        return ""
    request_length = NLMSG_HDR.unpack_from(body, 4)[0]
    start = 4 + (NLMSG_HDR.size if flags & NLM_F_CAPPED else request_length)
    message = nl_attrs(body[(start + 3) & ~3 :]).get(NLMSGERR_ATTR_MSG, b"")
    return message.split(b"\0", 1)[0].decode(errors="replace")
