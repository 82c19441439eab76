# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The fabric report: the VTEP fabric at a glance, fabric.md and the picture fabric.svg.

Input: the fact xdpfleet_fabric that xdpfleet.fabric.vtep_fabric returns (plugins/module_utils/fabric/fleet.py
writes it) and, after a run, each VTEP's xdpfleet_vtep fact (the vtep module or vtep_info), both as plain data.
build_report() validates them (ReportInputError names the first field in the way) and renders the files in memory,
pure but for running graphviz's `dot`; write_report() writes the ones that differ. Controller only: the picture
needs the Python package graphviz, imported where it is drawn.
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.reports.files import write_changed

MARKDOWN_FILE = "fabric.md"
PICTURE_FILE = "fabric.svg"
COUNTER_FIELDS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes")
# Backends whose VTEP is an XDP data plane with the collection's counters; linux is the kernel's bridge + vxlan.
COUNTED_BACKENDS = ("xdp", "tc")
NO_XDP_COUNTERS = "the linux backend is the kernel's VXLAN (bridge + vxlan device): it has no XDP counters"
# The picture has an edge and a row per VTEP and VNI it serves. Past this many, it is no longer readable, and dot
# takes seconds to minutes (1,000: 1.4 s here; 4,000: a minute): fabric.md then has the tables without a picture.
MAX_PICTURE_MEMBERSHIPS = 1000
# How the picture marks what needs an operator's eye.
ALERT_COLOR = "#c00000"
ALERT_FILL = "#fbe0e0"
QUIET_COLOR = "#808080"


class ReportInputError(ValueError):
    """Bad input; the message starts with the field: `fabric.vteps.a.vnis: required`."""


class PictureUnavailable(RuntimeError):
    """The picture cannot be drawn here; the message says why (the report says it in place of the picture)."""


@dataclass
class Member:
    """A VTEP's part in one VNI."""

    access_ports: list[str]
    trunks: list[tuple[str, int]]  # (port, VID)
    peers: list[str]  # tunnel addresses


@dataclass
class Vni:
    vni: int
    name: str | None
    vlan_mode: str | None
    members: dict[str, Member]  # by VTEP, sorted


@dataclass
class Vtep:
    name: str
    backend: str
    source: str
    tunnel_ips: list[str]
    vnis: list[int]

    @property
    def counted(self) -> bool:
        return self.backend in COUNTED_BACKENDS


@dataclass
class Fabric:
    vteps: dict[str, Vtep]  # by name, sorted
    vnis: list[Vni]  # by number
    warnings: list[str]
    owners: dict[str, str] = field(default_factory=dict)  # tunnel address -> VTEP

    def owner(self, address: str) -> str | None:
        return self.owners.get(address)

    def vni(self, number: int) -> Vni | None:
        return next((vni for vni in self.vnis if vni.vni == number), None)


@dataclass
class Counters:
    """One VTEP's xdpfleet_vtep fact: per VNI and per port, rx/tx and drops by reason (non-zero only)."""

    vnis: dict[int, Mapping]
    ports: dict[str, Mapping]

    @property
    def deployed(self) -> bool:
        # vtep_info on a host without that VTEP returns empty tables.
        return bool(self.vnis or self.ports)


def _field(parent: Mapping, path: str, key: str, kind: type | tuple, default=None):
    """parent[key] of that kind; `default` (when not None) where it is missing or null."""
    value = parent.get(key)
    if value is None:
        if default is None:
            raise ReportInputError(f"{path}.{key}: required")
        return default
    # bool is an int to Python, never to a report.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ReportInputError(f"{path}.{key}: must be {names}, got {type(value).__name__} {value!r}")
    return value


def _strings(parent: Mapping, path: str, key: str) -> list[str]:
    values = _field(parent, path, key, list, default=[])
    for n, value in enumerate(values):
        if not isinstance(value, str):
            raise ReportInputError(f"{path}.{key}[{n}]: must be a string, got {type(value).__name__} {value!r}")
    return list(values)


def _vni_number(value, path: str) -> int:
    """A VNI as a number: fact tables come back from a host as JSON, with the VNI as a string key."""
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ReportInputError(f"{path}: must be a VNI number, got {value!r}") from None


