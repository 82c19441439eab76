# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Map key/value layouts declared once in Python (ctypes types) and checked against an object's BTF.

A C struct that changes without its Python twin fails loudly at load (LayoutMismatch names the map, the field,
and both offsets or sizes), never by writing wrong bytes into a map. The same check runs against a pinned map's
BTF from the kernel, so a module never writes into a map of an older or newer layout. A layout that names its
data plane's interface (bpf/abi.py) has that interface's enums and limits checked with it.
Also here: .rodata constants, set by variable name and type-checked against the object's DATASEC.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.abi import Abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf import (
    KIND_ARRAY,
    KIND_ENUM,
    KIND_ENUM64,
    KIND_INT,
    KIND_STRUCT,
    KIND_UNION,
    Btf,
    LayoutMismatch,
)

_SIGNED_CTYPES = {ctypes.c_int8, ctypes.c_int16, ctypes.c_int32, ctypes.c_int64, ctypes.c_byte}
_UNSIGNED_CTYPES = {ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_char}


def shape(btf: Btf, type_id: int) -> tuple:
    """What a type lays out, field names and all, without its ids: two maps whose key and value have equal shapes
    read each other's bytes the same way. Type id 0 (no BTF) has the empty shape."""
    if not type_id:
        return ()
    _resolved_id, t, ptr = btf.resolve(type_id)
    kind = Btf.kind(t)
    if kind in (KIND_STRUCT, KIND_UNION):
        members = tuple((name, offset, bits, shape(btf, member)) for name, member, offset, bits in btf.members(ptr, t))
        return (kind, t.size_or_type, members)
    if kind == KIND_ARRAY:
        element, nelems = btf.array(type_id)
        return (kind, nelems, shape(btf, element))
    if kind in (KIND_INT, KIND_ENUM, KIND_ENUM64):  # an enum stores what an integer of its size and sign does
        return (KIND_INT, btf.size(type_id), bool(btf.int_signed(type_id)))
    return (kind, btf.size(type_id))


def _compare(btf: Btf, type_id: int, ctype: type, where: str, problems: list[str]) -> None:
    _resolved_id, t, ptr = btf.resolve(type_id)
    kind = Btf.kind(t)
    btf_size = btf.size(type_id)
    py_size = ctypes.sizeof(ctype)
    if btf_size != py_size:
        problems.append(f"{where}: {py_size} bytes in Python, {btf_size} in the object's BTF ({btf.describe(type_id)})")
        return
    if issubclass(ctype, (ctypes.Structure, ctypes.Union)):
        expected_kind = KIND_STRUCT if issubclass(ctype, ctypes.Structure) else KIND_UNION
        if kind != expected_kind:
            problems.append(f"{where}: a {ctype.__name__} in Python, {btf.describe(type_id)} in the object's BTF")
            return
        btf_members = btf.members(ptr, t)
        py_fields = [f[0] for f in ctype._fields_]
        btf_names = [m[0] for m in btf_members]
        if py_fields != btf_names:
            problems.append(
                f"{where}: fields {py_fields} in Python, {btf_names} in the object's BTF ({btf.describe(type_id)})"
            )
            return
        for (name, member_type, bit_offset, bits), field in zip(btf_members, ctype._fields_):
            py_offset = getattr(ctype, name).offset
            if bits or len(field) > 2:
                problems.append(f"{where}.{name}: bitfields are not supported in map layouts")
            elif bit_offset != py_offset * 8:
                problems.append(f"{where}.{name}: offset {py_offset} in Python, {bit_offset // 8} in the object's BTF")
            else:
                _compare(btf, member_type, field[1], f"{where}.{name}", problems)
        return
    if issubclass(ctype, ctypes.Array):
        if kind != KIND_ARRAY:
            problems.append(f"{where}: an array in Python, {btf.describe(type_id)} in the object's BTF")
            return
        element, nelems = btf.array(type_id)
        if nelems != ctype._length_:
            problems.append(f"{where}: {ctype._length_} elements in Python, {nelems} in the object's BTF")
            return
        _compare(btf, element, ctype._type_, f"{where}[]", problems)
        return
    if kind not in (KIND_INT, KIND_ENUM, KIND_ENUM64):
        problems.append(f"{where}: an integer in Python, {btf.describe(type_id)} in the object's BTF")
        return
    signed = btf.int_signed(type_id)
    if signed is not None and ((signed and ctype in _UNSIGNED_CTYPES) or (not signed and ctype in _SIGNED_CTYPES)):
        problems.append(f"{where}: signedness differs ({ctype.__name__} in Python, {btf.describe(type_id)} in BTF)")


