# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Metrics in the Prometheus text exposition format (version 0.0.4), as node_exporter's textfile collector reads
them from <directory>/*.prom.

A file is a list of families, each written once: `# HELP`, `# TYPE`, then its samples, one line each:

    # HELP xdpfleet_vtep_vni_rx_packets_total Frames the VTEP took into the VNI ...
    # TYPE xdpfleet_vtep_vni_rx_packets_total counter
    xdpfleet_vtep_vni_rx_packets_total{vtep="vtep",vni="100"} 10

Families are written sorted by name and samples in the order they were added, so the same numbers give the same
file. render() refuses what Prometheus would refuse or misread, naming the family: a name or label name outside the
format's characters, a family name twice, a counter whose name does not end in _total (Prometheus' convention),
two samples of a family with the same labels. Label values and HELP texts are escaped (backslash, newline and, in
label values, the double quote).

The shape of a file (shape()) is its text without the sample values: which families and series it has. Counters
move on every read; the shape changes only when a series comes or goes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge")


class MetricError(ValueError):
    """A family Prometheus would refuse or misread; the message names it and the rule."""


@dataclass
class Family:
    name: str
    type: str  # counter or gauge
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, value: float, **labels) -> None:
        """A sample; label values are written as text (a VNI 100 as "100")."""
        self.samples.append(({key: str(v) for key, v in labels.items()}, value))


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise MetricError(f"a sample value must be a number, got {type(value).__name__} {value!r}")
    if isinstance(value, int):
        return str(value)  # exact, however large (Prometheus reads it as a float64)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def family_problems(family: Family) -> list[str]:
    where = f"metric {family.name!r}"
    problems = []
    if not METRIC_NAME.fullmatch(family.name):
        problems.append(f"{where}: a name is letters, digits, '_' and ':', not starting with a digit")
    if family.type not in TYPES:
        problems.append(f"{where}: type {family.type!r} is not one of {', '.join(TYPES)}")
    if family.type == "counter" and not family.name.endswith("_total"):
        problems.append(f"{where}: a counter's name ends in _total")
    seen = set()
    for labels, _value in family.samples:
        for label in labels:
            if not LABEL_NAME.fullmatch(label) or label.startswith("__"):
                problems.append(
                    f"{where}: label {label!r}: a label name is letters, digits and '_', not starting with a digit "
                    "or '__'"
                )
        series = tuple(sorted(labels.items()))
        if series in seen:
            problems.append(f"{where}: two samples with the labels {dict(series)}")
        seen.add(series)
    return problems


def render(families: list[Family]) -> str:
    """The file's text: every family with samples, sorted by name. Raises MetricError listing every problem."""
    problems = []
    names: set[str] = set()
    for family in families:
        problems += family_problems(family)
        if family.name in names:
            problems.append(f"metric {family.name!r}: a second family of that name (one family per name)")
        names.add(family.name)
    if problems:
        raise MetricError("; ".join(problems))
    lines = []
    for family in sorted(families, key=lambda f: f.name):
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for labels, value in family.samples:
            written = ",".join(f'{key}="{escape_label_value(v)}"' for key, v in labels.items())
            series = f"{family.name}{{{written}}}" if written else family.name
            lines.append(f"{series} {format_value(value)}")
    return "".join(line + "\n" for line in lines)


def shape(text: str) -> list[str]:
    """The file's lines without their sample values: its HELP and TYPE lines and one line per series. A value is
    the last field of a sample line (render() writes no timestamps; a label value may hold spaces, a value never)."""
    return [line if line.startswith("#") else line.rsplit(" ", 1)[0] for line in text.splitlines() if line]
