# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The one store of records a module keeps on a host: a JSON object in a file of a state directory, written durably
and 0600 through common/files.py (its directory made 0700), so after a crash, a kill or a full disk a record is the
old one or the new one, whole.

A record that is there but cannot be read, or holds anything but a JSON object, raises RecordError naming the
module's field (the argument that chose the directory) and the file: a caller decides whether that stops the module
or counts as no record.
"""

from __future__ import annotations

import json
import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files


class RecordError(ValueError):
    """A record file that is there but unreadable or corrupt; the message names the field and the file."""


class Record:
    """The record `name` in `state_dir`; `field` is the argument the messages name (as "state_dir: <file> ...")."""

    def __init__(self, state_dir: str, name: str, field: str = "state_dir") -> None:
        self.path = os.path.join(state_dir, name)
        self.field = field

    def load(self) -> dict | None:
        """The record, None when there is none. Raises RecordError when the file cannot be read or is corrupt."""
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordError(f"{self.field}: the record {self.path} cannot be read: {exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RecordError(f"{self.field}: the record {self.path} is corrupt (not JSON: {exc})") from None
        if not isinstance(data, dict):
            raise RecordError(
                f"{self.field}: the record {self.path} is corrupt (a JSON {type(data).__name__}, not an object)"
            )
        return data

    def save(self, data: dict) -> None:
        """Replace the record with `data` durably, 0600, its directory made 0700 when missing. Raises OSError (a
        full disk: ENOSPC) with the old record untouched."""
        files.write_json(self.path, data)

    def remove(self) -> bool:
        """Remove the record so that it stays gone after a crash; False when there was none."""
        return files.remove_durably(self.path)