@dataclass(frozen=True)
class MapLayout:
    """The key and value types of one map, as the C source declares them (ctypes types)."""

    map_name: str
    key: type
    value: type
    abi: Abi | None = None  # the data plane's enums and limits, which the map's contents are read with

    def check(self, btf: Btf, key_type_id: int, value_type_id: int, key_size: int, value_size: int) -> None:
        problems = []
        if key_size != ctypes.sizeof(self.key) or value_size != ctypes.sizeof(self.value):
            problems.append(
                f"key/value sizes {ctypes.sizeof(self.key)}/{ctypes.sizeof(self.value)} in Python, "
                f"{key_size}/{value_size} in the map definition"
            )
        elif not key_type_id or not value_type_id:
            problems.append("the map carries no BTF for its key or value: declare it with __type(key, ...)")
        else:
            _compare(btf, key_type_id, self.key, "key", problems)
            _compare(btf, value_type_id, self.value, "value", problems)
        if problems:
            raise LayoutMismatch(f"map {self.map_name}: layout differs from the BPF object: " + "; ".join(problems))
        if self.abi is not None:
            self.abi.check(btf)

    def check_object(self, obj: libbpf.BpfObject) -> None:
        m = obj.map(self.map_name)
        self.check(Btf(obj.btf), m.btf_key_type_id, m.btf_value_type_id, m.key_size, m.value_size)

    def check_pinned(self, pinned: libbpf.PinnedMap) -> None:
        info = pinned.info
        if not info.btf_id:
            raise LayoutMismatch(f"map {self.map_name} at {pinned.path} carries no BTF; its layout cannot be checked")
        with Btf.from_kernel(info.btf_id) as btf:
            self.check(btf, info.btf_key_type_id, info.btf_value_type_id, info.key_size, info.value_size)


