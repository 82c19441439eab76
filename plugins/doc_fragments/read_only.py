# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Attributes of the modules that only read a host."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Reading is the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is nothing to show.
"""