def _parse_member(raw, path: str) -> Member:
    if not isinstance(raw, Mapping):
        raise ReportInputError(f"{path}: must be a mapping, got {type(raw).__name__}")
    trunks = []
    for n, trunk in enumerate(_field(raw, path, "trunks", list, default=[])):
        where = f"{path}.trunks[{n}]"
        if not isinstance(trunk, Mapping):
            raise ReportInputError(f"{where}: must be a mapping with port and vid, got {type(trunk).__name__}")
        trunks.append((_field(trunk, where, "port", str), _field(trunk, where, "vid", int)))
    peers = []
    # A peer is its tunnel address, or a document's peer entry ({ip, via}).
    for n, peer in enumerate(_field(raw, path, "peers", list, default=[])):
        peers.append(_field(peer, f"{path}.peers[{n}]", "ip", str) if isinstance(peer, Mapping) else str(peer))
    return Member(_strings(raw, path, "access_ports"), trunks, peers)


def parse_fabric(raw) -> Fabric:
    """The xdpfleet_fabric fact, validated; ReportInputError names the first field in the way."""
    if not isinstance(raw, Mapping):
        raise ReportInputError(f"fabric: must be a mapping (the xdpfleet_fabric fact), got {type(raw).__name__}")
    vteps = {}
    for name, vtep in sorted(_field(raw, "fabric", "vteps", Mapping).items()):
        path = f"fabric.vteps.{name}"
        if not isinstance(vtep, Mapping):
            raise ReportInputError(f"{path}: must be a mapping, got {type(vtep).__name__}")
        vteps[name] = Vtep(
            name=name,
            backend=_field(vtep, path, "backend", str, default="xdp"),
            source=_field(vtep, path, "source", str, default="model"),
            tunnel_ips=_strings(vtep, path, "tunnel_ips"),
            vnis=sorted(_vni_number(v, f"{path}.vnis[{n}]") for n, v in enumerate(_field(vtep, path, "vnis", list))),
        )
    if not vteps:
        raise ReportInputError("fabric.vteps: must name at least one VTEP")
    vnis = []
    for n, vni in enumerate(_field(raw, "fabric", "vnis", list, default=[])):
        path = f"fabric.vnis[{n}]"
        if not isinstance(vni, Mapping):
            raise ReportInputError(f"{path}: must be a mapping, got {type(vni).__name__}")
        members = {}
        for host, member in sorted(_field(vni, path, "members", Mapping).items()):
            if host not in vteps:
                raise ReportInputError(f"{path}.members.{host}: not a VTEP of fabric.vteps")
            members[host] = _parse_member(member, f"{path}.members.{host}")
        name = vni.get("name")
        vnis.append(
            Vni(
                vni=_vni_number(_field(vni, path, "vni", (int, str)), f"{path}.vni"),
                name=None if name is None else str(name),
                vlan_mode=vni.get("vlan_mode"),
                members=members,
            )
        )
    warnings = _strings(raw, "fabric", "warnings")
    owners = {address: vtep.name for vtep in vteps.values() for address in vtep.tunnel_ips}
    return Fabric(vteps, sorted(vnis, key=lambda vni: vni.vni), warnings, owners)


def parse_counters(raw, fabric: Fabric) -> dict[str, Counters]:
    """Each VTEP's xdpfleet_vtep fact, by VTEP name (only VTEPs of the fabric)."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ReportInputError(f"counters: must be a mapping by VTEP, got {type(raw).__name__}")
    out = {}
    for host, facts in sorted(raw.items()):
        path = f"counters.{host}"
        if host not in fabric.vteps:
            raise ReportInputError(f"{path}: not a VTEP of fabric.vteps")
        if not isinstance(facts, Mapping):
            raise ReportInputError(f"{path}: must be a mapping (the xdpfleet_vtep fact), got {type(facts).__name__}")
        tables = {}
        for key in ("vnis", "ports"):
            table = _field(facts, path, key, Mapping, default={})
            for name, entry in table.items():
                where = f"{path}.{key}.{name}"
                if not isinstance(entry, Mapping):
                    raise ReportInputError(f"{where}: must be a mapping, got {type(entry).__name__}")
                for counter in COUNTER_FIELDS:
                    _field(entry, where, counter, int)
                _field(entry, where, "drops", Mapping, default={})
            tables[key] = table
        vnis = {_vni_number(vni, f"{path}.vnis.{vni}"): entry for vni, entry in tables["vnis"].items()}
        out[host] = Counters(dict(sorted(vnis.items())), dict(sorted(tables["ports"].items())))
    return out


def gaps(fabric: Fabric, vni: Vni) -> list[tuple[str, str]]:
    """(VTEP, member of the VNI it does not list as a peer): every gap in the VNI's full mesh."""
    pairs = []
    for host, member in vni.members.items():
        listed = {fabric.owner(address) for address in member.peers}
        pairs += [(host, other) for other in vni.members if other != host and other not in listed]
    return pairs


