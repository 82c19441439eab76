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
    """What a BTF blob declares that feature checks need: enums by name (enumerator -> value), FUNC and struct
    names, and the FUNC names that carry the `bpf_kfunc` declaration tag."""

    enums: dict[str, dict[str, int]]
    functions: frozenset[str]
    structs: frozenset[str]
    tagged_kfuncs: frozenset[str]


def btf_records(blob: bytes):
    """The type records of a BTF blob, in id order: (type id, kind, name offset, info, size or type, offset of the
    kind's own data), and the blob's string section. Raises BtfError for bytes that are not little-endian BTF or
    whose records run past the type section."""
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
    records = []
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
        records.append((type_id, kind, name_off, info, size_or_type, body))
    return records, BtfStrings(blob[strings_start : strings_start + str_len])


class BtfStrings:
    """A BTF string section: names by offset."""

    def __init__(self, data: bytes):
        self.data = data

    def __call__(self, offset: int) -> str:
        if offset >= len(self.data):
            raise BtfError(f"BTF: name offset {offset} is past the {len(self.data)}-byte string section")
        return self.data[offset : self.data.index(b"\0", offset)].decode()


def parse_btf(blob: bytes, wanted_enums: frozenset[str] | None = None) -> BtfSummary:
    """Read the enum, struct, FUNC and DECL_TAG records of a BTF blob (a kernel's, a module's or an object's).

    wanted_enums limits which enums are decoded (all when None). Raises BtfError (see btf_records).
    """
    records, name = btf_records(blob)
    enums: dict[str, dict[str, int]] = {}
    func_name_offs: dict[int, int] = {}  # type id -> name offset; only the tagged ones' names are looked up twice
    struct_name_offs = set()
    tag_targets: list[int] = []
    for type_id, kind, name_off, info, size_or_type, body in records:
        if kind == KIND_FUNC:
            func_name_offs[type_id] = name_off
        elif kind == KIND_STRUCT and name_off:
            struct_name_offs.add(name_off)
        elif kind == KIND_DECL_TAG:
            component = struct.unpack_from("<i", blob, body)[0]
            if component == -1 and name(name_off) == KFUNC_TAG:
                tag_targets.append(size_or_type)
        elif kind in (KIND_ENUM, KIND_ENUM64) and name_off:
            enum_name = name(name_off)
            if wanted_enums is None or enum_name in wanted_enums:
                enums[enum_name] = _enumerators(blob, body, info & 0xFFFF, kind, name)
    return BtfSummary(
        enums=enums,
        functions=frozenset(name(off) for off in func_name_offs.values()),
        structs=frozenset(name(off) for off in struct_name_offs),
        tagged_kfuncs=frozenset(name(func_name_offs[t]) for t in tag_targets if t in func_name_offs),
    )


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


