# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Rules into the filter's maps, writing only the difference, and its counters out of them.

The maps (bpf/filter/filter.h says why): filter_rules[slot], filter_counters[slot], filter_order[generation] (the
slots in rule order) and filter_active[0] (the generation in use). What the maps hold now is read from the active
order; a rule that stays as it is keeps its slot and its counters. A rule added or changed is written into a slot
no active rule uses, its counters zeroed first; then the new order (with its unparsed: what frames the rules
cannot decide get) goes into the idle generation and one word switches to it. Until that switch the data plane runs
the old rules untouched, so a failed write changes nothing, and a frame sees either all of the old rules or all of
the new ones.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter.layouts import (
    LAYOUTS,
    FilterCounter,
    FilterOrder,
    FilterRule,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter.rules import Rule, decode


class DoesNotFit(ValueError):
    """The change needs more free slots than the maps have while the old rules still run."""


@dataclass
class Installed:
    """One rule as the maps hold it."""

    slot: int
    value: FilterRule

    @property
    def name(self) -> str:
        return bytes(self.value.name).rstrip(b"\0").decode()


@dataclass
class Current:
    generation: int
    rules: list[Installed]
    unparsed: str  # "drop" or "pass": what frames the rules cannot decide get (abi.UNPARSED_ACTIONS)


@dataclass
class Update:
    """What apply() writes: rules into free slots, then the order of slots into the idle generation."""

    current: Current
    desired: list[Rule]
    unparsed: str
    slots: list[int] = field(default_factory=list)  # the desired rules' slots, in rule order
    writes: dict[int, FilterRule] = field(default_factory=dict)  # slot -> rule, for rules added or changed
    changes: Changes = field(default_factory=lambda: Changes("filter"))

    @property
    def changed(self) -> bool:
        return self.changes.changed


def typed(maps: dict) -> dict[str, TypedMap]:
    return {name: TypedMap(maps[name], layout) for name, layout in LAYOUTS.items()}


def read(maps: dict[str, TypedMap]) -> Current:
    generation = maps["filter_active"].get(0).value
    order = maps["filter_order"].get(generation)
    rules = []
    for n in range(min(order.count, abi.FILTER_MAX_RULES)):
        slot = order.slot[n]
        rules.append(Installed(slot, maps["filter_rules"].get(slot)))
    return Current(generation, rules, _UNPARSED_NAMES.get(order.unparsed, f"unparsed {order.unparsed}"))


_UNPARSED_NAMES = {number: name for name, number in abi.UNPARSED_ACTIONS.items()}


def plan(current: Current, desired: list[Rule], header: str, unparsed: str = "drop") -> Update:
    """The update from what the maps hold to `desired` rules, and to `unparsed` (drop or pass) for the frames
    they cannot decide."""
    update = Update(current, desired, unparsed, changes=Changes(header))
    by_name = {installed.name: installed for installed in current.rules}
    in_use = {installed.slot for installed in current.rules}
    free = [slot for slot in range(abi.FILTER_MAX_RULES) if slot not in in_use]
    for rule in desired:
        value = rule.encode()
        installed = by_name.get(rule.name)
        if installed is not None and bytes(installed.value) == bytes(value):
            update.slots.append(installed.slot)
            continue
        if not free:
            raise DoesNotFit(
                f"rules: {len(current.rules)} rules run now and the change adds or changes {len(update.writes) + 1} "
                f"or more: the old ones keep their slots until the switch, and {abi.FILTER_MAX_RULES} slots do not "
                "hold both; change fewer rules at a time"
            )
        slot = free.pop(0)
        update.slots.append(slot)
        update.writes[slot] = value
        if installed is None:
            update.changes.add(f"add rule {rule.describe()}", key=rule.name, after=rule.describe())
        else:
            before = decode(installed.value).describe()
            update.changes.add(
                f"change rule {before} -> {rule.describe()}", key=rule.name, before=before, after=rule.describe()
            )
    wanted = {rule.name for rule in desired}
    for installed in current.rules:
        if installed.name not in wanted:
            before = decode(installed.value).describe()
            update.changes.add(f"remove rule {before}", key=installed.name, before=before)
    if [i.slot for i in current.rules] != update.slots and not update.changed:
        order = ", ".join(rule.name for rule in desired)
        update.changes.add(
            f"reorder rules: {order}",
            key="order",
            before=f"order: {', '.join(i.name for i in current.rules)}",
            after=f"order: {order}",
        )
    if unparsed != current.unparsed:
        update.changes.add(
            f"unparsed frames: {current.unparsed} -> {unparsed}",
            key="unparsed frames",
            before=f"unparsed frames: {current.unparsed}",
            after=f"unparsed frames: {unparsed}",
        )
    return update


def apply(maps: dict[str, TypedMap], update: Update) -> None:
    """Write the update (see the module's docstring for the order). Raises libbpf.LibbpfError; before the final
    switch nothing the data plane runs has changed."""
    if not update.changed:
        return
    zero = [FilterCounter() for _cpu in range(libbpf.num_possible_cpus())]
    for slot, value in update.writes.items():
        maps["filter_counters"].set(slot, zero)
        maps["filter_rules"].set(slot, value)
    order = FilterOrder(count=len(update.slots), unparsed=abi.UNPARSED_ACTIONS[update.unparsed])
    for n, slot in enumerate(update.slots):
        order.slot[n] = slot
    idle = (update.current.generation + 1) % abi.FILTER_GENERATIONS
    maps["filter_order"].set(idle, order)
    maps["filter_active"].set(0, ctypes.c_uint32(idle))


def _summed(per_cpu: list[FilterCounter]) -> dict:
    return {"packets": sum(c.packets for c in per_cpu), "bytes": sum(c.bytes for c in per_cpu)}


def counters(maps: dict[str, TypedMap]) -> dict:
    """The active rules' counters in rule order, the frames no rule decided by reason, and what unparsed frames
    get."""
    current = read(maps)
    return {
        "unparsed": current.unparsed,
        "rules": [
            {
                "name": installed.name,
                "action": {v: k for k, v in abi.ACTIONS.items()}.get(installed.value.action, "unknown"),
                **_summed(maps["filter_counters"].get(installed.slot)),
            }
            for installed in current.rules
        ],
        "unmatched": {
            reason: _summed(maps["filter_unmatched"].get(n)) for n, reason in enumerate(abi.UNMATCHED_REASONS)
        },
    }


def rollback(maps: dict[str, TypedMap], update: Update) -> None:
    """Switch back to the order that ran before apply(): its generation and slots were left as they were."""
    if update.changed:
        maps["filter_active"].set(0, ctypes.c_uint32(update.current.generation))
