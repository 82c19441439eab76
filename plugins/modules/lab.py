#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lab
short_description: Network-namespace lab of real SSH hosts and traffic endpoints on one machine
version_added: "0.1.0"
description:
  - Builds or removes a lab on the machine the module runs on (run it on C(localhost) with C(connection=local), as
    root).
  - Each lab host is a network namespace C(<prefix>-<host>) with its own mount, UTS and PID namespaces whose PID 1
    is an sshd on the host's management address. Inside it, a bpffs is mounted once at C(/sys/fs/bpf) (every SSH
    session of the host shares its pins), C(/run) is a tmpfs and the O(private_dirs) are overlays whose upper
    layers live in the lab dir, so the host sees the machine's files but keeps its writes to itself.
  - Endpoints are plain network namespaces C(<prefix>-<endpoint>) without sshd, for traffic.
  - Links are veth pairs between any two nodes, created directly inside the nodes' namespaces.
  - The management network is a bridge C(<prefix>-mgmt) in the root namespace holding the first address of
    O(mgmt_subnet), with one veth C(<prefix>-<host>-m) per host (C(mgmt0) inside the host). Hosts have no default
    route.
  - The lab dir holds the client key pair, a C(known_hosts) file with every host key (host key checking stays on),
    per-host sshd config, host key, overlay layers, logs and pid file, and C(state.json) recording what was made.
  - O(state=present) on a lab that runs with the same description changes nothing. A lab of the same prefix that
    is stale (its processes are gone), half-built or described differently is removed and built again; hosts
    restart, so their bpffs pins and private files start empty.
  - Before anything changes, the description is validated (every error names its field) and the module refuses
    when O(mgmt_subnet) overlaps an address or route in the root namespace that is not the lab's own bridge.
  - O(state=absent) ends the hosts' processes by pid (SIGTERM, then SIGKILL) and any process left inside a lab
    namespace, deletes the root-namespace links and namespaces named C(<prefix>-*) and the lab dir. It works from
    what exists by prefix plus C(state.json), so it also cleans up after a killed session.
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - root on the machine running the module
  - pyroute2 >= 0.9
  - iproute2 (C(ip netns exec)), util-linux (C(unshare)), OpenSSH (C(sshd), C(ssh-keygen)), procps (C(sysctl))
  - a kernel with overlayfs, bpffs, veth and bridge
attributes:
  check_mode:
    support: full
    description: Validates the description and reports whether the lab would be built, rebuilt or removed, and why;
      nothing is created, started or deleted.
  diff_mode:
    support: full
    description: The lab description before and after, one object per line.
