"""Small BTF blobs built in tests: the records the feature reader reads (enums, FUNCs, kfunc tags, structs) and
filler records of the other kinds, so a test says exactly which features a pretend kernel has."""

import struct

KIND_INT, KIND_STRUCT, KIND_ENUM, KIND_FUNC, KIND_FUNC_PROTO, KIND_DECL_TAG, KIND_ENUM64 = 1, 4, 6, 12, 13, 17, 19


class BtfBlob:
    def __init__(self):
        self.types = []  # encoded records, type id = index + 1
        self.strings = bytearray(b"\0")

    def name(self, text: str) -> int:
        offset = len(self.strings)
        self.strings += text.encode() + b"\0"
        return offset

    def _add(self, name: str, kind: int, vlen: int, size_or_type: int, tail: bytes = b"") -> int:
        info = (kind << 24) | vlen
        self.types.append(struct.pack("<III", self.name(name) if name else 0, info, size_or_type) + tail)
        return len(self.types)

    def int_type(self, name: str = "int") -> int:
        return self._add(name, KIND_INT, 0, 4, struct.pack("<I", 32))

    def enum(self, name: str, enumerators: dict[str, int]) -> int:
        tail = b"".join(struct.pack("<Ii", self.name(n), v) for n, v in enumerators.items())
        return self._add(name, KIND_ENUM, len(enumerators), 4, tail)

    def enum64(self, name: str, enumerators: dict[str, int]) -> int:
        tail = b"".join(struct.pack("<III", self.name(n), v & 0xFFFFFFFF, v >> 32) for n, v in enumerators.items())
        return self._add(name, KIND_ENUM64, len(enumerators), 8, tail)

    def struct_type(self, name: str, members: list[tuple[str, int]] = ()) -> int:
        tail = b"".join(struct.pack("<III", self.name(n), t, 0) for n, t in members)
        return self._add(name, KIND_STRUCT, len(members), 0, tail)

    def func(self, name: str, kfunc_tag: bool = False) -> int:
        proto = self._add("", KIND_FUNC_PROTO, 0, 0)
        func = self._add(name, KIND_FUNC, 1, proto)  # vlen 1: global linkage
        if kfunc_tag:
            self._add("bpf_kfunc", KIND_DECL_TAG, 0, func, struct.pack("<i", -1))
        return func

    def bytes(self) -> bytes:
        types = b"".join(self.types)
        header = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types), len(self.strings))
        return header + types + bytes(self.strings)


def kernel_blob(
    helpers: dict[str, int],
    map_types: dict[str, int],
    attach_types: dict[str, int],
    link_types: dict[str, int],
    prog_types: dict[str, int],
    functions: list[str] = (),
    tagged: list[str] = (),
    structs: list[str] = (),
) -> bytes:
    """A pretend kernel's BTF: the five enums (helpers by C name), FUNC records and kfunc-tagged FUNC records."""
    blob = BtfBlob()
    blob.int_type()
    blob.enum("bpf_func_id", {"BPF_FUNC_unspec": 0, **{"BPF_FUNC_" + n[4:]: v for n, v in helpers.items()}})
    blob.enum("bpf_map_type", map_types)
    blob.enum("bpf_attach_type", {**attach_types, "__MAX_BPF_ATTACH_TYPE": len(attach_types) + 100})
    blob.enum("bpf_link_type", link_types)
    blob.enum("bpf_prog_type", prog_types)
    for name in structs:
        blob.struct_type(name, [("x", 1)])
    for name in functions:
        blob.func(name, kfunc_tag=name in tagged)
    return blob.bytes()
