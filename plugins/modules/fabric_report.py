#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

# The documentation of the fabric_report action plugin (plugins/action/fabric_report.py), which runs on the controller
# (no module runs on a host); the report itself is built in plugins/module_utils/reports/fabric.py.

DOCUMENTATION = r"""
---
module: fabric_report
short_description: Write the VTEP fabric at a glance, a Markdown report and a picture, on the controller
version_added: "0.1.0"
description:
  - Writes, into I(dest) on the controller, C(fabric.md) and the picture C(fabric.svg) of a VXLAN fabric, from the
    fabric M(xdpfleet.fabric.vtep_fabric) derives and, after a run, each VTEP's counters.
  - "C(fabric.md): every VTEP with its backend, where its document comes from (derived from the model, or a
    hand-written C(vtep_config)), its tunnel addresses and its VNIs; per VNI, which VTEP serves it on which access
    ports and trunks, and each VTEP's peers, with what keeps them from a full mesh (a VTEP that does not list
    another, one-sided where the other lists it; a peer address no VTEP has; a peer that does not serve the VNI);
    the fabric check's warnings; per VTEP and VNI the packets and bytes received and sent and the drops by reason,
    and per VTEP and port the drops by reason."
  - A VTEP of the linux backend (the kernel's VXLAN) has no XDP counters, and the report says so in place of its rows.
  - "C(fabric.svg), drawn by graphviz's C(dot): a node per VNI and a node per VTEP (its name, backend and tunnel
    addresses, then a row per VNI it serves with the ports and, after a run, its counters), an edge from each VNI
    to each VTEP that serves it. A VTEP that dropped frames, its rows and edges with drops are red; a gap in a
    VNI's mesh is a red dashed edge from the VTEP to the one it does not list."
  - Without graphviz's C(dot) on the controller (or its Python package), or for a fabric of more than 1,000 VNI
    memberships (a VTEP serving a VNI), which no picture shows readably, C(fabric.md) is still written and says why
    there is no picture; a picture left from an earlier run is removed.
  - Runs once per play, whatever the number of hosts, and never connects to a host. Only files whose content
    differs are written.
  - "Input is validated before anything is written; a failure names the field, such as
    C(fabric.vteps.a.vnis: required)."
requirements:
  - the Python package graphviz on the controller (a dependency in pyproject.toml) and graphviz's C(dot) for the
    picture
extends_documentation_fragment:
  - xdpfleet.fabric.controller_report
author:
  - xdpfleet developers (!UNKNOWN)
options:
  dest:
    description:
      - Directory on the controller the report is written into; created when missing.
      - A relative path is relative to the playbook's directory.
    type: path
    required: true
  title:
    description: Title of the report, the top heading of C(fabric.md) and the picture's caption.
    type: str
    default: xdpfleet fabric
  fabric:
    description:
      - The fabric as M(xdpfleet.fabric.vtep_fabric) checked it. C(vteps) (by name, each with C(backend),
        C(source), C(tunnel_ips) and C(vnis)), C(vnis) (each with C(vni), optional C(name) and C(vlan_mode), and
        C(members) by VTEP with C(access_ports), C(trunks) and C(peers)) and C(warnings) are read.
      - Default, the fabric this run's check kept on the controller, found by the digest in this host's
        C(xdpfleet_fabric) fact, else in the first inventory host's that has one; a digest this run did not check
        (a cached fact of an earlier run) is refused.
    type: dict
  counters:
    description:
      - Each VTEP's counters by VTEP name, as the C(xdpfleet_vtep) fact of M(xdpfleet.fabric.vtep_info) (or
        M(xdpfleet.fabric.vtep)) has them; a VTEP left out has none in the report.
      - Default, the C(xdpfleet_vtep) fact of every VTEP of I(fabric) that has one in this run.
    type: dict
seealso:
  - module: xdpfleet.fabric.vtep_fabric
  - module: xdpfleet.fabric.vtep_info
"""

EXAMPLES = r"""
# On a play of VTEP hosts, after xdpfleet.fabric.vtep_fabric (run_once) and xdpfleet.fabric.vtep_info.
- name: Write the fabric report next to the playbook
  xdpfleet.fabric.fabric_report:
    dest: reports
  register: fabric_report

- name: Show it
  ansible.builtin.debug:
    msg: "{{ fabric_report.markdown }}"
"""

RETURN = r"""
files:
  description: Absolute paths of every file of the report, whether this run rewrote it or not.
  returned: success
  type: list
  elements: str
  sample: [/srv/xdpfleet/reports/fabric.svg, /srv/xdpfleet/reports/fabric.md]
changed_files:
  description:
    - The paths among C(files) whose content changed (in check mode, would change), and a picture left from an
      earlier run that was removed because none could be drawn.
  returned: success
  type: list
  elements: str
  sample: [/srv/xdpfleet/reports/fabric.md]
picture:
  description: Absolute path of the picture, or null when it could not be drawn (C(markdown) says why).
  returned: success
  type: str
  sample: /srv/xdpfleet/reports/fabric.svg
markdown:
  description: The content of C(fabric.md).
  returned: success
  type: str
  sample: |
    # xdpfleet fabric

    5 VTEPs, 2 VNIs.
    ...
"""
