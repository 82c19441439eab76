#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: xdp_restore
short_description: Bring back every recorded XDP program instance and VTEP after a reboot, from their state files
version_added: "0.1.0"
description:
  - A reboot takes every bpffs pin and XDP attachment with it; the state files in C(<state_dir>/programs/) stay.
    This module re-applies each of them through the same code as the module that wrote it.
  - A program instance (M(xdpfleet.fabric.xdp_program), and echo servers recorded by an earlier version of the
    collection) is loaded from its recorded object, with its recorded program, mode and constants, and attached to
    its recorded interfaces. When the compile cache no longer has that object, the recorded source is compiled
    again with the recorded include directories and defines.
  - A VTEP (M(xdpfleet.fabric.vtep)) is given its recorded document again. It goes through the same validation,
    compile, map difference and attach as the vtep module. Peer next-hop MACs that the document does not give
    are asked from the neighbour table again.
  - A router (M(xdpfleet.fabric.xdp_router)) is deployed on its recorded ports again, devmap included, through the
    same checks, compile and attach as the xdp_router module.
  - A filter (M(xdpfleet.fabric.xdp_filter)) gets its recorded rules again, and an echo server of
    M(xdpfleet.fabric.trafficgen) its recorded ports, addresses and MAC, each through the same steps as its
    module.
  - Instances are restored in the order they were deployed (their records keep it), so programs that share an
    interface's tc ingress hook run in the order the playbook gave, as before the reboot. An update keeps an
    instance's place; one deployed again after its removal, or that moved onto the tc hook, comes last. An instance
    that later gained an interface where another one already ran at tc keeps its first place, which on that
    interface may differ from the order before the reboot.
  - Idempotent. An instance that runs as recorded is left alone, and a run on a host where everything runs reports
    C(changed=false).
  - Each instance is restored on its own. If one cannot come back (its interface is gone, its source was
    removed), the others are still restored. The module then fails and names the instance and the reason.
  - Real hosts run the same restore at boot. The xdpfleet.fabric.xdp_host role installs the
    C(xdpfleet-restore.service) unit with the C(/usr/local/sbin/xdpfleet-restore) entry point.
extends_documentation_fragment:
  - xdpfleet.fabric.host_paths
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - Linux 5.15 or newer, libbpf.so.1, bpffs mounted at /sys/fs/bpf
  - pyroute2 and jsonschema on the host when a VTEP is recorded; clang when an object has to be compiled again
options:
  names:
    description: Restore only these instances (by name), in the order they were deployed. Default, every instance
      with a state file.
    type: list
    elements: str
  neighbour_timeout:
    description: Seconds to wait for a VTEP peer's next hop to answer ARP.
    type: float
    default: 3.0
  retry_seconds:
    description:
      - Try an instance again when it failed for a reason that can pass (an interface, a route or a next hop's ARP
        answer that is not there yet), with backoff (after 1 s, then twice as long each time, at most 30 s apart),
        for up to this many seconds after every instance was tried once. Other failures are reported at once.
      - The boot-time restore that the xdpfleet.fabric.xdp_host role installs retries the same way, for
        C(xdp_host_restore_retry_seconds).
      - Check mode never retries.
    type: float
    default: 0
attributes:
  check_mode:
    support: full
    description: Loads every object and computes what would be attached and written; changes nothing.
  diff_mode:
    support: full
    description: Per instance, the interfaces attached and, for a VTEP, the map entries written.
seealso:
  - module: xdpfleet.fabric.xdp_teardown
  - module: xdpfleet.fabric.xdp_program
  - module: xdpfleet.fabric.vtep
"""

EXAMPLES = r"""
- name: Bring the data plane back after a reboot
  xdpfleet.fabric.xdp_restore:

- name: Only the VTEP
  xdpfleet.fabric.xdp_restore:
    names: [vtep]
"""

RETURN = r"""
instances:
  description: Per instance, its kind (C(program), C(vtep), C(filter), C(router) or C(echo)), whether it changed,
    what changed, and an error when it could not be restored.
  returned: always
  type: dict
  sample:
    vtep: {kind: vtep, changed: true, changes: ["VNI 100: + access port acc100", "acc100: attach"]}
    counter: {kind: program, changed: false, changes: []}
    tg-echo-p3: {kind: program, changed: false, changes: [], error: "interfaces p3 no longer exist on this host"}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.neighbours import NEIGHBOUR_TIMEOUT
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import modules
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records as hr


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str"},
            "neighbour_timeout": {"type": "float", "default": NEIGHBOUR_TIMEOUT},
            "retry_seconds": {"type": "float", "default": 0},
            **modules.HOST_PATHS_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    p = module.params
    for i, name in enumerate(p["names"] or []):
        if bad := names.instance_name_problem(name):
            module.fail_json(msg=f"names[{i}]: {bad}")
    if p["retry_seconds"] < 0:
        module.fail_json(msg=f"retry_seconds: {p['retry_seconds']:g} is not 0 or more seconds")
    host = hr.HostPaths(p["state_dir"], p["pin_root"], p["cache_dir"])
    try:
        results = hr.restore(
            host,
            module.check_mode,
            build_dir=module.tmpdir if module.check_mode else None,
            neighbour_timeout=p["neighbour_timeout"],
            names=p["names"],
            retry_seconds=p["retry_seconds"],
        )
    except hr.RestoreError as exc:
        module.fail_json(msg=str(exc))
    result = {"changed": any(r.changed for r in results), "instances": {r.name: r.report() for r in results}}
    if result["changed"]:
        result["diff"] = hr.restored_diff(results)
    failed = [f"{r.name}: {r.error}" for r in results if r.error]
    if failed:
        module.fail_json(msg="not restored: " + "; ".join(failed), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
