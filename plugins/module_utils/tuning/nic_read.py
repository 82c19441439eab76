# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""One interface as it is now: ethtool's settings, its MTU, its queue IRQs (by the profile's naming rule) and their
affinity, and the CPUs local to it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.netdev import read_text
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_ethtool import (
    TuningError,
    ethtool,
    optional,
    parse_channels,
    parse_coalesce,
    parse_driver,
    parse_features,
    parse_rings,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_profiles import Profile, profile_for

SYSFS_NET = "/sys/class/net"
SYSFS_NODE = "/sys/devices/system/node"


def cpulist(text: str) -> list[int]:
    """ "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus = []
    for part in filter(None, text.strip().split(",")):
        lo, _sep, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def online_cpus() -> list[int]:
    return cpulist(read_text("/sys/devices/system/cpu/online") or "0")


def numa_local_cpus(ifname: str, sysfs: str = SYSFS_NET, nodes: str = SYSFS_NODE) -> list[int]:
    """The online CPUs of the interface's NUMA node; all online CPUs when it has none (virtual devices)."""
    node = read_text(os.path.join(sysfs, ifname, "device", "numa_node"))
    if node and node.lstrip("-").isdigit() and int(node) >= 0:
        text = read_text(os.path.join(nodes, f"node{node}", "cpulist"))
        if text:
            return cpulist(text)
    return online_cpus()


def queue_irqs(ifname: str, profile: Profile, bus: str | None, interrupts: str | None = None) -> list[int]:
    """The interface's queue IRQs, in queue order, by the profile's naming rule over /proc/interrupts."""
    if profile.irq_pattern is None:
        return []
    pattern = re.compile(profile.irq_pattern.format(ifname=re.escape(ifname), bus=re.escape(bus or "")))
    if interrupts is None:
        interrupts = read_text("/proc/interrupts") or ""
    irqs = []
    for line in interrupts.splitlines():
        number, _sep, rest = line.partition(":")
        if number.strip().isdigit() and rest.split() and pattern.match(rest.split()[-1]):
            irqs.append(int(number))
    return irqs


@dataclass
class Current:
    """One interface as it is now."""

    ifname: str
    driver: dict[str, str]
    channels: dict | None  # {"max": {...}, "current": {...}}; None: not supported
    rings: dict | None
    features: dict[str, dict[str, bool]]
    coalesce: dict[str, int | bool] | None
    mtu: int
    mtu_range: tuple[int, int]
    irqs: dict[int, str]  # queue IRQ -> its smp_affinity_list

    def value(self, setting: str) -> dict | int:
        """The current value of a setting in the shape the user writes it."""
        if setting == "mtu":
            return self.mtu
        if setting in ("channels", "rings"):
            table = getattr(self, setting)
            return dict(table["current"]) if table else {}
        if setting == "features":
            return {name: f["on"] for name, f in self.features.items()}
        if setting == "coalesce":
            return dict(self.coalesce or {})
        return {str(irq): cpus for irq, cpus in self.irqs.items()}


def read_current(ifname: str, profile_name: str = "auto") -> tuple[Current, Profile]:
    if not os.path.isdir(os.path.join(SYSFS_NET, ifname)):
        raise TuningError([f"name: interface {ifname} does not exist on this host"])
    driver = parse_driver(ethtool("-i", ifname)[1])
    profile = profile_for(profile_name, driver.get("driver"))
    channels = optional("-l", ifname)
    rings = optional("-g", ifname)
    coalesce = optional("-c", ifname)
    link = json.loads(
        subprocess.run(
            ["ip", "-d", "-j", "link", "show", "dev", ifname], capture_output=True, text=True, check=True
        ).stdout
    )[0]
    irqs = {
        irq: read_text(f"/proc/irq/{irq}/smp_affinity_list") or ""
        for irq in queue_irqs(ifname, profile, driver.get("bus-info"))
    }
    current = Current(
        ifname=ifname,
        driver=driver,
        channels=parse_channels(channels) if channels else None,
        rings=parse_rings(rings) if rings else None,
        features=parse_features(ethtool("-k", ifname)[1]),
        coalesce=parse_coalesce(coalesce) if coalesce else None,
        mtu=int(link["mtu"]),
        mtu_range=(int(link.get("min_mtu", 68)), int(link.get("max_mtu", 65535))),
        irqs=irqs,
    )
    return current, profile
