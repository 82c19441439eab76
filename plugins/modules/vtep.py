#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vtep
short_description: A VXLAN VTEP in XDP, configured from one document per host
version_added: "0.1.0"
description:
  - Deploys the XDP VTEP of C(bpf/vtep) on a host and programs its configuration into BPF maps. Access ports
    carry one VNI each. VLAN trunks map (port, VID) to a VNI. Tunnel ports carry VXLAN to the remote VTEPs of
    each VNI.
  - The VTEP learns MAC addresses per VNI (RFC 7348, section 4.1). A frame from a local port teaches that its source
    MAC is behind that port (on a trunk, with the frame's VID). A decapsulated frame teaches that its inner source MAC
    is behind the remote VTEP it came from.
  - "Known unicast: a frame to a known MAC goes to exactly one place, out of that local port or encapsulated to that
    one remote VTEP, with one redirect. Broadcast, multicast and unknown unicast frames are flooded to every member
    of the VNI with devmap broadcast, and a devmap egress program finishes each copy; many peers may sit behind one
    tunnel port. Each peer gets its own unicast copy (head-end replication), where RFC 7348 (section 4.2) sends one
    copy to a multicast group; the underlay needs no multicast."
  - A learned MAC ages out after C(fdb_aging) seconds without a frame from it (300 by default). The learned table
    holds C(fdb_size) MACs of all VNIs together (65536 by default); the least recently seen make room. A MAC seen at
    another place is learned there and counted as C(moved).
  - Static entries (C(fdb) of a VNI) put a MAC behind a local port or a remote VTEP of the VNI. They never age, and
    learning never overrides them; a frame from that MAC elsewhere is counted as C(static_conflict) and not learned.
  - VXLAN is accepted on a tunnel port only for the VNIs that port serves, and only from configured peers of that
    VNI. Decapsulated frames go only to local members (split horizon).
  - "C(vlan_mode=translate) (the default, as RFC 7348 section 6.1 advises): a trunk's tag selects the VNI and is
    removed, the tunnelled frame carries no tag, and a frame leaving through a trunk gets that trunk's VID for its
    VNI. So a VNI may mix access ports and trunks, and trunks may carry one VNI on different VIDs. An access port
    carries frames as they are, tags included: a tagged frame from an access port leaves a trunk with the trunk's
    VID outside its own tags."
  - "C(vlan_mode=preserve), for the VTEP or per VNI, keeps the tag inside the tunnelled frame. A copy leaves through
    a trunk only when it carries that trunk's VID for the VNI (else it is counted as C(vid_mismatch)), and through
    an access port as it came. So all trunks of such a VNI use the same VID, the VNI has either access ports or
    trunks on a host, not both, and its tunnel ports' MTU must hold the 4-byte tag as well."
  - "A VNI may mix ports of different MTUs. A flooded copy longer than its port takes (the port's MTU + 18, the
    Ethernet header and a tag; for a tunnel copy, its MTU + 14 with the outer headers) is not sent and is counted as
    C(mtu) on that port and on the VNI, once per copy. With I(mode=generic) the kernel ends a devmap broadcast at
    the first copy a port refuses, so there a flooded frame that some member cannot take is not flooded at all,
    each of its copies counted as C(mtu)."
  - "Every access port and trunk is put in promiscuous mode while the VTEP serves it: a NIC (virtio_net, ice, mlx5)
    drops unicast frames to MACs the host has not asked for before XDP sees them, and these ports receive frames for
    the endpoints behind other VTEPs (the Linux bridge of C(xdpfleet.fabric.linux_vtep) makes its ports promiscuous
    for the same reason). Tunnel ports receive VXLAN for the host's own MAC and are left as they are."
  - The promiscuous flag is set as C(ip link set DEV promisc on) sets it (it adds one to the kernel's count, however
    often it is set, and leaves the counts of a bridge or a capture alone). The state file records whether each port
    had the flag before the VTEP took it. A port that leaves the document, and every port when the VTEP is removed
    (I(state=absent), C(xdpfleet.fabric.xdp_teardown)), gets that flag back, so a port that was promiscuous stays so.
    C(xdpfleet.fabric.xdp_restore) sets the flag again after a reboot.
  - The document is validated before anything changes, by a JSON Schema and by the rules a schema cannot
    express. Every error names the field and the rule. Each tunnel port must already have its C(local_ip) (the
    module adds no addresses). No port may be the interface the host is managed through, unless
    I(allow_management_port) says so. The configuration must fit the data plane's maps (their sizes in the
    loaded object), also while an update adds new entries before it removes old ones.
  - A write the kernel refuses half-way is undone, every map entry, member group and promiscuous flag as it was. The
    module says C(previous state restored) only then; when the undo fails too it says so and names what it could not
    restore.
  - "Apply compiles the document into map contents and reads the pinned maps. It writes only the difference,
    adding members before removing others, so a VID-to-VNI change needs no reload. It reports C(changed=false)
    when nothing differs, and the diff in words (C(+VNI 100: access port acc100))."
