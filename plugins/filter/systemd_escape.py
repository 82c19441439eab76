# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The filter xdpfleet.fabric.systemd_escape: a value from the inventory written into a systemd unit file as
systemd.syntax(7) and systemd.service(5) read it back, or refused naming the variable. Documented in
systemd_escape.yml next to this file."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def unit_value_problem(value: str) -> str | None:
    """Why `value` cannot be written into a unit file line at all, or None. A newline would end the line and start a
    directive of its own; the other control characters are no better; systemd strips a value's surrounding
    whitespace and joins a line that ends in a backslash with the next one."""
    if CONTROL.search(value):
        return "has a control character (a newline would start a directive of its own in the unit file)"
    if value != value.strip():
        return "starts or ends with whitespace, which systemd strips from a unit file's value"
    if value.endswith("\\"):
        return "ends in a backslash, which joins a unit file's line with the next one"
    return None


EXEC_WORDS = ("command", "argument")


def systemd_escape(value, name: str, exec_word: str | None = None) -> str:
    """`value` for a unit file: '%' doubled (systemd expands specifiers such as %n, %h in most settings). With
    exec_word, one word of an Exec*= command line, double-quoted with its backslashes and double quotes escaped, so a
    space does not split it: the "command" (its executable) or an "argument", where '$' is doubled too (systemd
    expands $VAR and ${VAR} in the arguments, not in the executable's path). Raises AnsibleFilterError naming `name`
    when the value cannot be written (unit_value_problem)."""
    if not isinstance(value, str):
        raise AnsibleFilterError(f"{name}: must be a string, got {type(value).__name__} {value!r}")
    if exec_word not in (None, *EXEC_WORDS):
        raise AnsibleFilterError(f"exec_word: {exec_word!r} is not one of {', '.join(EXEC_WORDS)}")
    problem = unit_value_problem(value)
    if problem:
        raise AnsibleFilterError(f"{name}: {value!r} {problem}; the systemd units take it: choose another path")
    escaped = value.replace("%", "%%")
    if exec_word is None:
        return escaped
    escaped = escaped.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + (escaped.replace("$", "$$") if exec_word == "argument" else escaped) + '"'


class FilterModule:
    def filters(self):
        return {"systemd_escape": systemd_escape}
