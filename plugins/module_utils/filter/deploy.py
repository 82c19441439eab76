# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Deploying one filter on a host: validate the rules, compile and load the data plane, write only the rules that
differ into its maps, attach it at its hook (or, in check mode, only say what would change), and read its
counters.

Shared by the xdpfleet.fabric.xdp_filter module and by restore (the rules the filter's state file recorded), so a
filter brought back after a reboot goes through exactly the same steps.
"""

from __future__ import annotations

import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import LayoutMismatch
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import abi, layouts, needs, rules, writer

FILTER_SOURCE = "/var/lib/xdpfleet/src/filter/filter.c"
FILTER_INCLUDE_DIRS = ["/var/lib/xdpfleet/src/include"]
HOOKS = ("xdp", "tc")
XDP_MODES = ("native", "generic")
UNPARSED = tuple(abi.UNPARSED_ACTIONS)  # what frames the rules cannot decide get: drop (the default) or pass


class FilterError(RuntimeError):
    """A refusal or failure; problems lists every validation problem (each starting with the field's path)."""

    def __init__(self, msg: str, problems: list[str] | None = None):
        super().__init__(msg)
        self.problems = problems or []


def attach_mode(hook: str, mode: str, allow_generic: bool) -> str:
    """The program.py attach mode of a hook: the XDP mode, or "tc". Raises FilterError for generic XDP not asked
    for: it runs after the skb is built, so it saves nothing over tc and costs more."""
    if hook not in HOOKS:
        raise FilterError(f"hook: {hook!r} is not one of {', '.join(HOOKS)}")
    if hook == "tc":
        return "tc"
    if mode not in XDP_MODES:
        raise FilterError(f"mode: {mode!r} is not one of {', '.join(XDP_MODES)}")
    if mode == "generic" and not allow_generic:
        raise FilterError(
            "mode: generic XDP runs on the skb the kernel has already built, after the point where tc would, so a "
            "filter there saves nothing and costs more than hook: tc; use hook: tc, or set allow_generic: true"
        )
    return mode


def read_counters(paths: xp.InstancePaths) -> dict | None:
    """The counters of a deployed filter from its pinned maps alone; None when it has none pinned."""
    pins = {name: paths.map_pin(name) for name in layouts.MAP_NAMES}
    if not all(os.path.exists(pin) for pin in pins.values()):
        return None
    maps = {}
    try:
        for name, pin in pins.items():
            maps[name] = libbpf.PinnedMap(pin)
            layouts.LAYOUTS[name].check_pinned(maps[name])
        return writer.counters(writer.typed(maps))
    except LayoutMismatch as exc:
        raise FilterError(f"filter {paths.name} was deployed by another version of this collection ({exc})") from exc
    finally:
        for m in maps.values():
            m.close()


def deploy(
    paths: xp.InstancePaths,
    rule_items: list,
    interfaces: list[str],
    hook: str,
    mode: str,
    cache_dir: str,
    *,
    allow_generic: bool = False,
    unparsed: str = "drop",
    source: str = FILTER_SOURCE,
    include_dirs: list[str] | None = None,
    check_mode: bool = False,
    build_dir: str | None = None,
) -> dict:
    """Make the filter instance match: these rules, at this hook, on these interfaces, and `unparsed` for the frames
    the rules cannot decide (bpf/filter/filter.h). Returns the module result (changed, changes, program, counters,
    diff). Raises FilterError; nothing on the host changed unless the message says otherwise."""
    include_dirs = FILTER_INCLUDE_DIRS if include_dirs is None else include_dirs
    if unparsed not in UNPARSED:
        raise FilterError(f"unparsed: {unparsed!r} is not one of {', '.join(UNPARSED)}")
    try:
        desired = rules.validate(rule_items)
    except rules.RulesError as exc:
        raise FilterError(str(exc), exc.problems) from exc
    xp_mode = attach_mode(hook, mode, allow_generic)
    try:
        features.require(needs.NEEDS, needs.variant(hook))
    except features.MissingFeatures as exc:
        raise FilterError(f"this kernel cannot run the filter, nothing was changed: {exc}", exc.problems) from exc
    if (no_bpffs := xp.bpffs_problem(paths.pin_root)):
        raise FilterError(no_bpffs)
    try:
        xp.check_trusted_paths(paths)
        object_path, instance = xp.compiled_instance(
            paths, source, cache_dir, include_dirs, layouts.PROGRAMS[hook], xp_mode, tuple(layouts.LAYOUTS.values()),
            build_dir=build_dir,
        )
    except xp.XdpProgramError as exc:
        raise FilterError(f"loading the filter failed, nothing was changed: {exc}") from exc
    header = f"filter {paths.name}"
    with instance:
        try:
            attach_plan = instance.plan(interfaces, replace_foreign=False)
        except xp.XdpProgramError as exc:
            raise FilterError(str(exc)) from exc
        maps = writer.typed({name: instance.obj.map(name) for name in layouts.MAP_NAMES})
        try:
            update = writer.plan(writer.read(maps), desired, header, unparsed)
        except writer.DoesNotFit as exc:
            raise FilterError(f"the rules do not fit the data plane, nothing was changed: {exc}") from exc
        record = xp.state_record(instance, interfaces, source, object_path, {"include_dirs": include_dirs})
        record["filter"] = {"rules": rule_items, "hook": hook, "unparsed": unparsed}
        try:
            with xp.recording(paths, {**record, **xp.detaching_record(attach_plan)}, check_mode, record) as recorded:
                if not check_mode:
                    writer.apply(maps, update)
                    if attach_plan.changed:
                        try:
                            instance.apply(attach_plan)
                        except BaseException:
                            writer.rollback(maps, update)
                            raise
        except (*xp.ATTACH_ERRORS, xp.XdpProgramError) as exc:
            raise FilterError(f"applying the filter failed, previous state restored: {exc}") from exc
        changes = Changes(header)
        changes.extend(update.changes)
        changes.extend(xp.attachment_changes(attach_plan.steps, header))
        if recorded and not changes.changed:
            changes.add(xp.record_step(paths.state_file))
        counters = writer.counters(maps)
        result = {
            "changed": changes.changed,
            "changes": changes.steps,
            "program": {s.label: s.action for s in attach_plan.steps},
            "program_id": instance.running_prog_id(attach_plan),
            "ansible_facts": {
                "xdpfleet_filter": {"name": paths.name, "hook": hook, "interfaces": interfaces, **counters}
            },
        }
        if changes.changed:
            result["diff"] = changes.diff()
        return result
