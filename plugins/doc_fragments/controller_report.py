# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Attributes of the action plugins that write a report on the controller (perf_report, fabric_report)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  action:
    support: full
    description: All of it is an action plugin, run on the controller.
  bypass_host_loop:
    support: full
    description: One run per play, not one per host.
  check_mode:
    support: full
    description: Nothing is written; C(changed) and C(changed_files) say what would be.
  diff_mode:
    support: none
    description: C(changed_files) lists the files that differ; their content is not shown.
"""
