# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What this collection keeps running on a host, found from the records it leaves there: teardown and restore.

  <state_dir>/programs/<name>.json   one per instance (xdp_program, the VTEP, echo servers tg-echo-<if>): what
                                     runs where, written by xp.converge / DataPlane.deploy
  <pin_root>/<name>/                 the instance's pins (they can outlive a record removed by hand)
  <run_dir>/trafficgen-<if>.pid      a sender that is running (it removes the file when it ends)
  <state_dir>/linux_vtep.json, nic_tuning.json, kernel_cmdline.json, metrics_textfile.json
                                     records of the modules that put their own changes back (linux_vtep,
                                     nic_tuning, kernel_cmdline, metrics_textfile); teardown only reports which
                                     exist

Teardown removes every instance through dataplane/template.py's remove (what state=absent of each module does).
Restore re-applies every instance record through the same code as the modules: xp.converge for a program, and for
an instance of a data plane (its record names it, instances/registry.py) the data plane's deploy with the arguments
its record turns back into. Both are used by modules (xdp_teardown, xdp_restore) and restore also by the host-side
boot entry point the xdp_host role installs (roles/xdp_host/files/xdpfleet-restore).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes, merged
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.records import RecordError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane import template
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.neighbours import NEIGHBOUR_TIMEOUT
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import registry
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import sender

RUN_DIR = "/run/xdpfleet"
OTHER_RECORDS = ("linux_vtep.json", "nic_tuning.json", "kernel_cmdline.json", "metrics_textfile.json")
SENDER_STOP_SECONDS = sender.STOP_SECONDS
# Retries of a restore that failed for a reason that can pass: the first after this many seconds, each next one
# after twice as long, at most RETRY_MAX_DELAY apart.
RETRY_FIRST_DELAY = 1.0
RETRY_MAX_DELAY = 30.0


@dataclass(frozen=True)
class HostPaths:
    state_dir: str = xp.STATE_DIR
    pin_root: str = xp.PIN_ROOT
    cache_dir: str = xp.CACHE_DIR
    run_dir: str = RUN_DIR

    def instance(self, name: str) -> xp.InstancePaths:
        return xp.InstancePaths(name, self.pin_root, self.state_dir)

    @property
    def programs_dir(self) -> str:
        return os.path.join(self.state_dir, "programs")


def _names(directory: str, suffix: str = "", dirs: bool = False) -> set[str]:
    if not os.path.isdir(directory):
        return set()
    found = set()
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if dirs and os.path.isdir(path):
            found.add(entry)
        elif not dirs and entry.endswith(suffix) and os.path.isfile(path):
            found.add(entry[: -len(suffix)])
    return found


def recorded_instances(host: HostPaths) -> list[str]:
    """Instances with a state file."""
    return sorted(_names(host.programs_dir, ".json"))


def pinned_instances(host: HostPaths) -> list[str]:
    """Instances with a state file or a pin directory (a record removed by hand leaves its pins)."""
    return sorted(_names(host.programs_dir, ".json") | _names(host.pin_root, dirs=True))


def in_deploy_order(host: HostPaths, names: list[str]) -> list[str]:
    """`names` in the order their instances were deployed (program.deploy_order), which the restore follows so that
    programs that share a tc hook run in the order the playbook gave; records from before the order was kept first,
    by name."""
    orders = xp.recorded_deploy_orders(host.state_dir)
    return sorted(names, key=lambda name: (orders.get(name) or 0, name))


def recorded_senders(host: HostPaths) -> list[str]:
    """Interfaces with a sender record (running or left behind by a sender that was killed)."""
    return sorted(name.removeprefix(tg.SENDER_RECORD_PREFIX) for name in _names(host.run_dir, ".pid"))


def other_records(host: HostPaths) -> list[str]:
    return [name for name in OTHER_RECORDS if os.path.isfile(os.path.join(host.state_dir, name))]


