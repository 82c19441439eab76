# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Test-only kill points: where a module's process may die between two changes it makes to a host.

step() is called just before each change that outlives the process: a map entry written or removed
(libbpf.Map.update, delete and their batch forms), a pin made or removed, a link created, updated or detached, an
XDP program attached or detached through netlink, a clsact qdisc or a cls_bpf filter added, replaced or removed
(cls_bpf.py), an interface's promiscuous flag set, a record file replaced or removed (files.replace_durably,
remove_durably). With
XDPFLEET_TEST_KILL_AT unset (every real run) step() returns at once. tests/kernel/test_vtep_crash_consistency.py sets
XDPFLEET_TEST_KILL_AT=<n> in a module's child process, which then SIGKILLs itself at the n-th step, the changes
before it made and the n-th not: every boundary of an update is a place a crash can really happen, found without
mocking the kernel. The count so far is passed, for the test to learn how many steps an update has.
"""

from __future__ import annotations

import os
import signal

KILL_AT = int(os.environ.get("XDPFLEET_TEST_KILL_AT") or 0)
passed = 0


def step() -> None:
    global passed
    if not KILL_AT:
        return
    passed += 1
    if passed == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)
