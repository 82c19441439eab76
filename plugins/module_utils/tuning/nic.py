# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""NIC queue tuning: channels, rings, features, coalescing, MTU and the queue IRQs' affinity, per interface.

Current values come from `ethtool` (its text output, parsed in nic_ethtool.py), sysfs and /proc/irq. A driver
profile gives documented defaults that the user's settings override. Only what differs changes; a failure rolls
back what this run changed. The value of every setting before xdpfleet first changed it is recorded in the host's
state file, so that teardown restores exactly those settings to exactly those values.

This module is the entry the nic_tuning module calls, and keeps the record; the parts are nic_ethtool.py,
nic_profiles.py, nic_read.py (an interface as it is) and nic_plan.py (resolve, plan, apply).
"""

from __future__ import annotations

import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_ethtool import TuningError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_plan import (
    SETTINGS,
    Change,
    apply,
    plan,
    resolve,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_profiles import Profile
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_read import SYSFS_NET, Current, read_current

STATE_NAME = "nic_tuning.json"


# ---- the record of original values ------------------------------------------------------------------------


def check_state_dir(state_dir: str) -> None:
    """The record there says what state=absent writes back to the NICs: another user must not be able to write it."""
    try:
        files.check_trusted("state_dir", state_dir)
    except files.UntrustedPath as exc:
        raise TuningError([str(exc)]) from None


def load_record(state_dir: str) -> dict:
    try:
        return records.Record(state_dir, STATE_NAME).load() or {"interfaces": {}}
    except records.RecordError as exc:
        raise TuningError([str(exc)]) from None


def save_record(state_dir: str, record: dict) -> None:
    store = records.Record(state_dir, STATE_NAME)
    if not record["interfaces"]:
        store.remove()
        return
    store.save(record)


def remember(record: dict, ifname: str, changes: list[Change]) -> None:
    """Keep each setting's value from before xdpfleet first changed it (a later change keeps the first record)."""
    originals = record["interfaces"].setdefault(ifname, {})
    for c in changes:
        if c.key is None:
            originals.setdefault(c.setting, c.before)
        else:
            originals.setdefault(c.setting, {}).setdefault(c.key, c.before)


def restoration(record: dict, ifname: str) -> dict:
    """The recorded originals of one interface in the shape resolve() returns (irq affinities keyed by IRQ)."""
    originals = record["interfaces"].get(ifname, {})
    return {s: originals[s] for s in SETTINGS if s in originals}


# ---- the module's work: every interface checked, then each changed -------------------------------------------------


def xdp_program(ifname: str) -> tuple[int, str | None]:
    """(program id, mode) of the XDP program on the interface; (0, None) without one."""
    ifindex = netdev.ifindex(ifname)
    if ifindex is None:
        return 0, None
    state = libbpf.xdp_query(ifindex)
    return state.prog_id, state.mode


def irqbalance_running() -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "irqbalance":
                    return True
        except OSError:
            continue
    return False


def shown(current: Current, profile: Profile) -> dict:
    return {"profile": profile.name, **{s: current.value(s) for s in SETTINGS if s != "features"}}


def apply_interface(ifname: str, changes: list[Change], driver: str | None) -> None:
    """Apply, then make sure an attached XDP program survived a channel change (else put the channels back)."""
    before = xdp_program(ifname)
    apply(ifname, changes, driver)
    if before[0] and xdp_program(ifname) != before:
        undo = [Change(c.setting, c.key, c.after, c.before) for c in changes]
        try:
            apply(ifname, undo, driver)
        except TuningError as exc:
            raise TuningError(
                [
                    f"{ifname}: XDP program {before[0]} ({before[1]}) did not survive, and putting the settings back "
                    f"failed: {exc}"
                ]
            ) from exc
        raise TuningError(
            [
                f"{ifname}: XDP program {before[0]} ({before[1]}) was not attached the same way after the change; the "
                "previous settings are back"
            ]
        )


def report(done: Changes, ifname: str, changes: list[Change]) -> None:
    """Add an interface's changes to the module's report: each change a step, each setting's values the diff."""
    for c in changes:
        key = (ifname, c.setting, c.key)
        done.add(c.words(ifname), key=key, before=c.state(ifname, c.before), after=c.state(ifname, c.after))


def present(interfaces: list[dict] | None, state_dir: str, check_mode: bool) -> dict:
    """state=present: resolve and check every interface first, then change each, recording the original values
    before the change. Returns the module result; raises TuningError naming the fields."""
    check_state_dir(state_dir)
    record = load_record(state_dir)
    done = Changes("nic_tuning")
    planned, errors, result = [], [], {"interfaces": {}, "warnings": []}
    for n, spec in enumerate(interfaces or []):
        where = f"interfaces[{n}]"
        try:
            current, profile = read_current(spec["name"], spec.get("profile") or "auto")
            wanted = resolve(spec, current, profile, where)
        except TuningError as exc:
            errors += [e if e.startswith(where) else f"{where}.{e}" for e in exc.errors]
            continue
        planned.append((current, profile, plan(current, wanted)))
        if "irq_affinity" in wanted and irqbalance_running():
            result["warnings"].append(f"{spec['name']}: irqbalance is running and will move the queue IRQs again")
    if errors:  # every interface is checked before any changes
        raise TuningError(errors)
    for current, profile, changes in planned:
        report(done, current.ifname, changes)
        if changes and not check_mode:
            remember(record, current.ifname, changes)
            save_record(state_dir, record)  # before the change: teardown can always undo it
            apply_interface(current.ifname, changes, current.driver.get("driver"))
            current, profile = read_current(current.ifname, profile.name)
        result["interfaces"][current.ifname] = shown(current, profile)
    return {**result, **done.result()}


def absent(interfaces: list[dict] | None, state_dir: str, check_mode: bool) -> dict:
    """state=absent: put back the recorded original values of the interfaces named (all recorded ones by default)
    and forget them. Returns the module result; raises TuningError."""
    check_state_dir(state_dir)
    record = load_record(state_dir)
    names = [i["name"] for i in interfaces or []] or sorted(record["interfaces"])
    done = Changes("nic_tuning")
    result = {"interfaces": {}, "warnings": []}
    for ifname in names:
        if ifname not in record["interfaces"]:
            continue
        if not os.path.isdir(os.path.join(SYSFS_NET, ifname)):
            result["warnings"].append(f"{ifname}: gone from the host; its record is dropped")
            changes = []
        else:
            current, profile = read_current(ifname, "none")
            changes = plan(current, restoration(record, ifname))
            report(done, ifname, changes)
            if changes and not check_mode:
                apply_interface(ifname, changes, current.driver.get("driver"))
                current, profile = read_current(ifname, "none")
            result["interfaces"][ifname] = shown(current, profile)
        if not changes:  # the record itself goes: that is a change of the host's state too
            done.add(
                f"{ifname}: forget the recorded original values (they are in place)",
                before=f"{ifname}: recorded original values",
            )
        if not check_mode:
            del record["interfaces"][ifname]
            save_record(state_dir, record)
    return {**result, **done.result()}
