# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The filter xdpfleet.fabric.lab_host_problem: why a host of the network-namespace lab cannot be reached, from the
lab's own record, on the controller (the lab runs there). Documented in lab_host_problem.yml next to this file."""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.lab_spec import LabError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.lab_state import host_pids, load_state


def lab_host_problem(lab_dir: str, host: str, mgmt_ip: str | None = None) -> str:
    """'' when `host` of the lab recorded in `lab_dir` runs (at `mgmt_ip`, when given), else what is wrong."""
    try:
        state = load_state(lab_dir)
    except LabError as exc:
        return str(exc)
    if state is None:
        return f"no lab is recorded in {lab_dir}"
    if state.get("status") != "up":
        return f"the lab in {lab_dir} is {state.get('status')!r}, not 'up' (its start was interrupted)"
    recorded = (state.get("hosts") or {}).get(host)
    if recorded is None:
        return f"host {host!r} is not a host of the lab in {lab_dir}"
    if mgmt_ip and recorded.get("mgmt_ip") != mgmt_ip:
        return f"host {host!r} of the lab in {lab_dir} listens on {recorded.get('mgmt_ip')}, not on {mgmt_ip}"
    try:
        host_pids(lab_dir, host)
    except LabError as exc:
        return str(exc)
    return ""


class FilterModule:
    def filters(self):
        return {"lab_host_problem": lab_host_problem}
