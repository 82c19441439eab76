# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP's access ports and trunks in promiscuous mode while it serves them, and as they were once it lets them go.

A NIC (virtio_net, ice, mlx5) drops a unicast frame to a MAC the host has not asked for before any XDP program sees
it. An access port or trunk receives frames for the endpoints behind other VTEPs, so without promiscuous mode known
unicast from it never reaches the VTEP (and no drop is counted): the Linux bridge makes its ports promiscuous for the
same reason. Tunnel ports receive VXLAN addressed to the host's own MAC and are left as they are.

The flag is set with RTM_NEWLINK, not counted through a packet socket (host/promisc.py says why). The state file
records, per served port, whether its flag was set before the VTEP took it (RECORD_KEY). A port keeps that recorded
value while it stays in the VTEP, so a re-run, or the restore after a reboot, sets the flag again and still knows
what to put back when the port leaves the document or the VTEP is removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.promisc import (
    PromiscError,
    promiscuous,
    set_promiscuous,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import VtepConfig
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.writer import RollbackError

RECORD_KEY = "promisc_before"


def _word(on: bool) -> str:
    return "on" if on else "off"


def served_ports(config: VtepConfig) -> list[str]:
    """The access ports and trunks of the configuration, sorted, each once."""
    names = set()
    for vni in config.vnis:
        names.update(a.port for a in vni.access_ports)
        names.update(t.port for t in vni.trunks)
    return sorted(names)


def recorded(record: dict) -> dict[str, bool]:
    """Port -> whether its flag was set before the VTEP took it, as a state record keeps it ({} when it does not)."""
    found = record.get(RECORD_KEY)
    return {port: bool(was) for port, was in found.items()} if isinstance(found, dict) else {}


@dataclass
class PortFlags:
    """The flag changes that make the host's ports match a VTEP (or its removal), applied in order, undone on
    failure."""

    header: str
    before: dict[str, bool] = field(default_factory=dict)  # every served port -> its flag before the VTEP took it
    released: dict[str, bool] = field(default_factory=dict)  # ports let go whose flag steps put back -> that flag
    steps: list[tuple[str, bool]] = field(default_factory=list)  # (port, flag to set)
    changes: Changes = field(init=False)
    _done: list[tuple[str, bool]] = field(default_factory=list)  # (port, flag it had) of every step applied

    def __post_init__(self) -> None:
        self.changes = Changes(self.header)

    @property
    def changed(self) -> bool:
        return bool(self.steps)

    def record(self) -> dict:
        """The part of the VTEP's state record that says how to put its ports back, once the steps are applied."""
        return {RECORD_KEY: dict(sorted(self.before.items()))}

    def intent_record(self) -> dict:
        """record() while the steps are being applied: it still names the ports being let go, with the flag each gets
        back, so that a run killed before it put one back leaves a record from which a re-run puts it back (with
        record() alone the port would be forgotten, its flag left as the VTEP set it)."""
        return {RECORD_KEY: dict(sorted({**self.before, **self.released}.items()))}

    def add(self, port: str, on: bool, why: str) -> None:
        self.steps.append((port, on))
        self.changes.add(
            f"{port}: promisc {_word(on)} ({why})",
            key=("promisc", port),
            before=f"{port}: promisc {_word(not on)}",
            after=f"{port}: promisc {_word(on)}",
        )

    def apply(self) -> None:
        """Set every flag; on a failure put back those already set and raise PromiscError (or RollbackError when
        one cannot be put back)."""
        try:
            for port, on in self.steps:
                set_promiscuous(port, on)
                self._done.append((port, not on))
        except PromiscError as exc:
            self.undo(exc)
            raise

    def undo(self, cause: BaseException) -> None:
        """Put back the flags apply() set, because of cause; raises RollbackError (from cause) naming those that could
        not be put back."""
        unrestored = []
        for port, on in reversed(self._done):
            try:
                set_promiscuous(port, on)
            except PromiscError as exc:
                unrestored.append(f"promisc {_word(on)} on {port} ({exc})")
        self._done.clear()
        if unrestored:
            raise RollbackError(str(cause) or type(cause).__name__, unrestored) from cause


def plan(previous_record: dict, config: VtepConfig, header: str) -> PortFlags:
    """Served ports whose flag is off get it on; ports the previous record served that this configuration does not
    get back the flag they had before (a port that is gone from the host needs nothing)."""
    was = recorded(previous_record)
    flags = PortFlags(header)
    for port in served_ports(config):
        now = bool(promiscuous(port))  # validation found the port on the host
        flags.before[port] = was.get(port, now)
        if not now:
            flags.add(port, True, "receives frames for the MACs behind other VTEPs")
    _put_back(flags, {port: on for port, on in was.items() if port not in flags.before})
    return flags


def _put_back(flags: PortFlags, was: dict[str, bool]) -> None:
    for port, on in sorted(was.items()):
        if promiscuous(port) not in (None, on):
            flags.add(port, on, "as before the VTEP served it")
            flags.released[port] = on


def release(paths: xp.InstancePaths, check_mode: bool, label: str) -> Changes:
    """The ports an instance's record names put back as they were before the VTEP took them, before the instance is
    removed (dataplane/template.py's remove); returns what was (or would be) changed."""
    flags = PortFlags(f"{label} {paths.name}")
    _put_back(flags, recorded(xp.load_state(paths)))
    if not check_mode:
        flags.apply()
    return flags.changes
