# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: vtep_document
short_description: A VTEP's document as this run's fabric check derived it
version_added: "0.1.0"
author:
  - xdpfleet developers (!UNKNOWN)
description:
  - Returns the document (the format of M(xdpfleet.fabric.vtep)'s I(config)) that M(xdpfleet.fabric.vtep_fabric)
    derived for an inventory host, read on the controller from where the check of this run keeps the fabric. The
    hosts receive only the fabric's digest (the fact C(xdpfleet_fabric)), never the whole fleet.
  - Fails when the host's C(xdpfleet_fabric) names a fabric this run did not check - a fact from an earlier run, kept
    by a fact cache, or a run that skipped the check - so that no host is configured from a stale derivation.
  - Returns an empty dict for a host that has neither C(fabric_vtep) nor a document in the checked fabric, and fails
    for a host with C(fabric_vtep) when no check ran in this run.
  - The vtep role reads a host's document with it where the inventory gives the host no C(vtep_config).
options:
  _terms:
    description: The inventory host whose document to return (one).
    required: true
    type: str
seealso:
  - module: xdpfleet.fabric.vtep_fabric
  - module: xdpfleet.fabric.vtep
"""

EXAMPLES = r"""
- name: Configure this host's VTEP from its derived document
  xdpfleet.fabric.vtep:
    config: "{{ lookup('xdpfleet.fabric.vtep_document', inventory_hostname) }}"
"""

RETURN = r"""
_raw:
  description: The host's document, or an empty dict where the fabric has none for it.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.xdpfleet.fabric.plugins.module_utils.fabric import fleet
from ansible_collections.xdpfleet.fabric.plugins.plugin_utils.fabric_run import digest_of, run_directory


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        if len(terms) != 1 or not isinstance(terms[0], str):
            raise AnsibleLookupError(f"vtep_document: give one inventory host name, got {terms!r}")
        host = terms[0]
        variables = variables or {}
        if variables.get("inventory_hostname") == host:
            own = variables
        elif host in (variables.get("hostvars") or {}):
            own = variables["hostvars"][host]
        else:
            raise AnsibleLookupError(f"vtep_document: {host!r} is not a host of the inventory")
        digest = digest_of(own)
        if digest is None:
            if own.get("fabric_vtep"):
                raise AnsibleLookupError(
                    f"{host} has fabric_vtep but no derived document: the fact xdpfleet_fabric is missing. Run "
                    "xdpfleet.fabric.vtep_fabric first (run_once, on the VTEP hosts' play), as playbooks/vtep.yml "
                    "and site.yml do (playbooks/fabric_check.yml)."
                )
            return [{}]
        try:
            document = fleet.document(run_directory(), digest, host)
        except fleet.KeptFabricError as exc:
            raise AnsibleLookupError(f"{host}: {exc}") from exc
        return [document or {}]
