# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP's maps in the kernel: what they hold (read), writing a plan's difference to them make-before-break
with a way back (Writer), the one way a configuration gets into them (update), and the counters.

update() is used by the vtep module (through deploy.py), by the kernel tests and by the benchmark alike: read what
the maps hold, compile what the configuration needs, diff the two, write the difference.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.libbpf import BPF_MAP_TYPE_DEVMAP_HASH
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import plan
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import DROP_REASONS, FDB_EVENTS
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import VtepConfig
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import (
    ARRAY_MAPS,
    CONFIG_MAPS,
    FDB_GENERATION,
    GROUP_CAPACITY,
    GROUP_MAPS,
    LAYOUTS,
    LEARNED_FDB,
    USER_FDB_GENERATION_STEP,
    DevmapVal,
    TrafficStats,
    u32,
)

# New member groups published per batch write to an outer map (Writer._publish): each is an open fd until then, so a
# first apply of thousands of VNIs stays below a host's usual limit of 1024 open files.
PUBLISH_BATCH = 256


class WriteError(RuntimeError):
    """The kernel refused a write; the message names the document item the entry comes from. Raised after the
    writes made so far were undone."""


class RollbackError(RuntimeError):
    """Undoing an update that failed half-way failed in part: the maps hold neither the previous configuration nor
    the new one. .cause says why the update was undone, .unrestored what could not be put back (each in words)."""

    def __init__(self, cause: str, unrestored: list[str]):
        self.cause = cause
        self.unrestored = unrestored
        super().__init__(
            f"{cause}; undoing the writes made so far failed too, the VTEP's maps are half-programmed: could not "
            f"restore {'; '.join(unrestored)}"
        )


def _inner(group_ref: bytes) -> libbpf.Map:
    """A member group by the id the outer map returns; the caller closes its fd."""
    return libbpf.Map.from_fd(libbpf.map_fd_by_id(int.from_bytes(group_ref, "little")))


def _prog_tags(prog_ids: set[int]) -> set[str]:
    """The tags of programs by id; "gone" for one that no longer exists."""
    tags = set()
    for prog_id in prog_ids:
        try:
            fd = libbpf.prog_fd_by_id(prog_id)
        except libbpf.LibbpfError:
            tags.add("gone")
            continue
        try:
            tags.add(libbpf.prog_info(fd).tag)
        finally:
            os.close(fd)
    return tags


def read(maps: dict[str, libbpf.Map]) -> plan.MapContents:
    """What the VTEP's maps hold now (by name: the loaded object's, which are the pinned ones when reused)."""
    out = plan.MapContents()
    for name in CONFIG_MAPS:
        entries = maps[name].dump()
        if name in ARRAY_MAPS:
            absent = bytes(maps[name].value_size)
            entries = [(k, v) for k, v in entries if v != absent]
        out.entries[name] = dict(entries)
    prog_ids: set[int] = set()
    # Only the slots that hold a VNI are read: before Linux 6.8 every lookup in an array of maps waits for an RCU
    # grace period (bpf_map_copy_value): reading all VTEP_MAX_VNIS slots of the four group maps is 16,384 of them
    # (about 62 s per map in a software-emulated VM with Debian 12's 6.1). A group that an update killed half-way
    # left at a slot no VNI has is not seen: slots are given smallest first, so the re-run takes that slot again and
    # replaces it, and removal frees it with its outer map.
    vni_slots = out.vni_slots()
    for (kind, size), name in GROUP_MAPS.items():
        for vni, slot in vni_slots.items():
            ref = maps[name].lookup(slot.to_bytes(4, "little"))
            if ref is None:
                continue
            inner = _inner(ref)
            try:
                values = {int.from_bytes(k, "little"): DevmapVal.from_buffer_copy(v) for k, v in inner.dump()}
            finally:
                libbpf.close_fd(inner.fd)
            out.groups[kind][vni] = {member: value.ifindex for member, value in values.items()}
            out.where[(kind, vni)] = size
            prog_ids.update(value.prog for value in values.values())
    out.egress_tags = _prog_tags(prog_ids)
    return out


class _Refused:
    """A kernel refusal of one write, said with the document item it comes from. A class: it is entered once per
    entry written, and a generator-based context manager costs as much as the write."""

    __slots__ = ("origin", "what")

    def __init__(self, origin: str | None, what: str):
        self.origin = origin
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> bool:
        if isinstance(exc, (libbpf.LibbpfError, ValueError)):
            raise WriteError(f"{self.origin + ': ' if self.origin else ''}{self.what} failed: {exc}") from exc
        return False


