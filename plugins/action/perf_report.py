# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""xdpfleet.fabric.perf_report: the traffic generator's sweeps as perf.json, perf.md and one plot per pair.

Runs on the controller only. The report is built by plugins/module_utils/reports/perf.py (what the unit tests
drive); this action takes the options and the time, and writes the files whose content differs.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.xdpfleet.fabric.plugins.module_utils.reports import perf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.reports.files import write_changed

ARGUMENT_SPEC = {
    "dest": {"type": "path", "required": True},
    "title": {"type": "str", "default": "xdpfleet perf"},
    "pairs": {"type": "list", "elements": "dict", "required": True},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # One report per play: run once, not once per host writing the same files.
    BYPASS_HOST_LOOP = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        dest = os.path.join(self._loader.get_basedir(), args["dest"])
        generated_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        try:
            files = perf.build_report(args["title"], args["pairs"], generated_at)
        except perf.ReportInputError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        try:
            changed = write_changed(dest, files, self._task.check_mode)
        except OSError as exc:
            raise AnsibleActionFail(f"dest: cannot write the report into {dest}: {exc}") from exc
        result.update(
            changed=bool(changed),
            files=[os.path.join(dest, name) for name in files],
            changed_files=changed,
            markdown=files[perf.MARKDOWN_FILE].decode(),
        )
        return result
