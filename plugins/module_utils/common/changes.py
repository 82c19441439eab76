# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What a module changed (or would change, in check mode), in the two forms Ansible users read.

- `changes`: one line per step, in the order the steps are taken ("acc100: attach xdp_vtep").
- `diff`: the resource's state before and after, as two texts, one item per line. Ansible's diff callback shows a
  line found only before as `-`, only after as `+`, so a removal reads as a removal and a replaced item as a
  `-`/`+` pair. Both texts list the items in the order their steps were added.
"""

from __future__ import annotations


def text(lines) -> str:
    """Lines as one text, each ending in a newline (Ansible's diff compares texts)."""
    return "".join(f"{line}\n" for line in lines)


def diff(header: str, before, after) -> dict:
    """An Ansible diff of two lists of state lines under one header."""
    return {"before_header": header, "after_header": header, "before": text(before), "after": text(after)}


def merged(header: str, diffs: dict) -> dict:
    """One diff of the diffs of several parts (part name -> diff), each line prefixed with its part's name ("" for
    none), so that one module can report on several resources."""
    lines = {"before": [], "after": []}
    for name, part in diffs.items():
        for side, found in lines.items():
            found += [f"{name}: {line}" if name else line for line in part[side].splitlines()]
    return diff(header, lines["before"], lines["after"])


class Changes:
    """The steps taken on one resource and the state lines they replace.

    add(step, key, before=..., after=...) records one step; `before` is the item's state line before it (None: it
    did not exist) and `after` its state line afterwards (None: it is gone).
    """

    def __init__(self, header: str):
        self.header = header
        self.steps: list[str] = []
        self._before: dict = {}
        self._after: dict = {}

    def add(self, step: str, key=None, before: str | None = None, after: str | None = None) -> None:
        self.steps.append(step)
        key = step if key is None else key
        if before is not None:
            self._before[key] = before
        if after is not None:
            self._after[key] = after

    def extend(self, other: Changes) -> None:
        self.steps.extend(other.steps)
        self._before.update(other._before)
        self._after.update(other._after)

    @property
    def changed(self) -> bool:
        return bool(self.steps)

    def diff(self) -> dict:
        return diff(self.header, self._before.values(), self._after.values())

    def result(self) -> dict:
        """`changed` and `changes`, and `diff` when something changed: the part of a module's result they make."""
        out = {"changed": self.changed, "changes": list(self.steps)}
        if self.changed:
            out["diff"] = self.diff()
        return out
