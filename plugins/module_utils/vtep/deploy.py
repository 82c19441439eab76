# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP as a data plane (dataplane/template.py): its document validated against the host, the map difference
computed and written, its ports' promiscuous flags, and its counters and FDB read from its pinned maps alone
(xdpfleet.fabric.vtep_info).

Deployed by the xdpfleet.fabric.vtep module (the document from the inventory) and by restore (the document the
VTEP's state file recorded).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from typing import ClassVar

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import DataPlane, DataPlaneError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.neighbours import NEIGHBOUR_TIMEOUT
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.promisc import PromiscError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import fdb, layouts, needs, plan, words, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import promiscuous_ports as promisc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import DROP_REASONS, FDB_EVENTS
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    ConfigError,
    InterfaceFacts,
    VtepConfig,
    management_port_problems,
    tunnel_address_problems,
    validate,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.writer import RollbackError

# The XDP programs (both backends' ingress, the XDP backend's egress) and the TC backend's tc program: two objects,
# so that the XDP backend needs nothing a tc program does.
VTEP_SOURCE = "/var/lib/xdpfleet/src/vtep/vtep_xdp.c"
VTEP_TC_SOURCE = "/var/lib/xdpfleet/src/vtep/vtep_tc.c"


class VtepError(DataPlaneError):
    """A refusal or failure; problems lists every validation problem (each starting with the field's path)."""


def host_ports() -> dict[str, plan.Port]:
    ports = {}
    for name in netdev.list_interfaces():
        facts = netdev.sysfs_facts(name)
        ports[name] = plan.Port(name, facts["ifindex"], facts["mtu"], facts["mac"] or "00:00:00:00:00:00")
    return ports


def host_problems(config: VtepConfig, allow_management_port: bool) -> list[str]:
    """The document against the host's addresses: every tunnel port has its local_ip, and (unless allowed) no port
    is the interface the host is managed through."""
    from pyroute2 import IPRoute

    from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import management

    with IPRoute() as ipr:
        addresses = management.interface_addresses(ipr)
        problems = tunnel_address_problems(config, addresses)
        if not allow_management_port:
            problems += management_port_problems(config, management.management_interfaces(ipr, os.environ, addresses))
    return problems


def resolve_peer_macs(config: VtepConfig, ports: dict[str, plan.Port], timeout: float) -> dict[tuple[int, str], str]:
    """The next-hop MAC of every peer given without one, from the host's routes and neighbour table. A remote VTEP
    that is a peer of many VNIs through one port is resolved once (one netlink round trip per peer and VNI cost
    seconds on a host with thousands of VNIs), so all its VNIs send to the same next hop."""
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.neighbours import NeighbourError, resolve

    macs = {}
    resolved: dict[tuple[str, str], str] = {}  # (peer ip, via) -> next-hop MAC
    for vni in config.vnis:
        for peer in vni.peers:
            if peer.mac:
                continue
            if (peer.ip, peer.via) not in resolved:
                try:
                    resolved[(peer.ip, peer.via)] = resolve(peer.ip, ports[peer.via].ifindex, timeout)
                except NeighbourError as exc:
                    raise VtepError(f"{peer.path}.ip: {exc}; give its next-hop mac explicitly") from exc
            macs[(vni.vni, peer.ip)] = resolved[(peer.ip, peer.via)]
    return macs


# The first Linux release where the XDP backend's flooding works in generic XDP, as the VM matrix (tests/vm) found:
# on Debian 12's 6.1 a broadcast to two remote VTEPs left as one copy, the other dropped by its egress program as
# decapsulated (split horizon), on 6.12 both left. In generic XDP a devmap broadcast's copies are clones of one skb
# that share the frame, where each egress program writes its copy's outer headers; what changed in between was not
# found, so the release decides here, not a feature in the kernel's BTF.
GENERIC_FLOODING_SINCE = (6, 12)


def generic_broadcast_problem(mode: str, backend: str, release: str) -> str | None:
    """Why the VTEP cannot run in `mode` with `backend` on kernel `release`; None when it can."""
    if mode != "generic" or backend != "xdp":
        return None
    found = re.match(r"(\d+)\.(\d+)", release)
    if found and (int(found[1]), int(found[2])) >= GENERIC_FLOODING_SINCE:
        return None
    since = ".".join(map(str, GENERIC_FLOODING_SINCE))
    return (
        f"mode: generic with backend: xdp floods only one copy of each broadcast on this kernel ({release}; seen on "
        f"6.1, works from {since}): use mode: native, or backend: linux; nothing was changed"
    )


@dataclass
class VtepPlan:
    """What the maps hold and must hold (writer.update, inside the write), and the ports' promiscuous flags."""

    maps: dict[str, libbpf.Map]
    port_flags: promisc.PortFlags
    done: writer.Update | None = None


class Vtep(DataPlane):
    """A VTEP instance that runs `document`.

    backend: xdp (flooding in XDP) or tc (the XDP program hands forwarding to a tc ingress program on every port).
    source: the XDP programs' C source; tc_source: the tc program's, compiled for the tc backend only.
    check_host: also hold the document against the host's addresses (host_problems()), as the vtep module does; a
    restore does not, its document passed them when it was applied (and at boot the addresses may come later).
    A failure says that the previous state was restored, or that it could not be (and what was not)."""

    name = "vtep"
    title = "VTEP"
    module = "vtep"
    what = "the VTEP"
    what_applied = "the VTEP configuration"
    what_loaded = "the VTEP data plane"
    Error = VtepError
    source = VTEP_SOURCE
    map_layouts: ClassVar[dict[str, MapLayout]] = layouts.LAYOUTS
    counter_maps = layouts.MAP_NAMES
    attachments_in_changes = False  # the vtep module's `changes` are the configuration's; `program` says the rest
    release_errors = (RollbackError,)
    labels: ClassVar[dict[str, tuple[str, ...]]] = {"reason": DROP_REASONS, "event": FDB_EVENTS}

    def __init__(
        self,
        paths: xp.InstancePaths,
        cache_dir: str,
        *,
        document: dict,
        mode: str = "native",
        backend: str = "xdp",
        tc_source: str = VTEP_TC_SOURCE,
        neighbour_timeout: float = NEIGHBOUR_TIMEOUT,
        check_host: bool = False,
        allow_management_port: bool = False,
        **common,
    ):
        super().__init__(paths, cache_dir, **common)
        self.document = document
        self.mode = mode
        self.backend = backend
        self.tc_source = tc_source
        self.neighbour_timeout = neighbour_timeout
        self.check_host = check_host
        self.allow_management_port = allow_management_port

    def validate(self) -> None:
        if generic_problem := generic_broadcast_problem(self.mode, self.backend, os.uname().release):
            raise VtepError(generic_problem)
        self.ports = host_ports()
        facts = {name: InterfaceFacts(port.ifindex, port.mtu, port.mac) for name, port in self.ports.items()}
        try:
            self.config = validate(self.document, facts)
        except ConfigError as exc:
            raise VtepError(str(exc), exc.problems) from exc
        if self.check_host and (problems := host_problems(self.config, self.allow_management_port)):
            listed = "\n".join(f"- {p}" for p in problems)
            raise VtepError(f"the VTEP configuration does not fit this host:\n{listed}", problems)

    def needs(self):
        return needs.NEEDS, needs.variant(self.backend)

    def interfaces(self) -> list[str]:
        return self.config.ports()

    def compile_arguments(self) -> dict:
        tc = self.backend == "tc"
        return {
            "program": layouts.ingress_program(self.backend, self.mode),
            "mode": self.mode,
            "map_sizes": {layouts.LEARNED_FDB: self.config.fdb_size},
            "tc_program": layouts.TC_PROGRAM if tc else None,
            "tc_source": self.tc_source if tc else None,
        }

    def prepare(self) -> None:
        self.peer_macs = resolve_peer_macs(self.config, self.ports, self.neighbour_timeout)

    def plan(self, instance: xp.Instance) -> VtepPlan:
        self.egress = instance.obj.program(layouts.EGRESS_PROGRAM)
        maps = {name: instance.obj.map(name) for name in layouts.MAP_NAMES}
        return VtepPlan(maps, promisc.plan(xp.load_state(self.paths), self.config, self.header))

    def part(self) -> dict:
        return self.document

    def record(self, instance: xp.Instance, object_path: str) -> dict:
        record = super().record(instance, object_path)
        if self.backend == "tc":
            record["tc_source"] = self.tc_source
        return record

    def intent(self, planned: VtepPlan) -> dict:
        return planned.port_flags.intent_record()

    def settled(self, planned: VtepPlan) -> dict:
        return planned.port_flags.record()

    @contextlib.contextmanager
    def write(self, instance: xp.Instance, attach_plan: xp.Plan, planned: VtepPlan):
        write = not self.check_mode
        try:
            with writer.update(planned.maps, self.egress, self.config, self.ports, self.peer_macs, write) as done:
                planned.done = done
                if write and self.writes(planned):
                    planned.port_flags.apply()
                try:
                    yield
                except BaseException as exc:
                    if write and self.writes(planned):
                        planned.port_flags.undo(exc)
                    raise
        except plan.DoesNotFit as exc:
            raise VtepError(f"the VTEP configuration does not fit the data plane, nothing was changed: {exc}") from exc
        except writer.RollbackError as exc:
            raise VtepError(
                f"applying the VTEP configuration failed and the previous state could NOT be restored: {exc.cause}; "
                f"not restored: {'; '.join(exc.unrestored)}. The VTEP may forward wrongly until the configuration "
                "is applied again"
            ) from exc
        except (writer.WriteError, PromiscError, ValueError) as exc:
            raise VtepError(f"applying the VTEP configuration failed, previous state restored: {exc}") from exc

    def writes(self, planned: VtepPlan) -> bool:
        return not planned.done.diff.empty or planned.port_flags.changed

    def changes(self, planned: VtepPlan) -> Changes:
        changes = words.changes(planned.done.current, planned.done.desired, self.names(), self.header)
        changes.extend(planned.port_flags.changes)
        return changes

    def names(self) -> dict[int, str]:
        return {port.ifindex: name for name, port in self.ports.items()}

    def facts(self, instance: xp.Instance, attach_plan: xp.Plan, planned: VtepPlan) -> dict:
        in_maps = planned.done.current if self.check_mode else planned.done.desired
        return fdb.facts(planned.maps, in_maps, self.names())

    @classmethod
    def counters(cls, maps: dict) -> dict:
        """The counters and the FDB (fdb.facts())."""
        names = {port.ifindex: name for name, port in host_ports().items()}
        return fdb.facts(maps, writer.read(maps), names)

    @classmethod
    def arguments(cls, record: dict, options: dict) -> dict:
        return {
            "document": record[cls.name],
            "mode": record.get("mode", "native"),
            "source": record.get("source") or VTEP_SOURCE,
            "include_dirs": (record.get("build") or {}).get("include_dirs"),
            "neighbour_timeout": options.get("neighbour_timeout", NEIGHBOUR_TIMEOUT),
            "backend": "tc" if record.get("tc_program") else "xdp",  # the record names the TC backend's tc program
            "tc_source": record.get("tc_source") or VTEP_TC_SOURCE,
        }

    @classmethod
    def release(cls, paths: xp.InstancePaths, check_mode: bool, label: str) -> Changes:
        """The ports the record names put back as they were before the VTEP took them."""
        return promisc.release(paths, check_mode, label)
