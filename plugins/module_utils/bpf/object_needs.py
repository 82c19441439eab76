# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What a compiled BPF object (an ELF file from clang -target bpf) needs from the kernel, read from the object itself.

- helpers: per program, every call instruction with no relocation calls a helper, whose id is the immediate;
- kfuncs: per program, a call relocated against an undefined symbol calls a kernel function (a `__ksym` extern);
- both also of the subprograms (functions in .text) a program calls, and those they call;
- map types: from the object's BTF, the `type` member of every map in the .maps section (inner maps of map-in-map
  definitions too, through their `values` member);
- the section of each program (xdp, xdp/devmap, tc ...), which sets its program and expected attach type.

Pure Python, no libbpf: it runs before anything is loaded. features.Needs is what data planes declare; a unit test
holds each declaration to what its compiled object shows, and xdp_program checks a user's object through
needs_of_object().
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features as ft

ELF_MAGIC = b"\x7fELF"
ELFCLASS64, ELFDATA2LSB, EM_BPF = 2, 1, 247
SHT_SYMTAB, SHT_REL = 2, 9
SHF_EXECINSTR = 0x4
STT_FUNC, STT_SECTION = 2, 3
SHN_UNDEF = 0
BPF_CALL_OPCODE = 0x85  # BPF_JMP | BPF_CALL
BPF_PSEUDO_CALL = 1  # src_reg of a call to a function of the same object
INSN_SIZE = 8
SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
SYMBOL = struct.Struct("<IBBHQQ")
REL = struct.Struct("<QQ")


class ObjectError(ValueError):
    """The file is not a BPF ELF object this reader understands."""


@dataclass
class ProgramScan:
    name: str
    section: str
    helper_ids: set[int] = field(default_factory=set)
    kfuncs: set[str] = field(default_factory=set)


@dataclass
class ObjectScan:
    path: str
    programs: dict[str, ProgramScan]
    map_types: dict[str, list[int]]  # map name -> its type and its inner maps' types (map-in-map)

    @property
    def map_type_values(self) -> set[int]:
        return {value for values in self.map_types.values() for value in values}


@dataclass(frozen=True)
class _Section:
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int