@dataclass
class Teardown:
    senders: Changes = field(default_factory=lambda: Changes("senders"))  # stopped, their records gone
    instances: dict[str, Changes] = field(default_factory=dict)  # name -> what was removed

    @property
    def changed(self) -> bool:
        return self.senders.changed or bool(self.instances)

    def diff(self) -> dict:
        """Everything that went, one line each; an instance's lines start with its name."""
        parts = {name: removed.diff() for name, removed in self.instances.items()}
        return merged("xdpfleet", {"": self.senders.diff(), **parts})


def check_trusted(host: HostPaths) -> None:
    """Refuse host paths another user could write to (common/files.py says the rule): records there are acted on as
    root. Raises files.UntrustedPath naming the field."""
    files.check_trusted_fields(
        {"state_dir": host.state_dir, "pin_root": host.pin_root, "cache_dir": host.cache_dir, "run_dir": host.run_dir}
    )


def teardown(host: HostPaths, check_mode: bool, stop_timeout: float = SENDER_STOP_SECONDS) -> Teardown:
    """Senders first (each holds a return counter on its interface), then every instance, pins and records."""
    try:
        check_trusted(host)
    except files.UntrustedPath as exc:
        raise xp.XdpProgramError(str(exc)) from None
    done = Teardown()
    for ifname in recorded_senders(host):
        _pid, stopped = sender.stop(host.run_dir, ifname, check_mode, stop_timeout)
        done.senders.extend(stopped)
    for name in pinned_instances(host):
        paths = host.instance(name)
        try:
            removed = template.remove(paths, check_mode, "instance", registry.plane_of(xp.load_state(paths)))
        except (*template.REMOVE_ERRORS, *registry.RELEASE_ERRORS) as exc:
            raise xp.XdpProgramError(f"removing instance {name}: {exc}") from exc
        if removed.changed:
            done.instances[name] = removed
    return done


class RestoreError(RuntimeError):
    """One instance could not be restored; the message names what is missing. transient: what is missing can still
    come (an interface, a route or a next hop's answer that a slow underlay has not brought yet)."""

    def __init__(self, msg: str, transient: bool = False):
        super().__init__(msg)
        self.transient = transient


@dataclass
class Restored:
    name: str
    kind: str  # program, or the name of its data plane (instances/registry.py)
    changes: list[str] = field(default_factory=list)  # the steps taken
    diff: dict | None = None  # the instance's state before and after
    error: str = ""
    transient: bool = False  # the error can pass (RestoreError.transient): restore() tries again
    attempts: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def report(self) -> dict:
        out = {"kind": self.kind, "changed": self.changed, "changes": self.changes}
        if self.error:
            out["error"] = self.error
        return out


def _load_record(paths: xp.InstancePaths) -> dict:
    try:
        record = xp.load_state(paths)
    except RecordError as exc:
        raise RestoreError(str(exc)) from exc
    if not isinstance(record.get("interfaces"), dict):
        raise RestoreError(f"{paths.state_file} does not record the instance's interfaces")
    return record


def _restore_program(
    paths: xp.InstancePaths, record: dict, host: HostPaths, check_mode: bool, build_dir: str | None
) -> tuple[list[str], dict | None]:
    interfaces = sorted(record["interfaces"])
    object_path = record.get("object")
    build = record.get("build") or {}
    if not (object_path and os.path.isfile(object_path)):
        # The compile cache was cleared: build the recorded source again with the recorded flags.
        if not record.get("source"):
            raise RestoreError(f"the recorded object {object_path} is gone and no source was recorded")
        try:
            object_path, _built = bpf_build.compile_object(
                record["source"], host.cache_dir, build.get("include_dirs"), build.get("defines"), build_dir=build_dir
            )
        except bpf_build.CompileError as exc:
            raise RestoreError(str(exc)) from exc
    try:
        done = xp.converge(
            paths,
            object_path,
            record.get("program"),
            record.get("mode", "native"),
            record.get("constants") or {},
            interfaces,
            record.get("source"),
            build=build,
            check_mode=check_mode,
            tc_program=record.get("tc_program"),
        )
    except (xp.XdpProgramError, *xp.ATTACH_ERRORS) as exc:
        raise RestoreError(str(exc)) from exc
    changes = done.changes(paths.name)
    return changes.steps, changes.diff() if changes.changed else None


