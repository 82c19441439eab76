# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Kernel arguments as the kernel sees them: the command line split at whitespace outside double quotes (everything
after `--` is init's), arguments compared without their double quotes (`foo="a b"` and `"foo=a b"` are the same
argument), and the edits this collection makes to it: the request (present, absent), its undoing, and whether the
running kernel has what is configured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
# Quotes and what a shell would expand ($, `, \\) in /etc/default/grub, and GRUB script's own metacharacters (;, |,
# &, <, >, {, }) and comment sign (#): grub-mkconfig copies the arguments into grub.cfg's `linux` line as they are,
# so `a;b` would end that command there (and run what follows as GRUB commands) and `#` cut the line short. Quoting
# them for GRUB would mean quotes in /etc/default/grub and in grubby's entries that the kernel never sees, so the
# arguments there would no longer compare with /proc/cmdline: they are refused instead.
_FORBIDDEN_CHARS = "\"'\\$`;|&<>{}#"


class KernelCmdlineError(Exception):
    """Bad input or a failed step; the message starts with the field concerned."""


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
