# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Deploying one VTEP document on a host: validate, compile the data plane, load it, compute the map difference,
write it and attach (or, in check mode, only say what would change).

Shared by the xdpfleet.fabric.vtep module (the document from the inventory) and by restore (the document the
VTEP's state file recorded), so a VTEP brought back after a reboot goes through exactly the same steps.
Also here: reading a deployed VTEP's counters and FDB from its pinned maps alone (xdpfleet.fabric.vtep_info).
"""

from __future__ import annotations

import os
import re

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import LayoutMismatch
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.promisc import PromiscError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import fdb, layouts, needs, plan, words, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import promiscuous_ports as promisc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    ConfigError,
    InterfaceFacts,
    VtepConfig,
    management_port_problems,
    tunnel_address_problems,
    validate,
)

# The XDP programs (both backends' ingress, the XDP backend's egress) and the TC backend's tc program: two objects,
# so that the XDP backend needs nothing a tc program does.
VTEP_SOURCE = "/var/lib/xdpfleet/src/vtep/vtep_xdp.c"
VTEP_TC_SOURCE = "/var/lib/xdpfleet/src/vtep/vtep_tc.c"
VTEP_INCLUDE_DIRS = ["/var/lib/xdpfleet/src/include"]
NEIGHBOUR_TIMEOUT = 3.0


class VtepError(RuntimeError):
    """A refusal or failure; problems lists every validation problem (each starting with the field's path)."""

    def __init__(self, msg: str, problems: list[str] | None = None):
        super().__init__(msg)
        self.problems = problems or []


def host_ports() -> dict[str, plan.Port]:
    ports = {}
    for name in netdev.list_interfaces():
        facts = netdev.sysfs_facts(name)
        ports[name] = plan.Port(name, facts["ifindex"], facts["mtu"], facts["mac"] or "00:00:00:00:00:00")
    return ports


def read_counters(paths: xp.InstancePaths) -> dict | None:
    """The counters and the FDB of a deployed VTEP (fdb.facts()), read from its pinned maps: no document, no
    compile, no program load.

    None when the host has no VTEP of that name. Raises VtepError when only some of its maps are pinned, or when
    a map's layout is not the one this collection reads (a VTEP deployed by another version).
    """
    pins = {name: paths.map_pin(name) for name in layouts.MAP_NAMES}
    missing = sorted(name for name, pin in pins.items() if not os.path.exists(pin))
    if len(missing) == len(pins):
        return None
    if missing:
        raise VtepError(
            f"VTEP {paths.name} is incomplete, maps {', '.join(missing)} are not pinned under {paths.maps_dir}: "
            "deploy it again with xdpfleet.fabric.vtep, or remove it (state=absent)"
        )
    maps: dict[str, libbpf.PinnedMap] = {}
    try:
        for name, pin in pins.items():
            maps[name] = libbpf.PinnedMap(pin)
            if name in layouts.LAYOUTS:
                layouts.LAYOUTS[name].check_pinned(maps[name])
        names = {port.ifindex: name for name, port in host_ports().items()}
        return fdb.facts(maps, writer.read(maps), names)
    except LayoutMismatch as exc:
        raise VtepError(
            f"VTEP {paths.name} was deployed by another version of this collection ({exc}): deploy it again with "
            "xdpfleet.fabric.vtep to move it onto this version's maps"
        ) from exc
    finally:
        for m in maps.values():
            m.close()


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


def deploy(
    paths: xp.InstancePaths,
    document: dict,
    mode: str,
    cache_dir: str,
    source: str = VTEP_SOURCE,
    include_dirs: list[str] | None = None,
    neighbour_timeout: float = NEIGHBOUR_TIMEOUT,
    check_mode: bool = False,
    build_dir: str | None = None,
    check_host: bool = False,
    allow_management_port: bool = False,
    backend: str = "xdp",
    tc_source: str = VTEP_TC_SOURCE,
) -> dict:
    """Make the VTEP instance match `document`; returns the module result (changed, changes, program, facts, diff).

    backend: xdp (flooding in XDP) or tc (the XDP program hands forwarding to a tc ingress program on every port).
    source: the XDP programs' C source; tc_source: the tc program's, compiled for the tc backend only.

    build_dir: where a compile that misses the cache goes in check mode (the cache stays as it was).
    check_host: also hold the document against the host's addresses (host_problems()), as the vtep module does; a
    restore does not, its document passed them when it was applied (and at boot the addresses may come later).
    Raises VtepError; nothing on the host changed unless the message says the previous state was restored, or
    that it could not be (and what was not).
    """
    include_dirs = VTEP_INCLUDE_DIRS if include_dirs is None else include_dirs
    try:
        features.require(needs.NEEDS, needs.variant(backend))
    except features.MissingFeatures as exc:
        raise VtepError(f"this kernel cannot run the VTEP, nothing was changed: {exc}", exc.problems) from exc
    if (generic_problem := generic_broadcast_problem(mode, backend, os.uname().release)):
        raise VtepError(generic_problem)
    ports = host_ports()
    facts = {name: InterfaceFacts(port.ifindex, port.mtu, port.mac) for name, port in ports.items()}
    try:
        config = validate(document, facts)
    except ConfigError as exc:
        raise VtepError(str(exc), exc.problems) from exc
    if check_host and (problems := host_problems(config, allow_management_port)):
        listed = "\n".join(f"- {p}" for p in problems)
        raise VtepError(f"the VTEP configuration does not fit this host:\n{listed}", problems)
    if (no_bpffs := xp.bpffs_problem(paths.pin_root)):
        raise VtepError(no_bpffs)
    try:
        xp.check_trusted_paths(paths)
    except xp.XdpProgramError as exc:
        raise VtepError(str(exc)) from exc
    peer_macs = resolve_peer_macs(config, ports, neighbour_timeout)
    try:
        object_path, instance = xp.compiled_instance(
            paths,
            source,
            cache_dir,
            include_dirs,
            layouts.ingress_program(backend, mode),
            mode,
            tuple(layouts.LAYOUTS.values()),
            build_dir=build_dir,
            map_sizes={layouts.LEARNED_FDB: config.fdb_size},
            tc_program=layouts.TC_PROGRAM if backend == "tc" else None,
            tc_source=tc_source if backend == "tc" else None,
        )
    except xp.XdpProgramError as exc:
        raise VtepError(f"loading the VTEP data plane failed, nothing was changed: {exc}") from exc
    names = {port.ifindex: name for name, port in ports.items()}
    vtep_ports = config.ports()
    header = f"vtep {paths.name}"
    with instance:
        try:
            attach_plan = instance.plan(vtep_ports, replace_foreign=False)
        except xp.XdpProgramError as exc:
            raise VtepError(str(exc)) from exc
        maps = {name: instance.obj.map(name) for name in layouts.MAP_NAMES}
        egress = instance.obj.program(layouts.EGRESS_PROGRAM)
        record = xp.state_record(instance, vtep_ports, source, object_path, {"include_dirs": include_dirs})
        if backend == "tc":
            record["tc_source"] = tc_source
        port_flags = promisc.plan(xp.load_state(paths), config, header)
        # The record first (of intent: it still names the ports this change lets go and the cls_bpf filters it
        # removes), the maps and links after, the settled record last (see xp.recording).
        record = {**record, "vtep": document}
        intent = {**record, **port_flags.intent_record(), **xp.detaching_record(attach_plan)}
        recording = xp.recording(paths, intent, check_mode, {**record, **port_flags.record()})
        try:
            with recording as recorded, writer.update(maps, egress, config, ports, peer_macs, not check_mode) as done:
                changed = attach_plan.changed or not done.diff.empty or port_flags.changed
                if changed and not check_mode:
                    port_flags.apply()
                    try:
                        instance.apply(attach_plan)
                    except BaseException as exc:
                        port_flags.undo(exc)
                        raise
        except plan.DoesNotFit as exc:
            raise VtepError(f"the VTEP configuration does not fit the data plane, nothing was changed: {exc}") from exc
        except writer.RollbackError as exc:
            raise VtepError(
                f"applying the VTEP configuration failed and the previous state could NOT be restored: {exc.cause}; "
                f"not restored: {'; '.join(exc.unrestored)}. The VTEP may forward wrongly until the configuration "
                "is applied again"
            ) from exc
        except xp.RecordError as exc:
            raise VtepError(str(exc)) from exc
        except (writer.WriteError, *xp.ATTACH_ERRORS, xp.XdpProgramError, PromiscError, ValueError) as exc:
            raise VtepError(f"applying the VTEP configuration failed, previous state restored: {exc}") from exc
        in_maps = done.current if check_mode else done.desired
        config_changes = words.changes(done.current, done.desired, names, header)
        config_changes.extend(port_flags.changes)
        if recorded and not changed:
            config_changes.add(xp.record_step(paths.state_file))
        changed = changed or recorded
        result = {
            "changed": changed,
            "changes": config_changes.steps,
            "program": {s.label: s.action for s in attach_plan.steps},
            "ansible_facts": {"xdpfleet_vtep": fdb.facts(maps, in_maps, names)},
        }
        if changed:
            shown = Changes(header)
            shown.extend(config_changes)
            shown.extend(xp.attachment_changes(attach_plan.steps, header))
            result["diff"] = shown.diff()
        return result
