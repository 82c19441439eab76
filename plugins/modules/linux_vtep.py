#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: linux_vtep
short_description: Realise the VTEP configuration document with the Linux kernel's own VXLAN (bridge + vxlan)
version_added: "0.1.0"
description:
  - Takes the same configuration document as M(xdpfleet.fabric.vtep) and builds it from the kernel's own devices
    instead of XDP. The result is the interop peer and the performance baseline for the XDP VTEP.
  - For each VNI it makes a bridge C(xbr<vni>) and a vxlan device C(xvx<vni>). The vxlan device has the VNI as its
    id, UDP destination port 4789, local address = the tunnel port's I(local_ip), C(dev) = the tunnel port, learning
    on, and MTU = the tunnel port's MTU - 50. It is a port of the bridge, together with the VNI's access ports.
    Both names fit the 15-character limit for every 24-bit VNI.
  - BUM frames reach the peers by head-end replication, with one all-zeros FDB entry per peer on the vxlan device,
    as C(bridge fdb append 00:00:00:00:00:00 dev xvx<vni> dst <peer ip> via <tunnel port>) does.
  - MAC learning, as the XDP VTEP does it. The bridge learns on every port which port a MAC is behind (an access
    port, or the vxlan device), and the vxlan device learns which peer. A unicast frame to a known MAC goes to that
    one place; unknown unicast, broadcast and multicast are flooded. Both tables forget a MAC after C(fdb_aging)
    seconds without a frame from it (the bridge's C(ageing_time) and the vxlan device's C(ageing)).
  - Static entries (C(vnis[].fdb)) are sticky static bridge entries, which learning never moves. An entry with a
    C(port) is at that access port. An entry with a C(remote) is at the vxlan device, together with a static entry
    on the vxlan device that sends the MAC to that peer, as C(bridge fdb replace <mac> dev xvx<vni> dst <peer ip>
    via <tunnel port>) does. The kernel drops a frame from another peer that carries such a MAC as its source
    (the XDP VTEP forwards it and counts a static_conflict). Learned entries are the kernel's and are never shown
    or changed; static entries on the module's bridges and vxlan devices that the document does not list are
    removed.
  - The document is validated (the rules of the XDP VTEP, and the interfaces, MTUs and addresses found on the host)
    before anything changes. Every error names the field.
  - Idempotent. It reads the devices, their attributes, the bridge ports and the FDB entries, and changes only what
    differs. Additions come first, then removals. VNIs that are no longer in the document lose their bridge and
    vxlan device.
  - The module recognises its own devices by name and kind (a bridge C(xbr<digits>), a vxlan C(xvx<digits>)) and
    records them in C(<state_dir>/linux_vtep.json). I(state=absent) removes those devices and the record, and
    nothing else.
  - The tunnel port must already carry I(local_ip). The module checks this; it does not add underlay addresses or
    routes, and never changes the tunnel port.
  - No tunnel port or access port may be the interface the host is managed through, unless
    I(allow_management_port) says so.
  - Access ports are enslaved to the VNI's bridge and brought up. They are released from the bridge when they leave
    the document, and left up. An access port that belongs to a bridge or bond this module did not make is refused.
  - No frame from the overlay reaches the host's own IP stack. The host accepts packets for any of its addresses on
    any interface, and the kernel's vxlan socket listens on all of them, so a VXLAN packet that an endpoint sends
    inside its frames would otherwise be decapsulated into another VNI. Each bridge gets a tc ingress filter
    C(xdpfleet_bridge) that drops every frame it hands up to the host, and each of its ports (the vxlan device and
    the access ports) a filter C(xdpfleet_port) that drops frames to 01:80:c2:00:00:01-0f, the 802.1 group
    addresses a bridge hands up on the port instead of forwarding. Both are small BPF programs (clsact, first in
    line); they are shown, added and repaired like the devices, and an access port's is removed when it leaves.
extends_documentation_fragment:
  - xdpfleet.fabric.management_port
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - pyroute2 >= 0.9 and jsonschema >= 4.20 on the host
  - Linux with the vxlan and bridge drivers, clsact and cls_bpf, and libbpf (libbpf.so.1) on the host
options:
  config:
    description:
      - The VTEP configuration document, with keys C(tunnel_ports) and C(vnis). It is the same document as for
        M(xdpfleet.fabric.vtep). See plugins/module_utils/vtep/config.py for its schema.
      - C(vnis[].trunks) are refused. Trunks would need bridge VLAN filtering, which the Linux baseline does not
        configure and the lab kernel lacks.
      - C(vlan_mode) (top level or per VNI) is accepted and has no effect. Without trunks both modes carry an access
        port's frames as they are, tags included.
      - C(fdb_size) is refused when it is not the default. The bridge and the vxlan device of each VNI learn into
        tables of their own, and there is no shared limit to set.
      - All peers of one VNI must be via the same tunnel port, because a vxlan device has one local address.
      - C(vnis[].peers[].mac) is accepted but not used. The kernel chooses the next hop from its own routing and
        neighbour tables.
      - Required with I(state=present).
    type: dict
  state:
    description:
      - C(present) makes the host match I(config). C(absent) removes every bridge and vxlan device this module
        made, and its state file.
    type: str
    choices: [present, absent]
    default: present
  state_dir:
    description: Directory of the state file C(linux_vtep.json).
    type: path
    default: /var/lib/xdpfleet
