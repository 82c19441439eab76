# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""One BPF program instance attached to a set of interfaces through pinned bpf_links: at XDP (native or generic
mode), at tc ingress (tcx, mode "tc"), or at both (an XDP program and a tc program on every interface, as the VTEP's
tc backend runs: XDP classifies, tc replicates). Where the kernel has no tcx (before Linux 6.6) a tc program is a
cls_bpf filter at clsact ingress instead (bpf/cls_bpf.py), at a priority the record keeps, so that a restore puts
it back in the same order among the filters there.

Layout on a host, for an instance named N:
  /sys/fs/bpf/xdpfleet/N/links/<ifname>   the bpf_link of each XDP attachment (it keeps the program attached)
  /sys/fs/bpf/xdpfleet/N/tc-links/<ifname>  the bpf_link of each tcx ingress attachment (a cls_bpf filter has none)
  /sys/fs/bpf/xdpfleet/N/maps/<map>       the object's maps, reused by the next version when compatible
  /var/lib/xdpfleet/programs/N.json       what was attached where, for teardown and restore

Everything is decided before anything changes (plan), then applied make-before-break (apply): a new version
replaces the old one through bpf_link_update, so an interface never runs without a program, and a failure on
one interface rolls back those already changed. Idempotence is judged by what the kernel runs: the program's
tag, its .rodata constants, its maps and the attach mode.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import socket
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import cls_bpf, features, libbpf, object_needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.abi import declared_enums
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf import Btf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout, set_rodata, shape
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, mounts, records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.netlink import NetlinkError

PIN_ROOT = "/sys/fs/bpf/xdpfleet"
STATE_DIR = "/var/lib/xdpfleet"
CACHE_DIR = "/var/lib/xdpfleet/cache"
# Map flags the kernel adds by itself, by map type: programs cannot write a devmap (DEVMAP, DEVMAP_HASH), so it
# creates each with BPF_F_RDONLY_PROG, which the object does not declare (the kernel refuses it at creation).
KERNEL_MAP_FLAGS = {
    libbpf.BPF_MAP_TYPE_DEVMAP: libbpf.BPF_F_RDONLY_PROG,
    libbpf.BPF_MAP_TYPE_DEVMAP_HASH: libbpf.BPF_F_RDONLY_PROG,
}
# Where a program runs: XDP_MODES are the XDP hook's modes; TC_MODE is the tcx ingress hook (the tc programs of
# the tcx hook run after XDP and before the stack, on the skb).
XDP_MODES = ("native", "generic")
TC_MODE = "tc"
MODES = (*XDP_MODES, TC_MODE)
HOOK_XDP = "xdp"
HOOK_TC = "tc"
DEPLOY_ORDER = "deploy_order"  # a record's key: the instance's place in the order of deployment (deploy_order)
PROGRAM_TYPES = {HOOK_XDP: libbpf.BPF_PROG_TYPE_XDP, HOOK_TC: libbpf.BPF_PROG_TYPE_SCHED_CLS}
# How a tc program is attached: a tcx link (Linux 6.6), or a cls_bpf filter on a clsact qdisc where tcx is missing.
TC_ATTACH_TCX = "tcx"
TC_ATTACH_CLS_BPF = "cls_bpf"
TC_ATTACH_KINDS = (TC_ATTACH_TCX, TC_ATTACH_CLS_BPF)
# Forces how tc programs are attached whatever the kernel has, read in tc_attach_kind() only: the tests run the
# cls_bpf fallback on kernels with tcx through it.
TC_ATTACH_ENV = "XDPFLEET_TC_ATTACH"
# The errors of attaching and detaching (libbpf for links, rtnetlink for cls_bpf filters).
ATTACH_ERRORS = (libbpf.LibbpfError, NetlinkError, cls_bpf.ClsBpfError)


def hook_of(mode: str) -> str:
    return HOOK_TC if mode == TC_MODE else HOOK_XDP


def tc_attach_kind() -> str:
    """How this host attaches tc programs: tcx where the kernel has it, else cls_bpf; TC_ATTACH_ENV forces one."""
    forced = os.environ.get(TC_ATTACH_ENV)
    if forced:
        if forced not in TC_ATTACH_KINDS:
            raise XdpProgramError(f"{TC_ATTACH_ENV}: {forced!r} is not one of {', '.join(TC_ATTACH_KINDS)}")
        return forced
    try:
        has_tcx = features.KernelFeatures.from_host().has_attach_type("BPF_TCX_INGRESS")
    except (features.KernelBtfMissing, features.BtfError):
        has_tcx = False  # what the kernel offers is unknown: cls_bpf runs on every kernel
    return TC_ATTACH_TCX if has_tcx else TC_ATTACH_CLS_BPF


class XdpProgramError(RuntimeError):
    """A refusal or failure, with a message meant for the person running the playbook."""


class RecordError(XdpProgramError):
    """The state file could not be written before a change: nothing was changed."""


@dataclass(frozen=True)
class InstancePaths:
    name: str
    pin_root: str = PIN_ROOT
    state_dir: str = STATE_DIR

    @property
    def pin_dir(self) -> str:
        return os.path.join(self.pin_root, self.name)

    @property
    def links_dir(self) -> str:
        return os.path.join(self.pin_dir, "links")

    @property
    def tc_links_dir(self) -> str:
        return os.path.join(self.pin_dir, "tc-links")

    @property
    def maps_dir(self) -> str:
        return os.path.join(self.pin_dir, "maps")

    @property
    def record(self) -> records.Record:
        """The instance's state file (common/records.py)."""
        return records.Record(os.path.join(self.state_dir, "programs"), f"{self.name}.json")

    @property
    def state_file(self) -> str:
        return self.record.path

    def link_pin(self, ifname: str, hook: str = HOOK_XDP) -> str:
        return os.path.join(self.tc_links_dir if hook == HOOK_TC else self.links_dir, ifname)

    def map_pin(self, map_name: str) -> str:
        return os.path.join(self.maps_dir, map_name)