def peer_problems(fabric: Fabric, vni: Vni) -> list[str]:
    """What keeps the VNI's VTEPs from a full mesh: a member that does not list another (one-sided where the other
    lists it), a peer address no VTEP has, a peer that does not serve the VNI."""
    problems = []
    for host, member in vni.members.items():
        for address in member.peers:
            owner = fabric.owner(address)
            if owner is None:
                problems.append(f"{host} lists {address}, which is no VTEP's tunnel address")
            elif owner not in vni.members:
                problems.append(f"{host} lists {owner} ({address}), which does not serve VNI {vni.vni}")
    missing = gaps(fabric, vni)
    for host, other in missing:
        one_sided = (other, host) not in missing
        problems.append(f"{host} does not list {other}" + (f", which lists {host}: one-sided" if one_sided else ""))
    return problems


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _cell(values) -> str:
    text = ", ".join(str(value) for value in values) if isinstance(values, (list, tuple)) else str(values)
    return text.replace("|", "\\|") if text else "—"


def _trunks(member: Member) -> list[str]:
    return [f"{port} VID {vid}" for port, vid in member.trunks]


def _drops(drops: Mapping) -> str:
    return ", ".join(f"{reason} {count}" for reason, count in sorted(drops.items())) or "0"


def _vni_title(vni: Vni) -> str:
    return f"VNI {vni.vni}" + (f" ({vni.name})" if vni.name else "")


def _peer_names(fabric: Fabric, member: Member) -> list[str]:
    return [f"{fabric.owner(address) or '?'} {address}" for address in member.peers]


def _counter_rows(fabric: Fabric, counters: dict[str, Counters]) -> tuple[list[str], list[str]]:
    """The per-VNI counters table and the notes on VTEPs it has no rows for."""
    rows, notes = [], []
    for vtep in fabric.vteps.values():
        if not vtep.counted:
            notes.append(f"- {vtep.name}: {NO_XDP_COUNTERS}.")
            continue
        facts = counters.get(vtep.name)
        if facts is None:
            if counters:  # else the report says once that none were read
                notes.append(f"- {vtep.name}: not read in this run.")
            continue
        if not facts.deployed:
            notes.append(f"- {vtep.name}: no VTEP deployed on the host.")
            continue
        for number, vni in facts.vnis.items():
            values = " | ".join(str(vni[counter]) for counter in COUNTER_FIELDS)
            rows.append(f"| {vtep.name} | {number} | {values} | {_drops(vni.get('drops') or {})} |")
    return rows, notes


def _drop_rows(counters: dict[str, Counters]) -> list[str]:
    rows = []
    for host, facts in counters.items():
        for port, entry in facts.ports.items():
            for reason, count in sorted((entry.get("drops") or {}).items()):
                rows.append(f"| {host} | {port} | {reason} | {count} |")
    return rows


