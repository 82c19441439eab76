# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""tc programs attached the way kernels before tcx (Linux 6.6) attach them: a cls_bpf filter in direct-action mode at
ingress of a clsact qdisc, through rtnetlink.

A filter is no bpf_link: nothing pins it, and it holds its program by itself. It sits at a priority (filters run in
increasing priority) and a handle, and carries a name, which here says whose it is ("xdpfleet:<instance>"): a filter
of ours is the one at the place its instance recorded with that name, so that nothing here ever replaces or removes
another's. A new filter at a taken place fails (NLM_F_EXCL); one replaced at its own place (same priority and
handle) swaps its program atomically, as bpf_link_update does.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import kill_points
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.netlink import (
    NLA_F_NESTED,
    NLM_F_CREATE,
    NLM_F_EXCL,
    NLM_F_REPLACE,
    Netlink,
    nl_attr,
    nl_attrs,
)

RTM_NEWQDISC, RTM_DELQDISC, RTM_GETQDISC = 36, 37, 38
RTM_NEWTFILTER, RTM_DELTFILTER, RTM_GETTFILTER = 44, 45, 46
TCA_KIND, TCA_OPTIONS = 1, 2
TCA_BPF_FD, TCA_BPF_NAME, TCA_BPF_FLAGS, TCA_BPF_TAG, TCA_BPF_ID = 6, 7, 8, 10, 11
TCA_BPF_FLAG_ACT_DIRECT = 1
TC_H_CLSACT = 0xFFFFFFF1  # the clsact qdisc's parent; its handle is ffff:0
CLSACT_HANDLE = 0xFFFF0000
HOOK_PARENTS = {"ingress": 0xFFFFFFF2, "egress": 0xFFFFFFF3}  # TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS/EGRESS)
ETH_P_ALL = 0x0003
TCMSG = struct.Struct("=BxxxiIII")  # family, ifindex, handle, parent, info (priority << 16 | protocol)
# Where a first filter goes on an empty hook: the kernel's own first automatic priority, which leaves room on
# both sides for filters added later. A filter added later goes after every filter there (as tcx appends).
FIRST_PRIORITY = 0xC000
MAX_PRIORITY = 0xFFFF
HANDLE = 1  # each of our filters is alone at its priority


class ClsBpfError(RuntimeError):
    """A filter could not be attached, replaced or removed; the message names the interface and the place."""


@dataclass(frozen=True)
class Filter:
    """One filter at a clsact hook of an interface, as the kernel dumps it."""

    priority: int
    handle: int
    kind: str  # "bpf" for cls_bpf; another classifier's name otherwise
    name: str = ""
    prog_id: int = 0
    tag: str = ""
    direct_action: bool = False

    def describe(self) -> str:
        what = f"{self.kind} filter {self.name!r}" if self.name else f"{self.kind} filter"
        program = f", program id {self.prog_id} tag {self.tag}" if self.prog_id else ""
        return f"{what} (priority {self.priority}, handle {self.handle:#x}{program})"


def owner_name(instance: str) -> str:
    return f"xdpfleet:{instance}"


def _tcmsg(ifindex: int, handle: int = 0, parent: int = 0, priority: int = 0) -> bytes:
    info = (priority << 16) | socket.htons(ETH_P_ALL) if priority else 0
    return TCMSG.pack(socket.AF_UNSPEC, ifindex, handle, parent, info)


