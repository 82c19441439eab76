# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Kernel arguments in the boot configuration, the kernel_cmdline module's work: its options checked, the back end
chosen, the planned edit, and the record that lets state=restore undo exactly what this collection changed.

Two layers of quoting meet here. /etc/default/grub is a shell file: its variable's value is a shell word
(`"quiet foo=\\"a b\\""`), which unquotes to a kernel command line (`quiet foo="a b"`). The parts:
kernel_cmdline_args.py (the kernel's layer and the edits), kernel_cmdline_shell.py (the shell's layer),
kernel_cmdline_bootloaders.py (the GRUB file and grubby back ends).
"""

from __future__ import annotations

import os
import re

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.kernel_cmdline_args import (
    ONCE_KEYS,
    Cmdline,
    KernelCmdlineError,
    check_argument,
    key_of,
    reboot_required,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.kernel_cmdline_bootloaders import (
    Grubby,
    GrubFile,
    default_update_command,
    read_text,
)

PROC_CMDLINE = "/proc/cmdline"
STATE_FILE = "kernel_cmdline.json"
GRUBBY_PATHS = ("/usr/sbin/grubby", "/usr/bin/grubby")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def validate(params: dict) -> None:
    """Every rule on the options that needs no look at the host."""
    if params["state"] not in ("present", "restore"):
        raise KernelCmdlineError(f"state: {params['state']!r} is not one of present, restore")
    if params["bootloader"] not in ("auto", "grub", "grubby"):
        raise KernelCmdlineError(f"bootloader: {params['bootloader']!r} is not one of auto, grub, grubby")
    if not _VARIABLE_NAME.fullmatch(params["grub_variable"] or ""):
        raise KernelCmdlineError(f"grub_variable: {params['grub_variable']!r} is not a shell variable name")
    for n, word in enumerate(params["update_command"] or []):
        if not word:
            raise KernelCmdlineError(f"update_command[{n}]: must not be empty")
    once = {}
    for n, arg in enumerate(params["present"]):
        check_argument(f"present[{n}]", arg)
        key = key_of(arg)
        if key in ONCE_KEYS and once.setdefault(key, (n, arg))[1] != arg:
            raise KernelCmdlineError(
                f"present[{n}]: {arg!r} and present[{once[key][0]}] {once[key][1]!r} give {key} two values; "
                "the kernel takes it once"
            )
    keys = {key_of(arg): n for n, arg in enumerate(params["present"])}
    for n, arg in enumerate(params["absent"]):
        check_argument(f"absent[{n}]", arg)
        if key_of(arg) in keys:
            raise KernelCmdlineError(
                f"absent[{n}]: key {key_of(arg)!r} is also in present[{keys[key_of(arg)]}]; "
                "a key is either present or absent"
            )


def resolve_bootloader(bootloader: str) -> str:
    if bootloader != "auto":
        return bootloader
    return "grubby" if any(os.path.exists(p) for p in GRUBBY_PATHS) else "grub"


# ------------------------------------------------------------------------------------------ the record


def load_record(store: records.Record) -> dict | None:
    try:
        return store.load()
    except records.RecordError as exc:
        raise KernelCmdlineError(str(exc)) from None


def save_record(store: records.Record, record: dict | None) -> None:
    """Write the record durably, 0600 (its directory 0700), or remove it (None)."""
    if record is None:
        store.remove()
    else:
        store.save(record)


def updated_record(record: dict | None, fresh: dict, added: list[str], removed: list[str]) -> dict | None:
    """The record after a change: net additions and removals since the original (None when nothing is left)."""
    record = {
        **(record or fresh),
        "added": list((record or {}).get("added", [])),
        "removed": list((record or {}).get("removed", [])),
    }
    for arg in added:
        if arg in record["removed"]:
            record["removed"].remove(arg)
        elif arg not in record["added"]:
            record["added"].append(arg)
    for arg in removed:
        if arg in record["added"]:
            record["added"].remove(arg)
        elif arg not in record["removed"]:
            record["removed"].append(arg)
    return record if record["added"] or record["removed"] else None


def _same_target(record: dict, fresh: dict) -> bool:
    keys = ("bootloader", "grub_file", "grub_variable")
    return all(record.get(k) == fresh.get(k) for k in keys)


# ------------------------------------------------------------------------------------------ the module's work


def run(params: dict, check_mode: bool, run_command, cmdline_file: str = PROC_CMDLINE) -> dict:
    """Everything the module does; `run_command(argv) -> (rc, stdout, stderr)`. Raises KernelCmdlineError."""
    validate(params)
    running = Cmdline.parse(read_text(cmdline_file)).args
    store = records.Record(params["state_dir"], STATE_FILE)
    record_path = store.path
    try:  # the record names the file restore writes and what it writes there
        files.check_trusted("state_dir", params["state_dir"])
    except files.UntrustedPath as exc:
        raise KernelCmdlineError(str(exc)) from None
    record = load_record(store)
    restoring = params["state"] == "restore"
    result = {
        "changed": False,
        "added": [],
        "removed": [],
        "commands": [],
        "warnings": [],
        "state_file": record_path,
        "cmdline_running": running,
    }
    if restoring and record is None:
        return {**result, "bootloader": None, "cmdline_configured": [], "reboot_required": False}

    bootloader = record["bootloader"] if restoring else resolve_bootloader(params["bootloader"])
    if bootloader == "grubby":
        grubby = next((p for p in GRUBBY_PATHS if os.path.exists(p)), None)
        if grubby is None:
            raise KernelCmdlineError(f"bootloader: grubby not found ({', '.join(GRUBBY_PATHS)})")
        backend = Grubby(grubby, run_command)
        if params["update_command"] is not None:
            result["warnings"].append("update_command: not used with grubby, which writes the boot entries itself")
    else:
        update_command = params["update_command"]
        if update_command is None and restoring:
            # The command the change was applied with: a restore needs no inventory (playbooks/teardown.yml), and
            # today's default may not exist where the change was made with another one, or with none ([]).
            update_command = record.get("update_command")
        backend = GrubFile(
            record["grub_file"] if restoring else params["grub_file"],
            record["grub_variable"] if restoring else params["grub_variable"],
            default_update_command() if update_command is None else update_command,
        )

    if restoring:
        plan = backend.plan_restore(record)
        selectors, new_record = record["added"] + record["removed"], None
    else:
        fresh = backend.record()
        if record is not None and not _same_target(record, fresh):
            raise KernelCmdlineError(
                f"state_dir: {record_path} records changes to {record.get('grub_file') or record['bootloader']} "
                f"{record.get('grub_variable') or ''}; restore them first (state: restore) or use another state_dir"
            )
        plan = backend.plan_present(params["present"], params["absent"])
        selectors = [key_of(a) if key_of(a) in ONCE_KEYS else a for a in params["present"]] + params["absent"]
        new_record = updated_record(record, fresh, plan.added, plan.removed) if plan.changed else record
        if plan.changed and new_record is not None and isinstance(backend, GrubFile):
            new_record["update_command"] = backend.update_command  # the last one used, which restore runs
        result["warnings"] += backend.warnings(params["absent"], plan)

    changed = plan.after != backend.before or new_record != record
    if changed:
        backend.check_commands(plan)
        result["diff"] = backend.diff(plan)
    after = plan.after
    if changed and not check_mode:
        # The record first: a change that is cut short (a kill, a full disk) is never one that restore cannot undo.
        if new_record != record:
            try:
                save_record(store, new_record)
            except OSError as exc:
                raise KernelCmdlineError(f"state_dir: writing {record_path} failed, nothing changed: {exc}") from exc
        try:
            after = backend.apply(plan, run_command)
        except KernelCmdlineError:  # the bootloader configuration was put back: so is the record
            if new_record != record:
                save_record(store, record)
            raise
    configured = backend.configured(after)
    listed = list(configured.values()) if isinstance(configured, dict) else [configured]
    result.update(
        changed=changed,
        bootloader=bootloader,
        added=plan.added,
        removed=plan.removed,
        commands=plan.commands if changed else [],
        cmdline_configured=configured,
        reboot_required=reboot_required(running, listed, selectors),
    )
    return result