def render_markdown(title: str, fabric: Fabric, counters: dict[str, Counters], picture_problem: str | None) -> str:
    """fabric.md. No timestamp in it, so the same fabric and counters give the same file."""
    lines = [f"# {title}", "", f"{_count(len(fabric.vteps), 'VTEP')}, {_count(len(fabric.vnis), 'VNI')}.", ""]
    if picture_problem:
        lines += [f"No picture ({PICTURE_FILE}): {picture_problem}.", ""]
    else:
        lines += [f"![The fabric: each VNI and the VTEPs that serve it, on which ports]({PICTURE_FILE})", ""]
    if fabric.warnings:
        lines += ["## Warnings from the fabric check", "", *(f"- {warning}" for warning in fabric.warnings), ""]

    lines += ["## VTEPs", "", "| VTEP | backend | document | tunnel addresses | VNIs |", "|---|---|---|---|---|"]
    for vtep in fabric.vteps.values():
        source = "derived from the model" if vtep.source == "model" else f"hand-written ({vtep.source})"
        lines.append(f"| {vtep.name} | {vtep.backend} | {source} | {_cell(vtep.tunnel_ips)} | {_cell(vtep.vnis)} |")
    lines.append("")

    lines += ["## VNIs: where each is served, and its peers", ""]
    for vni in fabric.vnis:
        mode = f", vlan_mode {vni.vlan_mode}" if vni.vlan_mode else ""
        lines += [
            f"### {_vni_title(vni)}{mode}: {_count(len(vni.members), 'VTEP')}",
            "",
            "| VTEP | access ports | trunks | peers |",
            "|---|---|---|---|",
        ]
        for host, member in vni.members.items():
            peers = _cell(_peer_names(fabric, member))
            lines.append(f"| {host} | {_cell(member.access_ports)} | {_cell(_trunks(member))} | {peers} |")
        lines.append("")
        problems = peer_problems(fabric, vni)
        if problems:
            lines += ["Peers, not a full mesh:", "", *(f"- {problem}" for problem in problems), ""]
        elif len(vni.members) > 1:
            lines += [f"Peers: a full mesh (each VTEP lists the {len(vni.members) - 1} others).", ""]
        else:
            lines += [f"Peers: none ({'one VTEP serves' if vni.members else 'no VTEP serves'} this VNI).", ""]

    lines += ["## Counters after the run (summed over CPUs)", ""]
    if not counters:
        lines += ["No counters were read in this run (site.yml and playbooks/fabric_report.yml read them).", ""]
    rows, notes = _counter_rows(fabric, counters)
    if rows:
        lines += [
            "| VTEP | VNI | rx packets | rx bytes | tx packets | tx bytes | drops |",
            "|---|---:|---:|---:|---:|---:|---|",
            *rows,
            "",
        ]
    if notes:
        lines += ["No counters for:", "", *notes, ""]
    if counters:
        lines += ["## Drops by reason, per VTEP and port", ""]
        drop_rows = _drop_rows(counters)
        if drop_rows:
            lines += ["| VTEP | port | reason | packets |", "|---|---|---|---:|", *drop_rows, ""]
        else:
            lines += ["No drops.", ""]
    return "\n".join(lines)


def _td(text: str, bold: bool = False, **attributes) -> str:
    """A cell of an HTML-like graphviz label."""
    attrs = "".join(f' {key.upper()}="{value}"' for key, value in attributes.items())
    content = f"<B>{html.escape(text)}</B>" if bold else html.escape(text)
    return f"<TD{attrs}>{content}</TD>"


def _vtep_label(vtep: Vtep, fabric: Fabric, facts: Counters | None) -> str:
    """The VTEP's node: name, backend, tunnel addresses, then a row (and an edge port) per VNI it serves."""
    rows = [f"<TR>{_td(vtep.name, bold=True, colspan=2)}</TR>"]
    rows.append(f"<TR>{_td(vtep.backend + ' VTEP', colspan=2)}</TR>")
    for address in vtep.tunnel_ips:
        rows.append(f"<TR>{_td(address, colspan=2)}</TR>")
    if not vtep.counted:
        rows.append(f"<TR>{_td('no XDP counters (kernel VXLAN)', colspan=2)}</TR>")
    port_drops = sum(sum((entry.get("drops") or {}).values()) for entry in facts.ports.values()) if facts else 0
    if port_drops:
        rows.append(f"<TR>{_td(f'{port_drops} drops on its ports', colspan=2, bgcolor=ALERT_FILL)}</TR>")
    for number in vtep.vnis:
        vni = fabric.vni(number)
        member = vni.members.get(vtep.name) if vni else None
        ports = (member.access_ports + _trunks(member)) if member else []
        counted = facts.vnis.get(number) if facts else None
        traffic, fill = "", {}
        if counted is not None:
            drops = counted.get("drops") or {}
            traffic = f"rx {counted['rx_packets']} tx {counted['tx_packets']}"
            if drops:
                traffic += f" drops {_drops(drops)}"
                fill = {"bgcolor": ALERT_FILL}
        rows.append(
            f"<TR>{_td(f'VNI {number}: ' + (', '.join(ports) or '-'), align='left', port=f'v{number}', **fill)}"
            f"{_td(traffic, align='left', **fill)}</TR>"
        )
    return f'<<TABLE BORDER="0" CELLBORDER="0" CELLSPACING="0" CELLPADDING="2">{"".join(rows)}</TABLE>>'