@dataclass
class Running:
    """What one of our pinned links runs now, as the kernel reports it."""

    ifname: str
    link_fd: int
    link_id: int
    ifindex: int  # 0 when the interface went away under the link
    prog_id: int
    prog_fd: int
    prog_name: str
    tag: str
    rodata: bytes
    mode: str  # native, generic or tc; none when the link no longer runs on the interface
    tc_filter: dict | None = None  # a cls_bpf filter (no link, link_fd -1): its recorded place (tc_filter_place())

    def describe(self) -> str:
        return describe(self.prog_name, self.tag, self.mode, place=self.tc_filter)


@dataclass
class Step:
    ifname: str
    action: str  # attach, replace, reattach, takeover, unchanged, detach
    ifindex: int = 0
    before: str = ""
    after: str = ""
    running: Running | None = None
    foreign_prog_id: int = 0
    foreign_mode: str = ""
    hook: str = HOOK_XDP
    tc_filter: dict | None = None  # at the tc hook through cls_bpf: the filter's place (tc_filter_place())

    @property
    def label(self) -> str:
        """The attachment's name in changes and results: the interface, with "(tc)" for a tc attachment."""
        return f"{self.ifname} (tc)" if self.hook == HOOK_TC else self.ifname


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    new_maps: list[str] = field(default_factory=list)  # maps the new version creates (their pins are swapped)

    @property
    def changed(self) -> bool:
        # New maps alone are a change: the running program must move onto them.
        return bool(self.new_maps) or any(s.action != "unchanged" for s in self.steps)


def bpffs_problem(pin_root: str) -> str | None:
    """Why pins cannot be kept under `pin_root` (no bpffs holds it), or None; said the same way by every module."""
    if mounts.holding_type(pin_root) == mounts.BPFFS_TYPE:
        return None
    where = os.path.dirname(os.path.abspath(pin_root))
    return (
        f"bpffs is not mounted at {where}: mount -t bpf bpf {where} (the xdpfleet.fabric.xdp_host role mounts it), "
        f"so no pin can be made under {pin_root}"
    )


def ifindex_of(ifname: str) -> int:
    try:
        return socket.if_nametoindex(ifname)
    except OSError:
        return 0


def describe(name: str, tag: str, mode: str, constants: dict | None = None, place: dict | None = None) -> str:
    """A program as it runs; place: the cls_bpf filter it is (none: a link)."""
    knobs = ", ".join(f"{k}={v}" for k, v in sorted((constants or {}).items()))
    where = f" (cls_bpf priority {place['priority']})" if place else ""
    return f"{name} tag {tag} {mode}{where}" + (f" ({knobs})" if knobs else "")


def tc_filter_place(priority: int, handle: int, clsact_created: bool) -> dict:
    """Where an instance's cls_bpf filter sits on an interface, as its record keeps it: the priority and handle
    (restore puts it back there, so the filters keep their order), and whether the instance created the clsact
    qdisc (teardown removes it when it leaves it empty)."""
    return {"priority": priority, "handle": handle, "clsact_created": clsact_created}


# A record of intent's key: the cls_bpf filters the change being applied removes (interface -> {"tc_filter": its
# place}). A filter has no pin, so once the record no longer names an interface nothing else could find its filter.
DETACHING = "detaching"


def recorded_tc_filter(record: dict, ifname: str) -> dict | None:
    """The place of the instance's cls_bpf filter on an interface, from its entry or, while it is being removed, from
    DETACHING."""
    for key in ("interfaces", DETACHING):
        place = ((record.get(key) or {}).get(ifname) or {}).get("tc_filter")
        if place:
            return place
    return None


def detaching_record(plan: Plan) -> dict:
    """The part of a record of intent that names the cls_bpf filters the plan removes (those detached, and those
    that a tcx link replaces), so that a run killed before it removed one leaves a record from which a re-run
    removes it; {} when there is none. The settled record, written once they are gone, does without it."""
    places = {
        s.ifname: {"tc_filter": s.running.tc_filter}
        for s in plan.steps
        if s.running and s.running.tc_filter and (s.action == "detach" or (s.action == "reattach" and not s.tc_filter))
    }
    return {DETACHING: places} if places else {}


def read_rodata(prog_fd: int) -> bytes:
    """The .rodata contents a loaded program runs with (b'' when it has none)."""
    for map_id in libbpf.prog_info(prog_fd).map_ids:
        try:
            fd = libbpf.map_fd_by_id(map_id)
        except libbpf.LibbpfError:
            continue
        try:
            m = libbpf.Map.from_fd(fd)
            if m.name.endswith(".rodata"):
                return m.lookup(b"\0" * m.key_size) or b""
        finally:
            os.close(fd)
    return b""


def read_running(paths: InstancePaths, ifname: str, hook: str = HOOK_XDP, record: dict | None = None) -> Running | None:
    """Open our pinned link for an interface at a hook, or at tc our cls_bpf filter where the record (default: the
    state file's) places one; None when there is neither."""
    try:
        link_fd = libbpf.obj_get(paths.link_pin(ifname, hook))
    except libbpf.LibbpfError as exc:
        if exc.errno != errno.ENOENT:
            raise
        if hook != HOOK_TC:
            return None
        return read_filter(paths, ifname, load_state(paths) if record is None else record)
    link = libbpf.link_info(link_fd)
    mode = "none"
    if link.ifindex and hook == HOOK_TC:
        mode = TC_MODE  # a tcx link the kernel still holds on an interface runs there
    elif link.ifindex:
        state = libbpf.xdp_query(link.ifindex)
        mode = state.mode if state.prog_id == link.prog_id else "none"
    prog_fd = libbpf.prog_fd_by_id(link.prog_id)
    info = libbpf.prog_info(prog_fd)
    return Running(
        ifname=ifname,
        link_fd=link_fd,
        link_id=link.id,
        ifindex=link.ifindex,
        prog_id=link.prog_id,
        prog_fd=prog_fd,
        prog_name=info.name,
        tag=info.tag,
        rodata=read_rodata(prog_fd),
        mode=mode,
    )


