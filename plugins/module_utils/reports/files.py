# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""A report's files written into their directory on the controller: only those whose content differs, each whole."""

from __future__ import annotations

import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.files import replace_durably

# A report is for reading, by its author and by whoever they hand it on to (a web server, a CI artifact).
REPORT_FILE_MODE = 0o644


def write_changed(dest: str, files: dict[str, bytes], check_mode: bool) -> list[str]:
    """Write the files whose content differs from what is in `dest` (none in check mode); returns their paths.
    Each through a temporary file (common/files.py): a reader never sees half a report."""
    changed = []
    for name, content in files.items():
        path = os.path.join(dest, name)
        try:
            with open(path, "rb") as current:
                if current.read() == content:
                    continue
        except FileNotFoundError:
            pass
        changed.append(path)
        if check_mode:
            continue
        os.makedirs(dest, exist_ok=True)
        replace_durably(path, content, mode=REPORT_FILE_MODE)
    return changed
