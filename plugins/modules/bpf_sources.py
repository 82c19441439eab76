#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bpf_sources
short_description: Install the collection's BPF C sources on a host, in one step
version_added: "0.1.0"
description:
  - Makes O(dest) hold exactly the collection's C(bpf/) tree (the sources the xdp_program, xdp_filter, xdp_router,
    vtep and trafficgen modules compile on the host), the way the xdpfleet.fabric.xdp_host role needs it.
  - "An action plugin reads the tree on the controller and passes it to the module with the task: one module run per
    host, whatever the number of files."
  - Each file gets mode O(mode), each directory O(directory_mode), all owned by the user the module runs as (root
    with become). A file is rewritten only when its content differs, through a temporary file renamed over it, so a
    compile reads the old file or the new one, whole; its mode or owner are set when only they differ.
  - "What an earlier run installed and the tree no longer has is removed, after the new files are in place: a file
    a newer collection no longer ships (then its directory, once nothing else is in it), and a temporary file an
    interrupted run left. The manifest C(<dest>/.xdpfleet-sources) lists the files installed; nothing else under
    O(dest) is removed, so a directory given by mistake loses nothing. It is written last: until a run is complete
    it lists the files of the last complete run and those of this one, so after a run that failed or was killed
    the next run still removes every file it does not ship."
  - A directory where a file of the tree goes is an error; a file or a symbolic link where a directory or a file of
    the tree goes is replaced (a link is never followed inside O(dest)).
  - With O(state_dir), that directory is created too (or its mode and owner repaired); with O(bpffs), bpffs is
    mounted there when it is not.
author:
  - xdpfleet developers (!UNKNOWN)
options:
  dest:
    description:
      - Directory the sources go to, created when missing (with its missing parents, O(directory_mode)).
      - A symbolic link there is followed; something else than a directory is an error.
    type: path
    default: /var/lib/xdpfleet/src
  state_dir:
    description:
      - A directory to create as well, with O(directory_mode), or whose mode and owner to repair (the xdp_host role
        passes the state directory).
    type: path
  bpffs:
    description:
      - Where bpffs must be mounted (the host's mount table is read); mounted with C(mount -t bpf bpf <bpffs>)
        when another file system, or none, is mounted there.
      - Omitted, nothing is checked.
    type: path
  mode:
    description:
      - Mode of the files, octal (a string such as V("0600"), or a YAML octal number). No group or world write bit.
    type: raw
    default: "0600"
  directory_mode:
    description: Mode of the directories (O(dest), its subdirectories and O(state_dir)), as O(mode).
    type: raw
    default: "0700"
  tree:
    description:
      - Which of the collection's trees the action plugin reads on the controller and installs in O(dest).
      - V(bpf), the C sources. V(module_utils), the collection's host-side Python library
        (C(plugins/module_utils), without byte-code caches), which the xdp_host role installs for the entry points
        its systemd units run (C(xdpfleet-restore), C(xdpfleet-metrics)).
    type: str
    choices: [bpf, module_utils]
    default: bpf
  files:
    description:
      - The tree, set by the action plugin from the collection's directory that O(tree) names. A task does not set
        it.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: The file's path relative to O(dest).
        type: str
        required: true
      content:
        description: The file's content (not logged on the host, unlike other module arguments).
        type: str
        required: true
attributes:
  action:
    support: full
    description: The action plugin reads the collection's C(bpf/) on the controller.
  check_mode:
    support: full
    description: Reports what would be written, repaired, removed or mounted; changes nothing.
  diff_mode:
    support: full
    description: One line per entry that changes, before and after (path, mode, owner, sha256 of the content).
seealso:
  - module: xdpfleet.fabric.xdp_program
"""

EXAMPLES = r"""
- name: Mount bpffs, create the state directory and install the XDP C sources
  xdpfleet.fabric.bpf_sources:
    dest: /var/lib/xdpfleet/src
    state_dir: /var/lib/xdpfleet
    bpffs: /sys/fs/bpf
  become: true
"""

RETURN = r"""
files:
  description: The entries written or repaired, relative to O(dest); directories end with C(/).
  returned: always
  type: list
  elements: str
  sample: [.xdpfleet-sources, vtep/, vtep/vtep.h, vtep/vtep_tc.c]
removed:
  description:
    - The entries removed from O(dest), which an earlier run installed and the collection no longer ships, and
      leftover temporary files; directories end with C(/).
  returned: always
  type: list
  elements: str
  sample: [old/, old/retired.h]
directories:
  description: O(state_dir) and O(dest) when they were created or their mode or owner repaired.
  returned: always
  type: list
  elements: str
  sample: [/var/lib/xdpfleet, /var/lib/xdpfleet/src]
bpffs_mounted:
  description: Whether bpffs was mounted at O(bpffs) (would be, in check mode).
  returned: always
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import sources


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "default": "/var/lib/xdpfleet/src"},
            "state_dir": {"type": "path"},
            "bpffs": {"type": "path"},
            "mode": {"type": "raw", "default": "0600"},
            "directory_mode": {"type": "raw", "default": "0700"},
            "tree": {"type": "str", "choices": ["bpf", "module_utils"], "default": "bpf"},  # read by the action
            "files": {
                "type": "list",
                "elements": "dict",
                "required": True,
                # no_log: the module would otherwise write the whole tree into the host's log at every run
                "options": {
                    "path": {"type": "str", "required": True},
                    "content": {"type": "str", "required": True, "no_log": True},
                },
            },
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        todo = sources.plan(
            p["dest"],
            sources.tree_of(p["files"]),
            file_mode=sources.parse_mode("mode", p["mode"]),
            dir_mode=sources.parse_mode("directory_mode", p["directory_mode"]),
            state_dir=p["state_dir"],
            bpffs=p["bpffs"],
        )
        if not module.check_mode:
            sources.apply(todo)
    except sources.SourcesError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"dest: reading what {p['dest']} holds failed: {exc}")
    result = {
        "changed": todo.changed,
        "files": todo.files,
        "removed": todo.removed,
        "directories": todo.directories,
        "bpffs_mounted": bool(todo.bpffs),
    }
    if todo.changed:
        result["diff"] = {
            "before": "".join(f"{line}\n" for line in todo.before),
            "after": "".join(f"{line}\n" for line in todo.after),
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
