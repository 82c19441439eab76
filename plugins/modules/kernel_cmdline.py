#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_cmdline
short_description: Kernel arguments present or absent in the boot configuration (GRUB file or grubby)
version_added: "0.1.0"
description:
  - Ensures kernel arguments such as C(iommu=pt), C(intel_iommu=on), C(isolcpus=2-7) or a bare flag such as
    C(nosmt) are on the boot command line, and others are not. The change takes effect at the next boot. This
    module never reboots. It reports C(reboot_required) instead.
  - With I(bootloader=grub) (Debian, Ubuntu) it edits one variable of C(/etc/default/grub). The variable's value
    is read as the shell reads it (double or single quotes, backslash escapes), then split as the kernel splits
    it (whitespace outside double quotes). Repeated keys such as C(console=tty0 console=ttyS0) are kept in
    order. Arguments after C(--) belong to init and are never touched. Only that variable's line changes; its
    quoting style, the comments and the other lines stay as they are. A missing variable is appended. The file is
    replaced atomically (temporary file and rename, mode and owner kept). Then I(update_command) regenerates the
    GRUB configuration. If it fails, the file is put back as it was and the task fails.
  - With I(bootloader=grubby) (EL, Fedora) it reads every boot entry with C(grubby --info=ALL) and runs one
    C(grubby --update-kernel=ALL --args=... --remove-args=...) when any entry lacks a present argument or has an
    absent one.
  - A present C(key=value) whose key the kernel takes once replaces the other values of that key, in place. These
    keys are C(iommu), C(intel_iommu), C(amd_iommu), C(mitigations), C(isolcpus), C(nohz_full), C(rcu_nocbs),
    C(irqaffinity), C(default_hugepagesz) and C(transparent_hugepage). Any other argument is appended when that
    exact argument is missing. C(hugepagesz) and C(hugepages) are not in the list on purpose. They repeat
    legitimately, one pair per page size. To change a reservation, remove the old pair (I(absent)) in one task and
    add the new one in the next.
  - Arguments are compared as the kernel sees them, without their double quotes.
  - On its first change the module records, in C(<state_dir>/kernel_cmdline.json), the variable's original value
    (grub) or every entry's original arguments (grubby), and the arguments it added and removed. I(state=restore)
    undoes exactly that. An argument it added is removed again, one it removed is put back next to its original
    neighbour, and arguments changed by others since are left alone. When nothing else changed, the GRUB file is
    byte for byte what it was. The record is then deleted.
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - GRUB 2 with a defaults file and C(update-grub) or C(grub2-mkconfig), or grubby
options:
  state:
    description:
      - C(present) ensures I(present) and I(absent). C(restore) undoes what this collection changed (see the
        description) and takes the bootloader, file and variable from the record, not from the options.
    type: str
    choices: [present, restore]
    default: present
  present:
    description:
      - Arguments that must be on the command line, each C(key), C(key=value) or a bare flag.
      - An argument must be printable ASCII and must not be empty, contain whitespace, quotes, C(\), C($), a
        backtick, C(;), C(|), C(&), C(<), C(>), C({), C(}) or C(#) (what the shell in C(/etc/default/grub) or GRUB's
        script in C(grub.cfg) would interpret), start with C(=), or be C(--).
    type: list
    elements: str
    default: []
  absent:
    description:
      - Arguments that must not be on the command line. C(key) removes every occurrence of that key, with any value
        or none. C(key=value) removes only that exact argument.
      - A key may not be in both I(present) and I(absent).
    type: list
    elements: str
    default: []
  bootloader:
    description:
      - C(auto) uses grubby when C(/usr/sbin/grubby) or C(/usr/bin/grubby) exists, else the GRUB file.
    type: str
    choices: [auto, grub, grubby]
    default: auto
  grub_file:
    description: The GRUB defaults file (bootloader grub). It must exist.
    type: path
    default: /etc/default/grub
  grub_variable:
    description:
      - The variable of I(grub_file) to edit.
      - The default, C(GRUB_CMDLINE_LINUX_DEFAULT), goes on the normal boot entries only. The recovery entries get
        only C(GRUB_CMDLINE_LINUX), so a tuning mistake (C(isolcpus), C(mitigations), ...) still leaves a recovery
        entry that boots with the distribution's arguments. Use C(GRUB_CMDLINE_LINUX) for arguments every entry
        needs, as on EL hosts without grubby.
      - A C(grub.d/*.cfg) file next to I(grub_file) that sets the same variable wins over it (Ubuntu cloud images
        ship one). The module warns when it finds one.
    type: str
    default: GRUB_CMDLINE_LINUX_DEFAULT
  update_command:
    description:
      - The command that regenerates the GRUB configuration after the file changed, as a list (no shell).
      - Default C([update-grub]) where it exists, else C([grub2-mkconfig, -o, /boot/grub2/grub.cfg]).
      - An empty list does not regenerate. Use it for hosts whose bootloader reads the file another way, and for
        the network-namespace lab, which has no bootloader.
      - The command a change was made with is recorded. I(state=restore) without this option runs that one, not
        today's default, so a restore needs no inventory variables (C(playbooks/teardown.yml)).
      - Not used with grubby.
    type: list
    elements: str
  state_dir:
    description: Directory of the record that I(state=restore) reads (C(kernel_cmdline.json)).
    type: path
    default: /var/lib/xdpfleet
attributes:
  check_mode:
    support: full
    description: Reads the file, C(/proc/cmdline) and C(grubby --info=ALL); writes and runs nothing else.
  diff_mode:
    support: full
    description: The variable's line before and after (grub), or every entry's arguments (grubby).
notes:
  - Bad input fails before anything is written, with a message naming the option and the rule.
  - grubby applies its own rule to a C(key=value) in C(--args). It replaces the key's existing value. So two values
    of one key, such as two C(console=) arguments, cannot be added side by side through grubby.
  - grubby entries whose arguments are C($kernelopts) (EL 8, arguments kept in grubenv) are refused. Other variables
    in an entry, such as C($tuned_params), are kept as they are.
  - The module edits only I(grub_variable). An absent argument that another variable of I(grub_file) also gives
    stays on the command line, with a warning, and C(reboot_required) stays true for it.
seealso:
  - module: xdpfleet.fabric.xdp_probe
"""

EXAMPLES = r"""
- name: IOMMU passthrough for XDP on Intel hosts (a reboot applies it)
  xdpfleet.fabric.kernel_cmdline:
    present: [iommu=pt, intel_iommu=on]
  register: cmdline

- name: Isolate the forwarding cores and drop the speculative-execution mitigations
  xdpfleet.fabric.kernel_cmdline:
    present: [isolcpus=2-7, nohz_full=2-7, rcu_nocbs=2-7, mitigations=off]
    absent: [quiet]

- name: EL host without grubby, every boot entry
  xdpfleet.fabric.kernel_cmdline:
    bootloader: grub
    grub_variable: GRUB_CMDLINE_LINUX
    present: [iommu=pt]

- name: Put back what this collection changed
  xdpfleet.fabric.kernel_cmdline:
    state: restore
"""

RETURN = r"""
bootloader:
  description: The back end used (C(grub) or C(grubby)); null when I(state=restore) found no record.
  returned: always
  type: str
  sample: grub
added:
  description: Arguments added by this run (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: [iommu=pt]
removed:
  description: Arguments removed by this run (in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: [iommu=nopt]
commands:
  description: The commands run (in check mode, that would run) to apply the change.
  returned: always
  type: list
  elements: list
  sample: [[/usr/sbin/grubby, --update-kernel=ALL, --args=iommu=pt]]
cmdline_running:
  description: The arguments of the running kernel (C(/proc/cmdline)), before C(--).
  returned: always
  type: list
  elements: str
  sample: [BOOT_IMAGE=/boot/vmlinuz-6.1.0-27-amd64, root=UUID=0b1f, ro, quiet]
cmdline_configured:
  description:
    - What the next boot gets. With grub, a list of the arguments of normal entries (C(GRUB_CMDLINE_LINUX) then
      I(grub_variable)). With grubby, a dict of kernel path to its list of arguments.
  returned: always
  type: raw
  sample: [quiet, iommu=pt]
reboot_required:
  description:
    - Whether the running kernel's arguments differ from the configured ones in an argument this task is about.
      This covers a present argument missing from C(/proc/cmdline), an absent one still there, and, for
      I(state=restore), a restored one. It does not matter whether this run changed anything.
  returned: always
  type: bool
state_file:
  description: The record of what this collection changed, read by I(state=restore).
  returned: always
  type: str
  sample: /var/lib/xdpfleet/kernel_cmdline.json
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import kernel_cmdline as kc


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "restore"], "default": "present"},
            "present": {"type": "list", "elements": "str", "default": []},
            "absent": {"type": "list", "elements": "str", "default": []},
            "bootloader": {"type": "str", "choices": ["auto", "grub", "grubby"], "default": "auto"},
            "grub_file": {"type": "path", "default": "/etc/default/grub"},
            "grub_variable": {"type": "str", "default": "GRUB_CMDLINE_LINUX_DEFAULT"},
            "update_command": {"type": "list", "elements": "str"},
            "state_dir": {"type": "path", "default": "/var/lib/xdpfleet"},
        },
        supports_check_mode=True,
    )
    try:
        result = kc.run(module.params, module.check_mode, module.run_command)
    except (kc.KernelCmdlineError, OSError) as exc:
        module.fail_json(msg=str(exc))
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
