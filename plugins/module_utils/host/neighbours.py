# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Next-hop MAC addresses of remote VTEPs, from the host's routes and neighbour table (pyroute2)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ansible.module_utils.basic import missing_required_lib

if TYPE_CHECKING:
    from pyroute2 import IPRoute

NUD_REACHABLE = 0x02
NUD_PERMANENT = 0x80
USABLE_STATES = NUD_REACHABLE | 0x04 | 0x08 | 0x10 | NUD_PERMANENT  # REACHABLE, STALE, DELAY, PROBE, PERMANENT
NEIGHBOUR_TIMEOUT = 3.0  # seconds a next hop may take to answer ARP or ND, by default
NTF_USE = 0x01  # RTM_NEWNEIGH flag: treat the entry as used (the kernel resolves or re-confirms it), change nothing


class NeighbourError(RuntimeError):
    """No next-hop MAC. transient: the underlay may still come up (no route yet, a route through another port while
    routing converges, no ARP answer yet), as opposed to a host that cannot resolve at all (no pyroute2)."""

    def __init__(self, msg: str, transient: bool = False):
        super().__init__(msg)
        self.transient = transient


@dataclass(frozen=True)
class NextHop:
    """Where the host's route to an address goes, and what its neighbour table holds for that next hop now."""

    ifindex: int  # the route's output interface (0: none)
    address: str  # the next hop: the route's gateway, or the address itself on a link
    mac: str | None  # the neighbour entry's MAC when its state is usable (USABLE_STATES)
    state: int  # the neighbour entry's NUD state (0: no entry)


def ip_route(missing: Exception) -> IPRoute:
    """A pyroute2 IPRoute socket, or `missing` raised where pyroute2 is not installed. Imported here, not with this
    module: pyroute2's import costs more than the rest of a trafficgen task that resolves no MAC (0.2 s on a host,
    seconds on a slow one), and only hosts that resolve next hops need it."""
    try:
        from pyroute2 import IPRoute
    except ImportError:
        raise missing from None
    return IPRoute()


def _attr(msg, name):
    return msg.get_attr(name)


def next_hop(ipr: IPRoute, address: str) -> tuple[int, str]:
    """(output ifindex, next-hop address) of the host's route to an address."""
    try:
        route = ipr.route("get", dst=address)[0]
    except Exception as exc:  # pyroute2 raises NetlinkError with the kernel's errno
        raise NeighbourError(f"no route to {address}: {exc}", transient=True) from None
    return _attr(route, "RTA_OIF"), _attr(route, "RTA_GATEWAY") or address


def _entry(ipr: IPRoute, ifindex: int, address: str) -> tuple[str | None, int]:
    for neigh in ipr.get_neighbours(ifindex=ifindex, dst=address):
        mac = _attr(neigh, "NDA_LLADDR")
        if mac:
            return (mac if neigh["state"] & USABLE_STATES else None), neigh["state"]
    return None, 0


def _lookup(ipr: IPRoute, ifindex: int, address: str) -> str | None:
    return _entry(ipr, ifindex, address)[0]


def current(ipr: IPRoute, address: str) -> NextHop:
    """The next hop towards `address` as the kernel knows it now (nothing is sent). Raises NeighbourError (no
    route)."""
    oif, hop = next_hop(ipr, address)
    mac, state = _entry(ipr, oif, hop)
    return NextHop(oif, hop, mac, state)


def confirm(ipr: IPRoute, hop: NextHop) -> None:
    """Ask the kernel to resolve the next hop, or to confirm an entry it has not confirmed lately, as if the host sent
    it a packet (NTF_USE): the kernel's own neighbour state machine then probes it (ARP) and replaces the MAC when
    the next hop answers from another one. Sends nothing to the remote VTEP itself. Raises NeighbourError (the
    interface went away meanwhile).

    A permanent entry (ip neigh ... nud permanent) is left alone: the kernel never re-verifies it, and this request
    would turn it into an incomplete one (seen on Linux 6.18), which the next hop may never answer."""
    if hop.state & NUD_PERMANENT:
        return
    try:
        ipr.neigh("replace", dst=hop.address, ifindex=hop.ifindex, flags=NTF_USE, state=0)
    except Exception as exc:  # pyroute2's NetlinkError, with the kernel's errno
        raise NeighbourError(f"asking the kernel to confirm next hop {hop.address}: {exc}", transient=True) from None


def resolve(address: str, ifindex: int, timeout: float) -> str:
    """The MAC of the next hop towards `address`, which must leave through `ifindex`; asks the kernel to resolve
    it (one UDP datagram to the discard port) when the neighbour table does not have it yet."""
    with ip_route(NeighbourError(missing_required_lib("pyroute2"))) as ipr:
        oif, hop = next_hop(ipr, address)
        if oif != ifindex:
            name = socket.if_indextoname(oif) if oif else "nowhere"
            raise NeighbourError(
                f"the route to {address} leaves through {name}, not through this tunnel port", transient=True
            )
        mac = _lookup(ipr, oif, hop)
        if mac:
            return mac
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"", (address, 9))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            mac = _lookup(ipr, oif, hop)
            if mac:
                return mac
            time.sleep(0.05)
    raise NeighbourError(f"next hop {hop} did not answer ARP within {timeout:g} s", transient=True)