def _cstring(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def filters(ifindex: int, hook: str = "ingress") -> list[Filter]:
    """Every filter at the hook, in the order they run (priority, then handle); none without a clsact qdisc."""
    found = []
    with Netlink(socket.NETLINK_ROUTE) as nl:
        replies = nl.dump(RTM_GETTFILTER, _tcmsg(ifindex, parent=HOOK_PARENTS[hook]), f"dump tc {hook} filters")
    for _type, body in replies:
        _family, index, handle, _parent, info = TCMSG.unpack_from(body)
        if index != ifindex or not handle:  # handle 0: a priority's own entry, before its filters
            continue
        attrs = nl_attrs(body[TCMSG.size :])
        options = nl_attrs(attrs.get(TCA_OPTIONS, b""))
        found.append(
            Filter(
                priority=info >> 16,
                handle=handle,
                kind=_cstring(attrs.get(TCA_KIND, b"")),
                name=_cstring(options.get(TCA_BPF_NAME, b"")),
                prog_id=struct.unpack("=I", options[TCA_BPF_ID][:4])[0] if TCA_BPF_ID in options else 0,
                tag=options.get(TCA_BPF_TAG, b"").hex(),
                direct_action=bool(
                    TCA_BPF_FLAGS in options
                    and struct.unpack("=I", options[TCA_BPF_FLAGS][:4])[0] & TCA_BPF_FLAG_ACT_DIRECT
                ),
            )
        )
    return sorted(found, key=lambda f: (f.priority, f.handle))


def priority_after(existing: list[Filter]) -> int:
    """The priority of a filter that runs after every one of `existing`."""
    if not existing:
        return FIRST_PRIORITY
    last = max(f.priority for f in existing)
    if last >= MAX_PRIORITY:
        raise ClsBpfError(f"no priority is left after the last filter's ({last})")
    return last + 1


def has_clsact(ifindex: int) -> bool:
    with Netlink(socket.NETLINK_ROUTE) as nl:
        replies = nl.dump(RTM_GETQDISC, _tcmsg(ifindex), "dump qdiscs")
    for _type, body in replies:
        _family, index, _handle, parent, _info = TCMSG.unpack_from(body)
        kind = _cstring(nl_attrs(body[TCMSG.size :]).get(TCA_KIND, b""))
        if index == ifindex and kind == "clsact" and parent == TC_H_CLSACT:
            return True
    return False


def add_clsact(ifindex: int) -> None:
    kill_points.step()
    with Netlink(socket.NETLINK_ROUTE) as nl:
        payload = _tcmsg(ifindex, CLSACT_HANDLE, TC_H_CLSACT) + nl_attr(TCA_KIND, b"clsact\0")
        nl.request(RTM_NEWQDISC, NLM_F_CREATE | NLM_F_EXCL, payload, f"add clsact qdisc (ifindex {ifindex})")


def delete_clsact(ifindex: int) -> None:
    """Remove the clsact qdisc, and with it every filter at both its hooks, in one change."""
    kill_points.step()
    with Netlink(socket.NETLINK_ROUTE) as nl:
        payload = _tcmsg(ifindex, CLSACT_HANDLE, TC_H_CLSACT) + nl_attr(TCA_KIND, b"clsact\0")
        nl.request(RTM_DELQDISC, 0, payload, f"delete clsact qdisc (ifindex {ifindex})")


def attach(
    ifindex: int,
    prog_fd: int,
    priority: int,
    name: str,
    *,
    handle: int = HANDLE,
    replace: bool = False,
    hook: str = "ingress",
) -> None:
    """Put a program at (priority, handle) of the hook as a direct-action cls_bpf filter named `name`. Without
    replace the place must be free (EEXIST otherwise); with it, the filter there gets the program atomically."""
    options = (
        nl_attr(TCA_BPF_FD, struct.pack("=I", prog_fd))
        + nl_attr(TCA_BPF_NAME, name.encode() + b"\0")
        + nl_attr(TCA_BPF_FLAGS, struct.pack("=I", TCA_BPF_FLAG_ACT_DIRECT))
    )
    payload = (
        _tcmsg(ifindex, handle, HOOK_PARENTS[hook], priority)
        + nl_attr(TCA_KIND, b"bpf\0")
        + nl_attr(TCA_OPTIONS | NLA_F_NESTED, options)
    )
    flags = NLM_F_CREATE | (NLM_F_REPLACE if replace else NLM_F_EXCL)
    kill_points.step()
    what = f"{'replace' if replace else 'add'} cls_bpf filter (ifindex {ifindex}, tc {hook}, priority {priority})"
    with Netlink(socket.NETLINK_ROUTE) as nl:
        nl.request(RTM_NEWTFILTER, flags, payload, what)


def detach(ifindex: int, priority: int, handle: int = HANDLE, hook: str = "ingress") -> None:
    kill_points.step()
    payload = _tcmsg(ifindex, handle, HOOK_PARENTS[hook], priority) + nl_attr(TCA_KIND, b"bpf\0")
    what = f"delete cls_bpf filter (ifindex {ifindex}, tc {hook}, priority {priority})"
    with Netlink(socket.NETLINK_ROUTE) as nl:
        nl.request(RTM_DELTFILTER, 0, payload, what)
