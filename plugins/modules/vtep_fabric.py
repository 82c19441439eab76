#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

# The documentation of the vtep_fabric action plugin (plugins/action/vtep_fabric.py), which does the work on the
# controller: no module runs on a host.

DOCUMENTATION = r"""
---
module: vtep_fabric
short_description: Derive every VTEP's document from the fabric model and check the whole fleet, on the controller
version_added: "0.1.0"
description:
  - Reads the inventory (never a host) - C(fabric_vnis) and C(fabric_mtu) once per fabric, and per VTEP host
    C(fabric_vtep) (its tunnel ports with their prefix lengths, routes, port MTUs, and which VNIs it serves on which
    ports), C(vtep_backend) and C(host_tuning_nics) - and derives each VTEP's document (the format of
    M(xdpfleet.fabric.vtep)'s I(config)). The peers of a VNI are every other VTEP that serves it, sorted by address.
  - For each pair of VTEPs, the port is the one on a connected subnet the two share, else the one the host's
    C(routes) pick (the longest prefix), else the host's only tunnel port; the peer's address is the one it sends
    from towards the host.
  - A host with a hand-written C(vtep_config) keeps it (it wins over C(fabric_vtep), with a warning when it has
    both); it takes part in the checks, and the model's VTEPs derive their peers to it from its document.
  - Checks every host's part (the model's schema, and every document, derived or hand-written, against the VTEP's
    own document rules) and then the fleet - a tunnel address on two VTEPs; a VNI of a C(fabric_vtep) not in
    C(fabric_vnis); hand-written peers that are not symmetric or are no VTEP of the VNI; VTEPs of a VNI that handle
    VLAN tags differently (one C(vlan_mode) translate, another preserve; in preserve, access ports on one and trunks
    on another, or different VIDs); a tunnel port whose MTU is below the largest access or trunk MTU of a VNI it
    carries anywhere in the fleet + 50 (+ 4 where the VNI keeps tags); more VNIs, members or ports than the data
    plane's limits; a pair of VTEPs with no port between them.
  - "Fails listing every problem, each C(<host>: <field>: <rule>) with the field the user wrote (such as
    C(b: fabric_vtep.vnis[1].vni)); a problem of a derived peer says so. Otherwise keeps the checked fabric on the
    controller, in this run's temporary directory (removed when the run ends), sets the fact C(xdpfleet_fabric) to
    its digest and warns of VNIs served by one VTEP only."
  - The hosts receive the digest, not the fleet - nothing of the fleet's size is copied into each host's
    variables. Each host reads its own document with the lookup P(xdpfleet.fabric.vtep_document#lookup) (the vtep
    role does), which refuses a digest this run did not check, such as a fact a fact cache kept from an earlier run.
  - Run it with C(run_once) on the VTEP hosts' play (the fact then reaches every host of the play) before anything
    changes a host; C(playbooks/vtep.yml) and C(site.yml) start with it. MTUs come from C(fabric_vtep.mtu), else
    C(host_tuning_nics)' C(mtu) for the port, else C(fabric_mtu) (1500 when unset).
  - C(fabric_vnis), C(fabric_mtu) and C(fabric_vteps) are read from the variables of the first host of the
    inventory with a C(fabric_vtep) (else of the host the task runs for), so define them once for every VTEP (group
    vars); a VTEP of the model that sees other values (group vars of another group, host vars) is refused, naming
    it.
  - C(fabric_vteps) lists every VTEP of the fabric (inventory host names; a host with C(fabric_vtep) or
    C(vtep_config)) and is required. A run that does not see every VTEP it lists - a sliced job on AWX or
    Ansible Automation Platform, whose inventory is one slice, or a partial inventory - cannot derive the peers of
    the VTEPs it does not see and is refused before any host is touched, rather than configuring a partial mesh.
    A VTEP it does not list is refused too. C(--limit) is not such a run, as it leaves every host's variables in
    view.
author:
  - xdpfleet developers (!UNKNOWN)
options: {}
attributes:
  action:
    support: full
    description: All of it is an action plugin, run on the controller.
  check_mode:
    support: full
    description: Changes nothing in either mode; derives and checks the same in check mode.
  diff_mode:
    support: none
    description: The derived documents' differences are shown per host by M(xdpfleet.fabric.vtep) with C(--diff).
seealso:
  - module: xdpfleet.fabric.vtep
  - module: xdpfleet.fabric.linux_vtep
  - plugin: xdpfleet.fabric.vtep_document
    plugin_type: lookup
"""

EXAMPLES = r"""
# group_vars/all/fabric.yml
#   fabric_vnis:
#     - {vni: 100, name: servers}
#     - {vni: 200, name: vms, vlan_mode: translate}
#   fabric_vteps: [a, b]
# host_vars/b.yml
#   fabric_vtep:
#     tunnel_ports:
#       - {port: ul-a, local_ip: 198.51.100.98/30}
#     mtu: {ul-a: 1600}
#     vnis:
#       - {vni: 100, access_ports: [acc100]}
#       - {vni: 200, trunks: [{port: trunk0, vid: 20}]}
- name: Check the fabric
  hosts: vteps
  gather_facts: false
  any_errors_fatal: true
  tasks:
    - name: Derive every VTEP's document and check the fleet
      xdpfleet.fabric.vtep_fabric:
      run_once: true

- name: Configure the VTEPs
  hosts: vteps
  gather_facts: false
  tasks:
    - name: Configure this host's VTEP from its derived document
      xdpfleet.fabric.vtep:
        config: "{{ lookup('xdpfleet.fabric.vtep_document', inventory_hostname) }}"
      when: fabric_vtep is defined
"""

RETURN = r"""
msg:
  description: How many VTEPs and VNIs the fabric has, when it is consistent; every problem, when it is not.
  returned: always
  type: str
  sample: "5 VTEPs, 2 VNIs: the fabric is consistent"
problems:
  description: "Every problem, C(<host>: <field>: <rule>)."
  returned: failure
  type: list
  elements: str
  sample: ["b: fabric_vtep.vnis[1].vni: VNI 300 is not in fabric_vnis; every VNI of the fabric is listed there once"]
ansible_facts:
  description: The checked fabric's digest, for the VTEP hosts of the play.
  returned: success
  type: dict
  contains:
    xdpfleet_fabric:
      description:
        - Where this run keeps the checked fabric. The documents and the report's view of the fabric stay on the
          controller; P(xdpfleet.fabric.vtep_document#lookup) and M(xdpfleet.fabric.fabric_report) read them by
          C(digest).
      type: dict
      contains:
        digest:
          description: SHA-256 of every derived document and the fabric's report view.
          type: str
          sample: 5d1f0c3a9be2...
        vteps:
          description: How many VTEPs have a document.
          type: int
          sample: 5
        vnis:
          description: How many VNIs the fabric has.
          type: int
          sample: 2
warnings:
  description: The warnings, such as a VNI served by one VTEP only.
  returned: when there are any
  type: list
  elements: str
  sample: ["b: fabric_vtep.vnis[1]: VNI 300 is served by b only: it reaches no other VTEP"]
"""
