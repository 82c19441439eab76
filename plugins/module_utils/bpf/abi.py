# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The numbers a data plane's C and Python share (limits, enums, encodings), declared once in Python.

A data plane declares its interface in plugins/module_utils/<plane>/abi.py as an Abi: C enums (each limit is an
enumerator too) and the C helpers of its encodings. From that one declaration:
- render() gives the C header the data plane includes instead of its own copies, committed as
  bpf/<plane>/<plane>_abi.h; `make abi` (collection/abi_headers.py) rewrites it, and tests/unit/test_abi.py fails
  while it is stale;
- check() compares the declaration with an object's BTF. The header puts every enum into BTF through an anchor
  variable in a section that libbpf does not load (an enum that no declaration uses leaves no trace in BTF), so an
  object built from other sources (another version of the collection, a header edited by hand) is refused before
  it loads, and the BTF of a pinned map says which numbers the data plane that wrote it used.

Values are enumerators rather than #defines, because a #define leaves no trace in BTF; like BTF's enums (clang 14
emits no 64-bit ones) they are 32-bit unsigned numbers.
"""

from __future__ import annotations

import importlib
import os
import textwrap
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf import Btf, LayoutMismatch

ANCHOR_SECTION = ".xdpfleet_abi"
LINE_WIDTH = 120
_TAB = 8  # columns of a tab, as the C sources are indented
_COLLECTION = "ansible_collections.xdpfleet.fabric"


class AbiMismatch(LayoutMismatch):
    """An object's BTF numbers an enum or a limit differently from the Python declaration."""


@dataclass(frozen=True)
class Enum:
    """A C enum: members are (name, value, what it means), in the order the header lists them.

    count: the name of a last enumerator that counts the others (whose values must then be 0..n-1), for arrays
    indexed by the enum, such as traffic_stats.drops[DROP_REASONS].
    """

    name: str
    doc: str
    members: tuple[tuple[str, int, str], ...]
    count: str | None = None

    def __post_init__(self) -> None:
        names = [member[0] for member in self.members] + ([self.count] if self.count else [])
        if len(set(names)) != len(names):
            raise ValueError(f"enum {self.name}: a name is declared twice")
        for name, value, _doc in self.members:
            if not 0 <= value < 1 << 32:
                raise ValueError(f"enum {self.name}: {name} = {value} is not a 32-bit unsigned value")
        if self.count and sorted(member[1] for member in self.members) != list(range(len(self.members))):
            raise ValueError(f"enum {self.name}: counted by {self.count}, so its values must be 0..n-1")

    def values(self) -> dict[str, int]:
        """Every enumerator by name, the count included."""
        out = {name: value for name, value, _doc in self.members}
        if self.count:
            out[self.count] = len(self.members)
        return out

    def __getitem__(self, name: str) -> int:
        return self.values()[name]

    def labels(self, prefix: str) -> dict[int, str]:
        """value -> the member's name without prefix, in lower case (DROP_NO_PEER -> no_peer), by value."""
        by_value = sorted(self.members, key=lambda member: member[1])
        return {value: name[len(prefix) :].lower() for name, value, _doc in by_value}

    def render(self) -> str:
        lines = [*_comment(self.doc, ""), f"enum {self.name} {{"]
        for name, value, doc in self.members:
            lines += _member(name, _literal(value), doc)
        if self.count:
            lines += _member(self.count, str(len(self.members)), "")
        return "\n".join([*lines, "};"])


def _literal(value: int) -> str:
    # Above int's range an enumerator needs an unsigned literal; such values are bits, read best in hex.
    return str(value) if value < 1 << 31 else f"{value:#x}u"


def _member(name: str, literal: str, doc: str) -> list[str]:
    line = f"\t{name} = {literal},"
    trailing = f"{line} /* {doc} */"
    if not doc:
        return [line]
    if len(trailing.expandtabs(_TAB)) <= LINE_WIDTH:
        return [trailing]
    return [*_comment(doc, "\t"), line]


def _comment(text: str, indent: str) -> list[str]:
    width = LINE_WIDTH - len(indent.expandtabs(_TAB)) - 3
    wrapped = textwrap.wrap(" ".join(text.split()), width)
    if len(wrapped) == 1 and len(wrapped[0]) <= width - 3:
        return [f"{indent}/* {wrapped[0]} */"]
    return [f"{indent}/*", *(f"{indent} * {line}" for line in wrapped), f"{indent} */"]


