# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What this collection keeps running on a host, found from the records it leaves there: teardown and restore.

  <state_dir>/programs/<name>.json   one per instance (xdp_program, the VTEP, echo servers tg-echo-<if>): what
                                     runs where, written by xdp_program.converge / vtep_deploy.deploy
  <pin_root>/<name>/                 the instance's pins (they can outlive a record removed by hand)
  <run_dir>/trafficgen-<if>.pid      a sender that is running (it removes the file when it ends)
  <state_dir>/linux_vtep.json, nic_tuning.json, kernel_cmdline.json
                                     records of the modules that put their own changes back (linux_vtep,
                                     nic_tuning, kernel_cmdline); teardown only reports which exist

Teardown removes every instance through xdp_program.remove (what state=absent of each module does). Restore
re-applies every instance record through the same code as the modules: xdp_program.converge for a program, and
vtep_deploy.deploy with the recorded document for a VTEP. Both are used by modules (xdp_teardown, xdp_restore) and
restore also by the host-side boot entry point the xdp_host role installs (roles/xdp_host/files/xdpfleet-restore).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vd

RUN_DIR = "/run/xdpfleet"
OTHER_RECORDS = ("linux_vtep.json", "nic_tuning.json", "kernel_cmdline.json")
SENDER_STOP_SECONDS = 30.0  # a sender finishes its current BPF_PROG_RUN call (about 0.5 s) and reports


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


def recorded_senders(host: HostPaths) -> list[str]:
    """Interfaces with a sender record (running or left behind by a sender that was killed)."""
    return sorted(name.removeprefix(tg.SENDER_RECORD_PREFIX) for name in _names(host.run_dir, ".pid"))


def other_records(host: HostPaths) -> list[str]:
    return [name for name in OTHER_RECORDS if os.path.isfile(os.path.join(host.state_dir, name))]


def _exited(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie has exited
    except (OSError, IndexError):
        return True


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not _exited(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def stop_sender(host: HostPaths, ifname: str, check_mode: bool, timeout: float = SENDER_STOP_SECONDS) -> str:
    """Stop the sender recorded for an interface (SIGTERM: it detaches its return counter and reports; SIGKILL after
    timeout: the kernel releases the counter with the process) and remove its records. Returns what was done."""
    pid_file = tg.sender_pid_file(host.run_dir, ifname)
    pid = tg.running_sender(pid_file)
    line = f"- sender on {ifname} (pid {pid})" if pid else f"- stale sender record {pid_file}"
    if check_mode:
        return line
    if pid:
        os.kill(pid, signal.SIGTERM)
        if not _wait_exit(pid, timeout):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_exit(pid, 5.0)
            line += f", killed after {timeout:.0f} s"
    for path in (pid_file, tg.sender_stats_file(host.run_dir, ifname)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    return line


@dataclass
class Teardown:
    senders: list[str] = field(default_factory=list)
    instances: dict[str, list[str]] = field(default_factory=dict)  # name -> what was removed

    @property
    def changed(self) -> bool:
        return bool(self.senders or self.instances)

    def lines(self) -> list[str]:
        return self.senders + [f"{name}: {line[2:]}" for name, lines in self.instances.items() for line in lines]


def teardown(host: HostPaths, check_mode: bool, stop_timeout: float = SENDER_STOP_SECONDS) -> Teardown:
    """Senders first (each holds a return counter on its interface), then every instance, pins and records."""
    done = Teardown()
    for ifname in recorded_senders(host):
        done.senders.append(stop_sender(host, ifname, check_mode, stop_timeout))
    for name in pinned_instances(host):
        try:
            removed = xp.remove(host.instance(name), check_mode)
        except (libbpf.LibbpfError, OSError) as exc:
            raise xp.XdpProgramError(f"removing instance {name}: {exc}") from exc
        if removed:
            done.instances[name] = removed
    return done


class RestoreError(RuntimeError):
    """One instance could not be restored; the message names what is missing."""


@dataclass
class Restored:
    name: str
    kind: str  # program or vtep
    changed: bool = False
    changes: list[str] = field(default_factory=list)
    error: str = ""

    def report(self) -> dict:
        out = {"kind": self.kind, "changed": self.changed, "changes": self.changes}
        if self.error:
            out["error"] = self.error
        return out


def _load_record(paths: xp.InstancePaths) -> dict:
    try:
        record = xp.load_state(paths)
    except ValueError as exc:
        raise RestoreError(f"{paths.state_file} is not valid JSON: {exc}") from exc
    if not isinstance(record, dict) or not isinstance(record.get("interfaces"), dict):
        raise RestoreError(f"{paths.state_file} does not record the instance's interfaces")
    return record


def _restore_program(
    paths: xp.InstancePaths, record: dict, host: HostPaths, check_mode: bool, build_dir: str | None
) -> list[str]:
    interfaces = sorted(record["interfaces"])
    missing = [ifname for ifname in interfaces if not xp.ifindex_of(ifname)]
    if missing:
        raise RestoreError(f"interfaces {', '.join(missing)} no longer exist on this host")
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
        )
    except (xp.XdpProgramError, libbpf.LibbpfError) as exc:
        raise RestoreError(str(exc)) from exc
    return [f"{s.ifname}: {s.action} {s.after or s.before}" for s in done.plan.steps if s.action != "unchanged"]


def _restore_vtep(
    paths: xp.InstancePaths,
    record: dict,
    host: HostPaths,
    check_mode: bool,
    build_dir: str | None,
    neighbour_timeout: float,
) -> list[str]:
    try:
        result = vd.deploy(
            paths,
            record["vtep"],
            record.get("mode", "native"),
            host.cache_dir,
            record.get("source") or vd.VTEP_SOURCE,
            (record.get("build") or {}).get("include_dirs"),
            neighbour_timeout,
            check_mode=check_mode,
            build_dir=build_dir,
        )
    except vd.VtepError as exc:
        raise RestoreError(str(exc)) from exc
    if not result["changed"]:
        return []
    steps = [f"{ifname}: {action}" for ifname, action in result["program"].items() if action != "unchanged"]
    return result["changes"] + steps


def restore(
    host: HostPaths,
    check_mode: bool,
    build_dir: str | None = None,
    neighbour_timeout: float = vd.NEIGHBOUR_TIMEOUT,
    names: list[str] | None = None,
) -> list[Restored]:
    """Re-apply every recorded instance (or those named). Each instance is restored or reported on its own, so one
    that cannot come back (its interface is gone) does not keep the others down."""
    if (no_bpffs := xp.bpffs_problem()):
        raise RestoreError(no_bpffs)
    results = []
    for name in names if names is not None else recorded_instances(host):
        paths = host.instance(name)
        outcome = Restored(name, "program")
        results.append(outcome)
        try:
            if not os.path.isfile(paths.state_file):
                raise RestoreError(f"no record {paths.state_file}")
            record = _load_record(paths)
            if "vtep" in record:
                outcome.kind = "vtep"
                outcome.changes = _restore_vtep(paths, record, host, check_mode, build_dir, neighbour_timeout)
            else:
                outcome.changes = _restore_program(paths, record, host, check_mode, build_dir)
        except RestoreError as exc:
            outcome.error = str(exc)
        outcome.changed = bool(outcome.changes)
    return results
