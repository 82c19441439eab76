# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Where this run keeps the fabrics it checked, on the controller (plugins/module_utils/fabric/fleet.py).

Inside ansible-playbook's local temporary directory (DEFAULT_LOCAL_TMP): made afresh for each run, shared by its
worker processes (forked from it) and removed when the run ends. So only the run that checked a fabric can read it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ansible import constants as C

FACT = "xdpfleet_fabric"


def run_directory() -> str:
    path = os.path.join(C.DEFAULT_LOCAL_TMP, "xdpfleet-fabric")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def digest_of(variables) -> str | None:
    """The digest in a host's fact xdpfleet_fabric (set by xdpfleet.fabric.vtep_fabric), or None."""
    fact = (variables.get("ansible_facts") or {}).get(FACT)
    return fact.get("digest") if isinstance(fact, Mapping) else None
