# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP configuration document realised with the Linux kernel's own VXLAN: the interop peer and baseline.

Per VNI the host gets a bridge ``xbr<vni>`` and a vxlan device ``xvx<vni>`` (VNI, UDP port 4789, local = the
tunnel port's local_ip, dev = the tunnel port, learning on, MTU = tunnel MTU - 50) enslaved to it together with
the VNI's access ports. BUM frames reach the peers by head-end replication: one all-zeros FDB entry per peer on the
vxlan device (``bridge fdb append 00:00:00:00:00:00 dev xvx<vni> dst <peer> via <tunnel port>``).

Learning, as the XDP VTEP does it: the bridge learns which port (an access port, or the vxlan device) a MAC is
behind, and the vxlan device learns which remote VTEP; both forget a MAC after the document's fdb_aging (the
bridge's ageing_time, the vxlan device's ageing). A unicast frame to a known MAC goes to that one place; anything
else is flooded. The document's static entries (`fdb`) are sticky static bridge entries (learning never moves
them): at the access port, or at the vxlan device together with a static entry there that names the peer
(``bridge fdb replace <mac> dev xvx<vni> dst <peer> via <tunnel port>``). The kernel drops a decapsulated frame
whose source MAC a static vxlan entry puts at another VTEP (the XDP VTEP forwards it, counted as static_conflict).

No frame from the overlay reaches this host's own IP stack: the host accepts packets for any of its addresses on any
interface, and its vxlan socket (UDP 4789, every address) decapsulates whatever reaches it, so a VXLAN packet that
an endpoint of one VNI sends to the host inside its frames would come out in another VNI. A bridge hands frames up
to the host in two ways: through the bridge device (broadcast, multicast, its own MAC), and, for the reserved
802.1 group addresses 01:80:c2:00:00:01-0f that it does not forward, through the port they came in on. So every
bridge gets a tc ingress filter that drops all it hands up (``xdpfleet_bridge``), and every port of a bridge
(the vxlan device, the access ports) one that drops those group addresses (``xdpfleet_port``): tiny BPF
programs built here from raw instructions, kept by their filters after the module exits, repaired when missing.
The bridges' own forwarding is untouched (ingress of the bridge device sees only what goes up to the host).

The names fit IFNAMSIZ for every 24-bit VNI (``xbr16777215`` is 11 characters) and are how the module recognises
its own devices; it also records them in a state file. Only the devices it makes are ever created or deleted; access
ports are enslaved and released, and brought up, never deleted; underlay addresses are checked, never added.

Flow of `deploy` (every step before `apply` only reads): `read_host` -> validate -> `check` (the Linux-specific
rules on the validated VtepConfig; it gives the desired VNIs) -> `plan` (steps: additions first, then removals) ->
`apply` -> the state file. `remove` plans and applies the removal of every device the module made.

This module is the entry the linux_vtep module calls; the parts are in linux_host.py (what the host has),
linux_desired.py (`check`), linux_plan.py, linux_apply.py and linux_guards.py (the guards and their programs).
"""

from __future__ import annotations

import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import management as host_management
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_apply import apply
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_desired import check
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_host import LinuxVtepError, read_host, report
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_plan import changes, plan

try:
    from pyroute2 import IPRoute

    HAS_PYROUTE2 = True
except ImportError:  # the module reports this with missing_required_lib
    HAS_PYROUTE2 = False

STATE_FILE = "linux_vtep.json"


class MissingLibrary(Exception):
    """A Python library the host needs is not installed (the module says how to get it)."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(name)


def check_state_dir(state_dir: str) -> None:
    try:
        files.check_trusted("state_dir", state_dir)
    except files.UntrustedPath as exc:
        raise LinuxVtepError([str(exc)]) from None


def record_devices(state_dir: str, vnis: dict) -> None:
    """Keep the record of the devices made, rewritten whole when it differs (an unreadable one is replaced)."""
    store = records.Record(state_dir, STATE_FILE)
    try:
        held = store.load() or {}
    except records.RecordError:
        held = {}
    if held.get("vnis") != vnis:
        store.save({"version": 1, "vnis": vnis})


# --------------------------------------------------------------------------------------------------------------
# The module's two entry points


def deploy(ipr, document, state_dir: str, check_mode: bool, allow_management_port: bool) -> dict:
    """Make the host match `document` (state=present): validate, check, plan, apply (not in check mode) and record
    the devices. Returns the module result: changed, changes, diff, vnis (what the host has afterwards; in check
    mode, what it would have) and state_file.

    Raises MissingLibrary, or LinuxVtepError: a refusal before anything changed, or a failure part-way."""
    check_state_dir(state_dir)
    host = read_host(ipr)
    try:
        config = vc.validate(document, host.interface_facts())
    except vc.ConfigError as exc:
        raise LinuxVtepError(exc.problems, msg=str(exc)) from None
    except ImportError:
        raise MissingLibrary("jsonschema") from None
    if allow_management_port:
        management = None
    else:
        management = host_management.management_interfaces(ipr, os.environ, host_management.interface_addresses(ipr))
    desired = check(config, host, management)
    steps = plan(desired, host)
    if steps and not check_mode:
        apply(ipr, steps)
        host = read_host(ipr)
    if check_mode:
        vnis = {str(d.vni): d.report() for d in desired}
    else:
        vnis = report(host)
        record_devices(state_dir, {str(d.vni): d.record() for d in desired})
    return {**changes(steps).result(), "vnis": vnis, "state_file": os.path.join(state_dir, STATE_FILE)}


def remove(ipr, state_dir: str, check_mode: bool) -> dict:
    """Remove every device this module made, recognised by name and kind, and only those, and its state file
    (state=absent). Returns the module result as deploy() does. Raises LinuxVtepError on a failure part-way."""
    check_state_dir(state_dir)
    steps = plan([], read_host(ipr))
    if not check_mode:
        if steps:
            apply(ipr, steps)
        records.Record(state_dir, STATE_FILE).remove()
    return {**changes(steps).result(), "vnis": {}, "state_file": os.path.join(state_dir, STATE_FILE)}


def open_ipr():
    return IPRoute()
