# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What is mounted where, from the process's own mount table (/proc/self/mountinfo): every module asks the same way.

Two questions: which file system is mounted at a mount point (bpf_sources mounts bpffs where it is not, xdp_probe
reports it), and which file system holds a path (pins can only be made under a path that is on a bpffs, wherever
that bpffs is mounted: /sys/fs/bpf on a host, a test's own mount elsewhere).
"""

from __future__ import annotations

import os
import re

MOUNTINFO = "/proc/self/mountinfo"
BPFFS_TYPE = "bpf"

_ESCAPE = re.compile(r"\\([0-7]{3})")


def _entries(mountinfo: str):
    """(device "major:minor", mount point, file system type) per mount, in the table's order (a later mount over the
    same point is on top)."""
    with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            fields = line.split()
            # id parent major:minor root mount-point options [optional fields...] - type source super-options
            if len(fields) < 8 or "-" not in fields[6:]:
                continue
            point = _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
            yield fields[2], point, fields[fields.index("-", 6) + 1]


def mounted_type(path: str, mountinfo: str = MOUNTINFO) -> str | None:
    """The file system type mounted at `path` (the topmost mount there), or None when nothing is mounted there."""
    target = os.path.realpath(path)
    found = None
    for _device, point, fstype in _entries(mountinfo):
        if point == target:
            found = fstype
    return found


def holding_type(path: str, mountinfo: str = MOUNTINFO) -> str | None:
    """The file system type that holds `path`, or the nearest existing directory above it (where it would be made);
    None when the mount table does not list that file system's device."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    st = os.stat(existing)
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    found = None
    for entry_device, _point, fstype in _entries(mountinfo):
        if entry_device == device:
            found = fstype
    return found