options:
  state:
    description:
      - V(present) builds the lab (or rebuilds it when it differs or is stale); V(absent) removes everything of
        O(prefix).
    type: str
    choices: [present, absent]
    default: present
  prefix:
    description:
      - Name prefix of everything the lab makes (namespaces, root-namespace links, default lab dir); 1-6 lower-case
        letters or digits. Everything named C(<prefix>-*) belongs to the lab.
    type: str
    required: true
  mgmt_subnet:
    description:
      - IPv4 management subnet inside 198.51.100.0/24, a /29 or larger. The bridge takes its first address.
      - Required with O(state=present).
    type: str
  lab_dir:
    description:
      - Directory for keys, known_hosts, per-host files and C(state.json). Defaults to
        C(/tmp/xdpfleet-lab-<prefix>). Must not lie inside one of the O(private_dirs).
      - The lab creates it (mode 0700) and refuses one that already exists when it starts. Any existing lab dir it
        reads or removes must be a directory (not a symbolic link) of the user running the lab with mode 0700, in
        directories that belong to root or that user and that no one else can write to without the sticky bit, since
        the hosts' sshd, running as root, trusts the key inside it.
    type: path
  private_dirs:
    description:
      - Directories each host overlays, so that writes there stay private to the host.
    type: list
    elements: path
    default: [/etc, /var, /boot]
  hosts:
    description:
      - The SSH hosts.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description:
          - Inventory name; becomes the host's hostname and its namespace C(<prefix>-<name>).
          - C(<prefix>-<name>-m) must fit in 15 characters (IFNAMSIZ).
        type: str
        required: true
      mgmt_ip:
        description: Management address (in O(mgmt_subnet), not its first address); sshd listens here.
        type: str
        required: true
      forwarding: &namespace_forwarding
        description: Enable IPv4 and IPv6 forwarding in the node's namespace.
        type: bool
        default: false
      routes: &namespace_routes
        description: Static routes in the node's namespace.
        type: list
        elements: dict
        default: []
        suboptions:
          to:
            description: Destination network, or V(default).
            type: str
            default: default
          via:
            description: Gateway address.
            type: str
            required: true
  endpoints:
    description:
      - Plain namespaces for traffic, without sshd.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Endpoint name; its namespace is C(<prefix>-<name>).
        type: str
        required: true
      forwarding: *namespace_forwarding
      routes: *namespace_routes
  links:
    description:
      - veth pairs between nodes (hosts or endpoints). Addresses must lie in 198.51.100.0/24 or 2001:db8::/32;
        IPv6 addresses are added without duplicate address detection, so they are usable at once.
    type: list
    elements: dict
    default: []
    suboptions:
      ends:
        description: The two ends of the pair.
        type: list
        elements: dict
        required: true
        suboptions:
          node:
            description: Host or endpoint name.
            type: str
            required: true
          ifname:
            description: Interface name inside the node (at most 15 characters, unique per node).
            type: str
            required: true
          addresses:
            description: Addresses with prefix length, for example V(198.51.100.65/30) or V(2001:db8:64:1::1/64).
            type: list
            elements: str
            default: []
      mtu:
        description: MTU of both ends.
        type: int
        default: 1500
      queues:
        description:
          - Number of RX and TX queues of both ends (numrxqueues/numtxqueues). Omit for the kernel's default.
        type: int
  start_timeout:
    description: Seconds to wait for every host's sshd to listen.
    type: float
    default: 20
notes:
  - Changing the description rebuilds the whole lab; the lab is cheap to build (well under a second for a few
    hosts) and a rebuild is the only way to be sure no earlier state leaks into a test.
  - Lab hosts share the machine's file system outside O(private_dirs), so the controller's Python works on them.
seealso:
  - name: ip-netns(8)
    description: The network namespaces each lab host is.
    link: https://man7.org/linux/man-pages/man8/ip-netns.8.html
"""

EXAMPLES = r"""
- name: Two hosts, two endpoints routed through host a, a 2-queue link a <-> b
  xdpfleet.fabric.lab:
    prefix: xf
    mgmt_subnet: 198.51.100.0/27
    hosts:
      - {name: a, mgmt_ip: 198.51.100.2, forwarding: true}
      - {name: b, mgmt_ip: 198.51.100.3}
    endpoints:
      - name: e1
        routes: [{to: 198.51.100.64/26, via: 198.51.100.65}]
      - name: e2
        routes: [{to: 198.51.100.64/26, via: 198.51.100.69}]
    links:
      - ends:
          - {node: a, ifname: p1, addresses: [198.51.100.65/30]}
          - {node: e1, ifname: eth0, addresses: [198.51.100.66/30]}
      - ends:
          - {node: a, ifname: p2, addresses: [198.51.100.69/30]}
          - {node: e2, ifname: eth0, addresses: [198.51.100.70/30]}
      - queues: 2
        ends:
          - {node: a, ifname: p3, addresses: [198.51.100.73/30]}
          - {node: b, ifname: p3, addresses: [198.51.100.74/30]}

- name: Remove the lab, also after a killed session
  xdpfleet.fabric.lab:
    prefix: xf
    state: absent
"""

RETURN = r"""
lab_dir:
  description: The lab directory.
  returned: always
  type: str
  sample: /tmp/xdpfleet-lab-xf
private_key:
  description: Client private key accepted by every host (user root).
  returned: when state=present
  type: str
  sample: /tmp/xdpfleet-lab-xf/id_ed25519
known_hosts:
  description: known_hosts file with every host's key, for C(-o UserKnownHostsFile=...).
  returned: when state=present
  type: str
  sample: /tmp/xdpfleet-lab-xf/known_hosts
bridge:
  description: The management bridge in the root namespace.
  returned: when state=present
  type: str
  sample: xf-mgmt
