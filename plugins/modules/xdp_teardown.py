#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: xdp_teardown
short_description: Stop every recorded traffic sender and remove every XDP program instance recorded on a host
version_added: "0.1.0"
description:
  - Finds what this collection keeps running on the host from the records it left there, and removes it. No list
    of instances is needed. It covers the counter, the VTEP, the echo servers and any M(xdpfleet.fabric.xdp_program)
    instance.
  - Senders first. Every C(<run_dir>/trafficgen-<interface>.pid) whose process still runs gets SIGTERM. The sender
    then detaches its return counter and exits; after I(stop_timeout) seconds it gets SIGKILL. Its pid and
    statistics files are removed, also when the process was already gone.
  - Then every instance that has a state file C(<state_dir>/programs/<name>.json) or a pin directory
    C(<pin_root>/<name>). Each is removed as I(state=absent) of its own module would remove it. Every interface is
    detached and every link and map pin removed. Then the pin directories go, and the state file. When no instance
    is left, C(<pin_root>) itself goes too.
  - It works on a host where parts are already gone. A pin without a link, a link whose interface vanished, a
    state file without pins and pins without a state file are all removed without error. A second run reports
    C(changed=false).
  - It does not put back NIC settings, the kernel command line or the Linux VTEP baseline, nor remove the metrics
    files. Their modules do that (M(xdpfleet.fabric.nic_tuning), M(xdpfleet.fabric.kernel_cmdline),
    M(xdpfleet.fabric.linux_vtep), M(xdpfleet.fabric.metrics_textfile) with I(state=absent));
    RV(other_records) says which of their records exist. C(playbooks/teardown.yml) runs them all.
  - It keeps the copied C sources (C(<state_dir>/src)) and the compile cache (I(cache_dir)).
extends_documentation_fragment:
  - xdpfleet.fabric.host_paths
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - libbpf.so.1
options:
  run_dir:
    description: Where running senders record their pid (the I(run_dir) of M(xdpfleet.fabric.trafficgen)).
    type: path
    default: /run/xdpfleet
  stop_timeout:
    description: Seconds a sender may take to stop after SIGTERM before it gets SIGKILL.
    type: float
    default: 30
attributes:
  check_mode:
    support: full
    description: Lists what would be stopped and removed; nothing changes.
  diff_mode:
    support: full
    description: Every sender, interface, map and state file that goes, one line each.
seealso:
  - module: xdpfleet.fabric.xdp_restore
  - module: xdpfleet.fabric.xdp_program
"""

EXAMPLES = r"""
- name: Stop the senders and remove every XDP program instance
  xdpfleet.fabric.xdp_teardown:
  register: teardown

- name: What would go (with --diff, one line each)
  xdpfleet.fabric.xdp_teardown:
  check_mode: true
"""

RETURN = r"""
senders:
  description: The senders stopped (or stale records removed), one line each.
  returned: always
  type: list
  elements: str
  sample: ["stop sender on p3 (pid 4211)"]
instances:
  description: Per instance, what was removed (in check mode, what would be), one line each.
  returned: always
  type: dict
  sample: {counter: ["p1: detach xdp_count tag 0d112e397a65ba3d native", "remove map xdp_counters",
                     "remove state file /var/lib/xdpfleet/programs/counter.json"]}
other_records:
  description: Records in I(state_dir) of the modules that put back their own changes (C(linux_vtep.json),
    C(nic_tuning.json), C(kernel_cmdline.json), C(metrics_textfile.json)); this module leaves them alone.
  returned: always
  type: list
  elements: str
  sample: [nic_tuning.json]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import modules
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records as hr


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "run_dir": {"type": "path", "default": hr.RUN_DIR},
            "stop_timeout": {"type": "float", "default": hr.SENDER_STOP_SECONDS},
            **modules.HOST_PATHS_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["stop_timeout"] <= 0:
        module.fail_json(msg=f"stop_timeout: {p['stop_timeout']} must be more than 0 seconds")
    host = hr.HostPaths(p["state_dir"], p["pin_root"], p["cache_dir"], p["run_dir"])
    try:
        done = hr.teardown(host, module.check_mode, p["stop_timeout"])
    except (xp.XdpProgramError, OSError) as exc:
        module.fail_json(msg=str(exc))
    result = {
        "changed": done.changed,
        "senders": done.senders.steps,
        "instances": {name: removed.steps for name, removed in done.instances.items()},
        "other_records": hr.other_records(host),
    }
    if done.changed:
        result["diff"] = done.diff()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
