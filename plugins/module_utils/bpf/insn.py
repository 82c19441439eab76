# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""BPF instructions assembled by hand, for the few programs too small to need clang: the XDP probe's and the Linux
VTEP's tc guards. The opcodes are those of the kernel's instruction set (Documentation/bpf/standardization/
instruction-set.rst): class | operation | source, as the comments spell out.
"""

from __future__ import annotations

import struct

BPF_MOV64_IMM = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K: dst = imm
BPF_MOV64_REG = 0xBF  # BPF_ALU64 | BPF_MOV | BPF_X: dst = src
BPF_LD_ABS_W = 0x20  # BPF_LD | BPF_ABS | BPF_W: r0 = the 4 bytes at the offset, network order
BPF_LD_ABS_H = 0x28  # ... BPF_H: 2 bytes
BPF_JEQ_IMM = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: if dst == imm, skip off instructions
BPF_JGT_IMM = 0x25  # BPF_JMP | BPF_JGT | BPF_K
BPF_JNE_IMM = 0x55  # BPF_JMP | BPF_JNE | BPF_K
BPF_EXIT = 0x95  # BPF_JMP | BPF_EXIT


def bpf_insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One struct bpf_insn (little-endian host): code, dst_reg:4 | src_reg:4, s16 off, s32 imm."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)