attributes:
  check_mode:
    support: full
    description: Validates and computes the changes, and reports them. Nothing on the host changes.
  diff_mode:
    support: full
    description:
      - "The items before and after, one per line: an item added shows as C(+VNI 100: peer 198.51.100.34 via
        uplink0), one removed as C(-VNI 200: bridge xbr200), one changed as a pair (C(-VNI 100: vxlan xvx100 MTU
        1500), C(+VNI 100: vxlan xvx100 MTU 1550)). Static entries show as C(VNI 100: static MAC 02:00:00:00:64:01
        at acc100) or C(VNI 100: static MAC 02:00:00:00:64:02 at remote 198.51.100.34 via uplink0)."
notes:
  - Only IPv4 underlays are supported, as by the XDP VTEP.
  - The VNI and the UDP port of a live vxlan device cannot change. If either differs, the device is re-created, and
    that VNI has a short gap (its static entries are made again). Local address, tunnel port, learning, ageing and
    MTU change in place.
  - A failure part-way through leaves the additions made so far, with nothing yet removed. Running again completes
    the change.
seealso:
  - module: xdpfleet.fabric.vtep
"""

EXAMPLES = r"""
- name: The Linux kernel's VXLAN as a remote VTEP in VNI 100
  xdpfleet.fabric.linux_vtep:
    config:
      tunnel_ports:
        - {port: uplink0, local_ip: 198.51.100.130}
      fdb_aging: 300
      vnis:
        - vni: 100
          access_ports: [acc100]
          peers:
            - {ip: 198.51.100.129, via: uplink0}
            - {ip: 198.51.100.134, via: uplink0}
          fdb:
            - {mac: "02:00:00:00:64:01", port: acc100}
            - {mac: "02:00:00:00:64:02", remote: 198.51.100.134}

- name: Same document as the XDP VTEP, from inventory variables
  xdpfleet.fabric.linux_vtep:
    config: "{{ vtep_config }}"

- name: Remove every bridge and vxlan device it made
  xdpfleet.fabric.linux_vtep:
    state: absent
"""

RETURN = r"""
vnis:
  description:
    - Per VNI (keyed by the VNI), the devices, the bridge members, the peers and the static entries, as the host
      has them after this run. In check mode, what it would have.
  returned: always
  type: dict
  sample:
    "100":
      devices: {bridge: xbr100, vxlan: xvx100}
      members: [acc100, xvx100]
      peers: [{ip: 198.51.100.129, via: uplink0}]
      fdb: [{mac: "02:00:00:00:64:01", port: acc100}, {mac: "02:00:00:00:64:02", remote: 198.51.100.129}]
changes:
  description:
    - The changes made (or, in check mode, that would be made), one line each (+ added, - removed, ~ changed).
      The diff shows the same items as before and after.
  returned: always
  type: list
  elements: str
  sample: ["VNI 100: + bridge xbr100 (ageing 300 s)", "VNI 100: + peer 198.51.100.129 via uplink0"]
problems:
  description: On a refused document, every problem found, each starting with the field's path.
  returned: failure
  type: list
  elements: str
  sample: ["vnis[0].trunks: the Linux baseline needs bridge VLAN filtering ..."]
state_file:
  description: Path of the record of the devices this module made.
  returned: always
  type: str
  sample: /var/lib/xdpfleet/linux_vtep.json
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import linux as lv


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": {"type": "dict"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "state_dir": {"type": "path", "default": "/var/lib/xdpfleet"},
            "allow_management_port": {"type": "bool", "default": False},
        },
        required_if=[("state", "present", ["config"])],
        supports_check_mode=True,
    )
    if not lv.HAS_PYROUTE2:
        module.fail_json(msg=missing_required_lib("pyroute2"))
    p = module.params
    with lv.open_ipr() as ipr:
        try:
            if p["state"] == "present":
                result = lv.deploy(ipr, p["config"], p["state_dir"], module.check_mode, p["allow_management_port"])
            else:
                result = lv.remove(ipr, p["state_dir"], module.check_mode)
        except lv.MissingLibrary as exc:
            module.fail_json(msg=missing_required_lib(exc.name))
        except lv.LinuxVtepError as exc:
            module.fail_json(msg=str(exc), **exc.result())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
