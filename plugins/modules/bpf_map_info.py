#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bpf_map_info
short_description: Read a pinned BPF map, decoded through its BTF
version_added: "0.1.0"
description:
  - Reads every entry of a map pinned in bpffs and decodes keys and values by the map's own BTF. Structs become
    dictionaries, arrays lists and integers numbers, so counters read the same whatever program wrote them.
  - Per-CPU maps are summed over CPUs unless I(per_cpu=true).
  - Read-only. It never changes the host.
extends_documentation_fragment:
  - xdpfleet.fabric.read_only
author:
  - xdpfleet developers (!UNKNOWN)
options:
  path:
    description:
      - Pin path of the map. Takes precedence over I(instance) and I(map).
    type: path
  instance:
    description:
      - Name of an M(xdpfleet.fabric.xdp_program) instance. The map is read from its pin directory.
    type: str
  map:
    description: Name of the map in the instance.
    type: str
  pin_root:
    description: bpffs directory of the instances.
    type: path
    default: /sys/fs/bpf/xdpfleet
  per_cpu:
    description: Return per-CPU values as lists instead of their sums.
    type: bool
    default: false
  skip_zero:
    description: Leave out entries whose value is all zero bytes, such as unused array slots.
    type: bool
    default: false
seealso:
  - module: xdpfleet.fabric.xdp_program
"""

EXAMPLES = r"""
- name: Read the frame counters of the counter instance
  xdpfleet.fabric.bpf_map_info:
    instance: counter
    map: xdp_counters
    skip_zero: true
  register: counters

- name: Show packets in slot 0
  ansible.builtin.debug:
    msg: "{{ counters.entries | selectattr('key', 'equalto', 0) | map(attribute='value.packets') | first }}"
"""

RETURN = r"""
map:
  description: The map's kernel definition.
  returned: success
  type: dict
  sample:
    name: xdp_counters
    type: 6
    key_size: 4
    value_size: 16
    max_entries: 8
    path: /sys/fs/bpf/xdpfleet/counter/maps/xdp_counters
entries:
  description: The entries, each with C(key) and C(value) decoded by BTF.
  returned: success
  type: list
  elements: dict
  sample: [{key: 0, value: {packets: 10, bytes: 980}}]
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import btf_layout, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path"},
            "instance": {"type": "str"},
            "map": {"type": "str"},
            "pin_root": {"type": "path", "default": "/sys/fs/bpf/xdpfleet"},
            "per_cpu": {"type": "bool", "default": False},
            "skip_zero": {"type": "bool", "default": False},
        },
        required_one_of=[("path", "instance")],
        required_together=[("instance", "map")],
        supports_check_mode=True,
    )
    p = module.params
    for key in ("instance", "map"):
        if p[key] is not None and (bad := names.instance_name_problem(p[key])):
            module.fail_json(msg=f"{key}: {bad}")
    path = p["path"] or os.path.join(p["pin_root"], p["instance"], "maps", p["map"])
    try:
        result = btf_layout.read_pinned_map(path, p["per_cpu"], p["skip_zero"])
    except libbpf.LibbpfError as exc:
        module.fail_json(msg=f"map: cannot read {path}: {exc}")
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
