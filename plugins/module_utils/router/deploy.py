# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The XDP router (bpf/router) as a data plane (dataplane/template.py): the interfaces and the kernel's forwarding
switches checked, its ports written into the devmap, and its per-verdict counters.

Deployed by the xdpfleet.fabric.xdp_router module and by restore (instances/records.py replays the record's
`router` part).

Why forwarding must be on: bpf_fib_lookup answers BPF_FIB_LKUP_RET_FWD_DISABLED on an interface where the kernel
does not forward, and the router then hands every frame to a kernel that does not forward it either. A router that
forwards nothing is refused with the sysctl to set, before anything changes.

Why netfilter rules and rp_filter are refused too (router/forwarding_policy.py): a frame forwarded in XDP skips
them, so on such a host the router would forward what the kernel drops or rewrites. The user may let it
(bypass_forwarding_rules), and the choice is recorded so restore makes the same one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from dataclasses import dataclass
from typing import ClassVar

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout, TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import DataPlane, DataPlaneError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import forwarding_policy, layouts, needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router.abi import RT_PORTS_MAX, VERDICT_NAMES

ROUTER_SOURCE = "/var/lib/xdpfleet/src/router/router.c"
MODES = ("native", "generic")
SYSCTL_ROOT = "/proc/sys/net"


class RouterError(DataPlaneError):
    """A refusal or failure, with a message meant for the person running the playbook."""


def interface_problems(interfaces, ifindex_of=xp.ifindex_of) -> list[str]:
    """What is wrong with the `interfaces` argument (each problem names it), before anything is read or changed."""
    if not isinstance(interfaces, list) or not interfaces:
        return ["interfaces: give at least one interface to route between"]
    problems = []
    if len(interfaces) > RT_PORTS_MAX:
        problems.append(f"interfaces: {len(interfaces)} given, the router holds at most {RT_PORTS_MAX}")
    seen = set()
    for n, ifname in enumerate(interfaces):
        if bad := names.ifname_problem(ifname):
            problems.append(f"interfaces[{n}]: {bad}")
        elif ifname in seen:
            problems.append(f"interfaces[{n}]: {ifname} is listed twice")
        elif not ifindex_of(ifname):
            problems.append(f"interfaces[{n}]: {ifname} does not exist on this host")
        seen.add(ifname)
    return problems


def ifname_of(ifindex: int) -> str:
    try:
        return socket.if_indextoname(ifindex)
    except OSError:
        return "gone"


def read_sysctl(path: str) -> str | None:
    """A sysctl's value (path under /proc/sys/net, e.g. ipv4/conf/p1/forwarding), None where it does not exist."""
    try:
        with open(os.path.join(SYSCTL_ROOT, path)) as f:
            return f.read().strip()
    except FileNotFoundError:
        return None


def forwarding_problems(interfaces: list[str], read=read_sysctl) -> list[str]:
    """Interfaces on which the kernel does not forward (IPv4 always; IPv6 unless it is disabled on the interface),
    each with the sysctl that turns forwarding on."""
    problems = []
    for ifname in interfaces:
        if read(f"ipv4/conf/{ifname}/forwarding") != "1":
            problems.append(
                f"interfaces: the kernel does not forward IPv4 on {ifname} (net.ipv4.conf.{ifname}.forwarding is "
                "not 1; set net.ipv4.ip_forward=1)"
            )
        if read(f"ipv6/conf/{ifname}/disable_ipv6") == "0" and read(f"ipv6/conf/{ifname}/forwarding") != "1":
            problems.append(
                f"interfaces: the kernel does not forward IPv6 on {ifname} (net.ipv6.conf.{ifname}.forwarding is "
                "not 1; set net.ipv6.conf.all.forwarding=1, or disable IPv6 on the interface)"
            )
    return problems


@dataclass
class PortsPlan:
    """The devmap of the router's ports and what goes into it and out of it."""

    devmap: TypedMap
    added: list[int]
    removed: list[int]
    changes: Changes


def port_changes(current: dict[int, int], desired: dict[int, int], names_by_ifindex: dict[int, str], header: str):
    """The devmap's entries to add and remove, and the Changes that say so ("+ port p1 (ifindex 5)")."""
    changes = Changes(header)
    added = sorted(set(desired) - set(current))
    removed = sorted(set(current) - set(desired))
    for ifindex in added + removed:
        line = f"port {names_by_ifindex.get(ifindex, 'gone')} (ifindex {ifindex})"
        if ifindex in added:
            changes.add(f"+ {line}", key=ifindex, after=line)
        else:
            changes.add(f"- {line}", key=ifindex, before=line)
    return added, removed, changes


