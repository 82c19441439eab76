"""A kernel's BTF with chosen features taken out: what an older kernel's /sys/kernel/btf/vmlinux would lack.

A record is not deleted (every later type id would move, and the references to them with it) but renamed: its name
offset points at a new string, appended to the string section, that no feature check asks for. A FUNC record so
renamed is a kfunc or kernel function the kernel does not have; an enumerator of enum bpf_func_id, bpf_attach_type
... so renamed is a helper or type the kernel does not know (the new name lacks the enum's prefix, BPF_...).
"""

from __future__ import annotations

import struct

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features as ft

HIDDEN_PREFIX = "xq_hidden_"


def without(
    blob: bytes, functions: tuple[str, ...] = (), enumerators: dict[str, tuple[str, ...]] | None = None
) -> bytes:
    """`blob` (a kernel's BTF) without the FUNC records named in `functions` and the enumerators named per enum in
    `enumerators`. Raises ValueError for a name the blob does not have: a test must take out what is there."""
    enumerators = enumerators or {}
    magic, version, flags, hdr_len, type_off, type_len, str_off, str_len = ft.BTF_HEADER.unpack_from(blob)
    strings_end = hdr_len + str_off + str_len
    if strings_end != len(blob):
        raise ValueError("the string section is not the end of the blob: nothing can be appended to it")
    records, name = ft.btf_records(blob)
    out = bytearray(blob)
    added = bytearray()
    missing = {("function", n) for n in functions} | {(e, n) for e, names in enumerators.items() for n in names}

    def rename(name_pos: int, old: str) -> None:
        struct.pack_into("<I", out, name_pos, str_len + len(added))
        added.extend((HIDDEN_PREFIX + old).encode() + b"\0")

    for _type_id, kind, name_off, info, _size, body in records:
        if kind == ft.KIND_FUNC and name(name_off) in functions:
            rename(body - ft.BTF_TYPE.size, name(name_off))
            missing.discard(("function", name(name_off)))
        elif kind in (ft.KIND_ENUM, ft.KIND_ENUM64) and name_off and name(name_off) in enumerators:
            enum = name(name_off)
            member_size = 8 if kind == ft.KIND_ENUM else 12
            for n in range(info & 0xFFFF):
                member_pos = body + member_size * n
                member = name(struct.unpack_from("<I", blob, member_pos)[0])
                if member in enumerators[enum]:
                    rename(member_pos, member)
                    missing.discard((enum, member))
    if missing:
        raise ValueError(f"not in the BTF: {sorted(missing)}")
    ft.BTF_HEADER.pack_into(out, 0, magic, version, flags, hdr_len, type_off, type_len, str_off, str_len + len(added))
    return bytes(out + added)