def read_filter(paths: InstancePaths, ifname: str, record: dict) -> Running | None:
    """Our cls_bpf filter on an interface: at the place the record names, with our name; None when it is not there
    (a filter of another name there is not ours)."""
    place = recorded_tc_filter(record, ifname)
    ifindex = ifindex_of(ifname)
    if not place or not ifindex:
        return None
    try:
        found = cls_bpf.filters(ifindex)
    except NetlinkError as exc:
        raise XdpProgramError(f"{ifname}: reading its tc filters: {exc}") from exc
    ours = next(
        (
            f
            for f in found
            if (f.priority, f.handle) == (place["priority"], place["handle"])
            and f.name == cls_bpf.owner_name(paths.name)
        ),
        None,
    )
    if ours is None:
        return None
    prog_fd = libbpf.prog_fd_by_id(ours.prog_id)
    info = libbpf.prog_info(prog_fd)
    return Running(
        ifname=ifname,
        link_fd=-1,
        link_id=0,
        ifindex=ifindex,
        prog_id=ours.prog_id,
        prog_fd=prog_fd,
        prog_name=info.name,
        tag=info.tag,
        rodata=read_rodata(prog_fd),
        mode=TC_MODE,
        tc_filter=place,
    )


def recorded_attachments(paths: InstancePaths) -> list[tuple[str, str]]:
    """(interface, hook) of every attachment the instance has pinned or recorded."""
    found = set()
    for hook, directory in ((HOOK_XDP, paths.links_dir), (HOOK_TC, paths.tc_links_dir)):
        if os.path.isdir(directory):
            found.update((ifname, hook) for ifname in os.listdir(directory))
    record = load_state(paths)
    for ifname in record.get("interfaces", {}):
        found.add((ifname, hook_of(record.get("mode", "native"))))
        if record.get("tc_program"):
            found.add((ifname, HOOK_TC))
    found.update((ifname, HOOK_TC) for ifname in record.get(DETACHING, {}))
    return sorted(found)


def load_state(paths: InstancePaths) -> dict:
    """The instance's record, {} when it has none. Raises records.RecordError (a ValueError) for one that cannot be
    read or is not a JSON object."""
    return paths.record.load() or {}


def write_state(paths: InstancePaths, state: dict) -> None:
    paths.record.save(state)


def check_trusted_paths(paths: InstancePaths, object_path: str | None = None) -> None:
    """Refuse, before anything is read or changed, an instance whose object, state directory or pins another user
    could replace (common/files.py says the rule). Raises XdpProgramError naming the field."""
    try:
        files.check_trusted_fields(
            {"object": object_path, "state_dir": paths.state_dir, "pin_root": paths.pin_root}
        )
    except files.UntrustedPath as exc:
        raise XdpProgramError(str(exc)) from None


def runs_at_tc(record: dict) -> bool:
    return record.get("mode") == TC_MODE or bool(record.get("tc_program"))


def recorded_deploy_orders(state_dir: str) -> dict[str, int | None]:
    """Every recorded instance's DEPLOY_ORDER (None where its record has none or cannot be read)."""
    programs_dir = os.path.join(state_dir, "programs")
    orders: dict[str, int | None] = {}
    for entry in os.listdir(programs_dir) if os.path.isdir(programs_dir) else ():
        if not entry.endswith(".json"):
            continue
        try:
            order = (records.Record(programs_dir, entry).load() or {}).get(DEPLOY_ORDER)
        except records.RecordError:
            order = None
        orders[entry[: -len(".json")]] = order if isinstance(order, int) and not isinstance(order, bool) else None
    return orders


def deploy_order(paths: InstancePaths, previous: dict, record: dict) -> int:
    """The instance's place in the order the host's instances were deployed, which the restore at boot follows: tc
    runs the programs at a hook in the order they were attached (tcx appends), so a filter deployed after a tc VTEP
    must come back after it. An update keeps the place, as it keeps the attachments (bpf_link_update, a cls_bpf
    filter replaced at its priority); an instance deployed anew (after a removal), or that now runs at tc and did
    not, was attached after every other one and goes last."""
    kept = previous.get(DEPLOY_ORDER)
    if isinstance(kept, int) and not isinstance(kept, bool) and (runs_at_tc(previous) or not runs_at_tc(record)):
        return kept
    others = [o for name, o in recorded_deploy_orders(paths.state_dir).items() if name != paths.name and o is not None]
    return max(others, default=0) + 1


def same_record(a: dict, b: dict) -> bool:
    """Whether two records name the same configuration (when each was written does not count)."""
    return {k: v for k, v in a.items() if k != "updated"} == {k: v for k, v in b.items() if k != "updated"}


