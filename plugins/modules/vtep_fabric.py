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
    C(b: fabric_vtep.vnis[1].vni)); a problem of a derived peer says so. Otherwise sets the fact
    C(xdpfleet_fabric) and warns of VNIs served by one VTEP only."
  - Run it with C(run_once) on the VTEP hosts' play (the fact then reaches every host of the play) before anything
    changes a host; C(playbooks/vtep.yml) and C(site.yml) start with it. MTUs come from C(fabric_vtep.mtu), else
    C(host_tuning_nics)' C(mtu) for the port, else C(fabric_mtu) (1500 when unset).
  - C(fabric_vnis) and C(fabric_mtu) are read from the variables of the first host of the inventory with a
    C(fabric_vtep) (else of the host the task runs for), so define them once for every VTEP (group vars).
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
"""

EXAMPLES = r"""
# group_vars/all/fabric.yml
#   fabric_vnis:
#     - {vni: 100, name: servers}
#     - {vni: 200, name: vms, vlan_mode: translate}
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
        config: "{{ ansible_facts.xdpfleet_fabric.documents[inventory_hostname] }}"
      when: inventory_hostname in ansible_facts.xdpfleet_fabric.documents
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
  description: The fabric, for the VTEP hosts of the play.
  returned: success
  type: dict
  contains:
    xdpfleet_fabric:
      description: The fabric as derived.
      type: dict
      contains:
        documents:
          description: Every VTEP's document (derived, or as written in C(vtep_config)), by inventory host.
          type: dict
          sample: {b: {tunnel_ports: [{port: ul-a, local_ip: 198.51.100.98}],
                       vnis: [{vni: 100, access_ports: [acc100], peers: [{ip: 198.51.100.97, via: ul-a}]}]}}
        vteps:
          description: Per VTEP, its C(backend), C(source) (C(model) or C(vtep_config)), C(tunnel_ips) and C(vnis).
          type: dict
          sample: {b: {backend: xdp, source: model, tunnel_ips: [198.51.100.98], vnis: [100, 200]}}
        vnis:
          description:
            - Per VNI, by number, its C(vni), C(name) (null without one), C(vlan_mode) and C(members) - per VTEP
              its C(access_ports), C(trunks) (C(port), C(vid)) and C(peers) (addresses).
            - Every VNI of C(fabric_vnis) and of the hand-written documents.
          type: list
          elements: dict
          sample: [{vni: 100, name: servers, vlan_mode: translate,
                    members: {b: {access_ports: [acc100], trunks: [], peers: [198.51.100.97]}}}]
        warnings:
          description: The warnings (also shown as Ansible warnings), such as a VNI served by one VTEP only.
          type: list
          elements: str
          sample: ["b: fabric_vtep.vnis[1]: VNI 300 is served by b only: it reaches no other VTEP"]
"""
