#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nic_tuning
short_description: NIC channels, rings, features, coalescing, MTU and queue IRQ affinity, with exact restore
version_added: "0.1.0"
description:
  - For each interface, reads the current values (C(ethtool -i -l -g -k -c), the MTU, the queue IRQs'
    C(smp_affinity_list)), merges the driver profile's defaults with the user's settings, checks everything, and
    changes only what differs. Check mode reports each change in RV(changes), for example
    C(p3 channels rx 2 -> 1); C(--diff) shows each changed setting's value before and after.
  - "Driver profiles (I(profile=auto) picks one by driver): C(ice) (Intel E810) and C(mlx5_core) (ConnectX):
    one combined channel per NUMA-local core and the queue IRQs spread over those cores, LRO off on mlx5_core;
    C(virtio_net): all combined channels and C(rx-gro-hw) off, which native XDP needs; C(veth): no defaults.
    I(profile=none) applies only what is given."
  - Before its first change to a setting, the module records the setting's value in
    C(<state_dir>/nic_tuning.json). I(state=absent) puts back exactly the recorded settings, to exactly their
    recorded values, and forgets them; a second run changes nothing.
  - Nothing is changed when any check fails (unknown interface or feature, more channels or a larger ring than
    the NIC has, a feature the driver fixes, a CPU that is not online); every error names the field. When a change
    fails half-way, the settings this run already changed are put back.
  - An interface running XDP keeps it. After a channel change the module checks that the same program is still
    attached in the same mode, and puts the channels back if not. On veth with XDP on both ends the kernel refuses
    an rx count below the peer's tx count; the error says to change the peer first.
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - ethtool, iproute2
options:
  interfaces:
    description:
      - The interfaces and what to set on each. With I(state=absent), only C(name) is read; leave the list out to
        restore every interface recorded on the host.
    type: list
    elements: dict
    suboptions:
      name:
        description: Interface name.
        type: str
        required: true
      profile:
        description: Driver profile whose defaults apply (C(auto) picks by driver; C(none) applies none).
        type: str
        default: auto
      channels:
        description:
          - Channel counts by kind (C(combined), C(rx), C(tx), C(other)), each a number, C(max), or C(numa_local)
            (one per online core of the NIC's NUMA node, at most the maximum).
        type: dict
      rings:
        description: Ring sizes (C(rx), C(tx), C(rx-mini), C(rx-jumbo)), each a number or C(max).
        type: dict
      features:
        description:
          - Features by C(ethtool -k) name or ethtool's short name (C(lro), C(gro), C(rxvlan), ...), true or false.
            VLAN-aware VTEP ports need C(rx-vlan-offload) off; XDP needs LRO off.
        type: dict
      coalesce:
        description: Coalescing settings by C(ethtool -C) name (C(rx-usecs), C(adaptive-rx), ...).
        type: dict
      mtu:
        description: MTU.
        type: int
      irq_affinity:
        description:
          - The queue IRQs spread over these CPUs (queue i on cpus[i mod n]), or C(numa_local). irqbalance, when
            running, moves them again; the module warns.
        type: raw
  state:
    description: C(present) applies; C(absent) restores what this collection changed.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description: Where the record of original values is kept.
    type: path
    default: /var/lib/xdpfleet
"""

EXAMPLES = r"""
- name: E810 for a traffic generator
  xdpfleet.fabric.nic_tuning:
    interfaces:
      - name: ens1f0np0
        rings: {rx: max, tx: max}
        coalesce: {adaptive-rx: false, rx-usecs: 0}

- name: A VLAN-aware VTEP port on a ConnectX, 9000 MTU, queues on cores 2-9
  xdpfleet.fabric.nic_tuning:
    interfaces:
      - name: enp65s0f0np0
        features: {rxvlan: false}
        mtu: 9000
        channels: {combined: 8}
        irq_affinity: [2, 3, 4, 5, 6, 7, 8, 9]

- name: Put back everything xdpfleet changed on this host
  xdpfleet.fabric.nic_tuning:
    state: absent
"""

RETURN = r"""
changes:
  description: Each change made (or, in check mode, to be made), as interface, setting, before and after.
  returned: always
  type: list
  elements: str
  sample: ["p3: channels rx 2 -> 1", "p3: features rx-vlan-offload on -> off"]
interfaces:
  description: Per interface, the values after the run (in check mode, as they are now) and the profile used.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import nic as nt


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "interfaces": {
                "type": "list",
                "elements": "dict",
                "options": {
                    "name": {"type": "str", "required": True},
                    "profile": {"type": "str", "default": "auto"},
                    "channels": {"type": "dict"},
                    "rings": {"type": "dict"},
                    "features": {"type": "dict"},
                    "coalesce": {"type": "dict"},
                    "mtu": {"type": "int"},
                    "irq_affinity": {"type": "raw"},
                },
            },
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "state_dir": {"type": "path", "default": "/var/lib/xdpfleet"},
        },
        supports_check_mode=True,
    )
    p = module.params
    run = nt.present if p["state"] == "present" else nt.absent
    try:
        result = run(p["interfaces"], p["state_dir"], module.check_mode)
    except nt.TuningError as exc:
        module.fail_json(msg=str(exc), errors=exc.errors)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
