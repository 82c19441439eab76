# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The Linux VTEP's guards: tc filters on the ingress of its bridges and their ports that keep the overlay's frames
from this host's own stack (linux.py says why), and their programs, a few instructions assembled here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.insn import (
    BPF_EXIT,
    BPF_JEQ_IMM,
    BPF_JGT_IMM,
    BPF_JNE_IMM,
    BPF_LD_ABS_H,
    BPF_LD_ABS_W,
    BPF_MOV64_IMM,
    BPF_MOV64_REG,
    bpf_insn,
)

# The guards: tc filters on the ingress of clsact (TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS)), first there (prio 1).
TC_INGRESS = 0xFFFFFFF2
TCA_BPF_FLAG_ACT_DIRECT = 1
GUARD_PRIO = 1
GUARD_HANDLE = 1
BRIDGE_GUARD = "xdpfleet_bridge"
PORT_GUARD = "xdpfleet_port"
GUARD_TEXT = {
    BRIDGE_GUARD: "drops every frame the bridge hands up to this host",
    PORT_GUARD: "drops 01:80:c2:00:00:01-0f, which the bridge hands up to this host instead of forwarding",
}
TC_ACT_UNSPEC, TC_ACT_SHOT = -1, 2


@dataclass(frozen=True)
class Guard:
    """One of this module's filters (by name) on a device's ingress, where it sits and how it runs."""

    name: str
    prio: int = GUARD_PRIO
    handle: int = GUARD_HANDLE
    direct_action: bool = True


def guard_program(guard: str) -> bytes:
    """The guard's instructions. The bridge's drops everything; a port's drops frames to 01:80:c2:00:00:01-0f and
    leaves the rest to the device's other filters and the bridge (00, the bridge group address, is forwarded with STP
    off, as on the module's bridges, and so reaches the host only through the bridge device). At tc ingress the frame
    starts at its Ethernet header."""
    if guard == BRIDGE_GUARD:
        return bpf_insn(BPF_MOV64_IMM, dst=0, imm=TC_ACT_SHOT) + bpf_insn(BPF_EXIT)
    return b"".join(
        [
            bpf_insn(BPF_MOV64_REG, dst=6, src=1),  # LD_ABS reads the packet of the context in r6
            bpf_insn(BPF_LD_ABS_W, imm=0),
            bpf_insn(BPF_JNE_IMM, dst=0, off=5, imm=0x0180C200),
            bpf_insn(BPF_LD_ABS_H, imm=4),
            bpf_insn(BPF_JEQ_IMM, dst=0, off=3, imm=0),
            bpf_insn(BPF_JGT_IMM, dst=0, off=2, imm=0x0F),
            bpf_insn(BPF_MOV64_IMM, dst=0, imm=TC_ACT_SHOT),
            bpf_insn(BPF_EXIT),
            bpf_insn(BPF_MOV64_IMM, dst=0, imm=TC_ACT_UNSPEC),
            bpf_insn(BPF_EXIT),
        ]
    )
