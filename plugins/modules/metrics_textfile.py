#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: metrics_textfile
short_description: Write the host's XDP counters and perf results for node_exporter's textfile collector
version_added: "0.1.0"
description:
  - Writes the counters of every VTEP, packet filter, XDP router and counting program recorded on the host, read from
    their pinned maps, into C(<directory>/xdpfleet.prom). The format is the Prometheus text exposition format, which
    node_exporter's textfile collector reads from C(*.prom) files.
  - "Names and labels follow Prometheus' conventions: counters end in C(_total), units are in the names, every family
    has HELP and TYPE lines. For example C(xdpfleet_vtep_vni_rx_packets_total{vtep=\"vtep\",vni=\"100\"}) and
    C(xdpfleet_vtep_port_dropped_packets_total{vtep=\"vtep\",port=\"ul-a\",reason=\"not_peer\"}). The VTEP counts per
    VNI and per port, not per (VNI, port), hence two sets of families. Filters:
    C(xdpfleet_filter_rule_packets_total{filter,rule,action}) and
    C(xdpfleet_filter_unmatched_packets_total{filter,reason}). Routers:
    C(xdpfleet_router_packets_total{router,verdict}). Counting programs:
    C(xdpfleet_xdp_counter_packets_total{program,slot}). Each with its C(_bytes_total) twin."
  - C(xdpfleet_instance_read_success{kind,name}) is 1 for every instance read, 0 for one that could not be (a VTEP of
    another collection version, an instance recorded but not running). Such an instance's counters are left out
    and a warning says why.
  - With O(perf_results), also C(<directory>/xdpfleet_perf.prom) with the results of the perf pairs the host is an end
    of (gauges by pair, end and frame size, and when they were written). The file is removed when the host is in no
    pair.
  - On hosts with systemd the same code runs every 15 s (the role's C(prometheus_textfile_interval)) through
    C(xdpfleet-metrics.timer), which the xdpfleet.fabric.prometheus_textfile role installs.
  - Each file is written to a temporary file in O(directory) and renamed over the old one. So node_exporter never
    reads half a file, as its documentation asks. The files are mode 0644, for node_exporter's own user.
  - The module (and the timer) writes as root, so O(directory) must be owned by root and writable by no one else,
    and a file of its name there must be a regular file. A link, a FIFO or a device in its place is refused, never
    read or followed, and so is a directory others can write to. Of an existing file at most 64 MiB is read for the
    diff; a longer one is replaced unread.
  - The files it writes are recorded in C(<state_dir>/metrics_textfile.json) before they are written. With
    O(state=absent) it removes them (and C(xdpfleet.prom) and C(xdpfleet_perf.prom) in O(directory), which an
    earlier version wrote without a record), then the record. C(playbooks/teardown.yml) does that once the timer
    is gone, so node_exporter does not go on serving the counters of data planes that are gone as live. That needs
    no inventory variables.
  - C(changed) says whether a file's shape changed, not its numbers. A family or series came or went, or the file was
    created or removed. Counters move between any two reads, so the file is rewritten on every run. A run that only
    refreshed the numbers reports C(changed=false), and a second run of a playbook shows no change.
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - libbpf.so.1, bpffs at /sys/fs/bpf (for the counters)
options:
  state:
    description:
      - C(present) writes the files. C(absent) removes every file the record names, and C(xdpfleet.prom) and
        C(xdpfleet_perf.prom) in O(directory), then the record; O(counters) and O(perf_results) are not used then.
    type: str
    choices: [present, absent]
    default: present
  directory:
    description:
      - Directory node_exporter's textfile collector reads (its C(--collector.textfile.directory)). It is created
        (0755) when missing.
      - Must be owned by root and not writable by its group or others (Debian's C(/var/lib/prometheus/node-exporter)
        is root's, 0755).
    type: path
    default: /var/lib/prometheus/node-exporter
  counters:
    description: Write C(xdpfleet.prom) with the counters of the host's recorded instances.
    type: bool
    default: true
  perf_results:
    description:
      - The controller's last perf results, the document of C(reports/perf.json) that M(xdpfleet.fabric.perf_report)
        writes (C(generated_at) and C(pairs); pairs this host is not an end of are skipped).
      - Omitted, C(xdpfleet_perf.prom) is left as it is.
    type: dict
  perf_host:
    description: This host's name in the pairs' C(sender.host) and C(echo.host). Required with O(perf_results).
    type: str
  state_dir:
    description: Directory of the state files that name the host's instances, and of this module's record of the
      files it wrote.
    type: path
    default: /var/lib/xdpfleet
  pin_root:
    description: bpffs directory under which each instance pins its links and maps, in a directory of its name.
    type: path
    default: /sys/fs/bpf/xdpfleet
attributes:
  check_mode:
    support: full
    description: Reads the counters and says whether a file's shape would change; writes nothing.
  diff_mode:
    support: full
    description: Per file, its series (sample lines without their values) before and after.
seealso:
  - module: xdpfleet.fabric.vtep_info
  - module: xdpfleet.fabric.perf_report
  - name: node_exporter's textfile collector
    description: How node_exporter reads *.prom files.
    link: https://github.com/prometheus/node_exporter#textfile-collector
"""

EXAMPLES = r"""
- name: Write the counters for node_exporter
  xdpfleet.fabric.metrics_textfile:

- name: Remove the files it wrote (teardown)
  xdpfleet.fabric.metrics_textfile:
    state: absent

- name: Also the last perf results of this host's pairs, from the controller
  xdpfleet.fabric.metrics_textfile:
    directory: /var/lib/node_exporter/textfile_collector
    perf_results: "{{ lookup('ansible.builtin.file', playbook_dir ~ '/reports/perf.json') | from_json }}"
    perf_host: "{{ inventory_hostname }}"
"""

RETURN = r"""
files:
  description: Per file written or removed, whether its shape changed and how many series it holds.
  returned: always
  type: dict
  sample:
    /var/lib/prometheus/node-exporter/xdpfleet.prom: {changed: false, series: 212}
    /var/lib/prometheus/node-exporter/xdpfleet_perf.prom: {changed: true, series: 13}
problems:
  description: The instances whose counters could not be read, and why (also given as warnings).
  returned: always
  type: list
  elements: str
  sample: ["vtep: VTEP vtep was deployed by another version of this collection (...)"]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics import host as metrics_host
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics import perf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics.exposition import MetricError, render


def write(p: dict, check_mode: bool) -> tuple[list, list[str]]:
    """state=present: the files, recorded before they are written."""
    directory = p["directory"]
    written, problems = [], []
    perf_families = None
    if p["perf_results"] is not None:
        perf_families = perf.families(p["perf_results"], p["perf_host"])  # refused before anything is written
    if not check_mode:
        names = [metrics_host.COUNTERS_FILE] if p["counters"] else []
        names += [perf.PERF_FILE] if perf_families is not None else []
        metrics_host.remember(p["state_dir"], [os.path.join(directory, name) for name in names])
    if p["counters"]:
        host = records.HostPaths(p["state_dir"], p["pin_root"])
        done, problems = metrics_host.export(host, directory, check_mode)
        written.append(done)
    if perf_families is not None:
        path = os.path.join(directory, perf.PERF_FILE)
        if any(family.samples for family in perf_families):
            written.append(metrics_host.write_textfile(path, render(perf_families), check_mode))
        else:
            written.append(metrics_host.remove_textfile(path, check_mode))
    return written, problems


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "directory": {"type": "path", "default": metrics_host.DEFAULT_DIRECTORY},
            "counters": {"type": "bool", "default": True},
            "perf_results": {"type": "dict"},
            "perf_host": {"type": "str"},
            "state_dir": {"type": "path", "default": xp.STATE_DIR},
            "pin_root": {"type": "path", "default": xp.PIN_ROOT},
        },
        required_by={"perf_results": "perf_host"},
        supports_check_mode=True,
    )
    p = module.params
    directory = p["directory"]
    written, problems = [], []
    try:
        if p["state"] == "absent":
            written = metrics_host.remove_all(p["state_dir"], directory, module.check_mode)
        else:
            written, problems = write(p, module.check_mode)
    except (perf.PerfResultsError, metrics_host.UnsafeTextfile) as exc:
        module.fail_json(msg=str(exc))
    except MetricError as exc:
        module.fail_json(msg=f"the metrics cannot be written (a bug): {exc}")
    except OSError as exc:
        module.fail_json(msg=f"directory: cannot write into {directory}: {exc}")
    for problem in problems:
        module.warn(f"counters not exported: {problem}")
    changed = [w for w in written if w.changed]
    result = {
        "changed": bool(changed),
        "files": {w.path: {"changed": w.changed, "series": w.series} for w in written},
        "problems": problems,
    }
    if changed:
        result["diff"] = [w.diff for w in changed]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