class Writer:
    """Applies a MapDiff; remembers how to undo each write (the old value, an old group or egress program by fd),
    so a failure half-way puts back every byte the update changed, except fdb_generation, which moves on (the CPUs'
    cached FDB lookups are stale either way)."""

    def __init__(self, maps: dict[str, libbpf.Map], current: plan.MapContents, egress_fd: int):
        self.maps = maps
        self.current = current
        self.egress_fd = egress_fd
        self.undo: list[tuple[str, Callable[[], None]]] = []  # (what it restores, in words; the write that does)
        self._open: list[int] = []
        self._unpublished: list[int] = []  # fds of new groups not yet live

    def _keep(self, fd: int) -> int:
        """An fd the undo may need (an old group, an old egress program): open until close()."""
        self._open.append(fd)
        return fd

    def _remove(self, name: str, key: bytes) -> None:
        m = self.maps[name]
        if name in ARRAY_MAPS:
            m.update(key, bytes(m.value_size))
        else:
            m.delete(key)

    def _restore(self, name: str, key: bytes, old: bytes | None) -> None:
        if old is None:
            self._remove(name, key)
        else:
            self.maps[name].update(key, old)

    def _put(self, name: str, key: bytes, value: bytes, origin: str | None) -> None:
        old = self.current.entries.get(name, {}).get(key)
        self.maps[name].update(key, value)
        where = f" ({origin})" if origin else ""
        self.undo.append((f"{name} entry {key.hex()}{where}", lambda: self._restore(name, key, old)))

    def _delete(self, name: str, key: bytes) -> None:
        old = self.current.entries[name][key]
        self._remove(name, key)
        self.undo.append((f"{name} entry {key.hex()}", lambda: self._restore(name, key, old)))

    def _forget_learned(self, key: bytes) -> None:
        """A learned entry of a MAC that now has a static one."""
        learned = self.maps[LEARNED_FDB]
        old = learned.lookup(key)
        if old is not None:
            learned.delete(key)
            self.undo.append((f"learned FDB entry {key.hex()}", lambda: learned.update(key, old)))

    def _group(self, change: plan.GroupChange, fresh: bool) -> libbpf.Map:
        """The VNI's member group in the map of its size class (kept open until close()), or (fresh) a new one that
        is not yet published (open until _publish())."""
        found = None if fresh else self.maps[GROUP_MAPS[(change.kind, change.size)]].lookup(u32(change.slot))
        if found is not None:
            group = _inner(found)
            self._keep(group.fd)
            return group
        size = GROUP_CAPACITY[change.size]
        group = libbpf.Map.from_fd(
            libbpf.map_create(BPF_MAP_TYPE_DEVMAP_HASH, f"{change.kind}{change.vni}", 4, 8, size)
        )
        self._unpublished.append(group.fd)
        return group

    def _slot_undo(self, outer_name: str, slot: int, words: str) -> None:
        """Remember how to put back what a slot of an outer map holds, before it is written: the group it holds, kept
        open by fd, so that the undo can put that very group back (a group known by id cannot be written by fd), or
        nothing."""
        outer, key = self.maps[outer_name], u32(slot)
        old = outer.lookup(key)
        if old is None:
            self.undo.append((words, lambda: outer.delete(key)))
        else:
            previous = self._keep(libbpf.map_fd_by_id(int.from_bytes(old, "little")))
            self.undo.append((words, lambda: outer.update(key, u32(previous))))

    def _publish(self, outer_name: str, groups: list[tuple[plan.GroupChange, libbpf.Map]], origin) -> None:
        """Put complete new groups live at their slots of an outer map, in one batch: the kernel waits for an RCU
        grace period after every write to a map of maps (about 10 ms here), once per batch. Then the outer map holds
        them and their fds are closed."""
        if not groups:
            return
        for change, _group in groups:
            self._slot_undo(outer_name, change.slot, f"the {change.kind} group of VNI {change.vni}")
        first = groups[0][0]
        more = f" and {len(groups) - 1} more" if len(groups) > 1 else ""
        with _Refused(origin((first.kind, first.vni)), f"publishing the {first.kind} group of VNI {first.vni}{more}"):
            self.maps[outer_name].update_batch([(u32(change.slot), u32(group.fd)) for change, group in groups])
        for _change, group in groups:
            self._unpublished.remove(group.fd)
            libbpf.close_fd(group.fd)
        groups.clear()

    def _take_out_group(self, outer_name: str, slot: int, words: str) -> None:
        """Take a slot's group out of an outer map (the undo puts it back); an empty slot stays as it is."""
        if self.maps[outer_name].lookup(u32(slot)) is not None:
            self._slot_undo(outer_name, slot, words)
            self.maps[outer_name].delete(u32(slot))

    def _set_member(self, group: libbpf.Map, member: int, ifindex: int | None, words: str) -> None:
        """Write a member on the new egress program (None: remove it). The undo writes the old member back on its
        own egress program, kept open by fd (a devmap entry names its program by id on lookup, by fd on update)."""
        key = u32(member)
        old = group.lookup(key)
        if old is None:
            if ifindex is not None:
                group.update(key, bytes(DevmapVal(ifindex, self.egress_fd)))
                self.undo.append((words, lambda: group.delete(key)))
            return
        was = DevmapVal.from_buffer_copy(old)
        back = bytes(DevmapVal(was.ifindex, self._keep(libbpf.prog_fd_by_id(was.prog))))
        if ifindex is None:
            group.delete(key)
        else:
            group.update(key, bytes(DevmapVal(ifindex, self.egress_fd)))
        self.undo.append((words, lambda: group.update(key, back)))

    def _fdb_changed(self) -> None:
        generation = self.maps[FDB_GENERATION]
        now = int.from_bytes(generation.lookup(u32(0)), "little")
        generation.update(u32(0), ((now + USER_FDB_GENERATION_STEP) % (1 << 64)).to_bytes(8, "little"))

    def _zero(self, name: str, slots: list[int]) -> None:
        for slot in slots:
            key = u32(slot)
            old = self.maps[name].lookup(key)
            self.maps[name].update(key, bytes(len(old)))
            self.undo.append((f"{name} of slot {slot}", lambda key=key, old=old: self._restore(name, key, old)))

    def apply(self, d: plan.MapDiff) -> None:
        """Raises WriteError (after undoing what was written) when the kernel refuses a write, RollbackError when
        the undo fails in part."""
        try:
            self._apply(d)
        except BaseException as exc:
            self.undo_after(exc)
            raise

    def _apply(self, d: plan.MapDiff) -> None:
        origin = d.origins.get
        # Make before break: fresh counters, configuration entries, members in; then members out, removals.
        with _Refused(None, "clearing the counters of new ports and VNIs"):
            self._zero("port_stats", d.fresh_port_slots)
            self._zero("vni_stats", d.fresh_vni_slots)
        for name, entries in d.upserts.items():
            for key, value in entries.items():
                with _Refused(origin((name, key)), f"writing {name}"):
                    self._put(name, key, value, origin((name, key)))
        # New groups go live only when complete, in batches per outer map (PUBLISH_BATCH at a time: each is an open
        # fd until then).
        unpublished: dict[str, list[tuple[plan.GroupChange, libbpf.Map]]] = {name: [] for name in GROUP_MAPS.values()}
        for change in d.groups:
            words = f"the {change.kind} group of VNI {change.vni}"
            fresh = change.vni not in self.current.groups[change.kind] or change.moved_from is not None
            with _Refused(origin((change.kind, change.vni)), f"creating {words}"):
                group = self._group(change, fresh)
            for member, ifindex in change.adds.items():
                with _Refused(origin((change.kind, change.vni, member)), f"adding ifindex {ifindex} to {words}"):
                    if fresh:  # not live yet: taking back its publication is its undo
                        group.update(u32(member), bytes(DevmapVal(ifindex, self.egress_fd)))
                    else:
                        self._set_member(group, member, ifindex, f"member {member} of {words}")
            if fresh:
                outer = GROUP_MAPS[(change.kind, change.size)]
                unpublished[outer].append((change, group))
                if len(unpublished[outer]) >= PUBLISH_BATCH:
                    self._publish(outer, unpublished[outer], origin)
        for outer, groups in unpublished.items():
            self._publish(outer, groups, origin)
        written = {(c.kind, c.size, c.slot) for c in d.groups}
        for change in d.groups:
            words = f"the {change.kind} group of VNI {change.vni}"
            with _Refused(origin((change.kind, change.vni)), f"updating {words}"):
                if change.moved_from:
                    outer = GROUP_MAPS[(change.kind, change.moved_from)]
                    self._take_out_group(outer, change.slot, f"{words} in {outer}")
                    continue
                if not change.removes:
                    continue
                group = self._group(change, fresh=False)
                for member in change.removes:
                    self._set_member(group, member, None, f"member {member} of {words}")
        for kind, vni, size, slot in d.groups_removed:
            if (kind, size, slot) in written:  # the slot passed to a new VNI, whose group replaced this one
                continue
            words = f"the {kind} group of VNI {vni if vni is not None else '?'}"
            with _Refused(None, f"removing {words}"):
                self._take_out_group(GROUP_MAPS[(kind, size)], slot, words)
        for name, keys in d.deletes.items():
            with _Refused(None, f"removing an entry of {name}"):
                for key in keys:
                    self._delete(name, key)
        # A static entry overrides what was learned for its MAC (learning never writes it again).
        with _Refused(None, "removing the learned entries that static ones override"):
            for key in d.upserts.get("fdb_static", {}):
                self._forget_learned(key)
        if d.upserts.get("fdb_static") or d.deletes.get("fdb_static"):
            with _Refused(None, "marking the FDB changed"):
                self._fdb_changed()

    def rollback(self) -> list[str]:
        """Undo what apply() wrote; also after apply() returned, when a later step (the attach) failed. Every undo
        step is tried; returns what could not be restored, in words (empty: every byte is back)."""
        steps, self.undo = self.undo, []
        if steps:  # what the CPUs looked up of fdb_static meanwhile is stale once it is back
            steps.insert(0, ("the FDB generation", self._fdb_changed))  # undone last
        unrestored = []
        for what, step in reversed(steps):
            try:
                step()
            except (libbpf.LibbpfError, ValueError) as exc:
                unrestored.append(f"{what} ({exc})")
        return unrestored

    def undo_after(self, exc: BaseException) -> None:
        """Roll back because of exc; raises RollbackError (from exc) when something could not be restored."""
        unrestored = self.rollback()
        if unrestored:
            raise RollbackError(str(exc) or type(exc).__name__, unrestored) from exc

    def close(self) -> None:
        for fd in self._open + self._unpublished:
            libbpf.close_fd(fd)
        self._open.clear()
        self._unpublished.clear()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Update:
    """One update of a VTEP's maps: what they held, what they hold afterwards, and the difference."""

    current: plan.MapContents
    desired: plan.MapContents
    diff: plan.MapDiff