@contextlib.contextmanager
def recording(paths: InstancePaths, record: dict, check_mode: bool, settled: dict | None = None):
    """Record `record` as the instance's configuration before the block changes the data plane, and put the
    previous record back when the block fails (its changes were undone). Yields whether the record changes.

    The record is written first so that a failed write (a full disk) refuses before anything runs, and a kill part-way
    leaves a record of what was being applied: a re-run or the restore at boot then converges to it. A record that
    differs from what already runs (one lost or left stale by an earlier run) is rewritten even when nothing else
    changes, so a re-run repairs it. The record also keeps the instance's place in the order of deployment
    (deploy_order), which the restore follows.

    settled: the record once the block's changes are all made, where it says less than `record`, the record of
    intent (the VTEP's: ports it lets go, whose flags the block puts back; a kill before that must leave a record
    that still names them). It replaces `record` after the block succeeded."""
    previous = load_state(paths)
    order = deploy_order(paths, previous, record)
    record = {**record, DEPLOY_ORDER: order}
    settled = record if settled is None else {**settled, DEPLOY_ORDER: order}
    if check_mode:
        yield not same_record(previous, settled)
        return
    intent_written = not same_record(previous, record)
    if intent_written:
        try:
            write_state(paths, record)
        except OSError as exc:
            raise RecordError(f"{paths.name}: writing {paths.state_file} failed, nothing was changed: {exc}") from exc
    try:
        yield not same_record(previous, settled)
    except BaseException as failure:
        if not intent_written:
            raise
        try:
            if previous:
                write_state(paths, previous)
            else:
                paths.record.remove()
        except OSError as exc:
            raise XdpProgramError(
                f"{failure}; putting back the previous record {paths.state_file} also failed ({exc}): it names the "
                "configuration that failed, which a re-run or the restore applies"
            ) from failure
        raise
    if not same_record(record if intent_written else previous, settled):
        try:
            write_state(paths, settled)
        except OSError as exc:
            raise RecordError(
                f"{paths.name}: the configuration is applied but writing its final record {paths.state_file} failed "
                f"({exc}): a re-run writes it"
            ) from exc


def compatible(
    pinned: libbpf.MapInfo | libbpf.ObjectMap, pinned_btf: Btf | None, wanted: libbpf.ObjectMap, wanted_btf: Btf
) -> bool:
    """Whether the new object can use a pinned map (or another object's) as it is: same kind and sizes and, where both
    carry BTF, keys and values of the same shape, and the same numbers for the enums their data planes declare
    (bpf/abi.py). A struct whose fields moved but whose size did not is a new map, not a misread one; so are counters
    indexed by a drop reason whose number changed."""
    pinned_flags = pinned.map_flags & ~KERNEL_MAP_FLAGS.get(pinned.type, 0)
    sizes = (pinned.type, pinned.key_size, pinned.value_size, pinned.max_entries, pinned_flags) == (
        wanted.type,
        wanted.key_size,
        wanted.value_size,
        wanted.max_entries,
        wanted.map_flags,
    )
    if not sizes or pinned_btf is None:
        return sizes
    return (
        shape(pinned_btf, pinned.btf_key_type_id),
        shape(pinned_btf, pinned.btf_value_type_id),
        declared_enums(pinned_btf),
    ) == (
        shape(wanted_btf, wanted.btf_key_type_id),
        shape(wanted_btf, wanted.btf_value_type_id),
        declared_enums(wanted_btf),
    )


