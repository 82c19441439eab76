# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Deploying the XDP router (bpf/router) on a host: check the interfaces and the kernel's forwarding switches,
compile and load the data plane, write its ports into the devmap and attach it to them (or, in check mode, only say
what would change); and reading its per-verdict counters.

Shared by the xdpfleet.fabric.xdp_router module and by restore (host/records.py replays the record's `router`
part), so a router brought back after a reboot goes through exactly the same steps.

Why forwarding must be on: bpf_fib_lookup answers BPF_FIB_LKUP_RET_FWD_DISABLED on an interface where the kernel
does not forward, and the router then hands every frame to a kernel that does not forward it either. A router that
forwards nothing is refused with the sysctl to set, before anything changes.

Why netfilter rules and rp_filter are refused too (router/forwarding_policy.py): a frame forwarded in XDP skips
them, so on such a host the router would forward what the kernel drops or rewrites. The user may let it
(bypass_forwarding_rules), and the choice is recorded so restore makes the same one.
"""

from __future__ import annotations

import ctypes
import os
import socket

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import forwarding_policy, layouts, needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router.abi import RT_PORTS_MAX, VERDICT_NAMES

ROUTER_SOURCE = "/var/lib/xdpfleet/src/router/router.c"
ROUTER_INCLUDE_DIRS = ["/var/lib/xdpfleet/src/include"]
MODES = ("native", "generic")
SYSCTL_ROOT = "/proc/sys/net"


class RouterError(RuntimeError):
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


def read_counters(paths: xp.InstancePaths) -> dict | None:
    """The counters of a deployed router from its pinned map alone; None when the host has no router of that name."""
    pin = paths.map_pin(layouts.STATS)
    if not os.path.exists(pin):
        return None
    with libbpf.PinnedMap(pin) as pinned:
        layouts.LAYOUTS[layouts.STATS].check_pinned(pinned)
        return counters(TypedMap(pinned, layouts.LAYOUTS[layouts.STATS]))


def _program_changes(steps: list[xp.Step], changes: Changes) -> None:
    for s in steps:
        if s.action != "unchanged":
            changes.add(
                f"{s.ifname}: {s.action} {s.after or s.before}",
                key=s.ifname,
                before=f"{s.ifname}: {s.before}" if s.before else None,
                after=f"{s.ifname}: {s.after}" if s.action != "detach" else None,
            )


def deploy(
    paths: xp.InstancePaths,
    interfaces: list[str],
    mode: str,
    cache_dir: str,
    source: str = ROUTER_SOURCE,
    include_dirs: list[str] | None = None,
    check_mode: bool = False,
    build_dir: str | None = None,
    bypass_forwarding_rules: bool = False,
) -> dict:
    """Make the router instance forward between `interfaces`; returns the module result (changed, changes,
    program, ansible_facts, diff). Raises RouterError; nothing on the host changed unless the message says so.
    Unless `bypass_forwarding_rules`, a host whose netfilter rules or rp_filter apply to forwarded frames is
    refused."""
    include_dirs = ROUTER_INCLUDE_DIRS if include_dirs is None else include_dirs
    if mode not in MODES:
        raise RouterError(f"mode: {mode!r} is not one of {', '.join(MODES)}")
    problems = interface_problems(interfaces) or forwarding_problems(interfaces)
    if not problems and not bypass_forwarding_rules:
        problems = forwarding_policy.netfilter_problems(interfaces) + forwarding_policy.rp_filter_problems(
            interfaces, read_sysctl
        )
    if problems:
        raise RouterError("; ".join(problems))
    try:
        features.require(needs.NEEDS, needs.VARIANT)
    except features.MissingFeatures as exc:
        raise RouterError(f"this kernel cannot run the router, nothing was changed: {exc}") from exc
    if no_bpffs := xp.bpffs_problem(paths.pin_root):
        raise RouterError(no_bpffs)
    try:
        xp.check_trusted_paths(paths)
        object_path, instance = xp.compiled_instance(
            paths,
            source,
            cache_dir,
            include_dirs,
            layouts.PROGRAM,
            mode,
            tuple(layouts.LAYOUTS.values()),
            build_dir=build_dir,
        )
    except xp.XdpProgramError as exc:
        raise RouterError(f"loading the router data plane failed, nothing was changed: {exc}") from exc
    header = f"router {paths.name}"
    with instance:
        try:
            plan = instance.plan(interfaces, replace_foreign=False)
        except xp.XdpProgramError as exc:
            raise RouterError(str(exc)) from exc
        ports = TypedMap(instance.obj.map(layouts.PORTS), layouts.LAYOUTS[layouts.PORTS])
        current = {int(key.value): int(value.value) for key, value in ports.items()}
        desired = {xp.ifindex_of(ifname): xp.ifindex_of(ifname) for ifname in interfaces}
        port_names = {ifindex: ifname_of(ifindex) for ifindex in {*current, *desired}}
        added, removed, changes = port_changes(current, desired, port_names, header)
        record = {
            **xp.state_record(instance, interfaces, source, object_path, {"include_dirs": include_dirs}),
            "router": {"interfaces": interfaces, "bypass_forwarding_rules": bypass_forwarding_rules},
        }
        try:
            with xp.recording(paths, record, check_mode) as recorded:
                if not check_mode:
                    _apply(instance, plan, ports, added, removed)
        except xp.RecordError as exc:
            raise RouterError(str(exc)) from exc
        except (libbpf.LibbpfError, xp.XdpProgramError) as exc:
            raise RouterError(f"applying the router failed, previous state restored: {exc}") from exc
        _program_changes(plan.steps, changes)
        changed = changes.changed or plan.changed
        if recorded and not changed:
            changes.add(xp.record_step(paths.state_file))
        stats = TypedMap(instance.obj.map(layouts.STATS), layouts.LAYOUTS[layouts.STATS])
        result = {
            "changed": changed or recorded,
            "changes": changes.steps,
            "program": {s.ifname: s.action for s in plan.steps},
            "ansible_facts": {
                "xdpfleet_router": {
                    "name": paths.name,
                    "interfaces": interfaces,
                    "mode": mode,
                    "bypass_forwarding_rules": bypass_forwarding_rules,
                    "prog_id": instance.running_prog_id(plan),
                    "counters": counters(stats),
                }
            },
        }
        if result["changed"]:
            result["diff"] = changes.diff()
        return result


def _apply(instance: xp.Instance, plan: xp.Plan, ports: TypedMap, added: list[int], removed: list[int]) -> None:
    """New ports into the devmap before the program may route to them, ports that go out of it after the program
    left them; a failed attach takes the added entries out again (Instance.apply rolled the interfaces back)."""
    for ifindex in added:
        ports.set(ifindex, ctypes.c_uint32(ifindex))
    try:
        if plan.changed:
            instance.apply(plan)
    except BaseException:
        for ifindex in added:
            ports.delete(ifindex)
        raise
    for ifindex in removed:
        ports.delete(ifindex)
