# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Kernel arguments in the boot configuration: parsing, the planned edit, the GRUB file and grubby back ends, and
the record that lets state=restore undo exactly what this collection changed.

Two layers of quoting meet here. /etc/default/grub is a shell file: its variable's value is a shell word
(`"quiet foo=\\"a b\\""`), which unquotes to a kernel command line (`quiet foo="a b"`). The kernel splits that at
whitespace outside double quotes and hands everything after `--` to init. Arguments are compared without their
double quotes, as the kernel sees them (`foo="a b"` and `"foo=a b"` are the same argument).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import changes, files, records

PROC_CMDLINE = "/proc/cmdline"
STATE_FILE = "kernel_cmdline.json"
GRUBBY_PATHS = ("/usr/sbin/grubby", "/usr/bin/grubby")
# grub-mkconfig gives normal entries GRUB_CMDLINE_LINUX then GRUB_CMDLINE_LINUX_DEFAULT; recovery entries only the
# first. Both count when comparing with /proc/cmdline.
BOOT_VARIABLES = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
# Keys that make sense once: a present key=value replaces their other values instead of adding a second one.
# hugepagesz/hugepages are not here: they repeat legitimately, in pairs, one pair per page size.
ONCE_KEYS = frozenset(
    {
        "iommu",
        "intel_iommu",
        "amd_iommu",
        "mitigations",
        "isolcpus",
        "nohz_full",
        "rcu_nocbs",
        "irqaffinity",
        "default_hugepagesz",
        "transparent_hugepage",
    }
)
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BARE_WORD = re.compile(r"[A-Za-z0-9_.,:/=+@%-]*")  # needs no shell quoting
# Quotes and what a shell would expand ($, `, \\) in /etc/default/grub, and GRUB script's own metacharacters (;, |,
# &, <, >, {, }) and comment sign (#): grub-mkconfig copies the arguments into grub.cfg's `linux` line as they are,
# so `a;b` would end that command there (and run what follows as GRUB commands) and `#` cut the line short. Quoting
# them for GRUB would mean quotes in /etc/default/grub and in grubby's entries that the kernel never sees, so the
# arguments there would no longer compare with /proc/cmdline: they are refused instead.
_FORBIDDEN_CHARS = "\"'\\$`;|&<>{}#"


class KernelCmdlineError(Exception):
    """Bad input or a failed step; the message starts with the field concerned."""


# ------------------------------------------------------------------------------------------ kernel arguments


def plain(arg: str) -> str:
    """The argument as the kernel sees it: its double quotes only group, they are not part of the value."""
    return arg.replace('"', "")


def key_of(arg: str) -> str:
    return plain(arg).split("=", 1)[0]


def matches(selector: str, arg: str) -> bool:
    """`key=value` matches that exact argument; a bare `key` matches the key with any value (or none)."""
    return plain(arg) == selector if "=" in selector else key_of(arg) == selector


@dataclass
class Cmdline:
    """A kernel command line that renders back exactly as parsed: `items` are (separator before, argument), `lead`
    the whitespace before the first argument, `tail` the trailing whitespace and, from `--` on, the init
    arguments, kept verbatim."""

    lead: str = ""
    items: list[tuple[str, str]] = field(default_factory=list)
    tail: str = ""

    @classmethod
    def parse(cls, text: str) -> Cmdline:
        items, i = [], 0
        while True:
            start = i
            while i < len(text) and text[i].isspace():
                i += 1
            separator = text[start:i]
            if i == len(text):
                tail = separator
                break
            token_start, quoted = i, False
            while i < len(text) and (quoted or not text[i].isspace()):
                quoted ^= text[i] == '"'
                i += 1
            if text[token_start:i] == "--":
                tail = text[start:]
                break
            items.append((separator, text[token_start:i]))
        lead = items[0][0] if items else ""
        if items:
            items[0] = ("", items[0][1])
        return cls(lead, items, tail)

    @property
    def args(self) -> list[str]:
        return [arg for _sep, arg in self.items]

    def copy(self) -> Cmdline:
        return Cmdline(self.lead, list(self.items), self.tail)

    def render(self) -> str:
        text = self.lead + "".join((sep or " ") + arg if n else arg for n, (sep, arg) in enumerate(self.items))
        if self.items and self.tail and not self.tail[0].isspace():
            text += " "
        return text + self.tail


def apply_request(cmdline: Cmdline, present: list[str], absent: list[str]) -> tuple[Cmdline, list[str], list[str]]:
    """The command line with `absent` removed and `present` ensured: (edited, added, removed)."""
    edited = cmdline.copy()
    removed = [arg for arg in edited.args if any(matches(s, arg) for s in absent)]
    edited.items = [(sep, arg) for sep, arg in edited.items if arg not in removed]
    added = []
    for want in present:
        key = key_of(want)
        if key in ONCE_KEYS:
            others = [n for n, arg in enumerate(edited.args) if key_of(arg) == key and plain(arg) != want]
            if others and want not in map(plain, edited.args):
                # Replace in place, so the argument keeps its position.
                first = others.pop(0)
                removed.append(edited.items[first][1])
                edited.items[first] = (edited.items[first][0], want)
                added.append(want)
            removed += [edited.items[n][1] for n in others]
            edited.items = [item for n, item in enumerate(edited.items) if n not in others]
        if want not in map(plain, edited.args):
            edited.items.append((" ", want))
            added.append(want)
    return edited, added, removed