class Instance:
    """Desired state of one instance, its loaded object, and the plan to get there."""

    def __init__(
        self,
        paths: InstancePaths,
        object_path: str,
        program: str | None,
        mode: str,
        constants: dict,
        layouts: tuple[MapLayout, ...] = (),
        map_sizes: dict[str, int] | None = None,
        tc_program: str | None = None,
        tc_object_path: str | None = None,
    ):
        """mode: native or generic XDP, or tc (tc ingress: tcx, or cls_bpf without it) for `program`. tc_program: a
        second program attached at tc ingress of the same interfaces (with an XDP mode only), of the object, or of
        tc_object_path's object, which is loaded on the first object's maps (the VTEP's TC backend: its tc program
        needs what XDP does not). map_sizes: max_entries of maps sized per instance; a pinned map of another size is
        replaced."""
        if tc_program and mode == TC_MODE:
            raise ValueError("tc_program: the instance's program already runs at tc (mode tc)")
        if tc_object_path and not tc_program:
            raise ValueError("tc_object_path: name the tc_program to take from it")
        self.paths = paths
        self.mode = mode
        self.constants = constants
        self.obj = libbpf.BpfObject(object_path)
        self.tc_obj: libbpf.BpfObject | None = None
        self.running: list[Running] = []
        self.tc_attach = ""  # how the tc program is attached (TC_ATTACH_KINDS): plan() decides
        self.tc_filters: dict[str, dict] = {}  # interface -> its cls_bpf filter's place (tc_filter_place()): plan()
        self.record: dict = {}  # the state file as plan() found it
        try:
            if tc_object_path:
                self.tc_obj = libbpf.BpfObject(tc_object_path)
            for layout in layouts:  # before load: a C struct that Python does not follow never gets written
                layout.check_object(self.obj)
            self.program = self.obj.program(program)
            self.programs = {hook_of(mode): self.program}
            if tc_program:
                self.programs[HOOK_TC] = (self.tc_obj or self.obj).program(tc_program)
            self.rodata = set_rodata(self.obj, constants)
            for name, size in (map_sizes or {}).items():
                self.obj.map(name).set_max_entries(size)
            self.new_maps = self._reuse_pinned_maps()
            self.obj.load()  # verifier errors surface here, before any interface is touched
            if self.tc_obj:
                self._share_maps(self.tc_obj)
                self.tc_obj.load()
            self.infos = {hook: p.info() for hook, p in self.programs.items()}
            self.info = self.infos[hook_of(mode)]
            for hook, info in self.infos.items():
                if info.type != PROGRAM_TYPES[hook]:
                    what = 'a tc (SEC("tc"))' if hook == HOOK_TC else "an XDP"
                    raise ValueError(f"program {info.name} is not {what} program; it cannot run at the {hook} hook")
        except Exception:
            self.close()
            raise

    @property
    def tc_program(self) -> libbpf.Program | None:
        return self.programs.get(HOOK_TC) if self.mode != TC_MODE else None

    def _share_maps(self, other: libbpf.BpfObject) -> None:
        """Make `other` run on this instance's (loaded) maps; each of its maps must be one of them, declared alike."""
        own_btf, other_btf = Btf(self.obj.btf), Btf(other.btf)
        for name, m in other.maps.items():
            if m.internal:
                continue
            mine = self.obj.maps.get(name)
            if mine is not None:
                m.set_max_entries(mine.max_entries)  # sized per instance (map_sizes) like its twin
            if mine is None or not compatible(mine, own_btf, m, other_btf):
                raise ValueError(f"{other.path}: map {name} is not declared as in {self.obj.path}")
            m.reuse_fd(mine.fd)

    def _reuse_pinned_maps(self) -> list[str]:
        """Point the object at the instance's pinned maps where they fit; return the maps it must create."""
        created = []
        kernel_btfs: dict[int, Btf] = {}  # the pinned maps of one object share one BTF
        wanted_btf = Btf(self.obj.btf)
        try:
            for name, m in self.obj.maps.items():
                if m.internal:
                    continue
                try:
                    fd = libbpf.obj_get(self.paths.map_pin(name))
                except libbpf.LibbpfError as exc:
                    if exc.errno != errno.ENOENT:
                        raise
                    created.append(name)
                    continue
                try:
                    info = libbpf.map_info(fd)
                    if info.btf_id and info.btf_id not in kernel_btfs:
                        kernel_btfs[info.btf_id] = Btf.from_kernel(info.btf_id)
                    if compatible(info, kernel_btfs.get(info.btf_id), m, wanted_btf):
                        m.reuse_fd(fd)
                    else:
                        created.append(name)
                finally:
                    os.close(fd)
        finally:
            for btf in kernel_btfs.values():
                btf.close()
        return created

    def describe(self, hook: str | None = None, place: dict | None = None) -> str:
        hook = hook or hook_of(self.mode)
        info = self.infos[hook]
        return describe(info.name, info.tag, TC_MODE if hook == HOOK_TC else self.mode, self.constants, place)

    def plan(self, interfaces: list[str], replace_foreign: bool) -> Plan:
        """What to do on every interface; also decides where each cls_bpf filter goes (tc_filters, for the record)."""
        plan = Plan(new_maps=self.new_maps if os.path.isdir(self.paths.pin_dir) else [])
        self.tc_attach = tc_attach_kind() if HOOK_TC in self.programs else ""
        self.record = load_state(self.paths)
        # tc first: an XDP program that hands frames on to the tc one (the VTEP's tc backend) must find it there.
        hooks = sorted(self.programs, key=lambda hook: hook != HOOK_TC)
        wanted = [(ifname, hook) for hook in hooks for ifname in interfaces]
        for ifname, hook in wanted:
            plan.steps.append(self._step(ifname, hook, plan, replace_foreign))
        for ifname, hook in recorded_attachments(self.paths):
            if (ifname, hook) not in wanted:
                running = read_running(self.paths, ifname, hook, self.record)
                if running:
                    self.running.append(running)
                before = running.describe() if running else "stale pin"
                plan.steps.append(Step(ifname=ifname, action="detach", running=running, before=before, hook=hook))
        return plan

    def _step(self, ifname: str, hook: str, plan: Plan, replace_foreign: bool) -> Step:
        step = Step(ifname=ifname, action="attach", ifindex=ifindex_of(ifname), after=self.describe(hook), hook=hook)
        running = read_running(self.paths, ifname, hook, self.record)
        if running:
            self.running.append(running)
            step.running = running
            step.before = running.describe()
        if hook == HOOK_TC and self.tc_attach == TC_ATTACH_CLS_BPF:
            step.tc_filter = self._filter_place(ifname, step.ifindex, running)
            self.tc_filters[ifname] = step.tc_filter
            step.after = self.describe(hook, step.tc_filter)
        mode = TC_MODE if hook == HOOK_TC else self.mode
        if running and running.ifindex == step.ifindex and running.mode != "none":
            same_program = running.tag == self.infos[hook].tag and running.rodata == self.rodata and not plan.new_maps
            if running.mode != mode or bool(running.tc_filter) != bool(step.tc_filter):
                step.action = "reattach"
            else:
                step.action = "unchanged" if same_program else "replace"
            return step
        if hook == HOOK_TC:
            return step  # tc runs several programs on an interface: another one's is no obstacle
        state = libbpf.xdp_query(step.ifindex)
        if state.prog_id:
            if not replace_foreign:
                foreign = libbpf.prog_fd_by_id(state.prog_id)
                try:
                    info = libbpf.prog_info(foreign)
                finally:
                    os.close(foreign)
                raise XdpProgramError(
                    f"interfaces: {ifname} already runs XDP program {info.name} (id {state.prog_id}, "
                    f"tag {info.tag}, {state.mode}) that this instance did not attach; set "
                    "replace_foreign: true to take it over (there is a short gap without XDP while the "
                    "attachment moves to a bpf_link), or detach it first"
                )
            step.action = "takeover"
            step.foreign_prog_id = state.prog_id
            step.foreign_mode = state.mode
            step.before = f"foreign program id {state.prog_id} {state.mode}"
        return step

    def _filter_place(self, ifname: str, ifindex: int, running: Running | None) -> dict:
        """Where the interface's cls_bpf filter goes: where it is; else where the record puts it (a restore keeps
        the order of the filters); else after every filter there (as tcx appends). A place another filter holds is
        refused: a filter that is not ours is never replaced."""
        if running and running.tc_filter:
            return running.tc_filter
        recorded = recorded_tc_filter(self.record, ifname)
        try:
            present = cls_bpf.filters(ifindex)
            clsact_missing = not cls_bpf.has_clsact(ifindex)
            if not recorded:
                return tc_filter_place(cls_bpf.priority_after(present), cls_bpf.HANDLE, clsact_missing)
        except (NetlinkError, cls_bpf.ClsBpfError) as exc:
            raise XdpProgramError(f"interfaces: {ifname}: tc ingress: {exc}") from exc
        taken = next((f for f in present if (f.priority, f.handle) == (recorded["priority"], recorded["handle"])), None)
        if taken:
            raise XdpProgramError(
                f"interfaces: {ifname}: the place of this instance's tc filter (priority {recorded['priority']}, "
                f"handle {recorded['handle']:#x}) holds a {taken.describe()} that it did not attach; remove that "
                "filter or this instance (state=absent) first"
            )
        return tc_filter_place(recorded["priority"], recorded["handle"], recorded["clsact_created"] or clsact_missing)

    def apply(self, plan: Plan) -> None:
        """Make-before-break: attach or replace every interface, then swap map pins, then detach the rest (and what
        a tc attachment that changed its kind ran before)."""
        files.make_private_dirs(self.paths.links_dir)
        if HOOK_TC in self.programs:
            files.make_private_dirs(self.paths.tc_links_dir)
        files.make_private_dirs(self.paths.maps_dir)
        done: list[tuple[Step, int | None]] = []
        try:
            for step in plan.steps:
                if step.action in ("unchanged", "detach"):
                    continue
                done.append((step, self._apply_step(step)))
        except ATTACH_ERRORS as exc:
            rollback_errors = self._rollback(done)
            detail = f"; rolling back also failed: {'; '.join(rollback_errors)}" if rollback_errors else ""
            raise XdpProgramError(
                f"attaching {self.info.name} failed, previous state restored on "
                f"{', '.join(s.label for s, _link_fd in done) or 'no interface'}: {exc}{detail}"
            ) from exc
        for _step, link_fd in done:
            if link_fd is not None:
                os.close(link_fd)  # the pin holds the link now: an fd left open would keep it attached after unpin
        for name, m in self.obj.maps.items():
            if m.internal:
                continue
            pin_path = self.paths.map_pin(name)
            if name in plan.new_maps and os.path.exists(pin_path):
                libbpf.unpin(pin_path)
            if not os.path.exists(pin_path):
                m.pin(pin_path)
        for step in plan.steps:
            if step.action == "detach" or (step.action == "reattach" and step.hook == HOOK_TC):
                detach(self.paths, step.ifname, step.running, step.hook)
        if os.path.isdir(self.paths.tc_links_dir) and not os.listdir(self.paths.tc_links_dir):
            os.rmdir(self.paths.tc_links_dir)  # off tc (or onto cls_bpf): no empty directory left

    def running_prog_id(self, plan: Plan) -> int:
        """Id of the program the interfaces run once the plan is applied (the loaded one is discarded if unchanged)."""
        if plan.changed:
            return self.info.id
        main_hook = hook_of(self.mode)
        return next((s.running.prog_id for s in plan.steps if s.running and s.hook == main_hook), self.info.id)

    def _link_create(self, hook: str, ifindex: int, prog_fd: int, mode: str) -> int:
        if hook == HOOK_TC:
            return libbpf.tcx_link_create(prog_fd, ifindex)
        return libbpf.xdp_link_create(prog_fd, ifindex, mode)

    def _apply_step(self, step: Step) -> int | None:
        """Returns the new link fd where one was made (for rollback)."""
        pin_path = self.paths.link_pin(step.ifname, step.hook)
        prog_fd = self.programs[step.hook].fd
        if step.tc_filter:
            # A filter replaced in place swaps its program atomically; a new one (attach, or a move from a tcx link,
            # which goes once every step is done) is added beside what runs.
            name = cls_bpf.owner_name(self.paths.name)
            added_clsact = step.action != "replace" and not cls_bpf.has_clsact(step.ifindex)
            if added_clsact:
                cls_bpf.add_clsact(step.ifindex)
            try:
                priority, handle = step.tc_filter["priority"], step.tc_filter["handle"]
                cls_bpf.attach(step.ifindex, prog_fd, priority, name, handle=handle, replace=step.action == "replace")
            except NetlinkError:
                if added_clsact:
                    cls_bpf.delete_clsact(step.ifindex)
                raise
            return None
        if step.action == "replace":
            libbpf.link_update(step.running.link_fd, prog_fd, old_prog_fd=step.running.prog_fd)
            return None
        if step.action == "reattach" and step.hook == HOOK_XDP:
            # Native and generic XDP cannot be active at once on a device: a mode change has a short gap.
            libbpf.link_detach(step.running.link_fd)
            libbpf.unpin(pin_path)
        if step.action == "takeover":
            libbpf.xdp_detach_netlink(step.ifindex, step.foreign_mode)
        if step.running and not step.running.tc_filter and os.path.exists(pin_path):
            libbpf.unpin(pin_path)  # a stale link whose interface went away
        link_fd = self._link_create(step.hook, step.ifindex, prog_fd, self.mode)
        try:
            libbpf.pin(link_fd, pin_path)
        except libbpf.LibbpfError:
            libbpf.link_detach(link_fd)
            os.close(link_fd)
            raise
        return link_fd

    def _rollback(self, done: list[tuple[Step, int | None]]) -> list[str]:
        errors = []
        for step, link_fd in reversed(done):
            pin_path = self.paths.link_pin(step.ifname, step.hook)
            try:
                if step.tc_filter and step.action == "replace":
                    priority, handle = step.tc_filter["priority"], step.tc_filter["handle"]
                    name = cls_bpf.owner_name(self.paths.name)
                    cls_bpf.attach(step.ifindex, step.running.prog_fd, priority, name, handle=handle, replace=True)
                    continue
                if step.tc_filter:
                    remove_filter(step.ifindex, step.tc_filter)
                    continue
                if step.action == "replace":
                    libbpf.link_update(step.running.link_fd, step.running.prog_fd)
                    continue
                libbpf.link_detach(link_fd)
                libbpf.unpin(pin_path)
                os.close(link_fd)
                if step.action == "reattach" and step.hook == HOOK_XDP:
                    old = self._link_create(step.hook, step.ifindex, step.running.prog_fd, step.running.mode)
                    libbpf.pin(old, pin_path)
                    os.close(old)
                elif step.action == "takeover":
                    foreign = libbpf.prog_fd_by_id(step.foreign_prog_id)
                    libbpf.xdp_attach_netlink(step.ifindex, foreign, step.foreign_mode)
                    os.close(foreign)
            except (*ATTACH_ERRORS, OSError) as exc:
                errors.append(f"{step.label}: {exc}")
        return errors

    def close(self) -> None:
        for r in self.running:
            libbpf.close_fd(r.link_fd)
            os.close(r.prog_fd)
        self.running = []
        if self.tc_obj:
            self.tc_obj.close()
        self.obj.close()

    def __enter__(self) -> Instance:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def compiled_instance(
    paths: InstancePaths,
    source: str,
    cache_dir: str,
    include_dirs: list[str],
    program: str,
    mode: str,
    layouts: tuple[MapLayout, ...],
    *,
    build_dir: str | None = None,
    map_sizes: dict[str, int] | None = None,
    tc_program: str | None = None,
    tc_source: str | None = None,
    constants: dict | None = None,
) -> tuple[str, Instance]:
    """A data plane's source compiled (through the cache; into build_dir on a miss in check mode) and loaded as the
    instance's desired state: the start of every data plane's deploy. Returns the object's path and the Instance.
    tc_source: the source of tc_program when it has an object of its own (Instance's tc_object_path).
    constants: the object's .rodata constants (Instance's).
    Raises XdpProgramError with the compiler's or the verifier's message; nothing on the host changed."""
    try:
        object_path, _built = bpf_build.compile_object(source, cache_dir, include_dirs, build_dir=build_dir)
        tc_object_path = None
        if tc_source:
            tc_object_path, _built = bpf_build.compile_object(tc_source, cache_dir, include_dirs, build_dir=build_dir)
        instance = Instance(
            paths, object_path, program, mode, constants or {}, layouts, map_sizes, tc_program, tc_object_path
        )
    except (bpf_build.CompileError, libbpf.LibbpfError, ValueError) as exc:
        raise XdpProgramError(str(exc)) from exc
    return object_path, instance


