# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""How the modules that attach at tc ingress do it, and what they leave to others."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
notes:
  - "A program at tc ingress is attached through a tcx link (pinned under C(/sys/fs/bpf/xdpfleet/<name>/tc-links))
    where the kernel has tcx (Linux 6.6, told by its BTF naming C(BPF_TCX_INGRESS)). On older kernels it is a cls_bpf
    filter in direct-action mode on the interface's clsact qdisc (created when missing), named C(xdpfleet:<name>), at
    a priority after every filter there. A filter has no pin: the state file records its priority and handle, and a
    restore puts it back there, so the filters of a hook keep their order among themselves and among filters of
    others. An upgrade replaces the program in its filter, atomically. Removal takes only that filter, and the clsact
    qdisc when the module created it and nothing else is left on it. A filter of another at the recorded place is
    refused, never replaced. The environment variable C(XDPFLEET_TC_ATTACH) (C(tcx) or C(cls_bpf)) forces one way,
    for tests."
"""