extends_documentation_fragment:
  - xdpfleet.fabric.host_paths
  - xdpfleet.fabric.tc_attachment
  - xdpfleet.fabric.management_port
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - Linux 5.15 or newer (devmap broadcast and egress programs); 6.4 or newer for I(backend=tc) (its tc program's
    open-coded iterators; its tc attachment is a tcx link from 6.6, a cls_bpf filter before),
    libbpf.so.1, bpffs at /sys/fs/bpf
  - pyroute2 and jsonschema on the host; clang when compiling I(source)
options:
  name:
    description:
      - Name of the VTEP instance. Its pins live under C(/sys/fs/bpf/xdpfleet/<name>), its state file is
        C(<state_dir>/programs/<name>.json).
      - 1-64 letters, digits, C(_), C(.) or C(-), starting with a letter or digit.
    type: str
    default: vtep
  state:
    description: C(present) deploys and configures. C(absent) detaches the VTEP and removes its maps and state.
    type: str
    choices: [present, absent]
    default: present
  config:
    description:
      - The VTEP document. It has C(tunnel_ports), a list of C(port) and C(local_ip). It has C(vnis), a list of
        C(vni), C(access_ports), C(trunks) (each a C(port) and a C(vid)) and C(peers) (each an C(ip), a C(via)
        tunnel port, and optionally the next-hop C(mac); without it the host's neighbour table is asked).
      - A VNI may also have C(fdb), its static entries, each a C(mac) and either a C(port) (an access port or trunk
        of the VNI) or a C(remote) (the C(ip) of one of its peers), and C(vlan_mode), which overrides the VTEP's.
      - "Optional VTEP-wide keys: C(vlan_mode) (C(translate), the default, or C(preserve)), C(fdb_aging) (seconds a
        learned MAC lives without a frame from it, 1 to 1000000, default 300) and C(fdb_size) (learned MACs of all
        VNIs together, 16 to 1048576, default 65536)."
      - Required with I(state=present).
    type: dict
  mode:
    description:
      - XDP mode of the ingress program on every VTEP port.
      - C(generic) with I(backend=xdp) is refused on Linux before 6.12, where generic XDP was seen to send only one
        copy of a flooded frame (docs/support.md in the collection).
    type: str
    choices: [native, generic]
    default: native
  backend:
    description:
      - How flooded frames are replicated. C(xdp) with devmap broadcast and a devmap egress program per copy, all in
        XDP.
      - C(tc) replicates at tc ingress (XDP + TC). The same XDP program classifies, admits, decapsulates and learns,
        then passes each frame with a command in its metadata to a second program at tc ingress of the port (an
        object of its own, I(tc_source); the notes say how it is attached). That program sends known unicast on, and
        floods with C(bpf_clone_redirect) - the local copies first, then the Outer added once and rewritten for each
        peer.
      - In the C(tc) backend a flooded copy the kernel refuses (its port gone or down) is counted C(tx_failed), not
        sent. Known unicast is counted sent when the program hands it to the kernel (C(bpf_redirect)); if the
        kernel then drops it (its port down), the port's own C(tx_dropped) or its qdisc's drops count it.
      - Both use the same maps and counters, so C(vtep_info) and the facts read the same. The state file records the
        tc program, and C(xdpfleet.fabric.xdp_restore) brings the VTEP back with its backend.
    type: str
    choices: [xdp, tc]
    default: xdp
  source:
    description: C source of the data plane's XDP programs on the host (both backends' ingress, and egress).
    type: path
    default: /var/lib/xdpfleet/src/vtep/vtep_xdp.c
  tc_source:
    description:
      - C source of the TC backend's tc program on the host, compiled into an object of its own for I(backend=tc) only,
        so that the XDP backend needs nothing that program needs. The two objects share the maps.
    type: path
    default: /var/lib/xdpfleet/src/vtep/vtep_tc.c
  include_dirs:
    description: Include directories for compiling I(source) and I(tc_source).
    type: list
    elements: path
    default: [/var/lib/xdpfleet/src/include]
  neighbour_timeout:
    description: Seconds to wait for a peer's next hop to answer ARP.
    type: float
    default: 3.0
