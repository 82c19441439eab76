# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Which interface this host is managed through, so that a module does not take it over by mistake: the one that
carries the address of the SSH session the module runs in (the server half of SSH_CONNECTION), or, without one
(a local run), those of the default routes. Also every interface's addresses, which the same rules need.
"""

from __future__ import annotations

import ipaddress
import socket


def interface_addresses(ipr) -> dict[str, set[str]]:
    """Every interface's addresses (IPv4 and IPv6, as ipaddress writes them), by name; ipr: a pyroute2 IPRoute."""
    names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
    out: dict[str, set[str]] = {name: set() for name in names.values()}
    for msg in ipr.get_addr():
        address = msg.get_attr("IFA_LOCAL") or msg.get_attr("IFA_ADDRESS")
        if address and msg["index"] in names:
            out[names[msg["index"]]].add(str(ipaddress.ip_address(address)))
    return out


def session_address(environ) -> str | None:
    """This host's address of the SSH session in the environment (SSH_CONNECTION: client ip, client port, server
    ip, server port), or None."""
    parts = environ.get("SSH_CONNECTION", "").split()
    if len(parts) != 4:
        return None
    try:
        return str(ipaddress.ip_address(parts[2].split("%")[0]))  # a link-local address may carry its zone
    except ValueError:
        return None


def management_interfaces(ipr, environ, addresses: dict[str, set[str]]) -> dict[str, str]:
    """The interfaces the host is managed through, each with why it is one (in words, for an error message)."""
    session = session_address(environ)
    if session is not None:
        return {
            name: f"carries {session}, the address of the SSH session this module runs in"
            for name, have in addresses.items()
            if session in have
        }
    names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
    out = {}
    for family in (socket.AF_INET, socket.AF_INET6):
        for route in ipr.get_default_routes(family=family):
            hops = route.get_attr("RTA_MULTIPATH")  # a route over several next hops names no single RTA_OIF
            for oif in [hop["oif"] for hop in hops] if hops else [route.get_attr("RTA_OIF")]:
                if oif in names:
                    out[names[oif]] = "has the default route (no SSH session: the host's way out)"
    return out