def counters(stats: TypedMap) -> dict[str, dict[str, int]]:
    """Every verdict's packets and bytes, summed over the CPUs."""
    out = {}
    for value, label in VERDICT_NAMES.items():
        per_cpu = stats.get(value) or []
        out[label] = {"packets": sum(c.packets for c in per_cpu), "bytes": sum(c.bytes for c in per_cpu)}
    return out


class Router(DataPlane):
    """A router instance forwarding between `interfaces`. Unless `bypass_forwarding_rules`, a host whose netfilter
    rules or rp_filter apply to forwarded frames is refused."""

    name = "router"
    title = "router"
    module = "xdp_router"
    what = "the router"
    what_applied = "the router"
    what_loaded = "the router data plane"
    Error = RouterError
    source = ROUTER_SOURCE
    map_layouts: ClassVar[dict[str, MapLayout]] = layouts.LAYOUTS
    counter_maps = (layouts.STATS,)

    def __init__(
        self,
        paths: xp.InstancePaths,
        cache_dir: str,
        *,
        interfaces: list[str],
        mode: str = "native",
        bypass_forwarding_rules: bool = False,
        **common,
    ):
        super().__init__(paths, cache_dir, **common)
        self.ports = interfaces
        self.mode = mode
        self.bypass_forwarding_rules = bypass_forwarding_rules

    def validate(self) -> None:
        if self.mode not in MODES:
            raise RouterError(f"mode: {self.mode!r} is not one of {', '.join(MODES)}")
        problems = interface_problems(self.ports) or forwarding_problems(self.ports)
        if not problems and not self.bypass_forwarding_rules:
            problems = forwarding_policy.netfilter_problems(self.ports) + forwarding_policy.rp_filter_problems(
                self.ports, read_sysctl
            )
        if problems:
            raise RouterError("; ".join(problems))

    def needs(self):
        return needs.NEEDS, needs.VARIANT

    def interfaces(self) -> list[str]:
        return self.ports

    def compile_arguments(self) -> dict:
        return {"program": layouts.PROGRAM, "mode": self.mode}

    def plan(self, instance: xp.Instance) -> PortsPlan:
        devmap = TypedMap(instance.obj.map(layouts.PORTS), layouts.LAYOUTS[layouts.PORTS])
        current = {int(key.value): int(value.value) for key, value in devmap.items()}
        desired = {xp.ifindex_of(ifname): xp.ifindex_of(ifname) for ifname in self.ports}
        port_names = {ifindex: ifname_of(ifindex) for ifindex in {*current, *desired}}
        return PortsPlan(devmap, *port_changes(current, desired, port_names, self.header))

    def part(self) -> dict:
        return {"interfaces": self.ports, "bypass_forwarding_rules": self.bypass_forwarding_rules}

    @contextlib.contextmanager
    def write(self, instance: xp.Instance, attach_plan: xp.Plan, planned: PortsPlan):
        """New ports into the devmap before the program may route to them, ports that go out of it after the
        program left them; a failed attach takes the added entries out again (Instance.apply rolled the interfaces
        back)."""
        if self.check_mode:
            yield
            return
        for ifindex in planned.added:
            planned.devmap.set(ifindex, ctypes.c_uint32(ifindex))
        try:
            yield
        except BaseException:
            for ifindex in planned.added:
                planned.devmap.delete(ifindex)
            raise
        for ifindex in planned.removed:
            planned.devmap.delete(ifindex)

    def changes(self, planned: PortsPlan) -> Changes:
        changes = Changes(self.header)
        changes.extend(planned.changes)
        return changes

    def facts(self, instance: xp.Instance, attach_plan: xp.Plan, planned) -> dict:
        stats = TypedMap(instance.obj.map(layouts.STATS), layouts.LAYOUTS[layouts.STATS])
        return {
            "name": self.paths.name,
            "interfaces": self.ports,
            "mode": self.mode,
            "bypass_forwarding_rules": self.bypass_forwarding_rules,
            "prog_id": instance.running_prog_id(attach_plan),
            "counters": counters(stats),
        }

    @classmethod
    def counters(cls, maps: dict) -> dict:
        return counters(TypedMap(maps[layouts.STATS], layouts.LAYOUTS[layouts.STATS]))

    @classmethod
    def arguments(cls, record: dict, options: dict) -> dict:
        return {
            "interfaces": record[cls.name].get("interfaces") or [],
            "mode": record.get("mode", "native"),
            "source": record.get("source") or ROUTER_SOURCE,
            "include_dirs": (record.get("build") or {}).get("include_dirs"),
            "bypass_forwarding_rules": bool(record[cls.name].get("bypass_forwarding_rules")),
        }