attributes:
  check_mode:
    support: full
    description: Validates, compiles, loads and computes the difference; changes nothing.
  diff_mode:
    support: full
    description:
      - "The configuration in words, before and after, per VNI: an access port added shows as C(+VNI 100: access
        port acc100), a peer removed as C(-VNI 200: peer 198.51.100.130 via uplink0) followed by its next-hop MAC,
        a static entry as C(+VNI 100: static MAC 02:00:00:00:64:01 on acc100) or C(... at remote 198.51.100.130),
        a VNI in preserve mode as C(+VNI 200: vlan_mode preserve), and the aging time as C(+VTEP: fdb_aging 300 s).
        Then a port's promiscuous flag that changes (C(acc100: promisc off) before, C(acc100: promisc on) after),
        and per port the ingress program before and after."
seealso:
  - module: xdpfleet.fabric.xdp_program
  - module: xdpfleet.fabric.linux_vtep
"""

EXAMPLES = r"""
- name: Configure the VTEP
  xdpfleet.fabric.vtep:
    config:
      tunnel_ports:
        - {port: uplink0, local_ip: 198.51.100.129}
      vnis:
        - vni: 100
          access_ports: [acc100]
          peers:
            - {ip: 198.51.100.130, via: uplink0}
        - vni: 200
          trunks: [{port: trunk0, vid: 20}]
          peers:
            - {ip: 198.51.100.130, via: uplink0, mac: "02:00:00:00:01:30"}

- name: Configure the VTEP with static MACs, a short aging time, and VLAN tags kept in the tunnelled frame in VNI 200
  xdpfleet.fabric.vtep:
    config:
      fdb_aging: 60
      tunnel_ports:
        - {port: uplink0, local_ip: 198.51.100.129}
      vnis:
        - vni: 100
          access_ports: [acc100]
          trunks: [{port: trunk0, vid: 10}]
          peers:
            - {ip: 198.51.100.130, via: uplink0}
          fdb:
            - {mac: "02:00:00:00:64:01", port: acc100}
            - {mac: "02:00:00:00:64:02", remote: 198.51.100.130}
        - vni: 200
          vlan_mode: preserve
          trunks: [{port: trunk0, vid: 20}]
          peers:
            - {ip: 198.51.100.130, via: uplink0}

- name: Remove it
  xdpfleet.fabric.vtep:
    state: absent
"""

RETURN = r"""
removed:
  description: With I(state=absent), what was removed (in check mode, what would be), one line each.
  returned: state=absent
  type: list
  elements: str
  sample:
    - "acc100: promisc off (as before the VTEP served it)"
    - "acc100: detach vtep_ingress tag 0d112e397a65ba3d native"
    - "remove map port_config"