class TypedMap:
    """A map accessed through its checked layout: keys and values are ctypes instances (or ints)."""

    def __init__(self, bpf_map: libbpf.Map, layout: MapLayout):
        self.map = bpf_map
        self.layout = layout

    def _key(self, key) -> bytes:
        return bytes(
            key if isinstance(key, (ctypes._SimpleCData, ctypes.Structure, ctypes.Array)) else self.layout.key(key)
        )

    def _decode(self, raw: bytes):
        if not self.map.percpu:
            return self.layout.value.from_buffer_copy(raw)
        stride = self.map.value_stride
        return [self.layout.value.from_buffer_copy(raw, n * stride) for n in range(len(raw) // stride)]

    def _encode(self, value) -> bytes:
        if not self.map.percpu:
            return bytes(value)
        stride = self.map.value_stride
        cpus = value if isinstance(value, list) else [value] * libbpf.num_possible_cpus()
        return b"".join(bytes(v).ljust(stride, b"\0") for v in cpus)

    def get(self, key):
        raw = self.map.lookup(self._key(key))
        return None if raw is None else self._decode(raw)

    def set(self, key, value, flags: int = libbpf.BPF_ANY) -> None:
        self.map.update(self._key(key), self._encode(value), flags)

    def delete(self, key) -> bool:
        return self.map.delete(self._key(key))

    def items(self):
        for raw_key, raw_value in self.map.items():
            yield self.layout.key.from_buffer_copy(raw_key), self._decode(raw_value)


def set_rodata(obj: libbpf.BpfObject, values: dict[str, int]) -> bytes:
    """Set `const volatile` globals of .rodata by name before load; returns the section's resulting bytes.

    Every name must exist and every value must fit its C type: the error names the variable and the rule.
    """
    try:
        rodata = obj.internal_map(".rodata")
    except libbpf.LibbpfError:
        if values:
            raise ValueError(f"constants: {obj.path} has no .rodata section (no const volatile globals)") from None
        return b""
    if not values:
        return rodata.initial_value()
    btf = Btf(obj.btf)
    variables = btf.datasec_vars(".rodata")
    blob = bytearray(rodata.initial_value())
    for name, value in values.items():
        if name not in variables:
            known = ", ".join(sorted(variables)) or "none"
            raise ValueError(f"constants.{name}: the object has no .rodata variable of that name (it has: {known})")
        offset, size, type_id = variables[name]
        signed = bool(btf.int_signed(type_id))
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"constants.{name}: must be an integer, got {value!r}")
        try:
            blob[offset : offset + size] = value.to_bytes(size, "little", signed=signed)
        except OverflowError:
            kind = "signed" if signed else "unsigned"
            raise ValueError(f"constants.{name}: {value} does not fit a {size}-byte {kind} integer") from None
    rodata.set_initial_value(bytes(blob))
    return bytes(blob)


def decode(btf: Btf, type_id: int, raw: bytes, offset: int = 0):
    """A value's bytes as Python data, by its BTF: structs become dicts, arrays lists, integers ints."""
    _resolved_id, t, ptr = btf.resolve(type_id)
    kind = Btf.kind(t)
    if kind in (KIND_STRUCT, KIND_UNION):
        return {
            name or f"_{n}": decode(btf, member_type, raw, offset + bit_offset // 8)
            for n, (name, member_type, bit_offset, _bits) in enumerate(btf.members(ptr, t))
        }
    if kind == KIND_ARRAY:
        element, nelems = btf.array(type_id)
        size = btf.size(element)
        return [decode(btf, element, raw, offset + n * size) for n in range(nelems)]
    size = btf.size(type_id)
    return int.from_bytes(raw[offset : offset + size], "little", signed=bool(btf.int_signed(type_id)))


def sum_values(values: list):
    """Element-wise sum of per-CPU values decoded by decode()."""
    first = values[0]
    if isinstance(first, dict):
        return {k: sum_values([v[k] for v in values]) for k in first}
    if isinstance(first, list):
        return [sum_values([v[n] for v in values]) for n in range(len(first))]
    return sum(values)


def read_pinned_map(path: str, per_cpu: bool, skip_zero: bool) -> dict:
    """Every entry of the map pinned at `path`, keys and values decoded by the map's own BTF (per-CPU values summed
    over CPUs unless per_cpu; all-zero values left out with skip_zero), and the map's definition: the
    xdpfleet.fabric.bpf_map_info module's result. Raises libbpf.LibbpfError, or ValueError for a map without BTF."""
    with libbpf.PinnedMap(path) as pinned:
        info = pinned.info
        if not info.btf_id:
            raise ValueError(f"map {info.name} at {path} carries no BTF, so its entries cannot be decoded")
        entries = []
        with Btf.from_kernel(info.btf_id) as btf:
            for raw_key, raw_value in pinned.dump():
                if skip_zero and not any(raw_value):
                    continue
                if pinned.percpu:
                    stride = pinned.value_stride
                    cpus = [
                        decode(btf, info.btf_value_type_id, raw_value, n * stride)
                        for n in range(len(raw_value) // stride)
                    ]
                    value = cpus if per_cpu else sum_values(cpus)
                else:
                    value = decode(btf, info.btf_value_type_id, raw_value)
                entries.append({"key": decode(btf, info.btf_key_type_id, raw_key), "value": value})
        definition = {
            "name": info.name,
            "type": info.type,
            "key_size": info.key_size,
            "value_size": info.value_size,
            "max_entries": info.max_entries,
            "path": path,
        }
        return {"map": definition, "entries": entries}