def remove_filter(ifindex: int, place: dict) -> None:
    """Remove our cls_bpf filter at its place; where the instance created the clsact qdisc and ours is its only
    filter (at ingress or egress), the qdisc instead, which takes the filter with it: one change, so a run killed in
    between cannot leave an empty qdisc that no record names."""
    alone = [(f.priority, f.handle) for hook in cls_bpf.HOOK_PARENTS for f in cls_bpf.filters(ifindex, hook)] == [
        (place["priority"], place["handle"])
    ]
    if place["clsact_created"] and alone:
        cls_bpf.delete_clsact(ifindex)
    else:
        cls_bpf.detach(ifindex, place["priority"], place["handle"])


def detach(paths: InstancePaths, ifname: str, running: Running | None, hook: str = HOOK_XDP) -> None:
    """Take away what `running` is: our cls_bpf filter, or our link (and its pin, also when it is stale)."""
    if running and running.tc_filter:
        try:
            remove_filter(running.ifindex, running.tc_filter)
        except NetlinkError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENODEV):  # gone already, with its interface
                raise
        return
    detach_link(paths, ifname, running, hook)


def detach_link(paths: InstancePaths, ifname: str, running: Running | None, hook: str = HOOK_XDP) -> None:
    pin_path = paths.link_pin(ifname, hook)
    if running:
        try:
            libbpf.link_detach(running.link_fd)
        except libbpf.LibbpfError as exc:
            if exc.errno not in (errno.ENOLINK, errno.EINVAL):  # already detached (interface gone, forced detach)
                raise
    if os.path.exists(pin_path):
        libbpf.unpin(pin_path)


