#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

# The documentation of the perf_report action plugin (plugins/action/perf_report.py), which runs on the controller
# (no module runs on a host); the report itself is built in plugins/module_utils/reports/perf.py.

DOCUMENTATION = r"""
---
module: perf_report
short_description: Write the zero-loss throughput report of traffic tests, on the controller
version_added: "0.1.0"
description:
  - Takes the results of M(xdpfleet.fabric.trafficgen) for sender/echo pairs and writes, into I(dest) on the
    controller, C(perf.json) (the input, with the title and C(generated_at)), C(perf.md) (per pair the
    environment of both ends and a table by frame size) and C(perf-<pair name>.png) per pair (Mpps by frame size
    of the zero-loss throughput, of what came back unpaced, and the line rate of the link speed).
  - A virtual link (a veth, virtio_net, tun or another driver without a wire of its own) has no line rate, whatever
    speed it reports, so its table and plot show none and say so.
  - In C(perf.md), zero-loss Gbit/s is layer 1 (each frame counted with 20 bytes of preamble, start delimiter and
    inter-frame gap) and loss at max is the unpaced trial's.
  - Runs once per play, whatever the number of hosts, and never connects to a host.
  - Only files whose content differs are written. C(perf.json) carries the time of the run, so it is rewritten
    (and the task reports changed) on every run; C(perf.md) and the plots change only when the results do.
  - "Input is validated before anything is written; a failure names the field, such as
    C(pairs[0].sender.results[2].frame_size: required)."
requirements:
  - matplotlib >= 3.8 on the controller (a dependency in pyproject.toml)
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
    description: Title of the report, the top heading of C(perf.md).
    type: str
    default: xdpfleet perf
  pairs:
    description:
      - The pairs to report, each a dict with C(name), C(sender) and C(echo).
      - C(name) names the pair and its plot file, so it takes letters, digits, C(.), C(_) and C(-) only;
        names are unique.
      - C(sender) is the registered result of M(xdpfleet.fabric.trafficgen) sending on the pair's sender host,
        with C(host), C(interface), C(environment), C(template), C(threads) and C(results), one per frame size.
      - C(echo) is its result on the echo host (C(host), C(interface), C(environment), C(counters)), or an empty
        dict (or left out) when the echo end reported nothing.
    type: list
    elements: dict
    required: true
seealso:
  - module: xdpfleet.fabric.trafficgen
"""

EXAMPLES = r"""
# e810_send is the registered result of xdpfleet.fabric.trafficgen sending on gen1, e810_echo its result echoing
# on gen2.
- name: Write the report next to the playbook
  xdpfleet.fabric.perf_report:
    dest: reports/perf
    title: E810 back to back, iommu=pt
    pairs:
      - name: e810-b2b
        sender: "{{ e810_send }}"
        echo: "{{ hostvars['gen2'].e810_echo | default({}) }}"
  register: report

- name: Show the table
  ansible.builtin.debug:
    msg: "{{ report.markdown }}"
"""

RETURN = r"""
files:
  description: Absolute paths of every file of the report, whether this run rewrote it or not.
  returned: success
  type: list
  elements: str
  sample: [/srv/xdpfleet/reports/perf/perf.json, /srv/xdpfleet/reports/perf/perf.md,
           /srv/xdpfleet/reports/perf/perf-e810-b2b.png]
changed_files:
  description: The paths among C(files) whose content changed (in check mode, would change).
  returned: success
  type: list
  elements: str
  sample: [/srv/xdpfleet/reports/perf/perf.json]
markdown:
  description: The content of C(perf.md).
  returned: success
  type: str
  sample: |
    # xdpfleet perf

    ## e810-b2b: sender gen1:ens1f0np0 -> echo gen2:ens1f0np0
    ...
"""