@contextlib.contextmanager
def update(
    maps: dict[str, libbpf.Map],
    egress: libbpf.Program,
    config: VtepConfig,
    ports: dict[str, plan.Port],
    peer_macs: dict[tuple[int, str], str],
    write: bool = True,
):
    """Bring the VTEP's maps to `config`: read what they hold, compile what the configuration needs (every member
    on `egress`), diff, and (when `write`) write the difference, make-before-break. Yields the Update.

    Raises plan.DoesNotFit before anything is written, and WriteError after undoing a write the kernel refused.
    When the block raises (a later step such as the attach failed) the writes are undone and the error goes on.
    When the undo fails in part, RollbackError (from the error that made it undo) names what is not back.
    Devmap members name their interface by ifindex in the caller's network namespace.
    """
    current = read(maps)
    desired = plan.compile_desired(config, ports, peer_macs, current, egress.info().tag)
    difference = plan.diff(current, desired)
    overflows = plan.capacity_problems(current, desired, {name: maps[name].max_entries for name in CONFIG_MAPS})
    if overflows:
        raise plan.DoesNotFit("; ".join(overflows))
    with Writer(maps, current, egress.fd) as writer:
        if write:
            writer.apply(difference)
        try:
            yield Update(current, desired, difference)
        except BaseException as exc:  # also an interrupt: the maps go back to what the previous configuration wrote
            writer.undo_after(exc)
            raise


