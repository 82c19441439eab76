#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: xdp_program
short_description: Compile, load and attach one XDP or tc program to a list of interfaces, idempotently
version_added: "0.1.0"
description:
  - Compiles a C source on the host with C(clang -O2 -g -target bpf) (cached by a hash of the compiler, flags,
    source and include directories) or takes a prebuilt object, loads it with libbpf, and attaches one of its
    programs to every interface listed, in native or generic mode.
  - Each attachment is a bpf_link pinned at C(/sys/fs/bpf/xdpfleet/<name>/links/<interface>); the object's maps
    are pinned at C(/sys/fs/bpf/xdpfleet/<name>/maps/<map>) and reused by the next version where their definition
    is unchanged, so counters survive an upgrade.
  - Idempotent by what the kernel runs. An interface is unchanged when its link runs a program with the same tag,
    the same C(.rodata) constants and the same maps, in the same mode. Otherwise the new version replaces the old one
    through C(bpf_link_update), which is atomic, so no packet meets an interface without a program.
  - Everything is checked before any interface changes. That covers the interfaces existing, the source compiling
    and the verifier accepting the program. Compiler and verifier messages are returned as they are. If attaching
    fails on one interface, the interfaces already changed are rolled back to the previous program.
  - A record of what was attached where is written to C(/var/lib/xdpfleet/programs/<name>.json). Teardown
    (I(state=absent), M(xdpfleet.fabric.xdp_teardown)) and restore after a reboot (M(xdpfleet.fabric.xdp_restore))
    use it.
  - An interface that already runs an XDP program this instance did not attach is refused unless
    I(replace_foreign=true).
extends_documentation_fragment:
  - xdpfleet.fabric.host_paths
  - xdpfleet.fabric.tc_attachment
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - Linux 5.9 or newer (XDP through bpf_link), libbpf.so.1, a bpffs mounted at /sys/fs/bpf
  - clang on the host when I(source) is used
options:
  name:
    description:
      - Name of this program instance on the host. It is used in pin paths and the state file.
      - 1-64 letters, digits, C(_), C(.) or C(-), starting with a letter or digit.
    type: str
    required: true
  state:
    description:
      - C(present) attaches (or replaces). C(absent) detaches every interface of the instance, removes its pins and
        its state file.
    type: str
    choices: [present, absent]
    default: present
  source:
    description:
      - Path on the host of a C source to compile. Mutually exclusive with I(object).
    type: path
  object:
    description:
      - Path on the host of a prebuilt BPF ELF object. Mutually exclusive with I(source).
    type: path
  program:
    description:
      - Name of the program (C function) in the object to attach. It may be omitted when the object has exactly one.
    type: str
  interfaces:
    description:
      - Interfaces to attach to. Interfaces the instance was attached to before but are no longer listed are
        detached (after the listed ones are attached).
    type: list
    elements: str
    default: []
  mode:
    description:
      - Where the program runs. C(native) is XDP in the driver, before an skb exists. C(generic) is XDP on the skb and
        works on any interface. C(tc) is tc ingress for a C(SEC("tc")) program, after XDP and before the stack,
        through a tcx link pinned at C(/sys/fs/bpf/xdpfleet/<name>/tc-links/<interface>), or a cls_bpf filter before
        Linux 6.6 (see the notes).
      - The kernel cannot run native and generic XDP on one device at once. So a change between them detaches and
        then attaches, leaving a short gap. A move between XDP and tc attaches at the new hook first and detaches
        from the old one after. Every other change is atomic.
      - A program of the wrong type for the mode (an XDP program with C(tc), a tc program with an XDP mode) is
        refused before any interface changes.
    type: str
    choices: [native, generic, tc]
    default: native
  constants:
    description:
      - Values for the object's C(const volatile) globals (its C(.rodata)), by variable name. They are set before
        load and checked against the variable's C type.
    type: dict
    default: {}
  defines:
    description:
      - Preprocessor macros for compiling I(source), as C(-DNAME=VALUE). Use a null value for a plain C(-DNAME).
    type: dict
    default: {}
  include_dirs:
    description:
      - Extra include directories for compiling I(source). Their contents are part of the cache key.
    type: list
    elements: path
    default: []
  replace_foreign:
    description:
      - Take over an interface that runs an XDP program attached by someone else. The foreign program is detached
        and this one attached through a bpf_link, with a short gap between the two.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: The object is compiled and loaded (so verifier errors show), but no interface, pin or file changes.
  diff_mode:
    support: full
    description: Shows, per interface, the program, tag and mode before and after.
notes:
  - BPF object ids are global to the kernel. This module identifies its objects by pin path, never by id or name.
seealso:
  - module: xdpfleet.fabric.xdp_probe
"""

EXAMPLES = r"""
- name: Count frames on the uplinks (compiled on the host)
  xdpfleet.fabric.xdp_program:
    name: counter
    source: /var/lib/xdpfleet/src/counter/counter.c
    include_dirs: [/var/lib/xdpfleet/src/include]
    interfaces: [ens1f0, ens1f1]
    mode: native
    constants:
      count_only_proto: 17

- name: Attach a prebuilt object in generic mode
  xdpfleet.fabric.xdp_program:
    name: filter
    object: /opt/xdp/filter.o
    program: xdp_filter
    interfaces: [eth1]
    mode: generic

- name: Detach it and remove its pins and state
  xdpfleet.fabric.xdp_program:
    name: filter
    state: absent