def _restore_plane(
    plane: type[template.DataPlane],
    paths: xp.InstancePaths,
    record: dict,
    host: HostPaths,
    check_mode: bool,
    build_dir: str | None,
    neighbour_timeout: float,
) -> tuple[list[str], dict | None]:
    options = {"neighbour_timeout": neighbour_timeout}
    try:
        instance = plane(paths, host.cache_dir, check_mode=check_mode, build_dir=build_dir,
                         **plane.arguments(record, options))  # fmt: skip
        result = instance.deploy()
    except template.DataPlaneError as exc:
        raise RestoreError(str(exc), transient=exc.transient) from exc
    return instance.restored_steps(result), result.get("diff")


def _restore_one(
    outcome: Restored, host: HostPaths, check_mode: bool, build_dir: str | None, neighbour_timeout: float
) -> None:
    paths = host.instance(outcome.name)
    outcome.attempts += 1
    outcome.error, outcome.transient = "", False
    try:
        if not os.path.isfile(paths.state_file):
            raise RestoreError(f"no record {paths.state_file}")
        if untrusted := files.path_problem(paths.state_file):
            raise RestoreError(f"record {paths.state_file} is refused: {untrusted}")
        record = _load_record(paths)
        missing = [ifname for ifname in sorted(record["interfaces"]) if not xp.ifindex_of(ifname)]
        if missing:
            raise RestoreError(f"interfaces {', '.join(missing)} no longer exist on this host", transient=True)
        outcome.kind = registry.kind_of(record)
        plane = registry.plane_of(record)
        if plane:
            done = _restore_plane(plane, paths, record, host, check_mode, build_dir, neighbour_timeout)
        else:
            done = _restore_program(paths, record, host, check_mode, build_dir)
        outcome.changes, outcome.diff = done
    except RestoreError as exc:
        outcome.error, outcome.transient = str(exc), exc.transient


def restore(
    host: HostPaths,
    check_mode: bool,
    build_dir: str | None = None,
    neighbour_timeout: float = NEIGHBOUR_TIMEOUT,
    names: list[str] | None = None,
    retry_seconds: float = 0.0,
    first_pass_done: Callable[[list[Restored]], None] | None = None,
) -> list[Restored]:
    """Re-apply every recorded instance (or those named), in the order they were deployed. Each instance is restored
    or reported on its own, so one that cannot come back (its interface is gone) does not keep the others down.

    Everything is tried once first (then first_pass_done is called with the results). An instance that failed for
    a reason that can pass (RestoreError.transient: an interface, a route or a next hop's ARP answer that is not
    there yet, as at boot on a slow underlay) is tried again, with backoff, until it comes back or retry_seconds
    after the first pass have gone; its error then stays in the result. Other failures are reported at once. Check
    mode never retries."""
    if no_bpffs := xp.bpffs_problem(host.pin_root):
        raise RestoreError(no_bpffs)
    try:
        check_trusted(host)
    except files.UntrustedPath as exc:
        raise RestoreError(str(exc)) from None
    wanted = names if names is not None else recorded_instances(host)
    results = [Restored(name, registry.PROGRAM) for name in in_deploy_order(host, wanted)]
    for outcome in results:
        _restore_one(outcome, host, check_mode, build_dir, neighbour_timeout)
    if first_pass_done is not None:
        first_pass_done(results)
    deadline = time.monotonic() + retry_seconds
    delay = RETRY_FIRST_DELAY
    while not check_mode and any(r.transient for r in results) and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(delay, left))
        delay = min(delay * 2, RETRY_MAX_DELAY)
        for outcome in results:
            if outcome.transient:
                _restore_one(outcome, host, check_mode, build_dir, neighbour_timeout)
    return results


def restored_diff(results: list[Restored]) -> dict:
    """The diffs of every restored instance as one, each line starting with the instance's name."""
    return merged("xdpfleet", {r.name: r.diff for r in results if r.diff})
