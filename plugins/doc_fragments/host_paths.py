# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Options shared by the modules that keep programs on a host: where objects, pins and state files live."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  cache_dir:
    description: Where compiled objects are cached on the host.
    type: path
    default: /var/lib/xdpfleet/cache
  pin_root:
    description: bpffs directory under which each instance pins its links and maps, in a directory of its name.
    type: path
    default: /sys/fs/bpf/xdpfleet
  state_dir:
    description: Directory of the state files that teardown reads.
    type: path
    default: /var/lib/xdpfleet
"""