def counters(maps: dict[str, libbpf.Map], contents: plan.MapContents, names: dict[int, str]) -> dict:
    """Per-VNI and per-port counters, summed over CPUs, with drops by reason (non-zero only); per VNI also the
    forwarding events (fdb_events: every one, by name)."""

    def total(stats: list[TrafficStats]) -> dict:
        out = {f: sum(getattr(s, f) for s in stats) for f in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")}
        out["drops"] = {reason: n for i, reason in enumerate(DROP_REASONS) if (n := sum(s.drops[i] for s in stats))}
        return out

    def vni_total(stats: list[TrafficStats]) -> dict:
        events = {event: sum(s.fdb[i] for s in stats) for i, event in enumerate(FDB_EVENTS)}
        return {**total(stats), "fdb_events": events}

    vni_stats = TypedMap(maps["vni_stats"], LAYOUTS["vni_stats"])
    port_stats = TypedMap(maps["port_stats"], LAYOUTS["port_stats"])
    return {
        "vnis": {vni: vni_total(vni_stats.get(slot)) for vni, slot in sorted(contents.vni_slots().items())},
        "ports": {
            names.get(ifindex, str(ifindex)): total(port_stats.get(slot))
            for ifindex, slot in sorted(contents.port_slots().items())
        },
    }
