# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The data-plane template (docs/architecture.md, "The data-plane template"): the one deploy, counter reading and
removal of every data plane that keeps BPF maps of its own. A data plane is a DataPlane subclass whose hooks say
what is its own (its arguments, their validation, the plan of its maps, how it writes them and puts them back, its
facts and counters, and how a record turns back into its arguments); the steps and their order are here, once:

1. validate the arguments (every problem at once, each naming its field);
2. refuse a kernel that lacks what the data plane's object needs (<plane>/needs.py);
3. check bpffs and the host paths;
4. ask the host what the data plane needs of it (prepare), compile the C (cached by content hash) and load the
   object, its maps checked against the plane's layouts;
5. plan the attachments and the maps;
6. write the record of intent, then the maps and the attachments (make-before-break, a failure rolls back), then
   the settled record (bpf/program.py's recording);
7. say what changed and the facts.

The modules that deploy a data plane, and the restore (instances/records.py), construct the plane with their
arguments and call deploy(), so a data plane brought back after a reboot goes through exactly the same steps.
"""

from __future__ import annotations

import contextlib
import os
from typing import ClassVar

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import LayoutMismatch, MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.neighbours import NeighbourError

INCLUDE_DIRS = ["/var/lib/xdpfleet/src/include"]  # where the xdp_host role copies the shared headers
# What removing an instance can fail with, besides what a data plane's own release adds (DataPlane.release_errors).
REMOVE_ERRORS = (libbpf.LibbpfError, OSError, xp.XdpProgramError)


class DataPlaneError(RuntimeError):
    """A refusal or failure, with a message meant for the person running the playbook; problems lists every
    validation problem (each starting with the field's path)."""

    def __init__(self, msg: str, problems: list[str] | None = None):
        super().__init__(msg)
        self.problems = problems or []

    @property
    def transient(self) -> bool:
        """Whether what failed can pass by itself: a next hop that did not answer yet (as at boot on a slow
        underlay); the restore tries such an instance again."""
        cause = self.__cause__
        return isinstance(cause, NeighbourError) and bool(cause.transient)


class DataPlane:
    """One instance of a data plane with its arguments; deploy() makes the host match them.

    A subclass sets the class attributes and fills the hooks; the constructor of a subclass takes the data plane's
    own arguments, then those of every data plane (below)."""

    name = ""  # the key of its part of a record, its facts' xdpfleet_<name> and the kind the restore reports
    title = ""  # how messages name an instance ("VTEP vtep1", "filter edge")
    module = ""  # the module that deploys it, which messages send the user to
    what = ""  # how messages name the data plane as a whole ("the VTEP", "the filter")
    what_applied = ""  # what "applying ... failed" names ("the VTEP configuration")
    what_loaded = ""  # what "loading ... failed" names ("the VTEP data plane")
    Error: type[DataPlaneError] = DataPlaneError
    source = ""  # the C source on the host (the xdp_host role copies it there)
    map_layouts: ClassVar[dict[str, MapLayout]] = {}  # map name -> layout, checked before the object is loaded
    counter_maps: tuple[str, ...] = ()  # the pinned maps read_counters() reads
    attachments_in_changes = True  # the attachments' steps are part of `changes` (else only of the diff)
    release_errors: tuple[type[BaseException], ...] = ()  # what release() can fail with
    # Label -> every value its counters are reported by (drop reasons, events), zeros too, so that an exported
    # series never appears out of nowhere.
    labels: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __init__(
        self,
        paths: xp.InstancePaths,
        cache_dir: str,
        *,
        source: str | None = None,
        include_dirs: list[str] | None = None,
        check_mode: bool = False,
        build_dir: str | None = None,
    ):
        """build_dir: where a compile that misses the cache goes in check mode (the cache stays as it was)."""
        self.paths = paths
        self.cache_dir = cache_dir
        self.source_path = source or self.source
        self.include_dirs = INCLUDE_DIRS if include_dirs is None else include_dirs
        self.check_mode = check_mode
        self.build_dir = build_dir
        self.header = f"{self.name} {paths.name}"

    # ---- hooks ------------------------------------------------------------------------------------------------

    def validate(self) -> None:
        """Check the arguments (and the host they are for) before anything is read or changed; raise Error."""

    def prepare(self) -> None:
        """What the data plane asks the host for once the host passed its checks, before the object is loaded (the
        VTEP: its peers' next-hop MACs, which can take seconds); raise Error."""

    def needs(self) -> tuple[features.Needs, str]:
        """The kernel features the object needs (<plane>/needs.py) and the variant these arguments run."""
        raise NotImplementedError

    def interfaces(self) -> list[str]:
        """The interfaces the instance is attached to."""
        raise NotImplementedError

    def compile_arguments(self) -> dict:
        """xp.compiled_instance()'s program, mode and what else this instance loads with."""
        raise NotImplementedError

    def plan(self, instance: xp.Instance):
        """What the maps must hold against what they hold now; whatever write(), changes() and facts() take.
        Raises Error; nothing changed."""
        return None

    def part(self) -> dict:
        """The data plane's part of the record (kept under `name`): what arguments() turns back."""
        raise NotImplementedError

    def record(self, instance: xp.Instance, object_path: str) -> dict:
        """The settled record: what restore needs to bring the instance back."""
        record = xp.state_record(instance, self.interfaces(), self.source_path, object_path,
                                 {"include_dirs": self.include_dirs})  # fmt: skip
        return {**record, self.name: self.part()}

    def intent(self, planned) -> dict:
        """What the record of intent says beyond the settled record (what the change lets go)."""
        return {}

    def settled(self, planned) -> dict:
        """What the settled record says beyond record() (what the write leaves the plane holding)."""
        return {}

    @contextlib.contextmanager
    def write(self, instance: xp.Instance, attach_plan: xp.Plan, planned):
        """Write the maps (unless check mode) before the block attaches, and put them back when the block fails."""
        yield

    def changes(self, planned) -> Changes:
        """The change to the maps, in words (for `changes` and the diff)."""
        return Changes(self.header)

    def writes(self, planned) -> bool:
        """Whether the maps (or what else the plane keeps) change."""
        return self.changes(planned).changed

    def facts(self, instance: xp.Instance, attach_plan: xp.Plan, planned) -> dict:
        """The facts (ansible_facts.xdpfleet_<name>) after the change."""
        raise NotImplementedError

    def results(self, instance: xp.Instance, attach_plan: xp.Plan, planned) -> dict:
        """The data plane's part of the module result: its facts, and what else its module returns."""
        return {"ansible_facts": {f"xdpfleet_{self.name}": self.facts(instance, attach_plan, planned)}}

    def without_sources(self) -> dict | None:
        """In check mode where the source is not on the host: the result to return instead of refusing; None
        refuses (the compile says why)."""
        return None

    @classmethod
    def counters(cls, maps: dict[str, libbpf.Map]) -> dict:
        """The counters, from the maps (pinned or of a loaded object) named in counter_maps."""
        raise NotImplementedError

    @classmethod
    def arguments(cls, record: dict, options: dict) -> dict:
        """The constructor's arguments of the data plane's own (those after paths and cache_dir) from a record, for
        the restore; options: the restore's own (neighbour_timeout)."""
        raise NotImplementedError

    @classmethod
    def release(cls, paths: xp.InstancePaths, check_mode: bool, label: str) -> Changes:
        """Before an instance's pins and record go: put back what it changed on the host beyond them."""
        return Changes(f"{label} {paths.name}")

    # ---- the template -----------------------------------------------------------------------------------------

    def deploy(self) -> dict:
        """Make the instance match the arguments; returns the module result (changed, changes, program, the plane's
        facts, diff). Raises Error; nothing on the host changed unless the message says otherwise."""
        self.validate()
        try:
            features.require(*self.needs())
        except features.MissingFeatures as exc:
            raise self.Error(f"this kernel cannot run {self.what}, nothing was changed: {exc}", exc.problems) from exc
        if no_bpffs := xp.bpffs_problem(self.paths.pin_root):
            raise self.Error(no_bpffs)
        if self.check_mode and not os.path.isfile(self.source_path):
            unbuilt = self.without_sources()
            if unbuilt is not None:
                return unbuilt
        try:
            xp.check_trusted_paths(self.paths)
        except xp.XdpProgramError as exc:
            raise self.Error(str(exc)) from exc
        self.prepare()
        try:
            object_path, instance = xp.compiled_instance(
                self.paths,
                self.source_path,
                self.cache_dir,
                self.include_dirs,
                layouts=tuple(self.map_layouts.values()),
                build_dir=self.build_dir,
                **self.compile_arguments(),
            )
        except xp.XdpProgramError as exc:
            raise self.Error(f"loading {self.what_loaded} failed, nothing was changed: {exc}") from exc
        with instance:
            return self._converge(instance, object_path)

    def _converge(self, instance: xp.Instance, object_path: str) -> dict:
        try:
            attach_plan = instance.plan(self.interfaces(), replace_foreign=False)
        except xp.XdpProgramError as exc:
            raise self.Error(str(exc)) from exc
        planned = self.plan(instance)
        record = self.record(instance, object_path)
        # The record first (of intent: it still names what this change lets go), the maps and links after, the
        # settled record last (see xp.recording).
        intent = {**record, **self.intent(planned), **xp.detaching_record(attach_plan)}
        settled = {**record, **self.settled(planned)}
        try:
            recording = xp.recording(self.paths, intent, self.check_mode, settled)
            with recording as recorded, self.write(instance, attach_plan, planned):
                if attach_plan.changed and not self.check_mode:
                    instance.apply(attach_plan)
        except xp.RecordError as exc:
            raise self.Error(str(exc)) from exc
        except (*xp.ATTACH_ERRORS, xp.XdpProgramError) as exc:
            raise self.Error(f"applying {self.what_applied} failed, previous state restored: {exc}") from exc
        changes = self.changes(planned)
        attached = xp.attachment_changes(attach_plan.steps, self.header)
        if self.attachments_in_changes:
            changes.extend(attached)
        changed = self.writes(planned) or attach_plan.changed
        if recorded and not changed:
            changes.add(xp.record_step(self.paths.state_file))
        result = {
            "changed": changed or recorded,
            "changes": changes.steps,
            "program": {s.label: s.action for s in attach_plan.steps},
            **self.results(instance, attach_plan, planned),
        }
        if result["changed"]:
            shown = changes
            if not self.attachments_in_changes:
                shown = Changes(self.header)
                shown.extend(changes)
                shown.extend(attached)
            result["diff"] = shown.diff()
        return result

    def restored_steps(self, result: dict) -> list[str]:
        """What a restore did, from deploy()'s result: its changes, and the attachments' where those are not in it."""
        if not result["changed"]:
            return []
        if self.attachments_in_changes:
            return result["changes"]
        return result["changes"] + [f"{name}: {action}" for name, action in result["program"].items()
                                    if action != "unchanged"]  # fmt: skip

    @classmethod
    def read_counters(cls, paths: xp.InstancePaths) -> dict | None:
        """The counters of a deployed instance, from its pinned maps alone: no arguments, no compile, no program
        load. None when the host has no instance of that name. Raises Error when only some of its maps are
        pinned, or when a map's layout is not the one this collection reads (deployed by another version)."""
        pins = {name: paths.map_pin(name) for name in cls.counter_maps}
        missing = sorted(name for name, pin in pins.items() if not os.path.exists(pin))
        if len(missing) == len(pins):
            return None
        if missing:
            raise cls.Error(
                f"{cls.title} {paths.name} is incomplete, maps {', '.join(missing)} are not pinned under "
                f"{paths.maps_dir}: deploy it again with xdpfleet.fabric.{cls.module}, or remove it (state=absent)"
            )
        maps: dict[str, libbpf.PinnedMap] = {}
        try:
            for name, pin in pins.items():
                maps[name] = libbpf.PinnedMap(pin)
                if name in cls.map_layouts:
                    cls.map_layouts[name].check_pinned(maps[name])
            return cls.counters(maps)
        except LayoutMismatch as exc:
            raise cls.Error(
                f"{cls.title} {paths.name} was deployed by another version of this collection ({exc}): deploy it "
                f"again with xdpfleet.fabric.{cls.module} to move it onto this version's maps"
            ) from exc
        finally:
            for m in maps.values():
                m.close()


def remove(paths: xp.InstancePaths, check_mode: bool, label: str, plane: type[DataPlane] | None = None) -> Changes:
    """Detach and unpin everything of an instance and forget it, what its data plane changed beyond that put back
    first (so a failure there leaves the record that says how, for a re-run); plane None: an instance of no data
    plane (xdp_program's). Returns what was (or would be) changed. Raises REMOVE_ERRORS and plane.release_errors."""
    xp.check_trusted_paths(paths)
    removed = Changes(f"{label} {paths.name}")
    if plane is not None:
        removed.extend(plane.release(paths, check_mode, label))
    removed.extend(xp.remove(paths, check_mode, label))
    return removed
