# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The filters xdpfleet.fabric.vtep_health_plan and vtep_health_verdict: the vtep role's health check
(roles/vtep/tasks/health.yml) planned and judged by plugins/module_utils/reports/health.py, on the controller.
Documented in vtep_health_plan.yml and vtep_health_verdict.yml next to this file."""

from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.xdpfleet.fabric.plugins.module_utils.reports import health


def vtep_health_plan(document, host: str, backend: str, probes=None, counters=None) -> dict:
    return health.plan(host, document or {}, backend, list(probes or []), list(counters or []))


def _ran(registered) -> bool:
    return isinstance(registered, Mapping) and not registered.get("skipped", False)


def vtep_health_verdict(check, pings, before, after, flags) -> dict:
    """Takes the check's registered results apart (a task that was skipped read nothing) and judges them."""
    return_codes = [result.get("rc") for result in (pings or {}).get("results", [])]
    return health.verdict(
        check,
        return_codes,
        before=((before.get("ansible_facts") or {}).get("xdpfleet_vtep") or {}) if _ran(before) else None,
        after=((after.get("ansible_facts") or {}).get("xdpfleet_vtep") or {}) if _ran(after) else None,
        next_hops=after.get("next_hops") or [] if _ran(after) else None,
        flags=list(flags.get("stdout_lines") or []) if _ran(flags) else None,
    )


class FilterModule:
    def filters(self):
        return {"vtep_health_plan": vtep_health_plan, "vtep_health_verdict": vtep_health_verdict}
