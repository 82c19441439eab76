# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""A host's counters as Prometheus metrics, written for node_exporter's textfile collector.

Every instance the host's records name (instances/records.py) is read from its pinned maps by the reader its own
module uses: its data plane's read_counters (instances/registry.py finds the data plane; xdpfleet.fabric.vtep_info
reads the VTEP's so), and for a program instance with bpf/counter's map (the xdp_counter role's) btf_layout's
read_pinned_map (xdpfleet.fabric.bpf_map_info). export() writes them all into one file; it is what both the
xdpfleet.fabric.metrics_textfile module and the host-side entry point (roles/prometheus_textfile/files/
xdpfleet-metrics, run by a systemd timer) call.

The VTEP's data plane counts per VNI and per port, not per (VNI, port): so there are two sets of families,
xdpfleet_vtep_vni_* {vtep, vni} and xdpfleet_vtep_port_* {vtep, port}, each summing to the VTEP's traffic; one family
with both labels would count every frame twice when summed. Every drop reason and FDB event is written, zeros too,
so a series never appears out of nowhere. An instance that cannot be read (a VTEP of another collection version,
maps half gone) leaves its families out and says so in xdpfleet_instance_read_success{kind, name} 0.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import btf_layout, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.records import Record, RecordError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records, registry
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics.exposition import Family, render, shape
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics.perf import PERF_FILE

DEFAULT_DIRECTORY = "/var/lib/prometheus/node-exporter"  # Debian's prometheus-node-exporter reads this one
COUNTERS_FILE = "xdpfleet.prom"
RECORD = "metrics_textfile.json"  # in the state directory: every file written, for the teardown (remove_all)
FILE_MODE = 0o644  # node_exporter runs as its own user
DIRECTORY_MODE = 0o755
# The most of an existing file the exporter reads (for its diff and `changed`): a file of ours for a VTEP at its
# limits (16,384 VNIs) is about 40 MiB. A longer one is replaced unread.
MAX_READ_BYTES = 64 * 1024 * 1024
COUNTER_MAP = "xdp_counters"  # bpf/counter's map: a program instance that has it is a counter


class XdpCounter(ctypes.Structure):
    """bpf/counter/counter.c's struct xdp_counter, a slot of its map."""

    _fields_ = [("packets", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


# Checked against the pinned map's BTF before it is read: another program's map of that name is not a counter.
COUNTER_LAYOUT = btf_layout.MapLayout(COUNTER_MAP, ctypes.c_uint32, XdpCounter)
READ_ERRORS = (
    *registry.ERRORS,
    btf_layout.LayoutMismatch,
    libbpf.LibbpfError,
    OSError,
    ValueError,
)


class Families:
    """Families by name, made on first use, so each name is one family."""

    def __init__(self) -> None:
        self.by_name: dict[str, Family] = {}

    def get(self, name: str, kind: str, text: str) -> Family:
        if name not in self.by_name:
            self.by_name[name] = Family(name, kind, text)
        return self.by_name[name]

    def counter(self, name: str, text: str) -> Family:
        return self.get(name, "counter", text)

    def gauge(self, name: str, text: str) -> Family:
        return self.get(name, "gauge", text)

    def families(self) -> list[Family]:
        return list(self.by_name.values())


TRAFFIC = (
    ("rx_packets", "rx_packets_total", "frames received"),
    ("rx_bytes", "rx_bytes_total", "bytes received"),
    ("tx_packets", "tx_packets_total", "frames sent (each copy of a flooded frame counts)"),
    ("tx_bytes", "tx_bytes_total", "bytes sent"),
)


def add_vtep(out: Families, name: str, counters: dict) -> None:
    """The VTEP's read_counters()'s counters (the vtep_info module's facts) as families."""
    scopes = (
        ("vni", "vni", counters["vnis"], "into or out of the VNI (inner frames: on its local ports, and "
         "decapsulated from or encapsulated for its peers)"),
        ("port", "port", counters["ports"], "on the port, as on the wire"),
    )  # fmt: skip
    for scope, label, entries, where in scopes:
        for key, entry in entries.items():
            labels = {"vtep": name, label: key}
            for field_name, suffix, what in TRAFFIC:
                family = out.counter(f"xdpfleet_vtep_{scope}_{suffix}", f"VTEP: {what} {where}.")
                family.add(entry[field_name], **labels)
            drops = out.counter(
                f"xdpfleet_vtep_{scope}_dropped_packets_total",
                f"VTEP: frames dropped {where}, by reason (bpf/vtep/vtep_abi.h, enum drop_reason).",
            )
            for reason in registry.plane("vtep").labels["reason"]:
                drops.add(entry["drops"].get(reason, 0), **labels, reason=reason)
    for vni, entry in counters["vnis"].items():
        labels = {"vtep": name, "vni": vni}
        events = out.counter(
            "xdpfleet_vtep_vni_fdb_events_total",
            "VTEP: forwarding events per VNI (learned, moved, aged_out, static_conflict, known_unicast, flooded).",
        )
        for event in registry.plane("vtep").labels["event"]:
            events.add(entry["fdb_events"][event], **labels, event=event)
        table = entry.get("fdb", {})
        entries = out.gauge("xdpfleet_vtep_vni_fdb_entries", "VTEP: MACs in the VNI's forwarding table, by type.")
        for kind in ("static", "learned"):
            entries.add(sum(1 for e in table.values() if e["type"] == kind), **labels, type=kind)


def add_filter(out: Families, name: str, counters: dict) -> None:
    """The filter's read_counters()'s counters: per rule (in rule order) and frames no rule decided, by reason."""
    for unit in ("packets", "bytes"):
        rules = out.counter(
            f"xdpfleet_filter_rule_{unit}_total", f"Packet filter: {unit} each rule matched (its action: count, drop)."
        )
        for rule in counters["rules"]:
            rules.add(rule[unit], filter=name, rule=rule["name"], action=rule["action"])
        unmatched = out.counter(
            f"xdpfleet_filter_unmatched_{unit}_total",
            f"Packet filter: {unit} no rule decided, by reason (they pass; unparsed: as the filter's unparsed says).",
        )
        for reason, counted in counters["unmatched"].items():
            unmatched.add(counted[unit], filter=name, reason=reason)


def add_router(out: Families, name: str, counters: dict) -> None:
    """The router's read_counters()'s counters: per verdict (bpf/router/router_abi.h, enum router_verdict)."""
    for unit in ("packets", "bytes"):
        verdicts = out.counter(
            f"xdpfleet_router_{unit}_total",
            f"XDP router: {unit} by verdict (forwarded_v4/_v6 redirected by XDP, pass_* handed to the kernel).",
        )
        for verdict, counted in counters.items():
            verdicts.add(counted[unit], router=name, verdict=verdict)


def add_counter(out: Families, name: str, entries: list[dict]) -> None:
    """bpf/counter's slots (read_pinned_map's entries): slot 0, which a counter built as it ships counts into, and
    every other slot that counted something."""
    for unit in ("packets", "bytes"):
        slots = out.counter(f"xdpfleet_xdp_counter_{unit}_total", f"Counting XDP program (xdp_counter): {unit}.")
        for entry in entries:
            if entry["key"] == 0 or entry["value"]["packets"]:
                slots.add(entry["value"][unit], program=name, slot=entry["key"])


FAMILIES = {"vtep": add_vtep, "filter": add_filter, "router": add_router}  # data plane -> how its counters go out


@dataclass
class Collected:
    families: list[Family]
    problems: list[str] = field(default_factory=list)  # "<instance>: <why it could not be read>"


def collect(host: records.HostPaths) -> Collected:
    """Every recorded instance's counters, read now."""
    out = Families()
    read = out.gauge(
        "xdpfleet_instance_read_success",
        "1 when the instance's counters were read from its pinned maps, 0 when not (the exporter's log says why).",
    )
    problems = []
    for name in records.recorded_instances(host):
        paths = host.instance(name)
        kind = registry.PROGRAM
        try:
            record = xp.load_state(paths)
            kind, plane = registry.kind_of(record), registry.plane_of(record)
            if plane is None:
                pin = paths.map_pin(COUNTER_MAP)
                if not os.path.exists(pin):
                    continue  # a program without counters of ours (an echo server, a program of the user's)
                kind = "counter"
                with libbpf.PinnedMap(pin) as pinned:
                    COUNTER_LAYOUT.check_pinned(pinned)
                add_counter(out, name, btf_layout.read_pinned_map(pin, per_cpu=False, skip_zero=False)["entries"])
            elif kind in FAMILIES:
                counters = plane.read_counters(paths)
                if counters is None:
                    raise ValueError(f"recorded in {paths.state_file}, but none of its maps is pinned (not running)")
                FAMILIES[kind](out, name, counters)
            else:
                continue  # a data plane whose counters the exporter does not write (the echo server's)
        except READ_ERRORS as exc:
            problems.append(f"{name}: {exc}")
            read.add(0, kind=kind, name=name)
            continue
        read.add(1, kind=kind, name=name)
    return Collected(out.families(), problems)


@dataclass
class Written:
    path: str
    changed: bool  # the file's shape changed: a family or a series came or went
    series: int  # sample lines in the file
    diff: dict


class UnsafeTextfile(ValueError):
    """The textfile directory, or a file of ours in it, is not what the exporter may write (or read) as root; the
    message names the field (directory) and the rule."""


@contextlib.contextmanager
def textfile_directory(directory: str, create: bool):
    """The directory open (its fd), checked through that fd, so that everything after works in the directory checked
    whatever is renamed on the way to it; None when it is missing and not to be created (check mode).

    The exporter runs as root: a directory another user can write to lets that user put in place of our files a
    link to a secret (its lines would land in the diff), a FIFO (the read would never end) or a device (endless):
    so it must be owned by root (or the user running the module) and writable by no one else."""
    if create:
        os.makedirs(directory, DIRECTORY_MODE, exist_ok=True)
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        if create:
            raise
        yield None
        return
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in (0, os.geteuid()):
            raise UnsafeTextfile(
                f"directory: {directory} is owned by uid {st.st_uid}, not by root or the user running the exporter, "
                "which writes into it as root: make it root's"
            )
        if mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise UnsafeTextfile(
                f"directory: {directory} is writable by {'others' if mode & stat.S_IWOTH else 'its group'} (mode "
                f"{mode:04o}): the exporter writes into it as root, so only root may write there (chmod go-w)"
            )
        yield fd
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Previous:
    """A file of ours as it was: its text, or that it was longer than MAX_READ_BYTES and left unread."""

    text: str = ""
    oversized: bool = False


def read_previous(dir_fd: int | None, name: str, where: str) -> Previous | None:
    """Our file `name` in the open directory, None when there is none. Never read through a link, never from
    anything but a regular file, never more than MAX_READ_BYTES of it. Raises UnsafeTextfile naming `where`."""
    if dir_fd is None:
        return None
    try:
        # O_NONBLOCK: opening a FIFO waits for a writer otherwise
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeTextfile(
                f"directory: {where} is a symbolic link: refused (the exporter reads and replaces only a regular file "
                "of its own; remove the link)"
            ) from None
        raise
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeTextfile(
                f"directory: {where} is not a regular file: refused (the exporter reads and replaces only a regular "
                "file of its own; remove it)"
            )
        data = f.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        return Previous(oversized=True)
    return Previous(data.decode("utf-8", "replace"))


def _diff(path: str, before: Previous | None, after: str | None) -> dict:
    if before is None:
        before_header, before_lines = f"{path} (absent)", []
    elif before.oversized:
        before_header, before_lines = f"{path} (over {MAX_READ_BYTES} bytes: not read)", []
    else:
        before_header, before_lines = path, shape(before.text)
    return {
        "before_header": before_header,
        "after_header": path if after is not None else f"{path} (absent)",
        "before": "".join(line + "\n" for line in before_lines),
        "after": "".join(line + "\n" for line in shape(after or "")),
    }


def write_textfile(path: str, text: str, check_mode: bool) -> Written:
    """Replace `path` with `text` through a temporary file in its directory and a rename (node_exporter reads only
    *.prom, so it never sees the temporary file, and never half a file), 0644. Written also when only values moved
    (that is the point of it); `changed` says whether its shape did (see exposition.shape()), or the old file could
    not be compared (larger than MAX_READ_BYTES). In check mode nothing is written. Raises UnsafeTextfile (see
    textfile_directory, read_previous) before anything is written."""
    directory, name = os.path.split(path)
    with textfile_directory(directory, create=not check_mode) as dir_fd:
        before = read_previous(dir_fd, name, path)
        if not check_mode:
            files.replace_durably(name, text, FILE_MODE, dir_fd=dir_fd)
    changed = before is None or before.oversized or shape(before.text) != shape(text)
    return Written(path, changed, sum(1 for line in shape(text) if not line.startswith("#")), _diff(path, before, text))


def remove_textfile(path: str, check_mode: bool) -> Written:
    """Remove `path` (a file this host no longer has metrics for), under the rules of write_textfile."""
    directory, name = os.path.split(path)
    with textfile_directory(directory, create=False) as dir_fd:
        before = read_previous(dir_fd, name, path)
        if before is not None and not check_mode:
            files.remove_durably(name, dir_fd=dir_fd)
    return Written(path, before is not None, 0, _diff(path, before, None))


def export(host: records.HostPaths, directory: str, check_mode: bool) -> tuple[Written, list[str]]:
    """Read every recorded instance and write <directory>/xdpfleet.prom; the problems name the instances that could
    not be read (their families are left out, xdpfleet_instance_read_success says 0)."""
    collected = collect(host)
    written = write_textfile(os.path.join(directory, COUNTERS_FILE), render(collected.families), check_mode)
    return written, collected.problems


def recorded_files(state_dir: str) -> list[str]:
    """The files the record says the exporter wrote. Raises UnsafeTextfile for a record that is not its own."""
    record = Record(state_dir, RECORD)
    try:
        found = record.load()
    except RecordError as exc:
        raise UnsafeTextfile(str(exc)) from None
    if found is None:
        return []
    paths = found.get("files")
    if not isinstance(paths, list) or not all(isinstance(p, str) and os.path.isabs(p) for p in paths):
        raise UnsafeTextfile(f"state_dir: {record.path} does not list absolute paths under 'files'")
    return paths


def remember(state_dir: str, paths: list[str]) -> None:
    """Add `paths` to the record of the files the exporter writes, before they are written: a teardown, which needs
    no inventory, finds them there (and a run killed after the record and before the file leaves nothing unlisted)."""
    known = recorded_files(state_dir)
    wanted = sorted(set(known) | {os.path.abspath(p) for p in paths})
    if wanted != known:
        Record(state_dir, RECORD).save({"files": wanted})


def remove_all(state_dir: str, directory: str, check_mode: bool) -> list[Written]:
    """Remove every file the record names, and ours by name in `directory` (files written before the record was
    kept), then the record: node_exporter would otherwise go on serving the last counters of data planes that are
    gone as live."""
    paths = set(recorded_files(state_dir))
    paths.update(os.path.join(directory, name) for name in (COUNTERS_FILE, PERF_FILE))
    removed = [remove_textfile(path, check_mode) for path in sorted(paths)]
    if not check_mode:
        Record(state_dir, RECORD).remove()
    return removed