def scan(path: str) -> ObjectScan:
    """Read a BPF object's programs, the helpers and kfuncs each calls, and its maps' types. Raises ObjectError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ObjectError(f"{path}: {exc.strerror}") from None
    try:
        return _scan(path, data)
    except (struct.error, IndexError, UnicodeDecodeError, ft.BtfError) as exc:
        raise ObjectError(f"{path}: not a BPF object this reader understands ({exc})") from None


def _scan(path: str, data: bytes) -> ObjectScan:
    if data[:4] != ELF_MAGIC or data[4] != ELFCLASS64 or data[5] != ELFDATA2LSB:
        raise ObjectError(f"{path}: not a 64-bit little-endian ELF file")
    if struct.unpack_from("<H", data, 18)[0] != EM_BPF:
        raise ObjectError(f"{path}: an ELF file for another machine than BPF")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [SECTION_HEADER.unpack_from(data, shoff + n * shentsize) for n in range(shnum)]
    names_at = raw[shstrndx][4]

    def cstr(at: int) -> str:
        return data[at : data.index(b"\0", at)].decode()

    sections = [_Section(cstr(names_at + h[0]), h[1], h[2], h[4], h[5], h[6], h[7]) for h in raw]
    symtab_index = next(n for n, s in enumerate(sections) if s.type == SHT_SYMTAB)
    symtab = sections[symtab_index]
    strtab = sections[symtab.link]
    symbols = [
        SYMBOL.unpack_from(data, symtab.offset + n * SYMBOL.size) for n in range(symtab.size // SYMBOL.size)
    ]  # (name, info, other, section index, value, size)

    def symbol_name(sym) -> str:
        return cstr(strtab.offset + sym[0])

    # Relocations of each code section: instruction offset -> the name of an undefined symbol it refers to (a kfunc),
    # or the offset in .text of the subprogram a call goes to.
    text = next((n for n, s in enumerate(sections) if s.name == ".text"), None)
    extern_calls: dict[int, dict[int, str]] = {}
    text_calls: dict[int, dict[int, int]] = {}
    for s in sections:
        if s.type == SHT_REL and s.link == symtab_index and sections[s.info].flags & SHF_EXECINSTR:
            code_at = sections[s.info].offset
            for n in range(s.size // REL.size):
                offset, info = REL.unpack_from(data, s.offset + n * REL.size)
                sym = symbols[info >> 32]
                if sym[3] == SHN_UNDEF:
                    extern_calls.setdefault(s.info, {})[offset] = symbol_name(sym)
                elif sym[3] == text and data[code_at + offset] == BPF_CALL_OPCODE:
                    # against the function, or against .text with the target in the immediate (instructions - 1)
                    imm = struct.unpack_from("<i", data, code_at + offset + 4)[0]
                    target = sym[4] if sym[1] & 0xF == STT_FUNC else sym[4] + (imm + 1) * INSN_SIZE
                    text_calls.setdefault(s.info, {})[offset] = target

    def calls(index: int, start: int, size: int, program: ProgramScan, subprograms: set[int]) -> None:
        """Add the helpers and kfuncs called by the code at [start, start + size) of section `index` to program;
        the .text offsets it calls to subprograms."""
        section = sections[index]
        for at in range(start, start + size, INSN_SIZE):  # offsets in the section, as relocations give them
            code, regs, _off, imm = struct.unpack_from("<BBhi", data, section.offset + at)
            if code != BPF_CALL_OPCODE:
                continue
            if at in extern_calls.get(index, {}):
                program.kfuncs.add(extern_calls[index][at])
            elif at in text_calls.get(index, {}):
                subprograms.add(text_calls[index][at])
            elif (regs >> 4) == BPF_PSEUDO_CALL:
                if index == text:  # within .text: relative to the next instruction
                    subprograms.add(at + (imm + 1) * INSN_SIZE)
            else:
                program.helper_ids.add(imm)

    text_functions = sorted(
        (sym[4], sym[5]) for sym in symbols if (sym[1] & 0xF) == STT_FUNC and text is not None and sym[3] == text
    )
    programs = {}
    for sym in symbols:
        index = sym[3]
        if (sym[1] & 0xF) != STT_FUNC or index == SHN_UNDEF or index >= len(sections):
            continue
        section = sections[index]
        if not section.flags & SHF_EXECINSTR or section.name == ".text":  # .text holds subprograms, not programs
            continue
        program = ProgramScan(symbol_name(sym), section.name)
        pending: set[int] = set()
        calls(index, sym[4], sym[5], program, pending)
        done: set[int] = set()
        while pending - done:
            target = min(pending - done)
            done.add(target)
            for start, size in text_functions:
                if start == target:
                    calls(text, start, size, program, pending)
        programs[program.name] = program
    btf_section = next((s for s in sections if s.name == ".BTF"), None)
    map_types = _map_types(data[btf_section.offset : btf_section.offset + btf_section.size]) if btf_section else {}
    return ObjectScan(path, programs, map_types)


def _map_types(btf: bytes) -> dict[str, list[int]]:
    """Map name -> [its type, the types of its inner map definitions], from the .maps DATASEC of an object's BTF.

    A BTF-defined map is a struct whose members are pointers to arrays: `__uint(type, X)` is `int (*type)[X]`, so the
    type is the array's length; `__array(values, struct inner)` is an array of pointers to the inner map's struct.
    """
    records, name = ft.btf_records(btf)
    by_id = {r[0]: r for r in records}

    def resolve(type_id: int):
        record = by_id[type_id]
        while record[1] in (ft.KIND_TYPEDEF, ft.KIND_VOLATILE, ft.KIND_CONST, ft.KIND_RESTRICT, ft.KIND_TYPE_TAG):
            record = by_id[record[4]]
        return record

    def array(record) -> tuple[int, int]:  # (element type, nelems)
        element, _index_type, nelems = struct.unpack_from("<III", btf, record[5])
        return element, nelems

    def members(record) -> dict[str, int]:
        vlen = record[3] & 0xFFFF
        out = {}
        for n in range(vlen):
            name_off, member_type, _offset = struct.unpack_from("<III", btf, record[5] + 12 * n)
            out[name(name_off)] = member_type
        return out

    def types_of(definition) -> list[int]:
        fields = members(definition)
        found = []
        if "type" in fields:
            pointer = resolve(fields["type"])
            found.append(array(resolve(pointer[4]))[1])
        if "values" in fields:  # map-in-map: an array of pointers to the inner map's definition
            values = resolve(fields["values"])
            if values[1] == ft.KIND_ARRAY:
                inner = resolve(resolve(array(values)[0])[4])
                if inner[1] == ft.KIND_STRUCT:
                    found += types_of(inner)
        return found

    out = {}
    for record in records:
        if record[1] != ft.KIND_DATASEC or name(record[2]) != ".maps":
            continue
        for n in range(record[3] & 0xFFFF):
            var_id = struct.unpack_from("<I", btf, record[5] + 12 * n)[0]
            var = by_id[var_id]
            definition = resolve(var[4])
            if definition[1] == ft.KIND_STRUCT:
                out[name(var[2])] = types_of(definition)
    return out


def _named(kind: str, value: int, enum: str, prefix: str, kernel: ft.KernelFeatures | None) -> ft.Feature:
    """A uapi number as a feature: the catalog's, else by this kernel's enum (then the kernel has it), else "#N"
    (no enum of this kernel lists it: missing)."""
    known = (ft.HELPERS_BY_ID if kind == "helper" else ft.MAP_TYPES_BY_VALUE).get(value)
    if known:
        return known
    for enumerator, number in (kernel.enums.get(enum, {}) if kernel else {}).items():
        if number == value and enumerator.startswith(prefix):
            name = "bpf_" + enumerator[len(prefix) :] if kind == "helper" else enumerator
            return ft.feature(kind, name)
    return ft.Feature(kind, f"#{value}", "", "")


# Sections whose programs run at a devmap's egress (libbpf: SEC("xdp/devmap") and "xdp.frags/devmap").
DEVMAP_SECTIONS = ("xdp/devmap", "xdp.frags/devmap")


def needs_of_object(
    found: ObjectScan, plane: str, variants: dict[str, tuple[str, ...]], kernel: ft.KernelFeatures | None = None
) -> ft.Needs:
    """A Needs read from an object (for an object the collection does not ship: xdp_program's). kernel names the
    helpers and map types the catalog does not know, by its enums."""
    helpers = {
        p.name: tuple(_named("helper", i, "bpf_func_id", "BPF_FUNC_", kernel).name for i in sorted(p.helper_ids))
        for p in found.programs.values()
    }
    map_types = tuple(
        sorted({_named("map_type", v, "bpf_map_type", "BPF_MAP_TYPE_", kernel).name for v in found.map_type_values})
    )
    return ft.Needs(
        plane=plane,
        source=found.path,
        helpers=helpers,
        map_types=map_types,
        variants=variants,
        kfuncs={p.name: tuple(sorted(p.kfuncs)) for p in found.programs.values() if p.kfuncs},
        devmap_programs=tuple(p.name for p in found.programs.values() if p.section in DEVMAP_SECTIONS),
    )
