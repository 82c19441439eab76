# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""xdpfleet.fabric.fabric_report: the VTEP fabric at a glance, fabric.md and the picture fabric.svg.

Runs on the controller only. The report is built and written by plugins/module_utils/reports/fabric.py (what the
unit tests drive); this action takes the options and finds its input: the fabric that this run's
xdpfleet.fabric.vtep_fabric checked (kept on the controller, found by the digest in the hosts' fact xdpfleet_fabric:
fabric/fleet.py) and, after a run, each VTEP's counters (the xdpfleet_vtep fact of xdpfleet.fabric.vtep or
vtep_info).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.xdpfleet.fabric.plugins.module_utils.fabric import fleet
from ansible_collections.xdpfleet.fabric.plugins.module_utils.reports import fabric as report
from ansible_collections.xdpfleet.fabric.plugins.plugin_utils.fabric_run import digest_of, run_directory

ARGUMENT_SPEC = {
    "dest": {"type": "path", "required": True},
    "title": {"type": "str", "default": "xdpfleet fabric"},
    "fabric": {"type": "dict"},
    "counters": {"type": "dict"},
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    # One report per play: run once, not once per host writing the same files.
    BYPASS_HOST_LOOP = True
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hostvars = task_vars.get("hostvars", {})
        fabric = args["fabric"] if args["fabric"] is not None else self._fabric_fact(task_vars, hostvars)
        counters = args["counters"]
        if counters is None:
            counters = self._counter_facts(fabric, hostvars)
        dest = os.path.join(self._loader.get_basedir(), args["dest"])
        try:
            files = report.build_report(args["title"], fabric, counters)
        except report.ReportInputError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        try:
            changed = report.write_report(dest, files, self._task.check_mode)
        except OSError as exc:
            raise AnsibleActionFail(f"dest: cannot write the report into {dest}: {exc}") from exc
        markdown = files[report.MARKDOWN_FILE].decode()
        result.update(
            changed=bool(changed),
            files=[os.path.join(dest, name) for name in files],
            changed_files=changed,
            markdown=markdown,
            picture=os.path.join(dest, report.PICTURE_FILE) if report.PICTURE_FILE in files else None,
        )
        return result

    @staticmethod
    def _fabric_fact(task_vars: dict, hostvars) -> Mapping:
        """The fabric this run checked, by the digest of this host's xdpfleet_fabric fact, else of the first inventory
        host's that has one (vtep_fabric sets it on the hosts of its play, not on localhost)."""
        digest = digest_of(task_vars)
        for host in task_vars.get("groups", {}).get("all", []):
            if digest is not None:
                break
            digest = digest_of(hostvars[host])
        if digest is None:
            raise AnsibleActionFail(
                "fabric: not given, and no host has the xdpfleet_fabric fact: run xdpfleet.fabric.vtep_fabric first "
                "(site.yml and playbooks/fabric_report.yml do)"
            )
        try:
            return fleet.report(run_directory(), digest)
        except fleet.KeptFabricError as exc:
            raise AnsibleActionFail(f"fabric: {exc}") from exc

    @staticmethod
    def _counter_facts(fabric, hostvars) -> dict:
        """Each VTEP's xdpfleet_vtep fact, where this run read one."""
        vteps = fabric.get("vteps") if isinstance(fabric, Mapping) else None
        counters = {}
        for host in vteps or {}:
            if host in hostvars:
                fact = (hostvars[host].get("ansible_facts") or {}).get("xdpfleet_vtep")
                if fact is not None:
                    counters[host] = fact
        return counters
