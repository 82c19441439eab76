# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""An interface's promiscuous flag (IFF_PROMISC), read and set as `ip link set DEV promisc on|off` does.

The kernel keeps two things: a counter (dev->promiscuity) that the bridge, macvlan and packet sockets
(PACKET_MR_PROMISC) raise and lower, and the administrator's flag (IFF_PROMISC in dev->gflags), which adds one to
the counter while it is set. The flag is what this module reads and sets, through RTM_NEWLINK with ifi_change =
IFF_PROMISC: setting it twice counts once, so a re-run is idempotent; it outlives the module's process, where a
packet socket's count is dropped when the socket closes; and putting it back never takes away a count that a bridge
or a capture holds. The interface receives promiscuously while the counter is above zero (IFLA_PROMISCUITY).
"""

from __future__ import annotations

import errno
import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import kill_points
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.netdev import SYSFS_NET, errno_text

IFF_PROMISC = 0x100


class PromiscError(OSError):
    """Reading or setting an interface's promiscuous flag failed; the message names the interface."""


def promiscuous(ifname: str, sysfs: str = SYSFS_NET) -> bool | None:
    """Whether the interface's promiscuous flag is set (sysfs `flags` shows the flag, not the counter); None when
    there is no such interface."""
    try:
        with open(os.path.join(sysfs, ifname, "flags")) as f:
            return bool(int(f.read(), 16) & IFF_PROMISC)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise PromiscError(errno.EIO, f"{ifname}: reading its flags failed: {exc}") from exc


def set_promiscuous(ifname: str, on: bool) -> None:
    """Set or clear the interface's promiscuous flag (RTM_NEWLINK, only IFF_PROMISC changes)."""
    kill_points.step()
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=ifname)
            if not found:
                raise PromiscError(errno.ENODEV, f"{ifname}: no such interface, its promiscuous flag cannot be set")
            ipr.link("set", index=found[0], flags=IFF_PROMISC if on else 0, change=IFF_PROMISC)
    except NetlinkError as exc:
        raise PromiscError(
            exc.code, f"{ifname}: setting promiscuous mode {'on' if on else 'off'} failed: {errno_text(exc.code)}"
        ) from exc
