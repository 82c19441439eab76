# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""A host's counters as Prometheus metrics, written for node_exporter's textfile collector.

Every instance the host's records name (host/records.py) is read from its pinned maps by the reader its own
module uses: vtep/deploy.read_counters (xdpfleet.fabric.vtep_info), filter/deploy.read_counters, router/
deploy.read_counters, and for a program instance with bpf/counter's map (the xdp_counter role's) btf_layout's
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

import os
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import btf_layout, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import deploy as filter_deploy
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics.exposition import Family, render, shape
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy as router_deploy
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vtep_deploy
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import DROP_REASONS, FDB_EVENTS

DEFAULT_DIRECTORY = "/var/lib/prometheus/node-exporter"  # Debian's prometheus-node-exporter reads this one
COUNTERS_FILE = "xdpfleet.prom"
FILE_MODE = 0o644  # node_exporter runs as its own user
DIRECTORY_MODE = 0o755
COUNTER_MAP = "xdp_counters"  # bpf/counter's map: a program instance that has it is a counter
READ_ERRORS = (
    vtep_deploy.VtepError,
    filter_deploy.FilterError,
    router_deploy.RouterError,
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
    """vtep_deploy.read_counters()'s counters (the vtep_info module's facts) as families."""
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
            for reason in DROP_REASONS:
                drops.add(entry["drops"].get(reason, 0), **labels, reason=reason)
    for vni, entry in counters["vnis"].items():
        labels = {"vtep": name, "vni": vni}
        events = out.counter(
            "xdpfleet_vtep_vni_fdb_events_total",
            "VTEP: forwarding events per VNI (learned, moved, aged_out, static_conflict, known_unicast, flooded).",
        )
        for event in FDB_EVENTS:
            events.add(entry["fdb_events"][event], **labels, event=event)
        table = entry.get("fdb", {})
        entries = out.gauge("xdpfleet_vtep_vni_fdb_entries", "VTEP: MACs in the VNI's forwarding table, by type.")
        for kind in ("static", "learned"):
            entries.add(sum(1 for e in table.values() if e["type"] == kind), **labels, type=kind)


def add_filter(out: Families, name: str, counters: dict) -> None:
    """filter_deploy.read_counters()'s counters: per rule (in rule order) and frames no rule decided, by reason."""
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
    """router_deploy.read_counters()'s counters: per verdict (bpf/router/router_abi.h, enum router_verdict)."""
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
        kind = "program"
        try:
            kind = records.instance_kind(xp.load_state(paths))
            if kind == "program":
                pin = paths.map_pin(COUNTER_MAP)
                if not os.path.exists(pin):
                    continue  # a program without counters of ours (an echo server, a program of the user's)
                kind = "counter"
                add_counter(out, name, btf_layout.read_pinned_map(pin, per_cpu=False, skip_zero=False)["entries"])
            else:
                reader = {
                    "vtep": (vtep_deploy.read_counters, add_vtep),
                    "filter": (filter_deploy.read_counters, add_filter),
                    "router": (router_deploy.read_counters, add_router),
                }[kind]
                counters = reader[0](paths)
                if counters is None:
                    raise ValueError(f"recorded in {paths.state_file}, but none of its maps is pinned (not running)")
                reader[1](out, name, counters)
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


def write_textfile(path: str, text: str, check_mode: bool) -> Written:
    """Replace `path` with `text` through a temporary file in its directory and a rename (node_exporter reads only
    *.prom, so it never sees the temporary file, and never half a file), 0644. Written also when only values moved
    (that is the point of it); `changed` says whether its shape did (see exposition.shape()). In check mode nothing
    is written."""
    try:
        with open(path) as f:
            before = f.read()
    except FileNotFoundError:
        before = None
    old = shape(before) if before is not None else []
    new = shape(text)
    if not check_mode:
        directory = os.path.dirname(path)
        os.makedirs(directory, DIRECTORY_MODE, exist_ok=True)
        files.replace_durably(path, text, FILE_MODE)
    diff = {
        "before_header": path if before is not None else f"{path} (absent)",
        "after_header": path,
        "before": "".join(line + "\n" for line in old),
        "after": "".join(line + "\n" for line in new),
    }
    return Written(path, before is None or old != new, sum(1 for line in new if not line.startswith("#")), diff)


def remove_textfile(path: str, check_mode: bool) -> Written:
    """Remove `path` (a file this host no longer has metrics for)."""
    exists = os.path.exists(path)
    before = ""
    if exists:
        with open(path) as f:
            before = "".join(line + "\n" for line in shape(f.read()))
        if not check_mode:
            files.remove_durably(path)
    diff = {"before_header": path, "after_header": f"{path} (absent)", "before": before, "after": ""}
    return Written(path, exists, 0, diff)


def export(host: records.HostPaths, directory: str, check_mode: bool) -> tuple[Written, list[str]]:
    """Read every recorded instance and write <directory>/xdpfleet.prom; the problems name the instances that could
    not be read (their families are left out, xdpfleet_instance_read_success says 0)."""
    collected = collect(host)
    written = write_textfile(os.path.join(directory, COUNTERS_FILE), render(collected.families), check_mode)
    return written, collected.problems