changes:
  description:
    - The configuration difference in words, one line per member or peer added (+) or removed (-), and one per port
      whose promiscuous flag is set or put back. The diff shows the same items as before and after.
  returned: always
  type: list
  elements: str
  sample: ["VNI 100: + peer 198.51.100.130 via uplink0 (02:00:00:00:01:30)"]
program:
  description: Per VTEP port, what was done with the ingress program (attach, replace, unchanged, detach).
  returned: state=present
  type: dict
  sample: {acc100: attach, uplink0: attach}
problems:
  description: On a validation failure, every problem found, each starting with the field's path.
  returned: failure
  type: list
  elements: str
ansible_facts:
  description:
    - C(xdpfleet_vtep) holds the counters and the FDB. There is one entry per VNI and one per port, each with
      rx/tx packets and bytes and drops by reason (non-zero only).
    - Each VNI also has C(fdb_events), its forwarding counters (C(learned), C(moved), C(aged_out),
      C(static_conflict), C(known_unicast), C(flooded)), and C(fdb), its table by MAC. An entry has C(type)
      (C(static) or C(learned)) and C(port), the local port the MAC is behind or, with C(remote) (the remote VTEP's
      address), the tunnel port towards it. On a trunk it has the C(vid). A learned entry has its C(age), in whole
      seconds since the last frame from the MAC.
    - The table shows what the data plane uses now. Learned entries older than C(fdb_aging), learned MACs that have a
      static entry, and entries whose port or peer the configuration no longer has are left out.
  returned: state=present
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
            "02:00:00:00:64:02": {type: static, port: uplink0, remote: 198.51.100.130}
            "02:00:00:00:64:05": {type: learned, port: acc100, age: 12}
            "02:00:00:00:64:06": {type: learned, port: trunk0, vid: 10, age: 3}
            "02:00:00:00:64:07": {type: learned, port: uplink0, remote: 198.51.100.130, age: 0}
      ports: {uplink0: {rx_packets: 0, rx_bytes: 0, tx_packets: 20, tx_bytes: 2960, drops: {}}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import INCLUDE_DIRS
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.neighbours import NEIGHBOUR_TIMEOUT
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import modules
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vd


def present(module: AnsibleModule, paths: xp.InstancePaths) -> dict:
    p = module.params
    if not p["config"]:
        module.fail_json(msg="config: required with state=present")
    return modules.deployment(
        module,
        vd.Vtep,
        paths,
        document=p["config"],
        mode=p["mode"],
        neighbour_timeout=p["neighbour_timeout"],
        backend=p["backend"],
        tc_source=p["tc_source"],
        check_host=True,
        allow_management_port=p["allow_management_port"],
    )


def absent(module: AnsibleModule, paths: xp.InstancePaths) -> dict:
    """The VTEP detached and unpinned, its record gone, and its ports' promiscuous flags as they were before it."""
    result = modules.removal(module, paths, "vtep", vd.Vtep)
    return {**result, "changes": result["removed"]}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": "vtep"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "config": {"type": "dict"},
            "allow_management_port": {"type": "bool", "default": False},
            "mode": {"type": "str", "choices": ["native", "generic"], "default": "native"},
            "backend": {"type": "str", "choices": ["xdp", "tc"], "default": "xdp"},
            "source": {"type": "path", "default": vd.VTEP_SOURCE},
            "tc_source": {"type": "path", "default": vd.VTEP_TC_SOURCE},
            "include_dirs": {"type": "list", "elements": "path", "default": INCLUDE_DIRS},
            "neighbour_timeout": {"type": "float", "default": NEIGHBOUR_TIMEOUT},
            **modules.HOST_PATHS_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    if bad := names.instance_name_problem(module.params["name"]):
        module.fail_json(msg=f"name: {bad}")
    paths = modules.instance_paths(module.params)
    if module.params["state"] == "present":
        module.exit_json(**present(module, paths))
    module.exit_json(**absent(module, paths))


if __name__ == "__main__":
    main()
