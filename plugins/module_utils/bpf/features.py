# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the running kernel offers BPF programs, read from its own BTF: a shared API for every module and layer.

The kernel's BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF) describes the kernel that is running, so it
lists what that kernel has, backports included, where a version number would lie:
- helpers: the enumerators of `enum bpf_func_id` (BPF_FUNC_fib_lookup -> helper bpf_fib_lookup),
- map, program, attach and link types: `enum bpf_map_type`, `bpf_prog_type`, `bpf_attach_type`, `bpf_link_type`,
- kfuncs: FUNC records. libbpf resolves a program's `__ksym` function externs against exactly these records (a
  missing one is "extern (func ksym) 'X': not found in kernel or module BTFs"), so has_kfunc() asks the same
  question. Kernels built with pahole 1.27 or newer also tag each registered kfunc with the declaration tag
  `bpf_kfunc`; those names are in `tagged_kfuncs` (empty where the kernel does not tag them).

The reader is pure Python (the BTF header, the type section and the string section: enum, enum64, FUNC and
DECL_TAG records); it needs neither libbpf nor privilege, so it runs before anything is loaded.

API, meant for every module and data plane (not only the probe):

    features = KernelFeatures.from_host()      # raises KernelBtfMissing without kernel BTF
    features.has_helper("bpf_fib_lookup")
    features.has_kfunc("bpf_iter_num_new")
    features.has_map_type("DEVMAP_HASH")        # or "BPF_MAP_TYPE_DEVMAP_HASH"
    features.has_attach_type("TCX_INGRESS")     # or "BPF_TCX_INGRESS"
    features.has_link_type("TCX")               # or "BPF_LINK_TYPE_TCX"
    features.has_prog_type("XDP")               # or "BPF_PROG_TYPE_XDP"

