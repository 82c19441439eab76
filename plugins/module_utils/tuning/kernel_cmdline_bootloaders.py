# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The two back ends that hold the boot configuration's kernel arguments: a GRUB defaults file (one variable's
assignment, then the command that regenerates grub.cfg) and grubby (EL boot entries, which it writes itself). Each
plans a request or a restore as a Plan, shows it, and applies it.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import changes, files
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.kernel_cmdline_args import (
    Cmdline,
    KernelCmdlineError,
    apply_request,
    matches,
    restore_cmdline,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.kernel_cmdline_shell import (
    Assignment,
    assignment_re,
    find_assignment,
    line_at,
    shell_quote,
    shell_unquote,
)

# grub-mkconfig gives normal entries GRUB_CMDLINE_LINUX then GRUB_CMDLINE_LINUX_DEFAULT; recovery entries only the
# first. Both count when comparing with /proc/cmdline.
BOOT_VARIABLES = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        return f.read()


def write_text(path: str, text: str) -> None:
    """Replace a file of the system's durably (a reader, or a crash, sees the old content or the new, never a part),
    keeping its mode and owner; the bytes read_text() read come back as they were."""
    files.replace_keeping_owner(path, text.encode("utf-8", "surrogateescape"))


def which(name: str) -> str | None:
    """Like the shell's lookup, also in the sbin directories a non-root PATH may lack."""
    if "/" in name:
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def default_update_command() -> list[str]:
    return ["update-grub"] if which("update-grub") else ["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]


@dataclass
class Plan:
    after: object  # the GRUB file's new text, or grubby's args per kernel
    added: list[str]
    removed: list[str]
    commands: list[list[str]]

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


class GrubFile:
    """The variable's assignment in a GRUB defaults file; the change is that one line, then `update_command`."""

    name = "grub"

    def __init__(self, path: str, variable: str, update_command: list[str]):
        if not os.path.isfile(path):
            raise KernelCmdlineError(f"grub_file: {path} does not exist on this host")
        self.path, self.variable, self.update_command = path, variable, update_command
        self.text = self.before = read_text(path)
        self.assignment = self._find(self.text, variable)
        self.cmdline = Cmdline.parse(self.assignment.value if self.assignment else "")

    def _find(self, text: str, variable: str) -> Assignment | None:
        try:
            return find_assignment(text, variable)
        except ValueError as exc:
            raise KernelCmdlineError(f"grub_file: {self.path}: {variable} {exc}") from None

    def record(self) -> dict:
        original = self.text[self.assignment.start : self.assignment.end] if self.assignment else None
        return {"bootloader": "grub", "grub_file": self.path, "grub_variable": self.variable, "original": original}

    def _with_value(self, raw: str | None) -> str:
        """The file with the variable's value replaced by the shell word `raw` (None: the assignment line goes)."""
        a, text = self.assignment, self.text
        if raw is None:
            if a is None:
                return text
            end = text.find("\n", a.end)
            return text[: a.line_start] + (text[end + 1 :] if end >= 0 else "")
        if a is not None:
            return text[: a.start] + raw + text[a.end :]
        newline = "" if not text or text.endswith("\n") else "\n"
        return f"{text}{newline}{self.variable}={raw}\n"

    def _plan(self, edited: Cmdline, after: str) -> Plan:
        added = [a for a in edited.args if a not in self.cmdline.args]
        removed = [a for a in self.cmdline.args if a not in edited.args]
        commands = [self.update_command] if self.update_command and after != self.text else []
        return Plan(after, added, removed, commands)

    def _rendered(self, edited: Cmdline) -> str:
        style = self.assignment.style if self.assignment else '"'
        return self._with_value(shell_quote(edited.render(), style))

    def plan_present(self, present: list[str], absent: list[str]) -> Plan:
        edited, _added, _removed = apply_request(self.cmdline, present, absent)
        return self._plan(edited, self.text if edited.args == self.cmdline.args else self._rendered(edited))

    def plan_restore(self, record: dict) -> Plan:
        original_raw = record["original"]
        original = Cmdline.parse(shell_unquote(original_raw) if original_raw is not None else "").args
        edited = restore_cmdline(self.cmdline, original, record["added"], record["removed"])
        if edited.args != original:
            return self._plan(edited, self._rendered(edited))
        # Everything this collection changed is undone: the original text goes back byte for byte.
        return self._plan(edited, self._with_value(original_raw))

    def configured(self, text: str) -> list[str]:
        """The arguments normal boot entries get from this file."""
        args = []
        for variable in dict.fromkeys((*BOOT_VARIABLES, self.variable)):
            assignment = self._find(text, variable)
            args += Cmdline.parse(assignment.value).args if assignment else []
        return args

    def diff(self, plan: Plan) -> dict:
        after = line_at(plan.after, self._find(plan.after, self.variable))
        return changes.diff(f"{self.path} {self.variable}", line_at(self.text, self.assignment), after)

    def warnings(self, absent: list[str], plan: Plan) -> list[str]:
        found = []
        overrides = sorted(glob.glob(os.path.join(os.path.dirname(self.path), "grub.d", "*.cfg")))
        found += [
            f"grub_variable: {path} also sets {self.variable} and is read after {self.path}, so its value wins"
            for path in overrides
            if assignment_re(self.variable).search(read_text(path))
        ]
        left = [a for a in self.configured(plan.after) if any(matches(s, a) for s in absent)]
        if left:
            found.append(f"absent: {' '.join(left)} still in another variable of {self.path} (not grub_variable)")
        return found

    def check_commands(self, plan: Plan) -> None:
        if plan.commands and not which(plan.commands[0][0]):
            raise KernelCmdlineError(
                f"update_command: {plan.commands[0][0]} not found on this host "
                "(give the command that regenerates the GRUB configuration, or [] to skip it)"
            )

    def apply(self, plan: Plan, run_command) -> str:
        """Write, regenerate; the file as it is now."""
        write_text(self.path, plan.after)
        for command in plan.commands:
            rc, _out, err = run_command([which(command[0]), *command[1:]])
            if rc:
                write_text(self.path, self.text)
                raise KernelCmdlineError(
                    f"update_command: {' '.join(command)} exited {rc}: {err.strip()}; "
                    f"{self.path} was put back as it was"
                )
        return plan.after


def parse_grubby_info(text: str) -> dict[str, str]:
    """`grubby --info=ALL`: blocks of key=value lines, each starting with index=N; kernel -> args. Values may be
    double-quoted (args always is); entries without a kernel (non-linux entries) are skipped."""
    kernels, entry = {}, {}
    for line in [*text.splitlines(), "index=end"]:
        key, _sep, value = line.partition("=")
        if key == "index":
            if "kernel" in entry and "args" in entry:
                kernels[entry["kernel"]] = entry["args"]
            entry = {}
        entry[key] = value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value
    return kernels


class Grubby:
    """EL boot entries through grubby, which writes each entry's options itself (no regeneration step)."""

    name = "grubby"

    def __init__(self, grubby: str, run_command):
        self.grubby = grubby
        self.kernels = self.before = self._read(run_command)
        self.cmdlines = {k: Cmdline.parse(v) for k, v in self.kernels.items()}

    def _read(self, run_command) -> dict[str, str]:
        rc, out, err = run_command([self.grubby, "--info=ALL"])
        if rc:
            raise KernelCmdlineError(f"bootloader: {self.grubby} --info=ALL exited {rc}: {err.strip()}")
        kernels = parse_grubby_info(out)
        if not kernels:
            raise KernelCmdlineError(f"bootloader: {self.grubby} --info=ALL lists no kernel")
        for kernel, args in kernels.items():
            # EL 8 entries may hold only $kernelopts, the real arguments living in grubenv; other variables
            # ($tuned_params) are kept as opaque arguments.
            if "$kernelopts" in args.split():
                raise KernelCmdlineError(
                    f"bootloader: the args of {kernel} are $kernelopts (kept in grubenv), which this module does not "
                    "evaluate"
                )
        return kernels

    def record(self) -> dict:
        return {"bootloader": "grubby", "original": dict(self.kernels)}

    def _command(self, target: str, add: list[str], remove: list[str]) -> list[str]:
        command = [self.grubby, f"--update-kernel={target}"]
        command += [f"--args={' '.join(add)}"] if add else []
        return command + ([f"--remove-args={' '.join(remove)}"] if remove else [])

    def plan_present(self, present: list[str], absent: list[str]) -> Plan:
        after, added, removed = {}, [], []
        for kernel, cmdline in self.cmdlines.items():
            edited, add, remove = apply_request(cmdline, present, absent)
            after[kernel] = edited.render()
            added += [a for a in add if a not in added]
            removed += [a for a in remove if a not in removed]
        commands = [self._command("ALL", added, removed)] if added or removed else []
        return Plan(after, added, removed, commands)

    def plan_restore(self, record: dict) -> Plan:
        after, added, removed, commands = {}, [], [], []
        for kernel, cmdline in self.cmdlines.items():
            original = Cmdline.parse(record["original"].get(kernel, "")).args
            # Put back on each kernel only what it had: the record's removals are the union over all kernels.
            put_back = [a for a in record["removed"] if a in original]
            edited = restore_cmdline(cmdline, original, record["added"], put_back)
            after[kernel] = edited.render()
            add = [a for a in edited.args if a not in cmdline.args]
            remove = [a for a in cmdline.args if a not in edited.args]
            if add or remove:
                commands.append(self._command(kernel, add, remove))
            added += [a for a in add if a not in added]
            removed += [a for a in remove if a not in removed]
        return Plan(after, added, removed, commands)

    def configured(self, kernels: dict[str, str]) -> dict[str, list[str]]:
        return {k: Cmdline.parse(v).args for k, v in kernels.items()}

    def diff(self, plan: Plan) -> dict:
        def lines(kernels):
            return [f"{k}: {v}" for k, v in kernels.items()]

        return changes.diff("grubby", lines(self.kernels), lines(plan.after))

    def warnings(self, absent: list[str], plan: Plan) -> list[str]:
        return []

    def check_commands(self, plan: Plan) -> None:
        return None

    def apply(self, plan: Plan, run_command) -> dict[str, str]:
        """Run grubby; the entries as grubby wrote them (its rules for an existing key may differ from ours)."""
        for command in plan.commands:
            rc, _out, err = run_command(command)
            if rc:
                raise KernelCmdlineError(f"bootloader: {' '.join(command)} exited {rc}: {err.strip()}")
        return self._read(run_command)
