# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""xdpfleet.fabric.vtep_fabric: every VTEP's document derived from the fabric model, the whole fleet checked.

Runs on the controller only and contacts no host: it reads the inventory (hostvars of every host with fabric_vtep
or vtep_config), and either fails listing every problem or keeps the checked fabric in this run's directory on the
controller and returns its digest as the fact xdpfleet_fabric, with the warnings. The work is in
plugins/module_utils/fabric/fleet.py (check, keep), which the unit tests drive.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.xdpfleet.fabric.plugins.module_utils.fabric import fleet
from ansible_collections.xdpfleet.fabric.plugins.plugin_utils.fabric_run import FACT, run_directory

# The variables of a host the fleet check reads.
HOST_VARIABLES = ("fabric_vtep", "vtep_config", "vtep_backend", "host_tuning_nics")
# The fabric's own variables, read once (from the first VTEP of the model) and required the same on every other.
FABRIC_VARIABLES = ("fabric_vnis", "fabric_mtu", "fabric_vteps")


def plain(value):
    """A templated inventory value as plain dicts, lists and scalars (what the checks and the fact hold)."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def holds_template(value) -> bool:
    """Whether an untemplated inventory value has a Jinja2 expression or statement anywhere in it."""
    if isinstance(value, Mapping):
        return any(holds_template(key) or holds_template(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(holds_template(item) for item in value)
    return isinstance(value, str) and ("{{" in value or "{%" in value)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        self.validate_argument_spec(argument_spec={})
        hostvars = task_vars["hostvars"]
        hosts = {}
        # The fabric's variables as the first VTEP of the model has them (group vars of the VTEPs), else as the
        # host this task runs for has them; every other VTEP of the model must see the same.
        fabric_host, fabric_vars, fabric_raw, fabric_static = None, None, None, set()
        differing = []
        for host in task_vars["groups"]["all"]:
            variables = hostvars[host]
            if "fabric_vtep" not in variables and "vtep_config" not in variables:
                continue
            hosts[host] = {name: plain(variables[name]) if name in variables else None for name in HOST_VARIABLES}
            if not hosts[host]["fabric_vtep"]:
                continue
            # A fabric variable that is the first VTEP's very definition (the same group vars) and holds no template
            # is not templated again: templating fabric_vteps for every VTEP made the check quadratic in the fleet.
            raw = hostvars.raw_get(host)
            seen = {
                name: fabric_vars[name]
                if name in fabric_static and name in raw and raw[name] is fabric_raw[name]
                else plain(variables[name])
                if name in variables
                else None
                for name in FABRIC_VARIABLES
            }
            if fabric_vars is None:
                fabric_host, fabric_vars, fabric_raw = host, seen, raw
                fabric_static = {name for name in FABRIC_VARIABLES if name in raw and not holds_template(raw[name])}
            differing += [
                f"{host}: {name}: differs from the {name} of {fabric_host}; a fabric has one {name} (define it once "
                "for every VTEP, e.g. in group_vars/all)"
                for name in FABRIC_VARIABLES
                if seen[name] != fabric_vars[name]
            ]
        if fabric_vars is None:
            fabric_vars = {name: plain(task_vars[name]) if name in task_vars else None for name in FABRIC_VARIABLES}
        fabric = fleet.check(hosts, fabric_vars["fabric_vnis"], fabric_vars["fabric_mtu"], fabric_vars["fabric_vteps"])
        fabric.problems[:0] = differing
        if fabric.problems:
            listed = "\n".join(f"- {problem}" for problem in fabric.problems)
            warned = "".join(f"\nwarning: {warning}" for warning in fabric.warnings)
            raise AnsibleActionFail(
                f"the VTEP fabric is refused, no host was changed ({len(fabric.problems)} problem"
                f"{'s' if len(fabric.problems) != 1 else ''}):\n{listed}{warned}",
                result={"problems": fabric.problems, "warnings": fabric.warnings},
            )
        try:
            digest = fleet.keep(run_directory(), fabric.documents, fabric.report())
        except OSError as exc:
            raise AnsibleActionFail(f"cannot keep the checked fabric on the controller: {exc}") from exc
        result.update(
            changed=False,
            msg=f"{len(fabric.documents)} VTEPs, {len(fabric.vnis)} VNIs: the fabric is consistent",
            # Only the digest reaches the hosts: each reads its own document by it (lookup vtep_document).
            ansible_facts={FACT: {"digest": digest, "vteps": len(fabric.documents), "vnis": len(fabric.vnis)}},
        )
        if fabric.warnings:
            result["warnings"] = list(fabric.warnings)
        return result
