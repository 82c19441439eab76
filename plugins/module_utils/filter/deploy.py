# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The filter as a data plane (dataplane/template.py): its rules validated, only the rules that differ written
into its maps, attached at its hook, and its counters.

Deployed by the xdpfleet.fabric.xdp_filter module and by restore (the rules the filter's state file recorded).
"""

from __future__ import annotations

import contextlib
from typing import ClassVar

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import DataPlane, DataPlaneError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import abi, layouts, needs, rules, writer

FILTER_SOURCE = "/var/lib/xdpfleet/src/filter/filter.c"
HOOKS = ("xdp", "tc")
XDP_MODES = ("native", "generic")
UNPARSED = tuple(abi.UNPARSED_ACTIONS)  # what frames the rules cannot decide get: drop (the default) or pass


class FilterError(DataPlaneError):
    """A refusal or failure; problems lists every validation problem (each starting with the field's path)."""


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


class Filter(DataPlane):
    """A filter instance: these rules, at this hook, on these interfaces, and `unparsed` for the frames the rules
    cannot decide (bpf/filter/filter.h)."""

    name = "filter"
    title = "filter"
    module = "xdp_filter"
    what = "the filter"
    what_applied = "the filter"
    what_loaded = "the filter"
    Error = FilterError
    source = FILTER_SOURCE
    map_layouts: ClassVar[dict[str, MapLayout]] = layouts.LAYOUTS
    counter_maps = layouts.MAP_NAMES

    def __init__(
        self,
        paths: xp.InstancePaths,
        cache_dir: str,
        *,
        rules: list,
        interfaces: list[str],
        hook: str = "xdp",
        mode: str = "native",
        allow_generic: bool = False,
        unparsed: str = "drop",
        **common,
    ):
        super().__init__(paths, cache_dir, **common)
        self.rule_items = rules
        self.attached_to = interfaces
        self.hook = hook
        self.mode = mode
        self.allow_generic = allow_generic
        self.unparsed = unparsed

    def validate(self) -> None:
        if self.unparsed not in UNPARSED:
            raise FilterError(f"unparsed: {self.unparsed!r} is not one of {', '.join(UNPARSED)}")
        try:
            self.desired = rules.validate(self.rule_items)
        except rules.RulesError as exc:
            raise FilterError(str(exc), exc.problems) from exc
        self.attach_mode = attach_mode(self.hook, self.mode, self.allow_generic)

    def needs(self):
        return needs.NEEDS, needs.variant(self.hook)

    def interfaces(self) -> list[str]:
        return self.attached_to

    def compile_arguments(self) -> dict:
        return {"program": layouts.PROGRAMS[self.hook], "mode": self.attach_mode}

    def plan(self, instance: xp.Instance):
        self.maps = writer.typed({name: instance.obj.map(name) for name in layouts.MAP_NAMES})
        try:
            return writer.plan(writer.read(self.maps), self.desired, self.header, self.unparsed)
        except writer.DoesNotFit as exc:
            raise FilterError(f"the rules do not fit the data plane, nothing was changed: {exc}") from exc

    def part(self) -> dict:
        return {"rules": self.rule_items, "hook": self.hook, "unparsed": self.unparsed}

    @contextlib.contextmanager
    def write(self, instance: xp.Instance, attach_plan: xp.Plan, planned: writer.Update):
        if not self.check_mode:
            writer.apply(self.maps, planned)
        try:
            yield
        except BaseException:
            if not self.check_mode:
                writer.rollback(self.maps, planned)
            raise

    def changes(self, planned: writer.Update) -> Changes:
        changes = Changes(self.header)
        changes.extend(planned.changes)
        return changes

    def facts(self, instance: xp.Instance, attach_plan: xp.Plan, planned) -> dict:
        return {
            "name": self.paths.name,
            "hook": self.hook,
            "interfaces": self.attached_to,
            **writer.counters(self.maps),
        }

    def results(self, instance: xp.Instance, attach_plan: xp.Plan, planned) -> dict:
        return {"program_id": instance.running_prog_id(attach_plan), **super().results(instance, attach_plan, planned)}

    @classmethod
    def counters(cls, maps: dict) -> dict:
        return writer.counters(writer.typed(maps))

    @classmethod
    def arguments(cls, record: dict, options: dict) -> dict:
        hook = record[cls.name].get("hook", "xdp")
        return {
            "rules": record[cls.name].get("rules") or [],
            "interfaces": sorted(record["interfaces"]),
            "hook": hook,
            "mode": record.get("mode", "native") if hook == "xdp" else "native",
            "allow_generic": True,  # it was allowed when the record was written
            "unparsed": record[cls.name].get("unparsed", "drop"),
            "source": record.get("source") or FILTER_SOURCE,
            "include_dirs": (record.get("build") or {}).get("include_dirs"),
        }
