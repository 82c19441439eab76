# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The option of both VTEP backends that lets a port be the interface the host is managed through."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  allow_management_port:
    description:
      - Allow a tunnel port, access port or trunk that is the interface this host is managed through. That is the
        interface carrying the address of the SSH session the module runs in (the server address of
        C(SSH_CONNECTION)), or, in a run without SSH, the interface of a default route. A VTEP port takes over its
        interface's traffic, so such a document is refused unless this is C(true).
    type: bool
    default: false
"""
