# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Read access to an object's or a pinned map's BTF (types by id, members, enums, data sections), and the error
of a declaration in Python that differs from it. Below both users: the map layouts (btf_layout.py) and the data
planes' interfaces (abi.py) read BTF through this and depend on nothing of each other's here."""

from __future__ import annotations

import ctypes

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf

KIND_INT, KIND_PTR, KIND_ARRAY, KIND_STRUCT, KIND_UNION, KIND_ENUM = 1, 2, 3, 4, 5, 6
KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT = 8, 9, 10, 11
KIND_VAR, KIND_DATASEC, KIND_TYPE_TAG, KIND_ENUM64 = 14, 15, 18, 19
_QUALIFIERS = {KIND_TYPEDEF, KIND_VOLATILE, KIND_CONST, KIND_RESTRICT, KIND_TYPE_TAG}
_INT_SIGNED = 1


class LayoutMismatch(ValueError):
    """What Python declares (a map's layout, a data plane's numbers) differs from the BTF of the object or of the
    pinned map."""


class _BtfType(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32), ("size_or_type", ctypes.c_uint32)]


class _BtfMember(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("type", ctypes.c_uint32), ("offset", ctypes.c_uint32)]


class _BtfArray(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("index_type", ctypes.c_uint32), ("nelems", ctypes.c_uint32)]


class _BtfEnum(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("val", ctypes.c_uint32)]


class _BtfVarSecinfo(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("offset", ctypes.c_uint32), ("size", ctypes.c_uint32)]


class Btf:
    """Read access to a libbpf struct btf *: types by id, with their members."""

    def __init__(self, handle: int, owned: bool = False):
        self.handle = handle
        self.owned = owned

    @classmethod
    def from_kernel(cls, btf_id: int) -> Btf:
        so = libbpf.lib()
        return cls(
            libbpf._check_ptr(f"btf__load_from_kernel_by_id({btf_id})", so.btf__load_from_kernel_by_id(btf_id)), True
        )

    def close(self) -> None:
        if self.owned and self.handle:
            libbpf.lib().btf__free(self.handle)
            self.handle = 0

    def __enter__(self) -> Btf:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _type(self, type_id: int) -> tuple[_BtfType, int]:
        ptr = libbpf.lib().btf__type_by_id(self.handle, type_id)
        if not ptr:
            raise LayoutMismatch(f"BTF has no type id {type_id}")
        return _BtfType.from_address(ptr), ptr

    def name(self, name_off: int) -> str:
        raw = libbpf.lib().btf__name_by_offset(self.handle, name_off)
        return raw.decode() if raw else ""

    @staticmethod
    def kind(t: _BtfType) -> int:
        return (t.info >> 24) & 0x1F

    def resolve(self, type_id: int) -> tuple[int, _BtfType, int]:
        """Follow typedefs and qualifiers to the type that has a layout."""
        t, ptr = self._type(type_id)
        while self.kind(t) in _QUALIFIERS:
            type_id = t.size_or_type
            t, ptr = self._type(type_id)
        return type_id, t, ptr

    def describe(self, type_id: int) -> str:
        _resolved_id, t, _ptr = self.resolve(type_id)
        kind = self.kind(t)
        label = {KIND_STRUCT: "struct", KIND_UNION: "union", KIND_INT: "int", KIND_ENUM: "enum", KIND_ARRAY: "array"}
        name = self.name(t.name_off)
        return f"{label.get(kind, f'kind {kind}')} {name}".strip()

    def size(self, type_id: int) -> int:
        _resolved_id, t, ptr = self.resolve(type_id)
        kind = self.kind(t)
        if kind == KIND_ARRAY:
            arr = _BtfArray.from_address(ptr + ctypes.sizeof(_BtfType))
            return arr.nelems * self.size(arr.type)
        if kind == KIND_PTR:
            return 8
        return t.size_or_type

    def array(self, type_id: int) -> tuple[int, int]:
        """An array's element type id and number of elements."""
        _resolved_id, _t, ptr = self.resolve(type_id)
        arr = _BtfArray.from_address(ptr + ctypes.sizeof(_BtfType))
        return arr.type, arr.nelems

    def members(self, ptr: int, t: _BtfType) -> list[tuple[str, int, int, int]]:
        """(name, type id, bit offset, bitfield size) of a struct or union."""
        vlen = t.info & 0xFFFF
        bitfields = bool(t.info >> 31)
        base = ptr + ctypes.sizeof(_BtfType)
        out = []
        for n in range(vlen):
            m = _BtfMember.from_address(base + n * ctypes.sizeof(_BtfMember))
            offset, bits = (m.offset & 0xFFFFFF, m.offset >> 24) if bitfields else (m.offset, 0)
            out.append((self.name(m.name_off), m.type, offset, bits))
        return out

    def struct_members(self, type_id: int) -> list[tuple[str, int, int, int]]:
        """members() of a struct or union by type id; empty for other kinds."""
        _resolved_id, t, ptr = self.resolve(type_id)
        return self.members(ptr, t) if self.kind(t) in (KIND_STRUCT, KIND_UNION) else []

    def enum(self, type_id: int) -> tuple[str, dict[str, int]] | None:
        """An enum's name and its enumerators, each value as 32 unsigned bits; None for other kinds."""
        _resolved_id, t, ptr = self.resolve(type_id)
        if self.kind(t) != KIND_ENUM:
            return None
        base = ptr + ctypes.sizeof(_BtfType)
        members = [_BtfEnum.from_address(base + n * ctypes.sizeof(_BtfEnum)) for n in range(t.info & 0xFFFF)]
        return self.name(t.name_off), {self.name(m.name_off): m.val for m in members}

    def datasec_vars(self, section: str) -> dict[str, tuple[int, int, int]]:
        """Variables of a data section: name -> (offset, size, type id)."""
        type_id = libbpf.lib().btf__find_by_name_kind(self.handle, section.encode(), KIND_DATASEC)
        if type_id < 0:
            return {}
        t, ptr = self._type(type_id)
        base = ptr + ctypes.sizeof(_BtfType)
        out = {}
        for n in range(t.info & 0xFFFF):
            info = _BtfVarSecinfo.from_address(base + n * ctypes.sizeof(_BtfVarSecinfo))
            var, _ptr = self._type(info.type)
            out[self.name(var.name_off)] = (info.offset, info.size, var.size_or_type)
        return out

    def int_signed(self, type_id: int) -> bool | None:
        """Signedness of an INT (None for other kinds)."""
        _resolved_id, t, ptr = self.resolve(type_id)
        if self.kind(t) != KIND_INT:
            return None
        encoding = ctypes.c_uint32.from_address(ptr + ctypes.sizeof(_BtfType)).value
        return bool((encoding >> 24) & _INT_SIGNED)
