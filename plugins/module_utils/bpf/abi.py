# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What a data plane's C and Python share, declared once in Python: the numbers (limits, enums, encodings) and the
structs of its map keys and values.

A data plane declares its numbers in plugins/module_utils/<plane>/abi.py as an Abi: C enums (each limit is an
enumerator too) and the C helpers of its encodings. Its map keys and values are ctypes structs in
plugins/module_utils/<plane>/layouts.py, each declared with c_struct (its members as Fields, its docstring C's
comment), and listed with the Abi in the plane's Header. From these:
- Header.render() gives the C header the data plane includes instead of its own copies, committed as
  bpf/<plane>/<plane>_abi.h: the enums, the helpers, then the structs (sized by the enums); `make abi`
  (collection/abi_headers.py) rewrites it, and tests/unit/test_abi.py fails while it is stale;
- Abi.check() compares the numbers with an object's BTF. The header puts every enum into BTF through an anchor
  variable in a section that libbpf does not load (an enum that no declaration uses leaves no trace in BTF), so an
  object built from other sources (another version of the collection, a header edited by hand) is refused before
  it loads, and the BTF of a pinned map says which numbers the data plane that wrote it used. The structs are
  compared with BTF where they are used, as map keys and values (btf_layout.MapLayout).

Values are enumerators rather than #defines, because a #define leaves no trace in BTF; like BTF's enums (clang 14
emits no 64-bit ones) they are 32-bit unsigned numbers.
"""

from __future__ import annotations

import ctypes
import inspect
import textwrap
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf import Btf, LayoutMismatch

ANCHOR_SECTION = ".xdpfleet_abi"
LINE_WIDTH = 120
_TAB = 8  # columns of a tab, as the C sources are indented


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
    return _line(f"\t{name} = {literal},", doc)


def _line(line: str, doc: str) -> list[str]:
    """A line of C with its comment: trailing when both fit the width, else above it."""
    trailing = f"{line} /* {doc} */"
    if not doc:
        return [line]
    if len(trailing.expandtabs(_TAB)) <= LINE_WIDTH:
        return [trailing]
    return [*_comment(doc, "\t"), line]


def _comment(text: str, indent: str) -> list[str]:
    """A C comment of text, wrapped; a blank line in text starts a paragraph, and a paragraph that starts with "- "
    is a list item (its next lines indented under it)."""
    width = LINE_WIDTH - len(indent.expandtabs(_TAB)) - 3
    paragraphs = [" ".join(paragraph.split()) for paragraph in text.split("\n\n") if paragraph.strip()]
    if len(paragraphs) == 1 and len(paragraphs[0]) <= width - 3:
        return [f"{indent}/* {paragraphs[0]} */"]
    lines = []
    for paragraph in paragraphs:
        if lines and not paragraph.startswith("- "):
            lines.append("")
        lines += textwrap.wrap(
            paragraph, width, subsequent_indent="  " if paragraph.startswith("- ") else "", break_on_hyphens=False
        )
    return [f"{indent}/*", *(f"{indent} * {line}".rstrip() for line in lines), f"{indent} */"]


# --- Structs ----------------------------------------------------------------------------------------------------

# The integers of map layouts, by C's names for them.
U8, U16, U32, U64 = ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64
_C_INTEGERS = {
    ctypes.c_uint8: "__u8",
    ctypes.c_uint16: "__u16",
    ctypes.c_uint32: "__u32",
    ctypes.c_uint64: "__u64",
    ctypes.c_int8: "__s8",
    ctypes.c_int16: "__s16",
    ctypes.c_int32: "__s32",
    ctypes.c_int64: "__s64",
}


@dataclass(frozen=True)
class Field:
    """A member of a struct that C and Python share.

    ctype: an integer type of ctypes, a struct declared with c_struct, or an array of either.
    doc: C's comment on it.
    network_order: an integer whose bytes are in network order: C's __be16/__be32/__be64 (ctypes has no such
      type; it reads the same bits as an unsigned integer of the size).
    length: an array's length by the enumerator that sizes it (of the data plane's Abi), written in C instead of
      the number.
    """

    name: str
    ctype: type
    doc: str = ""
    network_order: bool = False
    length: str = ""

    def element(self) -> type:
        return self.ctype._type_ if issubclass(self.ctype, ctypes.Array) else self.ctype

    def c_declaration(self) -> str:
        element = self.element()
        if self.network_order:
            if element not in (ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64):
                raise ValueError(f"{self.name}: network order is for unsigned 16, 32 or 64-bit integers")
            c_type = f"__be{8 * ctypes.sizeof(element)}"
        elif hasattr(element, "_c_name_"):
            c_type = f"struct {element._c_name_}"
        elif element in _C_INTEGERS:
            c_type = _C_INTEGERS[element]
        else:
            raise ValueError(f"{self.name}: {element.__name__} has no C type here (an integer, or a c_struct)")
        if not issubclass(self.ctype, ctypes.Array):
            return f"{c_type} {self.name};"
        return f"{c_type} {self.name}[{self.length or self.ctype._length_}];"


def c_struct(name: str):
    """Class decorator: a ctypes.Structure whose members are its _members_ (Fields) is also C's `struct <name>`,
    which Header.render() writes with the class's docstring as its comment. Sets _fields_ from _members_ (ctypes
    takes no other attributes on a field, and computes a struct's layout only once _fields_ is set)."""

    def declare(cls: type) -> type:
        cls._c_name_ = name
        cls._fields_ = [(field.name, field.ctype) for field in cls._members_]
        return cls

    return declare


