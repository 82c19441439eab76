#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: xdp_router
short_description: An IPv4 and IPv6 router in XDP that follows the kernel's routes and neighbours
version_added: "0.1.0"
description:
  - Attaches the XDP router of C(bpf/router) to I(interfaces) and makes them its ports. Each frame is looked up in
    the kernel's own FIB (C(bpf_fib_lookup)), that is routes, policy rules, the neighbour table and the egress MTU,
    as the kernel's forwarding path sees them. A route or neighbour changed with C(ip) takes effect at once, with no
    program or map change. No MAC address or ifindex is configured.
  - A frame routed to a next hop whose MAC is known, out of one of the ports, gets its TTL or hop limit
    decremented (the IPv4 checksum updated incrementally) and is redirected out of that port through a devmap of
    the ports. A route out of any other interface is left to the kernel.
  - Everything else goes to the kernel unchanged, which forwards, answers or drops it as it would without XDP. That
    is ARP and ND, TTL or hop limit 1 (the kernel sends ICMP time exceeded), IPv4 options and IPv6 hop-by-hop
    headers, frames for this host or sent to a broadcast or multicast MAC, a next hop without a neighbour entry yet
    (the kernel resolves it and the next frames are forwarded in XDP), frames over the egress MTU, VLAN-tagged
    frames, and what the kernel drops on input (a wrong IPv4 header checksum, an IP length past the frame). IPv4
    fragments are forwarded like any packet; bytes past the IP length (Ethernet padding) are trimmed, as the
    kernel does.
  - Frames from or to an address the kernel checks itself before forwarding, and C(bpf_fib_lookup) does not, are
    never forwarded in XDP and go to the kernel, counted C(pass_special_addr). That is 0.0.0.0/8, 127.0.0.0/8,
    169.254.0.0/16, 224.0.0.0/4 and 255.255.255.255, and ::, ::1, fe80::/10 and ff00::/8, as source or
    destination.
  - An IPv4 frame from one of the host's own addresses goes to the kernel too, counted C(pass_local_source), because
    the kernel drops such a frame instead of forwarding it (unless C(accept_local) is on). Before an IPv4 frame is
    forwarded in XDP, its source is looked up in the FIB the other way round (one more C(bpf_fib_lookup) per
    forwarded frame), so an address added after the deploy counts at once. That lookup also sends to the kernel a
    frame whose source the FIB has no route back to, or is a local broadcast address; the kernel forwards those as
    it would without XDP. IPv6 is not checked, since the kernel forwards an IPv6 frame from one of its own addresses
    just as the router does.
  - The kernel must forward on every port (C(net.ipv4.conf.<port>.forwarding), and for IPv6
    C(net.ipv6.conf.<port>.forwarding) unless IPv6 is disabled on the port). The FIB lookup answers "forwarding
    disabled" otherwise, and the router would hand every frame to a kernel that does not forward it either. Such
    a host is refused before anything changes, naming the sysctl.
  - A frame forwarded in XDP does not go through the kernel's IP stack. It passes no netfilter hook (no
    prerouting, forward or postrouting chain, no netdev ingress or egress chain on a port, so no filtering, NAT or
    connection tracking) and no reverse-path filter (C(rp_filter)). So unless I(bypass_forwarding_rules) is set,
    the module reads the host's rules before anything changes (also in check mode) and refuses a host where they
    would decide. That is an nftables base chain on those hooks with rules or a policy other than accept (read with
    C(nft -j list ruleset), which shows iptables-nft's rules too), a legacy iptables table, or
    C(net.ipv4.conf.all.rp_filter) or C(net.ipv4.conf.<port>.rp_filter) not 0. The message names each finding.
  - Counters per verdict (forwarded, or why the frame went to the kernel) are returned as facts.
  - The state file records the ports, so M(xdpfleet.fabric.xdp_restore) brings the router back, devmap included,
    and M(xdpfleet.fabric.xdp_teardown) removes it.
extends_documentation_fragment:
  - xdpfleet.fabric.host_paths
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - Linux 5.15 or newer, libbpf.so.1, bpffs at /sys/fs/bpf; clang when compiling I(source)
  - nft (nftables) to read the host's netfilter rules, unless I(bypass_forwarding_rules) is set
options:
  name:
    description:
      - Name of the router instance. Its pins live under C(<pin_root>/<name>), its state file is
        C(<state_dir>/programs/<name>.json).
      - 1-64 letters, digits, C(_), C(.) or C(-), starting with a letter or digit.
    type: str
    default: router
  state:
    description: C(present) attaches the router to I(interfaces). C(absent) detaches it and removes its maps and state.
    type: str
    choices: [present, absent]
    default: present
  interfaces:
    description:
      - The router's ports; frames arriving on them are routed, and only they are egress ports. Required with
        I(state=present). An interface left out of the list is detached and taken out of the devmap.
    type: list
    elements: str
  mode:
    description: XDP mode on every port, C(native) (in the driver) or C(generic) (on the skb).
    type: str
    choices: [native, generic]
    default: native
  bypass_forwarding_rules:
    description:
      - Attach even where the host's netfilter rules on the forwarding path or C(rp_filter) apply to forwarded
        frames, and forward in XDP past them. What the user gives up, for every frame the router forwards in XDP
        (frames it hands to the kernel still get all of them), is the filtering of the forward chain, NAT and
        connection tracking (frames leave un-NATed, replies of NATed flows miss their state), the rules of the
        prerouting and postrouting chains and of a port's netdev chains, and the source check of C(rp_filter)
        (spoofed sources are forwarded).
      - Recorded in the state file, so M(xdpfleet.fabric.xdp_restore) makes the same choice.
    type: bool
    default: false
  source:
    description: C source of the data plane on the host (the M(xdpfleet.fabric.xdp_host) role copies it there).
    type: path
    default: /var/lib/xdpfleet/src/router/router.c
  include_dirs:
    description: Include directories for compiling I(source).
    type: list
    elements: path
    default: [/var/lib/xdpfleet/src/include]
attributes:
  check_mode:
    support: full
    description:
      - Checks the interfaces, forwarding and the forwarding path's rules, compiles, loads and computes the
        difference; changes nothing.
  diff_mode:
    support: full
    description: The ports in the devmap (C(port p1 (ifindex 5))) and the program on each port, before and after.
seealso:
  - module: xdpfleet.fabric.xdp_program
  - module: xdpfleet.fabric.xdp_restore
"""

EXAMPLES = r"""
- name: Route between p1 and p2 in XDP
  xdpfleet.fabric.xdp_router:
    interfaces: [p1, p2]
  register: router

- name: Show what was forwarded in XDP
  ansible.builtin.debug:
    msg: "{{ router.ansible_facts.xdpfleet_router.counters.forwarded_v4.packets }} IPv4 packets"

- name: Remove it
  xdpfleet.fabric.xdp_router:
    state: absent
"""

RETURN = r"""
changes:
  description: What was (or, in check mode, would be) done, one line each (C(+ port p1 (ifindex 5)), C(p1 attach ...)).
  returned: always
  type: list
  elements: str
  sample: ["+ port p1 (ifindex 5)", "+ port p2 (ifindex 6)", "p1: attach xdp_router tag 0599ae2a834d6bd4 native"]
removed:
  description: With I(state=absent), what was removed (in check mode, what would be), one line each.
  returned: state=absent
  type: list
  elements: str
program:
  description: Per port, what was done with the program (attach, replace, reattach, unchanged, detach).
  returned: state=present
  type: dict
  sample: {p1: attach, p2: attach}
ansible_facts:
  description:
    - C(xdpfleet_router) has the instance's C(name), C(interfaces), C(mode), C(bypass_forwarding_rules), the
      C(prog_id) its ports run, and C(counters), packets and bytes per verdict summed over the CPUs, read after the
      change.
    - "Verdicts: C(forwarded_v4) and C(forwarded_v6) (forwarded in XDP), and the frames handed to the kernel:
      C(pass_not_ip), C(pass_vlan), C(pass_malformed), C(pass_ttl), C(pass_options), C(pass_local) (for this
      host, broadcast, multicast, link-local), C(pass_no_route), C(pass_no_neigh), C(pass_mtu),
      C(pass_fwd_disabled), C(pass_not_port) (routed out of an interface that is not a port),
      C(pass_fib_other), C(pass_special_addr) (from or to an address the kernel checks itself) and
      C(pass_local_source) (IPv4 from one of the host's own addresses, or from a source with no route back)."
  returned: state=present
  type: dict
  sample:
    xdpfleet_router:
      name: router
      interfaces: [p1, p2]
      mode: native
      bypass_forwarding_rules: false
      prog_id: 1234
      counters:
        forwarded_v4: {packets: 40, bytes: 3920}
        pass_no_neigh: {packets: 1, bytes: 98}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import INCLUDE_DIRS
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import modules
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy as rd


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": "router"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "interfaces": {"type": "list", "elements": "str"},
            "mode": {"type": "str", "choices": list(rd.MODES), "default": "native"},
            "source": {"type": "path", "default": rd.ROUTER_SOURCE},
            "include_dirs": {"type": "list", "elements": "path", "default": INCLUDE_DIRS},
            "bypass_forwarding_rules": {"type": "bool", "default": False},
            **modules.HOST_PATHS_ARGUMENT_SPEC,
        },
        required_if=[("state", "present", ["interfaces"])],
        supports_check_mode=True,
    )
    p = module.params
    if bad := names.instance_name_problem(p["name"]):
        module.fail_json(msg=f"name: {bad}")
    paths = modules.instance_paths(p)
    if p["state"] == "absent":
        result = modules.removal(module, paths, "router", rd.Router)
        module.exit_json(**result, changes=result["removed"])
    result = modules.deployment(
        module,
        rd.Router,
        paths,
        interfaces=p["interfaces"],
        mode=p["mode"],
        bypass_forwarding_rules=p["bypass_forwarding_rules"],
    )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