@dataclass(frozen=True)
class Abi:
    """One data plane's interface. name: the anchor is struct <name>_abi; header and source: paths in the
    collection of the generated header and of the file that declares this; c_helpers: C text after the enums,
    the helpers of encodings built from them."""

    name: str
    header: str
    source: str
    doc: str
    enums: tuple[Enum, ...]
    c_helpers: str = ""

    def render(self) -> str:
        guard = f"XDPFLEET_{self.name.upper()}_ABI_H"
        anchor = f"{self.name}_abi"
        parts = [
            "/* SPDX-License-Identifier: GPL-2.0-only */",
            "\n".join(
                _comment(
                    f"Generated from {self.source} by `make abi`: edit that file, not this one "
                    f"(tests/unit/test_abi.py fails when the two differ). {self.doc}",
                    "",
                )
            ),
            f"#ifndef {guard}\n#define {guard}\n\n#include <linux/types.h>",
            *(enum.render() for enum in self.enums),
        ]
        if self.c_helpers:
            parts.append(self.c_helpers.strip("\n"))
        anchor_doc = (
            f"Every enum above as a member, so that each reaches the object's BTF, where user space compares it "
            f"with {self.source}. Nothing reads the variable; its section is not one that libbpf loads, so it "
            "costs no map and no instruction."
        )
        members = "\n".join(f"\tenum {enum.name} {enum.name};" for enum in self.enums)
        parts += [
            "\n".join(_comment(anchor_doc, "")) + f"\nstruct {anchor} {{\n{members}\n}};\n"
            f'static const struct {anchor} {anchor} __attribute__((section("{ANCHOR_SECTION}"), used));',
            f"#endif /* {guard} */",
        ]
        return "\n\n".join(parts) + "\n"

    def problems(self, btf: Btf) -> list[str]:
        found = declared_enums(btf)
        if not found:
            return [f"it declares no enums (no section {ANCHOR_SECTION}): it was not built with {self.header}"]
        out = []
        for enum in self.enums:
            theirs = found.get(enum.name)
            if theirs is None:
                out.append(f"enum {enum.name} is not in it")
                continue
            ours = enum.values()
            for name in sorted(set(ours) | set(theirs), key=lambda n: (ours.get(n, theirs.get(n)), n)):
                if name not in theirs:
                    out.append(f"enum {enum.name}: {name} only in Python")
                elif name not in ours:
                    out.append(f"enum {enum.name}: {name} only in the object")
                elif ours[name] != theirs[name]:
                    out.append(f"enum {enum.name}: {name} is {ours[name]} in Python, {theirs[name]} in the object")
        return out

    def check(self, btf: Btf) -> None:
        problems = self.problems(btf)
        if problems:
            raise AbiMismatch(
                f"the {self.name} data plane's numbers differ between {self.source} and the BPF object's BTF: "
                + "; ".join(problems)
            )

    def check_object(self, obj: libbpf.BpfObject) -> None:
        self.check(Btf(obj.btf))


def declared_enums(btf: Btf) -> dict[str, dict[str, int]]:
    """The enums an object declares through the anchors of its generated headers: name -> {enumerator: value}.
    Empty for an object built without one."""
    out = {}
    for _offset, _size, type_id in btf.datasec_vars(ANCHOR_SECTION).values():
        for _name, member_type, _bit_offset, _bits in btf.struct_members(type_id):
            enum = btf.enum(member_type)
            if enum is not None:
                out[enum[0]] = enum[1]
    return out


def collection_abis(root: str) -> list[Abi]:
    """Every data plane's interface: the ABI of each plugins/module_utils/<plane>/abi.py under the collection
    root (this package's own abi.py is the mechanism, not an interface)."""
    found = []
    utils = os.path.join(root, "plugins", "module_utils")
    for package in sorted(os.listdir(utils)):
        if package != "bpf" and os.path.isfile(os.path.join(utils, package, "abi.py")):
            found.append(importlib.import_module(f"{_COLLECTION}.plugins.module_utils.{package}.abi").ABI)
    return found
