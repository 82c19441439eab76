# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Names that become paths or pins on a host, and the rules that keep them inside their directory.

An instance name (xdp_program's and vtep's `name`) is a directory under the pin root and a file under the state
directory. An interface name is a link pin's file name, and the kernel's own rules for it (dev_valid_name) apply:
at most IFNAMSIZ - 1 = 15 bytes, no '/', ':' or whitespace, not '.' or '..'.
"""

from __future__ import annotations

import re

IFNAMSIZ = 16  # the kernel's buffer for an interface name, its NUL included
INSTANCE_NAME_MAX = 64
_INSTANCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
INSTANCE_NAME_RULE = (
    f"1-{INSTANCE_NAME_MAX} letters, digits, '_', '.' or '-', starting with a letter or digit (it names a "
    "directory of pins and a state file)"
)
IFNAME_RULE = f"1..{IFNAMSIZ - 1} bytes (UTF-8), no '/', ':' or whitespace, not '.' or '..'"


def instance_name_problem(name: object) -> str | None:
    """Why `name` is not an instance name, or None."""
    if not isinstance(name, str) or len(name) > INSTANCE_NAME_MAX or not _INSTANCE_NAME.fullmatch(name):
        return f"{name!r} must be {INSTANCE_NAME_RULE}"
    return None


def ifname_problem(name: object) -> str | None:
    """Why `name` is not a valid Linux interface name, or None (the kernel's dev_valid_name, whitespace in any
    script refused)."""
    if not isinstance(name, str):
        return f"{name!r} is not an interface name: {IFNAME_RULE}"
    size = len(name.encode("utf-8", "surrogateescape"))
    if size == 0 or size >= IFNAMSIZ or name in (".", "..") or any(c in "/:" or c.isspace() for c in name):
        return f"{name!r} is not an interface name ({size} bytes): {IFNAME_RULE}"
    return None
