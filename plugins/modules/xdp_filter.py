#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: xdp_filter
short_description: A packet filter (drop or count) at XDP or at tc ingress, from a list of rules
version_added: "0.1.0"
description:
  - Deploys the filter of C(bpf/filter) on interfaces and programs its rules into BPF maps. The object has one
    rule-matching core and two programs, so the same compiled rules run at either hook. I(hook=xdp) attaches its
    XDP program (I(mode) native, or generic when I(allow_generic) says so), through a pinned bpf_link. I(hook=tc)
    attaches its tc program at tc ingress (tcx, or cls_bpf on kernels before 6.6, see the notes).
  - "Rules are tried in list order and the first match wins. A rule matches on address family, source and
    destination prefix, IP protocol, and source and destination port ranges. Its action is C(drop) or C(count)
    (count and pass). Each rule has per-CPU packet and byte counters. Frames no rule matches pass, counted by
    reason: C(no_rule), C(not_ip) (ARP and other non-IP frames, which rules never match) and C(malformed)."
  - "Parsing: up to two VLAN tags (the rules match the IP packet inside), IPv4 options, and up to 8 IPv6
    extension headers (hop-by-hop, routing, fragment, destination options, AH); the protocol is the upper-layer
    one behind them. A non-first fragment carries no ports. A rule with ports never matches it; a rule without
    ports (addresses, protocol) does. The first fragment carries the ports, so dropping it leaves the rest of the
    datagram impossible to reassemble. The IP total and payload lengths are not consulted: the filter parses what
    the frame holds."
  - "What the filter cannot parse never passes as if no rule matched. The protocol is unknown behind more than 8
    extension headers, behind one cut short, and in a non-first IPv6 fragment whose fragment header names another
    extension header; the ports are unknown when the TCP or UDP header is cut short before them (so a first
    fragment too short to hold them, too). With I(hook=tc) the program reads the skb's linear part and pulls up to
    1024 bytes in when the headers run past it; headers beyond those 1024 bytes are unknown too. For such a frame
    the rules are tried as usual, and a rule that matches on what is known decides (a rule without protocol and
    ports, or one whose family, addresses or known protocol differ, which is passed over); the first rule that
    could match but needs the unknown protocol or ports ends the walk: the frame is counted C(unparsed) and gets
    what I(unparsed) says, C(drop) by default."
  - "Changing rules writes only the difference into the maps, without reloading the program: a rule that stays
    keeps its slot and its counters; a rule added or changed goes into a free slot, counted from zero; then the new
    order is written into the idle one of two and a single word switches to it, so a frame meets either all of the
    old rules or all of the new ones."
  - The rules are validated before anything changes; every error names the field's path and the rule.
  - "XDP saves work over tc only where it runs before the kernel builds an skb (what xdpfleet.fabric.xdp_probe
    reports as C(xdp_before_skb)). With I(hook=xdp) the module warns, per interface, where it does not: generic
    mode never does, and on veth only frames that arrive as XDP frames skip the skb."
  - The state file records the rules, so xdpfleet.fabric.xdp_restore brings the filter back and
    xdpfleet.fabric.xdp_teardown removes it.
extends_documentation_fragment:
  - xdpfleet.fabric.host_paths
  - xdpfleet.fabric.tc_attachment
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - Linux 5.9 or newer for I(hook=xdp) (XDP through bpf_link); I(hook=tc) through a tcx link from Linux 6.6, a
    cls_bpf filter before (see the notes); libbpf.so.1, bpffs at /sys/fs/bpf, clang to compile I(source)
