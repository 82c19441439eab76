# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The shell layer of /etc/default/grub: a variable's value there is a shell word (`"quiet foo=\\"a b\\""`), which
unquotes to a kernel command line (`quiet foo="a b"`). Only what such a file holds is read here (quoted and unquoted
runs); a word that needs evaluating is refused with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BARE_WORD = re.compile(r"[A-Za-z0-9_.,:/=+@%-]*")  # needs no shell quoting


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


def assignment_re(variable: str) -> re.Pattern:
    return re.compile(rf"^[ \t]*(?:export[ \t]+)?{re.escape(variable)}=", re.MULTILINE)


def find_assignment(text: str, variable: str) -> Assignment | None:
    """The last assignment of `variable` (the one the shell keeps), or None."""
    found = list(assignment_re(variable).finditer(text))
    if not found:
        return None
    last = found[-1]
    end, value, style = _scan_word(text, last.end())
    return Assignment(last.start(), last.end(), end, value, style)


def line_at(text: str, assignment: Assignment | None) -> list[str]:
    """The assignment's line, as a diff shows it ([] when there is none)."""
    if assignment is None:
        return []
    end = text.find("\n", assignment.end)
    return [text[assignment.line_start : end if end >= 0 else len(text)]]