"""

RETURN = r"""
removed:
  description: With I(state=absent), what was removed (in check mode, what would be), one line each.
  returned: state=absent
  type: list
  elements: str
  sample: ["p1: detach xdp_count tag 0d112e397a65ba3d native", "remove map xdp_counters"]
object:
  description: The object file that was loaded (the cache entry when compiled).
  returned: state=present
  type: str
  sample: /var/lib/xdpfleet/cache/counter-3f1c9a0e5b7d2c44.o
compiled:
  description: Whether the source was compiled by this run (false when the cache had it).
  returned: state=present
  type: bool
program:
  description: Name, tag and id of the program the interfaces run after this run.
  returned: state=present
  type: dict
  sample: {name: xdp_count, tag: 9a1f0c2b3d4e5f60, id: 412}
interfaces:
  description:
    - Per attachment, what was done (attach, replace, reattach, takeover, unchanged, detach) and the link pin, or for
      a cls_bpf filter its C(tc_filter) (C(priority), C(handle), C(clsact_created)). An attachment is named by its
      interface, with C( (tc)) after it at tc ingress.
  returned: always
  type: dict
  sample: {p1: {action: replace, ifindex: 7, link_pin: /sys/fs/bpf/xdpfleet/counter/links/p1}}
maps:
  description: Pin path of each of the object's maps.
  returned: state=present
  type: dict
  sample: {xdp_counters: /sys/fs/bpf/xdpfleet/counter/maps/xdp_counters}
state_file:
  description: Path of the record used by teardown.
  returned: always
  type: str
  sample: /var/lib/xdpfleet/programs/counter.json
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import modules


def validate(module: AnsibleModule) -> None:
    p = module.params
    if bad := names.instance_name_problem(p["name"]):
        module.fail_json(msg=f"name: {bad}")
    if p["state"] == "absent":
        return
    if not p["interfaces"]:
        module.fail_json(msg="interfaces: at least one interface is required with state=present")
    if len(set(p["interfaces"])) != len(p["interfaces"]):
        module.fail_json(
            msg=f"interfaces: listed twice: {sorted({i for i in p['interfaces'] if p['interfaces'].count(i) > 1})}"
        )
    for key, value in p["constants"].items():
        try:  # templated values may arrive as strings
            p["constants"][key] = value if isinstance(value, int) else int(str(value), 0)
        except ValueError:
            module.fail_json(msg=f"constants.{key}: {value!r} is not an integer")
    for i, ifname in enumerate(p["interfaces"]):
        if bad := names.ifname_problem(ifname):
            module.fail_json(msg=f"interfaces[{i}]: {bad}")
    missing = [i for i in p["interfaces"] if not xp.ifindex_of(i)]
    if missing:
        module.fail_json(msg=f"interfaces: no such interface on this host: {', '.join(missing)}")
    if (no_bpffs := xp.bpffs_problem(p["pin_root"])):
        module.fail_json(msg=no_bpffs)


def present(module: AnsibleModule, paths: xp.InstancePaths) -> dict:
    p = module.params
    compiled = False
    object_path = p["object"]
    if object_path and not os.path.isfile(object_path):
        module.fail_json(msg=f"object: {object_path}: no such file on this host")
    if p["source"]:
        try:
            object_path, compiled = bpf_build.compile_object(
                p["source"],
                p["cache_dir"],
                p["include_dirs"],
                p["defines"],
                build_dir=module.tmpdir if module.check_mode else None,
            )
        except bpf_build.CompileError as exc:
            module.fail_json(msg=str(exc))
    try:
        done = xp.converge(
            paths,
            object_path,
            p["program"],
            p["mode"],
            p["constants"],
            p["interfaces"],
            p["source"],
            build={"include_dirs": p["include_dirs"], "defines": p["defines"]} if p["source"] else None,
            replace_foreign=p["replace_foreign"],
            check_mode=module.check_mode,
        )
    except xp.XdpProgramError as exc:
        module.fail_json(msg=str(exc))
    result = {
        "changed": done.changed,
        "object": object_path,
        "compiled": compiled,
        "program": done.program,
        "interfaces": {
            s.label: {
                "action": s.action,
                "ifindex": s.ifindex,
                **({"tc_filter": s.tc_filter} if s.tc_filter else {"link_pin": paths.link_pin(s.ifname, s.hook)}),
            }
            for s in done.plan.steps
        },
        "maps": done.maps,
        "state_file": paths.state_file,
    }
    if done.changed:
        result["diff"] = done.changes(f"xdp_program {paths.name}").diff()
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "source": {"type": "path"},
            "object": {"type": "path"},
            "program": {"type": "str"},
            "interfaces": {"type": "list", "elements": "str", "default": []},
            "mode": {"type": "str", "choices": list(xp.MODES), "default": "native"},
            "constants": {"type": "dict", "default": {}},
            "defines": {"type": "dict", "default": {}},
            "include_dirs": {"type": "list", "elements": "path", "default": []},
            "replace_foreign": {"type": "bool", "default": False},
            **modules.HOST_PATHS_ARGUMENT_SPEC,
        },
        mutually_exclusive=[("source", "object")],
        required_if=[("state", "present", ("source", "object"), True)],
        supports_check_mode=True,
    )
    validate(module)
    paths = modules.instance_paths(module.params)
    if module.params["state"] == "present":
        module.exit_json(**present(module, paths))
    module.exit_json(**modules.removal(module, paths, "xdp_program"), interfaces={}, state_file=paths.state_file)


if __name__ == "__main__":
    main()
