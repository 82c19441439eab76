#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vtep_info
short_description: Read the counters and the FDB of a deployed XDP VTEP
version_added: "0.1.0"
description:
  - Reads the counters and the forwarding database (FDB) of a VTEP that M(xdpfleet.fabric.vtep) deployed, from its
    pinned maps alone. It needs no configuration document, compiles nothing and loads no program, so it is cheap
    enough for a health check after every rollout batch.
  - The facts are the ones M(xdpfleet.fabric.vtep) returns. There is one entry per VNI and one per port, each with
    rx/tx packets and bytes and drops by reason. Each VNI also has its forwarding counters and its FDB table.
  - "Each VNI's table maps a MAC to where frames for it go: C(type) (C(static), from the document, or C(learned)),
    C(port) (the local port, or with C(remote) the tunnel port towards that remote VTEP), the C(vid) on a trunk,
    and a learned entry's C(age) in seconds. Learned entries older than the VTEP's aging time are gone for the data
    plane and not shown."
  - Each map's layout is checked against the pinned map's BTF first. A VTEP deployed by another version of the
    collection is refused, never misread.
  - With O(next_hops), also each peer's next hop. This is the MAC the data plane sends the peer's tunnel copies to,
    against the MAC the host's neighbour table has for the next hop of its route to the peer. A next hop that now
    answers from another MAC (C(stale)) black-holes the overlay towards that peer. The vtep role's health check
    fails on it. The xdp_host role's C(xdpfleet-next-hops.service) follows such a change on its own.
  - Read-only. It never changes the host, and it sends nothing.
extends_documentation_fragment:
  - xdpfleet.fabric.read_only
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - libbpf.so.1, bpffs at /sys/fs/bpf
options:
  name:
    description: Name of the VTEP instance (the I(name) given to M(xdpfleet.fabric.vtep), and its rules).
    type: str
    default: vtep
  pin_root:
    description: bpffs directory under which each instance pins its links and maps, in a directory of its name.
    type: path
    default: /sys/fs/bpf/xdpfleet
  next_hops:
    description:
      - Also return RV(next_hops), read from the host's routes and neighbour table (needs pyroute2 on the host).
    type: bool
    default: false
seealso:
  - module: xdpfleet.fabric.vtep
"""

EXAMPLES = r"""
- name: Read the VTEP counters
  xdpfleet.fabric.vtep_info:
  register: vtep

- name: Show what VNI 100 received and sent
  ansible.builtin.debug:
    msg: "{{ ansible_facts.xdpfleet_vtep.vnis['100'] }}"
  when: vtep.present

- name: Show where VNI 100 sends frames for 02:00:00:00:64:05, when it knows
  ansible.builtin.debug:
    msg: "{{ ansible_facts.xdpfleet_vtep.vnis['100'].fdb['02:00:00:00:64:05'] | default('unknown: flooded') }}"
  when: vtep.present
"""

RETURN = r"""
present:
  description: Whether the host has a VTEP of that name. Without one, the counters are empty.
  returned: always
  type: bool
ansible_facts:
  description:
    - C(xdpfleet_vtep) holds the counters and the FDB, as M(xdpfleet.fabric.vtep) returns them.
    - Per VNI, C(fdb_events) counts C(learned), C(moved), C(aged_out), C(static_conflict), C(known_unicast) and
      C(flooded) frames, and C(fdb) is the table by MAC.
  returned: always
  type: dict
  sample:
    xdpfleet_vtep:
      vnis:
        "100":
          rx_packets: 10
          rx_bytes: 980
          tx_packets: 30
          tx_bytes: 3440
          drops: {}
          fdb_events: {learned: 2, moved: 0, aged_out: 0, static_conflict: 0, known_unicast: 6, flooded: 4}
          fdb:
            "02:00:00:00:64:01": {type: static, port: acc100}
            "02:00:00:00:64:05": {type: learned, port: trunk0, vid: 10, age: 12}
            "02:00:00:00:64:07": {type: learned, port: uplink0, remote: 198.51.100.130, age: 0}
      ports: {uplink0: {rx_packets: 0, rx_bytes: 0, tx_packets: 20, tx_bytes: 2960, drops: {vid_mismatch: 2}}}
next_hops:
  description:
    - With O(next_hops), one entry per peer of each VNI. C(mac) is the MAC its copies are sent to. C(next_hop) and
      C(next_hop_mac) are the host's next hop towards it and that next hop's MAC in the neighbour table (null when
      the table has no usable entry). C(stale) is true when the two MACs differ. C(problem) says why the next hop
      is not known (no route, a route through another port, no neighbour entry).
  returned: when O(next_hops) is true and the VTEP is present
  type: list
  elements: dict
  sample:
    - {vni: 100, remote: 198.51.100.102, port: ul-a, mac: "02:00:00:00:61:01", next_hop: 198.51.100.97,
       next_hop_mac: "02:00:00:00:61:01", stale: false}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vd
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import next_hops as nh


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": "vtep"},
            "pin_root": {"type": "path", "default": xp.PIN_ROOT},
            "next_hops": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    if bad := names.instance_name_problem(module.params["name"]):
        module.fail_json(msg=f"name: {bad}")
    paths = xp.InstancePaths(module.params["name"], module.params["pin_root"])
    try:
        counters = vd.Vtep.read_counters(paths)
    except (vd.VtepError, libbpf.LibbpfError) as exc:
        module.fail_json(msg=str(exc))
    result = {"changed": False, "present": counters is not None}
    if module.params["next_hops"] and counters is not None:
        port_names = {port.ifindex: name for name, port in vd.host_ports().items()}
        maps: dict = {}
        try:
            maps = nh.open_maps(paths) or {}
            result["next_hops"] = [hop.report() for hop in nh.check(maps, port_names)]
        except nh.NextHopError as exc:
            module.fail_json(msg=str(exc))
        finally:
            for m in maps.values():
                m.close()
    module.exit_json(**result, ansible_facts={"xdpfleet_vtep": counters or {"vnis": {}, "ports": {}}})


if __name__ == "__main__":
    main()