options:
  name:
    description:
      - Name of the filter instance. Its pins live under C(/sys/fs/bpf/xdpfleet/<name>), its state file is
        C(<state_dir>/programs/<name>.json).
      - 1-64 letters, digits, C(_), C(.) or C(-), starting with a letter or digit.
    type: str
    default: filter
  state:
    description: C(present) deploys the filter with I(rules). C(absent) detaches it and removes its maps and state.
    type: str
    choices: [present, absent]
    default: present
  interfaces:
    description: The interfaces whose received frames the filter sees. Required with I(state=present).
    type: list
    elements: str
  hook:
    description: Where the filter runs, C(xdp) or C(tc) (tc ingress).
    type: str
    choices: [xdp, tc]
    default: xdp
  mode:
    description:
      - XDP mode with I(hook=xdp). Generic XDP runs on the skb after the point where tc would, so it is refused
        unless I(allow_generic=true). Ignored with I(hook=tc).
    type: str
    choices: [native, generic]
    default: native
  allow_generic:
    description: Allow I(mode=generic) with I(hook=xdp).
    type: bool
    default: false
  unparsed:
    description:
      - "What a frame gets whose first rule that could match needs the protocol or ports the filter could not
        reach (see the description); it is counted C(unparsed) either way. C(drop) keeps a rule such as
        C({protocol: tcp, dst_port: 22, action: drop}) from being bypassed by a long or cut IPv6 header chain;
        C(pass) lets such frames on, for the kernel to parse."
    type: str
    choices: [drop, pass]
    default: drop
  rules:
    description:
      - "The rules, in the order they are tried (at most 128). Each has C(name) (unique, 1-31 letters, digits,
        C(_), C(.) or C(-)) and C(action) (C(drop) or C(count)), and optionally C(src) and C(dst) (an IPv4 or IPv6
        prefix or address, both of one family), C(family) (C(ipv4) or C(ipv6), for a rule without prefixes),
        C(protocol) (C(tcp), C(udp), C(icmp), C(icmpv6) or a number), and C(src_port) and C(dst_port) (a port or a
        range C(low-high), only with protocol C(tcp) or C(udp))."
    type: list
    elements: dict
    default: []
  source:
    description: C source of the filter on the host.
    type: path
    default: /var/lib/xdpfleet/src/filter/filter.c
  include_dirs:
    description: Include directories for compiling I(source).
    type: list
    elements: path
    default: [/var/lib/xdpfleet/src/include]
attributes:
  check_mode:
    support: full
    description: Validates, compiles, loads and computes the difference; changes nothing.
  diff_mode:
    support: full
    description:
      - "The rules in words, before and after (C(vxlan: count udp to any port 4789)): a rule added shows as
        C(+), one removed as C(-), one changed as a C(-)/C(+) pair; a changed I(unparsed) as C(unparsed frames:
        drop). Then per interface the program before and after."
seealso:
  - module: xdpfleet.fabric.xdp_probe
  - module: xdpfleet.fabric.xdp_teardown
  - module: xdpfleet.fabric.xdp_restore
"""

EXAMPLES = r"""
- name: Count VXLAN and drop discard-protocol traffic on the underlay, at tc
  xdpfleet.fabric.xdp_filter:
    interfaces: [uplink0]
    hook: tc
    rules:
      - {name: vxlan, action: count, protocol: udp, dst_port: 4789}
      - {name: discard, action: drop, protocol: udp, dst_port: 9}

- name: Drop a source network's TCP to a port range, at native XDP
  xdpfleet.fabric.xdp_filter:
    name: edge
    interfaces: [eth0]
    rules:
      - {name: block-scan, action: drop, src: 198.51.100.64/27, protocol: tcp, dst_port: "1000-1999"}
      - {name: v6-dns, action: count, dst: "2001:db8::/32", protocol: udp, dst_port: 53}

- name: Remove it
  xdpfleet.fabric.xdp_filter:
    name: edge
    state: absent
"""

RETURN = r"""
changes:
  description: What was done (in check mode, what would be), one line per rule added, changed or removed, then
    per interface what was done with the program.
  returned: always
  type: list
  elements: str
  sample: ["add rule vxlan: count udp to any port 4789", "ul-a: attach filter_tc tag 5003d11a0c961122 tc"]
removed:
  description: With I(state=absent), what was removed (in check mode, what would be), one line each.
  returned: state=absent
  type: list
  elements: str
program:
  description: Per interface, what was done with the program (attach, replace, unchanged, detach).
  returned: state=present
  type: dict
  sample: {ul-a: unchanged}