def build_dot(title: str, fabric: Fabric, counters: dict[str, Counters]) -> str:
    """The picture's DOT source: a node per VNI on the left, a node per VTEP on the right with a row per VNI it
    serves, and an edge from each VNI to each of its rows; the mesh of a VNI is every VTEP its edges reach. That is
    one edge per VTEP and VNI, which stays readable at fleet size where an edge per VTEP pair (a full mesh per VNI)
    would not. Drops are red, peers that break the mesh red dashed edges between VTEPs."""
    graph = _graphviz().Digraph(
        "fabric",
        graph_attr={"rankdir": "LR", "ranksep": "1.5", "nodesep": "0.25", "label": title, "labelloc": "t"},
        node_attr={"fontname": "Helvetica", "fontsize": "10"},
        edge_attr={"arrowhead": "none", "color": QUIET_COLOR, "fontname": "Helvetica", "fontsize": "9"},
    )
    for vni in fabric.vnis:
        label = f"VNI {vni.vni}" + (f"\n{vni.name}" if vni.name else "") + f"\n{_count(len(vni.members), 'VTEP')}"
        graph.node(f"VNI {vni.vni}", label=label, shape="box", style="rounded")
    for vtep in fabric.vteps.values():
        facts = counters.get(vtep.name)
        dropped = bool(facts) and any(
            (entry.get("drops") or {}) for table in (facts.vnis, facts.ports) for entry in table.values()
        )
        style = {"color": ALERT_COLOR, "penwidth": "2"} if dropped else {}
        if not vtep.counted:
            style = {"style": "dashed"}
        graph.node(vtep.name, label=_vtep_label(vtep, fabric, facts), shape="box", **style)
    for vni in fabric.vnis:
        for host in vni.members:
            counted = counters[host].vnis.get(vni.vni) if host in counters else None
            alert = {"color": ALERT_COLOR, "penwidth": "2"} if counted and counted.get("drops") else {}
            graph.edge(f"VNI {vni.vni}", f"{host}:v{vni.vni}:w", **alert)
        for problem_pair in gaps(fabric, vni):
            graph.edge(
                *problem_pair,
                label=f"VNI {vni.vni}: not listed",
                color=ALERT_COLOR,
                fontcolor=ALERT_COLOR,
                style="dashed",
                arrowhead="normal",
                constraint="false",
            )
    return graph.source


def _graphviz():
    # Imported where it is used: the controller has it (pyproject.toml), a host never needs it.
    try:
        import graphviz
    except ImportError:
        raise PictureUnavailable("the Python package graphviz is not installed on the controller") from None
    return graphviz


def render_svg(dot_source: str) -> bytes:
    """The picture, drawn by graphviz's `dot`; PictureUnavailable says why not."""
    graphviz = _graphviz()
    try:
        return graphviz.Source(dot_source).pipe(format="svg", engine="dot")
    except graphviz.ExecutableNotFound:
        raise PictureUnavailable(
            "graphviz's `dot` is not installed on the controller (the Debian package graphviz has it)"
        ) from None
    except graphviz.CalledProcessError as exc:
        stderr = (exc.stderr or b"").decode(errors="replace").strip()
        raise PictureUnavailable(f"graphviz's `dot` failed: {stderr or exc}") from None


def build_report(title: str, fabric_input, counters_input) -> dict[str, bytes]:
    """Every file of the report by name: fabric.md, and fabric.svg when it can be drawn (else fabric.md says why).
    Raises ReportInputError for bad input, before anything is rendered."""
    fabric = parse_fabric(fabric_input)
    counters = parse_counters(counters_input, fabric)
    files = {}
    problem = None
    memberships = sum(len(vni.members) for vni in fabric.vnis)
    try:
        if memberships > MAX_PICTURE_MEMBERSHIPS:
            raise PictureUnavailable(
                f"the fabric has {memberships} VNI memberships (a VTEP serving a VNI), more than a readable picture "
                f"holds ({MAX_PICTURE_MEMBERSHIPS}); the tables below have every one"
            )
        files[PICTURE_FILE] = render_svg(build_dot(title, fabric, counters))
    except PictureUnavailable as exc:
        problem = str(exc)
    files[MARKDOWN_FILE] = render_markdown(title, fabric, counters, problem).encode()
    return files


def write_report(dest: str, files: dict[str, bytes], check_mode: bool) -> list[str]:
    """Write the files that differ (none in check mode), and remove a picture from an earlier run when this one has
    none: it would contradict the report saying why. Returns the paths changed (or that would be)."""
    changed = write_changed(dest, files, check_mode)
    stale = os.path.join(dest, PICTURE_FILE)
    if PICTURE_FILE not in files and os.path.exists(stale):
        changed.append(stale)
        if not check_mode:
            os.unlink(stale)
    return changed