hosts:
  description:
    - Per host, its namespace, management address, the pid of its unshare and of its sshd (root-namespace pids).
    - Enter a host out of band with C(nsenter -t <sshd_pid> -m -n -u -p).
  returned: when state=present
  type: dict
  sample: {a: {namespace: xf-a, mgmt_ip: 198.51.100.2, pid: 4100, sshd_pid: 4102}}
endpoints:
  description: Per endpoint, its namespace (enter it with C(ip netns exec)).
  returned: when state=present
  type: dict
  sample: {e1: {namespace: xf-e1}}
reasons:
  description: Why the lab was (or in check mode would be) built or rebuilt; empty when nothing changed.
  returned: when state=present
  type: list
  elements: str
  sample: [the lab description changed]
removed:
  description: What was (or in check mode would be) removed.
  returned: when something was removed
  type: dict
  contains:
    processes:
      description: Ended pids.
      type: list
      elements: int
    root_links:
      description: Deleted root-namespace links.
      type: list
      elements: str
    namespaces:
      description: Deleted network namespaces.
      type: list
      elements: str
    lab_dir:
      description: The removed lab dir, or null.
      type: str
  sample:
    processes: [4100, 4102]
    root_links: [xf-a-m, xf-mgmt]
    namespaces: [xf-a, xf-e1]
    lab_dir: /tmp/xdpfleet-lab-xf
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import diff
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.lab import HAS_PYROUTE2, describe, down, up
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.lab_spec import (
    ARGUMENT_SPEC,
    LabError,
    check_lab_dir,
    check_prefix,
    normalize,
    summary,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.lab_state import (
    existing,
    health,
    load_state,
    mgmt_clashes,
)


def _absent(module: AnsibleModule) -> None:
    # Only prefix and lab_dir matter for removal; the rest of the description is not looked at.
    prefix = check_prefix(module.params["prefix"])
    lab_dir = check_lab_dir(module.params["lab_dir"], prefix)
    found = existing(prefix, lab_dir)
    result = {"changed": False, "lab_dir": lab_dir}
    if not (found["namespaces"] or found["root_links"] or found["lab_dir"] or found["processes"]):
        module.exit_json(**result)
    state = load_state(lab_dir) or {}
    result["changed"] = True
    result["diff"] = diff(f"lab {prefix}", summary(state.get("spec")), [])
    if module.check_mode:
        result["removed"] = {key: found[key] for key in ("processes", "root_links", "namespaces", "lab_dir")}
    else:
        result["removed"] = down(prefix, lab_dir)
    module.exit_json(**result)


def _present(module: AnsibleModule) -> None:
    spec = normalize(module.params)
    clashes = mgmt_clashes(spec)
    if clashes:
        module.fail_json(
            msg=f"mgmt_subnet: {spec['mgmt_subnet']} overlaps what already exists in the root namespace: "
            f"{'; '.join(clashes)}. Choose another subnet or remove these; nothing was changed.",
            clashes=clashes,
        )
    reasons = health(spec)
    if not reasons:
        module.exit_json(changed=False, reasons=[], **describe(spec))
    before = summary((load_state(spec["lab_dir"]) or {}).get("spec"))
    lab_diff = diff(f"lab {spec['prefix']}", before, summary(spec))
    found = existing(spec["prefix"], spec["lab_dir"])
    leftovers = found["namespaces"] or found["root_links"] or found["lab_dir"] or found["processes"]
    if module.check_mode:
        module.exit_json(changed=True, reasons=reasons, diff=lab_diff, lab_dir=spec["lab_dir"])
    removed = down(spec["prefix"], spec["lab_dir"]) if leftovers else None
    info = up(spec, module.params["start_timeout"])
    result = {"changed": True, "reasons": reasons, "diff": lab_diff, **info}
    if removed:
        result["removed"] = removed
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("state", "present", ["mgmt_subnet"])],
        supports_check_mode=True,
    )
    if not HAS_PYROUTE2:
        module.fail_json(msg=missing_required_lib("pyroute2"))
    if os.geteuid() != 0:
        module.fail_json(msg="the lab needs root (network namespaces, mounts, veth)")
    try:
        if module.params["state"] == "absent":
            _absent(module)
        else:
            _present(module)
    except LabError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