def state_record(
    instance: Instance, interfaces: list[str], source: str | None, object_path: str, build: dict | None = None
) -> dict:
    """What restore needs to bring the instance back (program is the C function, as the object names it; build holds
    the include_dirs and defines the source was compiled with, for when the cached object is gone; tc_program the
    program an XDP instance also runs at tc ingress, tc_object its object when it has one of its own)."""
    main_hook = hook_of(instance.mode)
    record = {
        "name": instance.paths.name,
        "program": instance.program.name,
        "tag": instance.info.tag,
        "mode": instance.mode,
        "constants": instance.constants,
        "source": source,
        "object": object_path,
        "build": build or {},
        "interfaces": {ifname: attachment_record(instance, ifname, main_hook) for ifname in interfaces},
        "maps": {name: instance.paths.map_pin(name) for name, m in instance.obj.maps.items() if not m.internal},
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if instance.tc_program:
        record["tc_program"] = instance.tc_program.name
    if instance.tc_obj:
        record["tc_object"] = instance.tc_obj.path
    return record


def attachment_record(instance: Instance, ifname: str, main_hook: str) -> dict:
    """An interface's part of the record: its link pins, or for a tc program attached through cls_bpf the filter's
    place instead of the tc link pin."""
    entry: dict = {"ifindex": ifindex_of(ifname)}
    place = instance.tc_filters.get(ifname)
    if main_hook == HOOK_XDP:
        entry["link_pin"] = instance.paths.link_pin(ifname, HOOK_XDP)
    if (main_hook == HOOK_TC or instance.tc_program) and place:
        entry["tc_filter"] = place
    elif main_hook == HOOK_TC:
        entry["link_pin"] = instance.paths.link_pin(ifname, HOOK_TC)
    elif instance.tc_program:
        entry["tc_link_pin"] = instance.paths.link_pin(ifname, HOOK_TC)
    return entry


@dataclass
class Converged:
    """What converge() did (or would do, in check mode) to one instance."""

    plan: Plan
    program: dict  # name, tag and id of what the interfaces run afterwards
    maps: dict[str, str]  # map name -> pin path
    state_file: str = ""
    recorded: bool = False  # the state file was (or would be) rewritten

    @property
    def changed(self) -> bool:
        return self.plan.changed or self.recorded

    def changes(self, header: str) -> Changes:
        """The plan's steps ("p1: replace xdp_count tag ..."); the state lines are what each interface runs before
        and after, and the maps the new version does not share with the old."""
        changes = attachment_changes(self.plan.steps, header)
        for name in self.plan.new_maps:
            changes.add(
                f"replace map {name} (the pinned one no longer fits)",
                before=f"map {name} (pinned)",
                after=f"map {name} (new: the pinned one no longer fits)",
            )
        if self.recorded and not self.plan.changed:
            changes.add(record_step(self.state_file))
        return changes


def attachment_changes(steps: list[Step], header: str) -> Changes:
    """The steps that change an attachment ("p1: replace xdp_count tag ..."), with what each attachment runs before
    and after as the state lines."""
    changes = Changes(header)
    for s in steps:
        if s.action == "unchanged":
            continue
        changes.add(
            f"{s.label}: {s.action} {s.after or s.before}",
            key=s.label,
            before=f"{s.label}: {s.before}" if s.before else None,
            after=f"{s.label}: {s.after}" if s.action != "detach" else None,
        )
    return changes


def record_step(state_file: str) -> str:
    return f"record what runs in {state_file} (it recorded something else)"


def kernel_problems(object_path: str, mode: str, tc_program: str | None = None) -> list[str]:
    """What the running kernel lacks to load the object (the helpers, kfuncs and map types it uses, read from it)
    and to attach it in `mode` (and at tc, with tc_program): one sentence per missing feature (bpf/features.py)."""
    hooks = (hook_of(mode), *((HOOK_TC,) if tc_program else ()))
    variant = f"mode {mode}" + (f", tc_program {tc_program}" if tc_program else "")
    try:
        found = object_needs.scan(object_path)
    except object_needs.ObjectError as exc:
        raise XdpProgramError(f"object: {exc}") from None
    try:
        kernel = features.KernelFeatures.from_host()
    except (features.KernelBtfMissing, features.BtfError) as exc:
        return [f"kernel: {exc}"]
    needs = object_needs.needs_of_object(found, f"object {os.path.basename(object_path)}", {variant: hooks}, kernel)
    return needs.problems(kernel, variant)


def converge(
    paths: InstancePaths,
    object_path: str,
    program: str | None,
    mode: str,
    constants: dict,
    interfaces: list[str],
    source: str | None,
    *,
    build: dict | None = None,
    layouts: tuple[MapLayout, ...] = (),
    replace_foreign: bool = False,
    check_mode: bool = False,
    tc_program: str | None = None,
) -> Converged:
    """Load the object, plan, and (unless check_mode) apply and record: the whole present path of an instance, shared
    by the modules that keep one and by restore. Raises XdpProgramError with a message for the user."""
    check_trusted_paths(paths, object_path)
    problems = kernel_problems(object_path, mode, tc_program)
    if problems:
        raise XdpProgramError(f"this kernel cannot run {object_path}, nothing was changed: {'; '.join(problems)}")
    try:
        instance = Instance(paths, object_path, program, mode, constants, layouts, tc_program=tc_program)
    except (libbpf.LibbpfError, ValueError) as exc:
        raise XdpProgramError(f"loading {object_path} failed, nothing was changed: {exc}") from exc
    with instance:
        plan = instance.plan(interfaces, replace_foreign)
        record = state_record(instance, interfaces, source, object_path, build)
        unfinished = None
        with recording(paths, {**record, **detaching_record(plan)}, check_mode, record) as recorded:
            if plan.changed and not check_mode:
                try:
                    instance.apply(plan)  # a failed attach is rolled back (XdpProgramError), and the record with it
                except ATTACH_ERRORS as exc:  # a map pin or detach: the new program runs, its record stays
                    unfinished = exc
        if unfinished:
            raise XdpProgramError(f"{paths.name}: {unfinished}") from unfinished
        return Converged(
            plan=plan,
            program={"name": instance.info.name, "tag": instance.info.tag, "id": instance.running_prog_id(plan)},
            maps={n: paths.map_pin(n) for n, m in instance.obj.maps.items() if not m.internal},
            state_file=paths.state_file,
            recorded=recorded,
        )


def remove(paths: InstancePaths, check_mode: bool, label: str = "instance") -> Changes:
    """Detach and unpin everything of an instance and forget it; returns what was (or would be) removed."""
    removed = Changes(f"{label} {paths.name}")
    check_trusted_paths(paths)
    attachments = recorded_attachments(paths)
    record = load_state(paths)  # where its cls_bpf filters are: only the record says
    had_record = os.path.exists(paths.state_file)
    if had_record and not check_mode:
        # The record goes first: a removal cut short must not come back at the next boot's restore.
        paths.record.remove()
    for ifname, hook in attachments:
        running = read_running(paths, ifname, hook, record)
        label = Step(ifname, "detach", hook=hook).label
        if running:
            removed.add(f"{label}: detach {running.describe()}", key=label, before=f"{label}: {running.describe()}")
        else:
            removed.add(f"{label}: remove stale pin", key=label, before=f"{label}: stale pin")
        try:
            if not check_mode:
                detach(paths, ifname, running, hook)
        finally:
            if running:
                libbpf.close_fd(running.link_fd)
                os.close(running.prog_fd)
    if os.path.isdir(paths.maps_dir):
        for name in sorted(os.listdir(paths.maps_dir)):
            removed.add(f"remove map {name}", before=f"map {name}")
            if not check_mode:
                libbpf.unpin(paths.map_pin(name))
    for directory in (paths.links_dir, paths.tc_links_dir, paths.maps_dir, paths.pin_dir):
        if os.path.isdir(directory):
            if not removed.changed:
                removed.add(f"remove {directory}", before=directory)
            if not check_mode:
                os.rmdir(directory)
    if not check_mode and os.path.isdir(paths.pin_root) and not os.listdir(paths.pin_root):
        os.rmdir(paths.pin_root)  # the last instance leaves no xdpfleet directory behind
    if had_record:
        removed.add(f"remove state file {paths.state_file}", before=f"state file {paths.state_file}")
    return removed