_READ: dict[tuple, KernelFeatures] = {}


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
    structs: frozenset[str]  # struct names: evidence of features with no enumerator or FUNC of their own
    source: str = KERNEL_BTF  # the file the features were read from
    enums: dict[str, dict[str, int]] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_btf(cls, blob: bytes, source: str = "<bytes>") -> KernelFeatures:
        summary = parse_btf(blob, frozenset(ENUM_PREFIXES))

        def names(enum: str) -> frozenset[str]:
            prefix = ENUM_PREFIXES[enum]
            # __MAX_BPF_ATTACH_TYPE, __BPF_FUNC_MAX_ID and the like count the others, and BPF_FUNC_unspec,
            # BPF_MAP_TYPE_UNSPEC ... stand for none: they are no feature.
            return frozenset(
                n for n in summary.enums.get(enum, {}) if n.startswith(prefix) and n[len(prefix) :].lower() != "unspec"
            )

        helper_prefix = ENUM_PREFIXES["bpf_func_id"]
        return cls(
            helpers=frozenset("bpf_" + n[len(helper_prefix) :] for n in names("bpf_func_id")),
            map_types=names("bpf_map_type"),
            prog_types=names("bpf_prog_type"),
            attach_types=names("bpf_attach_type"),
            link_types=names("bpf_link_type"),
            functions=summary.functions,
            tagged_kfuncs=summary.tagged_kfuncs,
            structs=summary.structs,
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
        """The running kernel's features (or those of the file XDPFLEET_KERNEL_BTF names: tests only), read once
        per process and file version: a restore checks many instances against one kernel."""
        path = os.environ.get(KERNEL_BTF_OVERRIDE_ENV) or KERNEL_BTF
        try:
            stat = os.stat(path)
            version = (path, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        except OSError:
            return cls.from_file(path)  # raises KernelBtfMissing, naming the path
        if version not in _READ:
            _READ.clear()
            _READ[version] = cls.from_file(path)
        return _READ[version]

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


# ---- what programs need ----------------------------------------------------------------------------------------

KIND_LABELS = {
    "helper": "helper",
    "kfunc": "kfunc",
    "map_type": "map type",
    "prog_type": "program type",
    "attach_type": "attach type",
    "link_type": "link type",
    "flag": "program flag",
}


@dataclass(frozen=True)
class Feature:
    """One kernel feature a program needs, with the first mainline Linux version that has it.

    value: the uapi number (helper id, map type) by which a compiled object names it, where it has one.
    evidence: for a program flag, which has no BTF trace of its own, the BTF record (kind "function" or "struct",
    name) that came into the kernel with it, in the same commit: its presence is how the flag is judged.
    """

    kind: str
    name: str
    since: str
    what: str
    value: int | None = None
    evidence: tuple[str, str] | None = None

    def present(self, kernel: KernelFeatures) -> bool:
        if self.kind == "flag":
            kind, name = self.evidence
            return name in (kernel.functions if kind == "function" else kernel.structs)
        check = {
            "helper": kernel.has_helper,
            "kfunc": kernel.has_kfunc,
            "map_type": kernel.has_map_type,
            "prog_type": kernel.has_prog_type,
            "attach_type": kernel.has_attach_type,
            "link_type": kernel.has_link_type,
        }[self.kind]
        return check(self.name)

    def describe(self) -> str:
        since = f"Linux {self.since}" if self.since else "first version unknown to xdpfleet"
        return f"{KIND_LABELS[self.kind]} {self.name} ({self.what + ', ' if self.what else ''}{since})"

    def absence(self) -> str:
        """How the kernel's BTF shows the feature missing."""
        if self.kind == "flag":
            kind, name = self.evidence
            return f"this kernel's BTF has no {kind} {name}, which came with it"
        return "this kernel's BTF does not have it"


def _catalog(*features: Feature) -> dict[tuple[str, str], Feature]:
    return {(f.kind, f.name): f for f in features}


# Every feature a data plane of the collection uses or an attachment needs. Helper ids and map type values are
# uapi numbers (include/uapi/linux/bpf.h); a unit test checks them against the headers the objects are built with.
CATALOG = _catalog(
    Feature("helper", "bpf_map_lookup_elem", "3.18", "map lookup", 1),
    Feature("helper", "bpf_map_update_elem", "3.18", "map update", 2),
    Feature("helper", "bpf_map_delete_elem", "3.18", "map delete", 3),
    Feature("helper", "bpf_ktime_get_ns", "4.1", "monotonic clock", 5),
    Feature("helper", "bpf_clone_redirect", "4.2", "skb copy to a device", 13),
    Feature("helper", "bpf_skb_vlan_push", "4.3", "skb VLAN tag push", 18),
    Feature("helper", "bpf_skb_vlan_pop", "4.3", "skb VLAN tag pop", 19),
    Feature("helper", "bpf_redirect", "4.4", "redirect to a device", 23),
    Feature("helper", "bpf_skb_pull_data", "4.9", "skb linearization", 39),
    Feature("helper", "bpf_skb_change_head", "4.10", "skb headroom", 43),
    Feature("helper", "bpf_xdp_adjust_head", "4.10", "XDP headroom", 44),
    Feature("helper", "bpf_redirect_map", "4.14", "redirect through a map", 51),
    Feature("helper", "bpf_xdp_adjust_meta", "4.15", "XDP metadata", 54),
    Feature("helper", "bpf_xdp_adjust_tail", "4.18", "XDP frame length", 65),
    Feature("helper", "bpf_fib_lookup", "4.18", "kernel FIB lookup", 69),
    Feature("helper", "bpf_jiffies64", "5.5", "jiffies", 118),
    Feature("helper", "bpf_ktime_get_coarse_ns", "5.11", "coarse monotonic clock", 160),
    Feature("helper", "bpf_check_mtu", "5.12", "a device's MTU", 163),
    Feature("kfunc", "bpf_iter_num_new", "6.4", "open-coded iterators"),
    Feature("kfunc", "bpf_iter_num_next", "6.4", "open-coded iterators"),
    Feature("kfunc", "bpf_iter_num_destroy", "6.4", "open-coded iterators"),
    Feature("map_type", "BPF_MAP_TYPE_HASH", "3.19", "hash map", 1),
    Feature("map_type", "BPF_MAP_TYPE_ARRAY", "3.19", "array map", 2),
    Feature("map_type", "BPF_MAP_TYPE_PERCPU_HASH", "4.6", "per-CPU hash map", 5),
    Feature("map_type", "BPF_MAP_TYPE_PERCPU_ARRAY", "4.6", "per-CPU array map", 6),
    Feature("map_type", "BPF_MAP_TYPE_LRU_HASH", "4.10", "LRU hash map", 9),
    Feature("map_type", "BPF_MAP_TYPE_LRU_PERCPU_HASH", "4.10", "per-CPU LRU hash map", 10),
    Feature("map_type", "BPF_MAP_TYPE_ARRAY_OF_MAPS", "4.12", "array of maps", 12),
    Feature("map_type", "BPF_MAP_TYPE_HASH_OF_MAPS", "4.12", "hash of maps", 13),
    Feature("map_type", "BPF_MAP_TYPE_DEVMAP", "4.14", "device map", 14),
    Feature("map_type", "BPF_MAP_TYPE_DEVMAP_HASH", "5.4", "device map by key", 25),
    Feature("prog_type", "BPF_PROG_TYPE_SCHED_CLS", "4.1", "tc program", 3),
    Feature("prog_type", "BPF_PROG_TYPE_XDP", "4.8", "XDP program", 6),
    Feature("attach_type", "BPF_XDP_DEVMAP", "5.8", "devmap egress program", 33),
    Feature("attach_type", "BPF_XDP", "5.9", "XDP through bpf_link", 37),
    Feature("attach_type", "BPF_TCX_INGRESS", "6.6", "tcx ingress", 46),
    Feature("link_type", "BPF_LINK_TYPE_XDP", "5.9", "XDP bpf_link", 6),
    Feature("link_type", "BPF_LINK_TYPE_TCX", "6.6", "tcx bpf_link", 11),
    # Devmap broadcast: dev_map_enqueue_multi implements both flags (kernel/bpf/devmap.c, commit e624d4ed4aa8).
    Feature("flag", "BPF_F_BROADCAST", "5.13", "devmap broadcast", evidence=("function", "dev_map_enqueue_multi")),
    Feature(
        "flag", "BPF_F_EXCLUDE_INGRESS", "5.13", "devmap broadcast", evidence=("function", "dev_map_enqueue_multi")
    ),
    # Live frames: struct xdp_test_data holds a live-frames run's state (net/bpf/test_run.c, commit b530e9e1063e).
    Feature("flag", "BPF_F_TEST_XDP_LIVE_FRAMES", "5.18", "XDP live frames", evidence=("struct", "xdp_test_data")),
)
HELPERS_BY_ID = {f.value: f for f in CATALOG.values() if f.kind == "helper"}
MAP_TYPES_BY_VALUE = {f.value: f for f in CATALOG.values() if f.kind == "map_type"}


def feature(kind: str, name: str) -> Feature:
    """The catalog's feature, or one without a known first version for a name the catalog does not list."""
    return CATALOG.get((kind, name)) or Feature(kind, name, "", "")


# What attaching at each hook needs beyond the program itself: xdpfleet attaches only through bpf_link.
HOOK_FEATURES = {
    "xdp": (("prog_type", "BPF_PROG_TYPE_XDP"), ("attach_type", "BPF_XDP"), ("link_type", "BPF_LINK_TYPE_XDP")),
    # tcx (BPF_TCX_INGRESS, BPF_LINK_TYPE_TCX: 6.6) where the kernel has it, else a cls_bpf filter (program.py)
    "tc": (("prog_type", "BPF_PROG_TYPE_SCHED_CLS"),),
    "devmap": (("prog_type", "BPF_PROG_TYPE_XDP"), ("attach_type", "BPF_XDP_DEVMAP")),
    "live_frames": (("prog_type", "BPF_PROG_TYPE_XDP"), ("flag", "BPF_F_TEST_XDP_LIVE_FRAMES")),
}
HOOK_LABELS = {"xdp": "XDP hook", "tc": "tc hook", "devmap": "devmap egress", "live_frames": "BPF_PROG_RUN"}


@dataclass(frozen=True)
class Needs:
    """What one BPF object needs from the kernel, by program, and how each variant of its data plane runs it.

    helpers, kfuncs: program -> the helpers and kfuncs it calls (names as in C). libbpf loads every program of an
    object and resolves every kfunc extern of it, whichever programs a variant attaches, so every variant needs all
    the programs of the objects it loads: all of them, unless `programs` says.
    more_sources: further objects of the plane, loaded on the first one's maps (the VTEP's tc program: vtep_tc.c).
    programs: variant -> the programs of the objects it loads, where it loads only some of the plane's objects.
    flags: program -> the program flags it passes (BPF_F_BROADCAST ...), which no object shows.
    variants: label ("backend tc", "hook xdp") -> the hooks that variant attaches at (HOOK_FEATURES).
    devmap_programs: programs that run at devmap egress (SEC("xdp/devmap")), loaded with every variant.
    """

    plane: str
    source: str  # the C source, under bpf/
    helpers: dict[str, tuple[str, ...]]
    map_types: tuple[str, ...]
    variants: dict[str, tuple[str, ...]]
    kfuncs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    devmap_programs: tuple[str, ...] = ()
    more_sources: tuple[str, ...] = ()
    programs: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def required(self, variant: str) -> list[tuple[Feature, str]]:
        """Every feature `variant` needs, each with what needs it ("program vtep_replicate", "the tc hook")."""
        if variant not in self.variants:
            raise ValueError(f"{self.plane}: no variant {variant!r} (it has: {', '.join(self.variants)})")
        out: list[tuple[Feature, str]] = []
        loaded = self.programs.get(variant)
        for program in sorted({*self.helpers, *self.kfuncs, *self.flags}):
            if loaded is not None and program not in loaded:
                continue
            out += [(feature("kfunc", name), f"program {program}") for name in self.kfuncs.get(program, ())]
            out += [(feature("helper", name), f"program {program}") for name in self.helpers.get(program, ())]
            out += [(feature("flag", name), f"program {program}") for name in self.flags.get(program, ())]
        out += [(feature("map_type", name), "its maps") for name in self.map_types]
        hooks = list(self.variants[variant]) + (["devmap"] if self.devmap_programs else [])
        for hook in hooks:
            out += [(feature(kind, name), f"the {HOOK_LABELS[hook]}") for kind, name in HOOK_FEATURES[hook]]
        return _unique(out)

    def missing(self, kernel: KernelFeatures, variant: str) -> list[tuple[Feature, str]]:
        return [(f, who) for f, who in self.required(variant) if not f.present(kernel)]

    def problems(self, kernel: KernelFeatures, variant: str) -> list[str]:
        """One sentence per missing feature: the feature, what needs it, its first mainline version, and how this
        kernel's BTF shows it missing."""
        return [
            f"kernel: the {self.plane} ({variant}) needs {f.describe()} for {who}; {f.absence()}"
            for f, who in self.missing(kernel, variant)
        ]


def _unique(pairs: list[tuple[Feature, str]]) -> list[tuple[Feature, str]]:
    """The first 'who' of each feature, in order."""
    seen: dict[tuple[str, str], tuple[Feature, str]] = {}
    for f, who in pairs:
        seen.setdefault((f.kind, f.name), (f, who))
    return list(seen.values())


class MissingFeatures(RuntimeError):
    """The kernel lacks what a data plane needs; nothing was changed. problems: one sentence per feature."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def require(needs: Needs, variant: str, kernel: KernelFeatures | None = None) -> KernelFeatures:
    """Refuse (MissingFeatures) unless the host's libbpf can be used and the running kernel has all that `variant`
    of the data plane needs; call it before anything on the host changes. A kernel without BTF is refused too: what
    it offers cannot be known."""
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf  # loads the shared library

    try:
        libbpf.lib()
    except OSError as exc:  # LibbpfUnsupported, or no libbpf at all
        problem = f"libbpf: the {needs.plane} ({variant}) cannot be loaded: {exc.strerror or exc}"
        raise MissingFeatures([problem]) from None
    if kernel is None:
        try:
            kernel = KernelFeatures.from_host()
        except (KernelBtfMissing, BtfError) as exc:
            raise MissingFeatures([f"kernel: the {needs.plane} ({variant}) cannot be checked: {exc}"]) from None
    problems = needs.problems(kernel, variant)
    if problems:
        raise MissingFeatures(problems)
    return kernel


# The counter (bpf/counter/counter.c) has no package of its own: the xdp_program module runs it.
COUNTER = Needs(
    plane="counter",
    source="counter/counter.c",
    helpers={"xdp_count": ("bpf_map_lookup_elem",)},
    map_types=("BPF_MAP_TYPE_PERCPU_ARRAY",),
    variants={"hook xdp": ("xdp",)},
)


def support(planes: list[Needs], kernel: KernelFeatures) -> dict:
    """Per data plane and variant: whether this kernel has all it needs, and what it lacks (xdp_probe's facts)."""
    out: dict = {}
    for needs in planes:
        for variant in needs.variants:
            missing = needs.missing(kernel, variant)
            out.setdefault(needs.plane, {})[variant] = {
                "supported": not missing,
                "missing": [f"{f.describe()} for {who}" for f, who in missing],
            }
    return out


def summary(kernel: KernelFeatures) -> dict:
    """The kernel's feature sets in short (xdp_probe's facts): the names of helpers, map, program, attach and link
    types, and the kfuncs (the tagged ones where the kernel tags them, with how many FUNC records it has)."""
    return {
        "source": kernel.source,
        "helpers": sorted(kernel.helpers),
        "map_types": sorted(kernel.map_types),
        "prog_types": sorted(kernel.prog_types),
        "attach_types": sorted(kernel.attach_types),
        "link_types": sorted(kernel.link_types),
        "kfuncs": sorted(kernel.tagged_kfuncs),
        "kfuncs_tagged": bool(kernel.tagged_kfuncs),
        "functions": len(kernel.functions),
    }