def render_struct(cls: type, values: dict[str, int], defined: set[str]) -> str:
    """C's definition of a c_struct class, and an assertion of the size ctypes gives it. values: the enumerators
    an array's length may name; defined: the structs already written, which its members may be."""
    lines = _comment(inspect.cleandoc(cls.__doc__), "") if cls.__doc__ else []
    lines.append(f"struct {cls._c_name_} {{")
    for field in cls._members_:
        element = field.element()
        if hasattr(element, "_c_name_") and element._c_name_ not in defined:
            raise ValueError(f"struct {cls._c_name_}.{field.name}: struct {element._c_name_} is not declared before")
        if field.length and values.get(field.length) != field.ctype._length_:
            raise ValueError(
                f"struct {cls._c_name_}.{field.name}: {field.ctype._length_} elements, but {field.length} is "
                f"{values.get(field.length)}"
            )
        lines += _line(f"\t{field.c_declaration()}", field.doc)
    lines += [
        "};",
        f"_Static_assert(sizeof(struct {cls._c_name_}) == {ctypes.sizeof(cls)}, "
        f'"the size of {cls.__name__} in Python");',
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Abi:
    """One data plane's numbers. name: the anchor is struct <name>_abi; header and source: paths in the
    collection of the generated header and of the file that declares this; c_helpers: C text after the enums,
    the helpers of encodings built from them."""

    name: str
    header: str
    source: str
    doc: str
    enums: tuple[Enum, ...]
    c_helpers: str = ""

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


@dataclass(frozen=True)
class Header:
    """A data plane's generated C header: the numbers of its Abi, then its structs (c_struct classes, each after
    the structs it holds). layouts: the path in the collection of the file that declares the structs."""

    abi: Abi
    layouts: str
    structs: tuple[type, ...]

    @property
    def path(self) -> str:
        return self.abi.header

    def render(self) -> str:
        abi = self.abi
        guard = f"XDPFLEET_{abi.name.upper()}_ABI_H"
        anchor = f"{abi.name}_abi"
        parts = [
            "/* SPDX-License-Identifier: GPL-2.0-only */",
            "\n".join(
                _comment(
                    f"Generated from {abi.source} and {self.layouts} by `make abi`: edit those files, not this one "
                    f"(tests/unit/test_abi.py fails when they differ). {abi.doc}",
                    "",
                )
            ),
            f"#ifndef {guard}\n#define {guard}\n\n#include <linux/types.h>",
            *(enum.render() for enum in abi.enums),
        ]
        if abi.c_helpers:
            parts.append(abi.c_helpers.strip("\n"))
        values = {name: value for enum in abi.enums for name, value in enum.values().items()}
        defined: set[str] = set()
        for struct in self.structs:
            parts.append(render_struct(struct, values, defined))
            defined.add(struct._c_name_)
        anchor_doc = (
            f"Every enum above as a member, so that each reaches the object's BTF, where user space compares it "
            f"with {abi.source}. Nothing reads the variable; its section is not one that libbpf loads, so it "
            "costs no map and no instruction."
        )
        members = "\n".join(f"\tenum {enum.name} {enum.name};" for enum in abi.enums)
        parts += [
            "\n".join(_comment(anchor_doc, "")) + f"\nstruct {anchor} {{\n{members}\n}};\n"
            f'static const struct {anchor} {anchor} __attribute__((section("{ANCHOR_SECTION}"), used));',
            f"#endif /* {guard} */",
        ]
        return "\n\n".join(parts) + "\n"


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