def restore_cmdline(current: Cmdline, original: list[str], added: list[str], removed: list[str]) -> Cmdline:
    """Undo a record: what it added goes, what it removed comes back next to the original neighbour it followed.
    Arguments the user changed since are left as they are."""
    restored = current.copy()
    restored.items = [(sep, arg) for sep, arg in restored.items if plain(arg) not in added]
    position = {arg: n for n, arg in reversed(list(enumerate(original)))}
    for arg in sorted(removed, key=lambda a: position.get(a, len(original))):
        if plain(arg) in map(plain, restored.args):
            continue
        before = original[: position.get(arg, len(original))]
        anchor = next((a for a in reversed(before) if a in restored.args), None)
        at = restored.args.index(anchor) + 1 if anchor is not None else 0
        restored.items.insert(at, (" ", arg))
    return restored


def reboot_required(running: list[str], configured: list[list[str]], selectors: list[str]) -> bool:
    """Whether any configured command line differs from the running one in an argument a selector matches."""

    def relevant(args):
        return sorted(plain(a) for a in args if any(matches(s, a) for s in selectors))

    return any(relevant(args) != relevant(running) for args in configured)


def check_argument(name: str, arg) -> None:
    if not isinstance(arg, str) or not arg:
        raise KernelCmdlineError(f"{name}: an argument must not be empty")
    if any(c.isspace() for c in arg):
        raise KernelCmdlineError(f"{name}: {arg!r} must not contain whitespace (one argument per list item)")
    if any(not " " < c < "\x7f" for c in arg):
        raise KernelCmdlineError(f"{name}: {arg!r} must be printable ASCII (no control or non-ASCII characters)")
    forbidden = sorted({c for c in arg if c in _FORBIDDEN_CHARS}, key=_FORBIDDEN_CHARS.index)
    if forbidden:
        raise KernelCmdlineError(
            f"{name}: {arg!r} must not contain quotes, '\\', or what the shell in /etc/default/grub or GRUB's script "
            f"in grub.cfg would interpret ($ ` ; | & < > {{ }} #); found {', '.join(map(repr, forbidden))}"
        )
    if arg.startswith("="):
        raise KernelCmdlineError(f"{name}: {arg!r} must start with a key, not '='")
    if arg == "--":
        raise KernelCmdlineError(f"{name}: '--' starts the init arguments, which this module never touches")


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


# ------------------------------------------------------------------------------------------ shell layer


def _scan_word(text: str, pos: int) -> tuple[int, str, str]:
    """The shell word at `pos`: (where it ends, its value with the quoting removed, its quoting style: '"', "'" or
    '' for a word that is one double-quoted, single-quoted or unquoted run; '"' for anything mixed)."""
    value, runs, quote, i = [], [], None, pos
    while i < len(text):
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = None
            else:
                value.append(c)
        elif quote == '"':
            if c == '"':
                quote = None
            elif c == "\\" and text[i + 1 : i + 2] in ('"', "\\", "$", "`", "\n"):
                i += 1
                value.append(text[i] if text[i] != "\n" else "")
            elif c in "$`":
                raise ValueError("uses a shell expansion ($ or `), which this module does not evaluate")
            else:
                value.append(c)
        elif c.isspace() or c in ";&|<>()":
            break
        elif c in "'\"":
            quote = c
            runs.append(c)
        elif c in "$`":
            raise ValueError("uses a shell expansion ($ or `), which this module does not evaluate")
        else:
            if c == "\\":
                i += 1
                c = text[i] if i < len(text) and text[i] != "\n" else ""
            value.append(c)
            if not runs or runs[-1] != "":
                runs.append("")
        i += 1
    if quote:
        raise ValueError(f"has an unterminated {quote} quote")
    return i, "".join(value), (runs[0] if len(runs) == 1 else '"') if runs else ""


def shell_quote(value: str, style: str) -> str:
    """`value` as a shell word, in `style` where the value allows it, else double-quoted."""
    if style == "'" and "'" not in value:
        return f"'{value}'"
    if style == "" and _BARE_WORD.fullmatch(value):
        return value
    return '"' + re.sub(r'(["\\$`])', r"\\\1", value) + '"'


def shell_unquote(word: str) -> str:
    return _scan_word(word, 0)[1]


@dataclass
class Assignment:
    line_start: int
    start: int  # of the value
    end: int
    value: str  # unquoted: a kernel command line
    style: str


def _assignment_re(variable: str) -> re.Pattern:
    return re.compile(rf"^[ \t]*(?:export[ \t]+)?{re.escape(variable)}=", re.MULTILINE)


def find_assignment(text: str, variable: str) -> Assignment | None:
    """The last assignment of `variable` (the one the shell keeps), or None."""
    found = list(_assignment_re(variable).finditer(text))
    if not found:
        return None
    last = found[-1]
    end, value, style = _scan_word(text, last.end())
    return Assignment(last.start(), last.end(), end, value, style)


def _line_at(text: str, assignment: Assignment | None) -> list[str]:
    """The assignment's line, as a diff shows it ([] when there is none)."""
    if assignment is None:
        return []
    end = text.find("\n", assignment.end)
    return [text[assignment.line_start : end if end >= 0 else len(text)]]


# ------------------------------------------------------------------------------------------ files and commands


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


def resolve_bootloader(bootloader: str) -> str:
    if bootloader != "auto":
        return bootloader
    return "grubby" if any(os.path.exists(p) for p in GRUBBY_PATHS) else "grub"


# ------------------------------------------------------------------------------------------ back ends


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
        after = _line_at(plan.after, self._find(plan.after, self.variable))
        return changes.diff(f"{self.path} {self.variable}", _line_at(self.text, self.assignment), after)

    def warnings(self, absent: list[str], plan: Plan) -> list[str]:
        found = []
        overrides = sorted(glob.glob(os.path.join(os.path.dirname(self.path), "grub.d", "*.cfg")))
        found += [
            f"grub_variable: {path} also sets {self.variable} and is read after {self.path}, so its value wins"
            for path in overrides
            if _assignment_re(self.variable).search(read_text(path))
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
