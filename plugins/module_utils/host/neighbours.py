# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Next-hop MAC addresses of remote VTEPs, from the host's routes and neighbour table (pyroute2)."""

from __future__ import annotations

import socket
import time

from ansible.module_utils.basic import missing_required_lib

try:
    from pyroute2 import IPRoute

    HAS_PYROUTE2 = True
except ImportError:  # resolve() reports it; only hosts that resolve next hops need pyroute2
    HAS_PYROUTE2 = False

USABLE_STATES = 0x02 | 0x04 | 0x08 | 0x10 | 0x80  # REACHABLE, STALE, DELAY, PROBE, PERMANENT


class NeighbourError(RuntimeError):
    pass


def _attr(msg, name):
    return msg.get_attr(name)


def next_hop(ipr: IPRoute, address: str) -> tuple[int, str]:
    """(output ifindex, next-hop address) of the host's route to an address."""
    try:
        route = ipr.route("get", dst=address)[0]
    except Exception as exc:  # pyroute2 raises NetlinkError with the kernel's errno
        raise NeighbourError(f"no route to {address}: {exc}") from None
    return _attr(route, "RTA_OIF"), _attr(route, "RTA_GATEWAY") or address


def _lookup(ipr: IPRoute, ifindex: int, address: str) -> str | None:
    for neigh in ipr.get_neighbours(ifindex=ifindex, dst=address):
        mac = _attr(neigh, "NDA_LLADDR")
        if mac and neigh["state"] & USABLE_STATES:
            return mac
    return None


def resolve(address: str, ifindex: int, timeout: float) -> str:
    """The MAC of the next hop towards `address`, which must leave through `ifindex`; asks the kernel to resolve
    it (one UDP datagram to the discard port) when the neighbour table does not have it yet."""
    if not HAS_PYROUTE2:
        raise NeighbourError(missing_required_lib("pyroute2"))
    with IPRoute() as ipr:
        oif, hop = next_hop(ipr, address)
        if oif != ifindex:
            name = socket.if_indextoname(oif) if oif else "nowhere"
            raise NeighbourError(f"the route to {address} leaves through {name}, not through this tunnel port")
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
    raise NeighbourError(f"next hop {hop} did not answer ARP within {timeout:g} s")