program_id:
  description: Id of the program the interfaces run (a rules change keeps it).
  returned: state=present
  type: int
problems:
  description: On a validation failure, every problem found, each starting with the field's path.
  returned: failure
  type: list
  elements: str
ansible_facts:
  description:
    - C(xdpfleet_filter) has the filter's C(name), C(hook), C(interfaces), C(unparsed) (what unparsed frames get
      now, C(drop) or C(pass)), C(rules) (in order, each C(name), C(action), C(packets), C(bytes)) and C(unmatched)
      (C(no_rule), C(not_ip), C(malformed), C(unparsed), each C(packets) and C(bytes); all but C(unparsed) pass).
      In check mode the counters are those of the rules running now.
  returned: state=present
  type: dict
  sample:
    xdpfleet_filter:
      name: filter
      hook: tc
      interfaces: [ul-a]
      unparsed: drop
      rules:
        - {name: vxlan, action: count, packets: 24, bytes: 2976}
        - {name: discard, action: drop, packets: 0, bytes: 0}
      unmatched:
        no_rule: {packets: 6, bytes: 612}
        not_ip: {packets: 2, bytes: 84}
        malformed: {packets: 0, bytes: 0}
        unparsed: {packets: 0, bytes: 0}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import INCLUDE_DIRS
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import deploy as fd
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.probe import xdp_before_skb
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import modules


def warn_where_xdp_saves_nothing(module: AnsibleModule, interfaces: list[str], mode: str) -> None:
    for ifname in interfaces:
        facts = netdev.interface_facts(ifname)
        features = netdev.xdp_features(facts["ifindex"])
        basic = None if features is None else "basic" in features["flags"]
        decision = xdp_before_skb(facts.get("driver"), mode, basic)
        if decision["when"] != "always":
            module.warn(f"interfaces: {ifname}: hook xdp ({mode}) saves nothing over hook tc here: {decision['why']}")


def present(module: AnsibleModule, paths: xp.InstancePaths) -> dict:
    p = module.params
    if not p["interfaces"]:
        module.fail_json(msg="interfaces: required with state=present (the interfaces the filter runs on)")
    for ifname in p["interfaces"]:
        if bad := names.ifname_problem(ifname):
            module.fail_json(msg=f"interfaces: {bad}")
    if missing := [ifname for ifname in p["interfaces"] if not netdev.exists(ifname)]:
        module.fail_json(msg=f"interfaces: {', '.join(missing)} do not exist on this host")
    result = modules.deployment(
        module,
        fd.Filter,
        paths,
        rules=p["rules"],
        interfaces=p["interfaces"],
        hook=p["hook"],
        mode=p["mode"],
        allow_generic=p["allow_generic"],
        unparsed=p["unparsed"],
    )
    if p["hook"] == "xdp":
        warn_where_xdp_saves_nothing(module, p["interfaces"], p["mode"])
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "default": "filter"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "interfaces": {"type": "list", "elements": "str"},
            "hook": {"type": "str", "choices": list(fd.HOOKS), "default": "xdp"},
            "mode": {"type": "str", "choices": list(fd.XDP_MODES), "default": "native"},
            "allow_generic": {"type": "bool", "default": False},
            "unparsed": {"type": "str", "choices": list(fd.UNPARSED), "default": "drop"},
            "rules": {"type": "list", "elements": "dict", "default": []},
            "source": {"type": "path", "default": fd.FILTER_SOURCE},
            "include_dirs": {"type": "list", "elements": "path", "default": INCLUDE_DIRS},
            **modules.HOST_PATHS_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    if bad := names.instance_name_problem(module.params["name"]):
        module.fail_json(msg=f"name: {bad}")
    paths = modules.instance_paths(module.params)
    if module.params["state"] == "present":
        module.exit_json(**present(module, paths))
    result = modules.removal(module, paths, "filter", fd.Filter)
    module.exit_json(**result, changes=result["removed"])


if __name__ == "__main__":
    main()