Tests point the reader at another BTF file through the environment variable XDPFLEET_KERNEL_BTF (an internal
override, for tests only: a module run with it judges the kernel by that file instead of the running kernel's).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

KERNEL_BTF = "/sys/kernel/btf/vmlinux"
KERNEL_BTF_OVERRIDE_ENV = "XDPFLEET_KERNEL_BTF"

BTF_MAGIC = 0xEB9F
BTF_HEADER = struct.Struct("<HBBIIIII")  # magic, version, flags, hdr_len, type_off, type_len, str_off, str_len
BTF_TYPE = struct.Struct("<III")  # name_off, info (vlen:16, kind:5 at 24, kind_flag at 31), size or type

# BTF kinds (include/uapi/linux/btf.h) and the bytes that follow each kind's btf_type record
KIND_INT, KIND_PTR, KIND_ARRAY, KIND_STRUCT, KIND_UNION, KIND_ENUM, KIND_FWD = 1, 2, 3, 4, 5, 6, 7
KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_FUNC, KIND_FUNC_PROTO = 8, 9, 10, 11, 12, 13
KIND_VAR, KIND_DATASEC, KIND_FLOAT, KIND_DECL_TAG, KIND_TYPE_TAG, KIND_ENUM64 = 14, 15, 16, 17, 18, 19
_FIXED_TAIL = {KIND_INT: 4, KIND_ARRAY: 12, KIND_VAR: 4, KIND_DECL_TAG: 4}
_PER_MEMBER_TAIL = {
    KIND_STRUCT: 12,
    KIND_UNION: 12,
    KIND_ENUM: 8,
    KIND_FUNC_PROTO: 8,
    KIND_DATASEC: 12,
    KIND_ENUM64: 12,
}

# The enums that list what a kernel's BPF offers, and the prefix of their enumerators.
ENUM_PREFIXES = {
    "bpf_func_id": "BPF_FUNC_",
    "bpf_map_type": "BPF_MAP_TYPE_",
    "bpf_prog_type": "BPF_PROG_TYPE_",
    "bpf_attach_type": "BPF_",
    "bpf_link_type": "BPF_LINK_TYPE_",
}
KFUNC_TAG = "bpf_kfunc"


class BtfError(ValueError):
    """The bytes are not BTF this reader understands; the message says where they stop making sense."""


class KernelBtfMissing(OSError):
    """The kernel has no BTF to read (built without CONFIG_DEBUG_INFO_BTF), so its features cannot be known."""


@dataclass(frozen=True)
class BtfSummary:
    """What a BTF blob declares that feature checks need: enums by name (enumerator -> value), FUNC names, and
    the FUNC names that carry the `bpf_kfunc` declaration tag."""

    enums: dict[str, dict[str, int]]
    functions: frozenset[str]
    tagged_kfuncs: frozenset[str]


def parse_btf(blob: bytes, wanted_enums: frozenset[str] | None = None) -> BtfSummary:
    """Read enum, FUNC and DECL_TAG records of a BTF blob (a kernel's, a module's or an object's .BTF section).

    wanted_enums limits which enums are decoded (all when None); other records are skipped by their size only.
    Raises BtfError for bytes that are not little-endian BTF or whose records run past the type section.
    """
    if len(blob) < BTF_HEADER.size:
        raise BtfError(f"BTF: {len(blob)} bytes, shorter than the {BTF_HEADER.size}-byte header")
    magic, version, _flags, hdr_len, type_off, type_len, str_off, str_len = BTF_HEADER.unpack_from(blob)
    if magic != BTF_MAGIC:
        raise BtfError(f"BTF: magic {magic:#06x}, expected {BTF_MAGIC:#06x} (little-endian BTF)")
    if version != 1:
        raise BtfError(f"BTF: version {version}, this reader knows version 1")
    types_start, strings_start = hdr_len + type_off, hdr_len + str_off
    if types_start + type_len > len(blob) or strings_start + str_len > len(blob):
        raise BtfError(f"BTF: sections end past the blob's {len(blob)} bytes")
    strings = blob[strings_start : strings_start + str_len]

    def name(offset: int) -> str:
        if offset >= len(strings):
            raise BtfError(f"BTF: name offset {offset} is past the {len(strings)}-byte string section")
        return strings[offset : strings.index(b"\0", offset)].decode()

    enums: dict[str, dict[str, int]] = {}
    func_name_offs: dict[int, int] = {}  # type id -> name offset; names are decoded only for the tagged ones
    tag_targets: list[int] = []
    unpack_type = BTF_TYPE.unpack_from
    pos, end, type_id = types_start, types_start + type_len, 0
    while pos < end:
        type_id += 1
        if pos + BTF_TYPE.size > end:
            raise BtfError(f"BTF: type {type_id} is cut off at the end of the type section")
        name_off, info, size_or_type = unpack_type(blob, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        body = pos + BTF_TYPE.size
        if kind in _PER_MEMBER_TAIL:
            pos = body + vlen * _PER_MEMBER_TAIL[kind]
        elif kind in _FIXED_TAIL:
            pos = body + _FIXED_TAIL[kind]
        elif KIND_INT <= kind <= KIND_ENUM64:
            pos = body
        else:
            raise BtfError(f"BTF: type {type_id} has kind {kind}, unknown to this reader")
        if pos > end:
            raise BtfError(f"BTF: type {type_id} (kind {kind}) runs past the end of the type section")
        if kind == KIND_FUNC:
            func_name_offs[type_id] = name_off
        elif kind == KIND_DECL_TAG:
            component = struct.unpack_from("<i", blob, body)[0]
            if component == -1 and name(name_off) == KFUNC_TAG:
                tag_targets.append(size_or_type)
        elif kind in (KIND_ENUM, KIND_ENUM64) and name_off:
            enum_name = name(name_off)
            if wanted_enums is None or enum_name in wanted_enums:
                enums[enum_name] = _enumerators(blob, body, vlen, kind, name)
    functions = frozenset(name(off) for off in func_name_offs.values())
    tagged = frozenset(name(func_name_offs[t]) for t in tag_targets if t in func_name_offs)
    return BtfSummary(enums=enums, functions=functions, tagged_kfuncs=tagged)


def _enumerators(blob: bytes, body: int, vlen: int, kind: int, name) -> dict[str, int]:
    values = {}
    for n in range(vlen):
        if kind == KIND_ENUM:
            name_off, value = struct.unpack_from("<II", blob, body + 8 * n)
        else:  # ENUM64: the value in two 32-bit halves, low first
            name_off, low, high = struct.unpack_from("<III", blob, body + 12 * n)
            value = (high << 32) | low
        values[name(name_off)] = value
    return values


def _with_prefix(name: str, prefix: str) -> str:
    return name if name.startswith(prefix) else prefix + name


@dataclass(frozen=True)
class KernelFeatures:
    """The BPF features one kernel offers, by name. Build it with from_host(), from_file() or from_btf()."""

    helpers: frozenset[str]  # C names, e.g. bpf_fib_lookup
    map_types: frozenset[str]  # enumerators, e.g. BPF_MAP_TYPE_DEVMAP_HASH
    prog_types: frozenset[str]
    attach_types: frozenset[str]
    link_types: frozenset[str]
    functions: frozenset[str]  # every FUNC record: what libbpf resolves __ksym function externs against
    tagged_kfuncs: frozenset[str]  # FUNCs tagged bpf_kfunc (empty where the kernel's BTF has no such tags)
    source: str = KERNEL_BTF  # the file the features were read from
    enums: dict[str, dict[str, int]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_btf(cls, blob: bytes, source: str = "<bytes>") -> KernelFeatures:
        summary = parse_btf(blob, frozenset(ENUM_PREFIXES))

        def names(enum: str) -> frozenset[str]:
            prefix = ENUM_PREFIXES[enum]
            # __MAX_BPF_ATTACH_TYPE, __BPF_FUNC_MAX_ID and the like count the others; they are no feature.
            return frozenset(n for n in summary.enums.get(enum, {}) if n.startswith(prefix))

        helper_prefix = ENUM_PREFIXES["bpf_func_id"]
        return cls(
            helpers=frozenset("bpf_" + n[len(helper_prefix) :] for n in names("bpf_func_id")),
            map_types=names("bpf_map_type"),
            prog_types=names("bpf_prog_type"),
            attach_types=names("bpf_attach_type"),
            link_types=names("bpf_link_type"),
            functions=summary.functions,
            tagged_kfuncs=summary.tagged_kfuncs,
            source=source,
            enums=summary.enums,
        )

    @classmethod
    def from_file(cls, path: str) -> KernelFeatures:
        """Features from a BTF file. Raises KernelBtfMissing when the file does not exist, BtfError when it is
        not BTF."""
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except FileNotFoundError:
            raise KernelBtfMissing(
                f"no kernel BTF at {path}: the kernel was built without CONFIG_DEBUG_INFO_BTF, so the BPF features "
                "it offers cannot be read"
            ) from None
        try:
            return cls.from_btf(blob, source=path)
        except BtfError as exc:
            raise BtfError(f"{path}: {exc}") from None

    @classmethod
    def from_host(cls) -> KernelFeatures:
        """The running kernel's features (or those of the file XDPFLEET_KERNEL_BTF names: tests only)."""
        return cls.from_file(os.environ.get(KERNEL_BTF_OVERRIDE_ENV) or KERNEL_BTF)

    def has_helper(self, name: str) -> bool:
        """A helper by its C name (bpf_redirect_map) or its enumerator (BPF_FUNC_redirect_map)."""
        if name.startswith("BPF_FUNC_"):
            name = "bpf_" + name[len("BPF_FUNC_") :]
        return name in self.helpers

    def has_kfunc(self, name: str) -> bool:
        """Whether the kernel's BTF has the function libbpf would resolve a `__ksym` extern of this name to."""
        return name in self.functions

    def has_map_type(self, name: str) -> bool:
        return _with_prefix(name, "BPF_MAP_TYPE_") in self.map_types

    def has_prog_type(self, name: str) -> bool:
        return _with_prefix(name, "BPF_PROG_TYPE_") in self.prog_types

    def has_attach_type(self, name: str) -> bool:
        return _with_prefix(name, "BPF_") in self.attach_types

    def has_link_type(self, name: str) -> bool:
        return _with_prefix(name, "BPF_LINK_TYPE_") in self.link_types
