# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The perf report: the traffic generator's sweeps as perf.json, perf.md and one plot per pair.

build_report() validates the pairs (ReportInputError names the first field in the way) and renders every file in
memory; it writes nothing (the xdpfleet.fabric.perf_report action does, through reports/files.py). Controller only:
the plots need matplotlib, imported where a plot is drawn.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.rfc2544 import (
    L1_OVERHEAD_BYTES,
    Trial,
    is_virtual_link,
    line_rate_pps,
    line_rate_speed_mbps,
)

JSON_FILE = "perf.json"
MARKDOWN_FILE = "perf.md"
# A pair's name becomes part of a file name.
PAIR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

# The environment's fields as the table shows them, in order. Every one is required (null where unknown), unless
# the environment is empty: the echo end in check mode reports {}.
ENVIRONMENT_ROWS = (
    ("kernel", "kernel"),
    ("cmdline", "kernel cmdline"),
    ("driver", "driver"),
    ("driver_version", "driver version"),
    ("firmware_version", "firmware"),
    ("bus_info", "bus"),
    ("speed_mbps", "speed"),
    ("numa_node", "NUMA node"),
    ("queues", "queues"),
    ("channels", "channels"),
    ("cpus", "CPUs"),
    ("cpu_model", "CPU model"),
)
TEMPLATE_FIELDS = ("name", "flows", "bases", "description")


class ReportInputError(ValueError):
    """Bad input; the message starts with the field: `pairs[0].sender.results[2].frame_size: required`."""


@dataclass
class FrameSizeResult:
    frame_size: int
    line_rate_pps: float | None
    max_trial: Trial
    zero_loss: Trial | None
    trials: list[Trial]


@dataclass
class End:
    """One end of a pair: the host's result as the traffic generator returned it."""

    host: str
    interface: str
    environment: Mapping

    @property
    def label(self) -> str:
        return f"{self.host}:{self.interface}"


@dataclass
class Pair:
    name: str
    sender: End
    echo: End | None  # None: the echo end reported nothing
    echo_counters: Mapping | None
    template: Mapping
    threads: int
    results: list[FrameSizeResult]  # by frame size

    @property
    def speed_mbps(self) -> int | None:
        return self.sender.environment.get("speed_mbps")

    @property
    def driver(self) -> str | None:
        return self.sender.environment.get("driver")

    @property
    def virtual_link(self) -> bool:
        return is_virtual_link(self.driver)

    @property
    def line_rate_mbps(self) -> int | None:
        """The speed the sender's line rate follows from; None on a virtual link or when the speed is unknown."""
        return line_rate_speed_mbps(self.driver, self.speed_mbps)


_KINDS = {
    "a string": lambda value: isinstance(value, str),
    # bool is an int to Python, never to a report.
    "an integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "a number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "a mapping": lambda value: isinstance(value, Mapping),
    "a list": lambda value: isinstance(value, list),
}


def _field(parent: Mapping, path: str, key: str, kind: str | None = None, *, nullable: bool = False):
    """parent[key], which must be there and (unless `kind` is None) of that kind, or null when `nullable`."""
    if key not in parent:
        raise ReportInputError(f"{path}.{key}: required")
    value = parent[key]
    if kind is None or (value is None and nullable):
        return value
    if not _KINDS[kind](value):
        null = " or null" if nullable else ""
        raise ReportInputError(f"{path}.{key}: must be {kind}{null}, got {type(value).__name__} {value!r}")
    return value


def _positive(value: float | None, path: str) -> None:
    if value is not None and value <= 0:
        raise ReportInputError(f"{path}: must be > 0, got {value}")


def _parse_trial(raw, path: str) -> Trial:
    if not isinstance(raw, Mapping):
        raise ReportInputError(f"{path}: must be a mapping, got {type(raw).__name__}")
    rate = _field(raw, path, "rate_pps", "a number", nullable=True)
    seconds = _field(raw, path, "seconds", "a number")
    _positive(seconds, f"{path}.seconds")
    sent = _field(raw, path, "sent", "an integer")
    received = _field(raw, path, "received", "an integer")
    for key, count in (("sent", sent), ("received", received)):
        if count < 0:
            raise ReportInputError(f"{path}.{key}: must be >= 0, got {count}")
    return Trial(rate, seconds, sent, received)


def _parse_environment(raw: Mapping, path: str) -> Mapping:
    environment = _field(raw, path, "environment", "a mapping")
    if not environment:
        return environment
    path = f"{path}.environment"
    for key, _label in ENVIRONMENT_ROWS:
        _field(environment, path, key)
    _positive(_field(environment, path, "speed_mbps", "an integer", nullable=True), f"{path}.speed_mbps")
    queues = _field(environment, path, "queues", "a mapping")
    for key in ("rx", "tx"):
        _field(queues, f"{path}.queues", key)
    _field(environment, path, "channels", "a mapping", nullable=True)
    return environment


def _parse_end(raw: Mapping, path: str) -> End:
    return End(
        host=_field(raw, path, "host", "a string"),
        interface=_field(raw, path, "interface", "a string"),
        environment=_parse_environment(raw, path),
    )


def _parse_result(raw, path: str) -> FrameSizeResult:
    if not isinstance(raw, Mapping):
        raise ReportInputError(f"{path}: must be a mapping, got {type(raw).__name__}")
    frame_size = _field(raw, path, "frame_size", "an integer")
    _positive(frame_size, f"{path}.frame_size")
    rate = _field(raw, path, "line_rate_pps", "a number", nullable=True)
    _positive(rate, f"{path}.line_rate_pps")
    zero_loss = _field(raw, path, "zero_loss")
    trials = _field(raw, path, "trials", "a list")
    return FrameSizeResult(
        frame_size=frame_size,
        line_rate_pps=rate,
        max_trial=_parse_trial(_field(raw, path, "max"), f"{path}.max"),
        zero_loss=None if zero_loss is None else _parse_trial(zero_loss, f"{path}.zero_loss"),
        trials=[_parse_trial(trial, f"{path}.trials[{n}]") for n, trial in enumerate(trials)],
    )


def _parse_pair(raw, path: str) -> Pair:
    if not isinstance(raw, Mapping):
        raise ReportInputError(f"{path}: must be a mapping, got {type(raw).__name__}")
    name = _field(raw, path, "name", "a string")
    if not PAIR_NAME.fullmatch(name):
        raise ReportInputError(f"{path}.name: must be letters, digits, '.', '_' or '-' (a file name), got {name!r}")
    sender_raw = _field(raw, path, "sender", "a mapping")
    sender_path = f"{path}.sender"
    sender = _parse_end(sender_raw, sender_path)
    template = _field(sender_raw, sender_path, "template", "a mapping")
    for key in TEMPLATE_FIELDS:
        _field(template, f"{sender_path}.template", key)
    threads = _field(sender_raw, sender_path, "threads", "an integer")
    _positive(threads, f"{sender_path}.threads")
    results = []
    for n, result in enumerate(_field(sender_raw, sender_path, "results", "a list")):
        results.append(_parse_result(result, f"{sender_path}.results[{n}]"))
    if not results:
        raise ReportInputError(f"{sender_path}.results: must not be empty")
    seen: dict[int, int] = {}
    for n, result in enumerate(results):
        if result.frame_size in seen:
            raise ReportInputError(
                f"{sender_path}.results[{n}].frame_size: {result.frame_size} again (results[{seen[result.frame_size]}])"
            )
        seen[result.frame_size] = n
    # The echo end may have nothing to say (an echo the collection does not run): then it is {} or left out.
    echo_raw = raw.get("echo") or {}
    if not isinstance(echo_raw, Mapping):
        raise ReportInputError(f"{path}.echo: must be a mapping, got {type(echo_raw).__name__}")
    echo = _parse_end(echo_raw, f"{path}.echo") if echo_raw else None
    counters = None
    if echo:
        counters = _field(echo_raw, f"{path}.echo", "counters", "a mapping")
        for key in ("packets", "bytes"):
            _field(counters, f"{path}.echo.counters", key, "an integer")
    return Pair(
        name=name,
        sender=sender,
        echo=echo,
        echo_counters=counters,
        template=template,
        threads=threads,
        results=sorted(results, key=lambda result: result.frame_size),
    )


def parse_pairs(raw) -> list[Pair]:
    """The validated pairs; ReportInputError names the first field in the way."""
    if not isinstance(raw, list) or not raw:
        raise ReportInputError("pairs: must be a non-empty list")
    pairs = [_parse_pair(pair, f"pairs[{n}]") for n, pair in enumerate(raw)]
    names: dict[str, int] = {}
    for n, pair in enumerate(pairs):
        if pair.name in names:
            raise ReportInputError(f"pairs[{n}].name: {pair.name!r} again (pairs[{names[pair.name]}])")
        names[pair.name] = n
    return pairs


def _mpps(pps: float | None) -> str:
    return "—" if pps is None else f"{pps / 1e6:.3f}"


def _speed(speed_mbps: int | None) -> str:
    if speed_mbps is None:
        return "speed unknown"
    if speed_mbps % 1000 == 0:
        return f"{speed_mbps // 1000} Gbit/s"
    return f"{speed_mbps} Mbit/s"


def _link(pair: Pair) -> str:
    if pair.virtual_link:
        nominal = f" (its {_speed(pair.speed_mbps)} is nominal)" if pair.speed_mbps else ""
        return f"virtual ({pair.driver}): a virtual link has no line rate{nominal}"
    return _speed(pair.speed_mbps)


def _cell(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, Mapping):
        text = ", ".join(f"{key} {item}" for key, item in value.items())
    elif isinstance(value, list):
        text = ", ".join(str(item) for item in value)
    else:
        text = str(value)
    return text.replace("|", "\\|")


def plot_file(pair: Pair) -> str:
    return f"perf-{pair.name}.png"


def _environment_table(pair: Pair) -> list[str]:
    ends = [pair.sender, pair.echo]
    lines = ["| | sender | echo |", "|---|---|---|"]
    lines.append("| interface | " + " | ".join(_cell(end.label if end else None) for end in ends) + " |")
    for key, label in ENVIRONMENT_ROWS:
        cells = []
        for end in ends:
            value = end.environment.get(key) if end else None
            if key == "speed_mbps" and value is not None:
                nominal = is_virtual_link(end.environment.get("driver"))
                cells.append(_speed(value) + (" (nominal: a virtual link)" if nominal else ""))
            elif key == "cmdline" and value:
                cells.append(f"`{_cell(value)}`")
            else:
                cells.append(_cell(value))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


RESULT_COLUMNS = (
    "frame size",
    "line rate Mpps",
    "zero-loss Mpps",
    "% of line rate",
    "zero-loss Gbit/s (L1)",
    "max offered Mpps",
    "max received Mpps",
    "loss at max",
    "trials",
)
LINE_RATE_COLUMNS = ("line rate Mpps", "% of line rate")


def _results_table(pair: Pair) -> list[str]:
    """By frame size. A virtual link has no line rate, so its table has no line-rate columns; a link of unknown
    speed has one that is not known (shown as —)."""
    columns = [c for c in RESULT_COLUMNS if not (pair.virtual_link and c in LINE_RATE_COLUMNS)]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---:|" * len(columns)]
    for result in pair.results:
        line_rate = result.line_rate_pps if pair.line_rate_mbps else None
        zero_loss_pps = result.zero_loss.offered_pps if result.zero_loss else None
        share = gbits = "—"
        if zero_loss_pps is not None:
            # On the wire every frame also takes its preamble, start delimiter and inter-frame gap.
            gbits = f"{zero_loss_pps * (result.frame_size + L1_OVERHEAD_BYTES) * 8 / 1e9:.2f}"
            if line_rate:
                share = f"{100 * zero_loss_pps / line_rate:.1f} %"
        cells = {
            "frame size": str(result.frame_size),
            "line rate Mpps": _mpps(line_rate),
            "zero-loss Mpps": _mpps(zero_loss_pps),
            "% of line rate": share,
            "zero-loss Gbit/s (L1)": gbits,
            "max offered Mpps": _mpps(result.max_trial.offered_pps),
            "max received Mpps": _mpps(result.max_trial.received_pps),
            "loss at max": f"{100 * result.max_trial.loss_ratio:.3f} %",
            "trials": str(len(result.trials)),
        }
        lines.append("| " + " | ".join(cells[c] for c in columns) + " |")
    return lines


def render_markdown(title: str, pairs: list[Pair]) -> str:
    """perf.md. No timestamp in it, so the same results give the same file."""
    lines = [f"# {title}", ""]
    for pair in pairs:
        echo = pair.echo.label if pair.echo else "(not reported)"
        template = pair.template
        lines += [
            f"## {pair.name}: sender {pair.sender.label} -> echo {echo}",
            "",
            f"- template `{template['name']}` (flows {_cell(template['flows'])}, bases {_cell(template['bases'])}): "
            f"{_cell(template['description'])}",
            f"- {pair.threads} sender threads, link {_link(pair)}",
            "",
            *_environment_table(pair),
            "",
        ]
        if pair.echo_counters is not None:
            counters = pair.echo_counters
            lines += [f"The echo end counted {counters['packets']} frames, {counters['bytes']} bytes.", ""]
        lines += [*_results_table(pair), "", f"![{pair.name}: Mpps by frame size]({plot_file(pair)})", ""]
    return "\n".join(lines)


# How each line of the plot is drawn, by kind.
PLOT_STYLES = {
    "line_rate": {"color": "0.45"},
    "zero_loss": {"marker": "o", "color": "tab:blue"},
    "received": {"linestyle": "--", "marker": "x", "color": "tab:orange"},
}


def plot_lines(pair: Pair) -> dict[str, tuple[str, list, list]]:
    """The plot's lines by kind: (label, frame sizes, Mpps). The line rate only where the link has one."""
    sizes = [result.frame_size for result in pair.results]
    lines = {}
    if pair.line_rate_mbps:
        curve = list(range(min(sizes), max(sizes) + 1))
        rates = [line_rate_pps(pair.line_rate_mbps, size) / 1e6 for size in curve]
        lines["line_rate"] = (f"line rate, {_speed(pair.line_rate_mbps)}", curve, rates)
    nan = float("nan")  # a gap in the line where no rate passed
    zero_loss = [result.zero_loss.offered_pps / 1e6 if result.zero_loss else nan for result in pair.results]
    lines["zero_loss"] = ("zero-loss throughput", sizes, zero_loss)
    received = [result.max_trial.received_pps / 1e6 for result in pair.results]
    lines["received"] = ("max received (unpaced)", sizes, received)
    return lines


def render_plot(pair: Pair) -> bytes:
    """Mpps by frame size: zero-loss throughput, what came back unpaced, and the link's line rate (PNG)."""
    # The object API with an explicit Agg canvas: no pyplot, so no global backend or figure state.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    sizes = [result.frame_size for result in pair.results]
    for kind, (label, x, y) in plot_lines(pair).items():
        axes.plot(x, y, label=label, **PLOT_STYLES[kind])
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [str(size) for size in sizes])
    axes.minorticks_off()
    axes.set_ylim(bottom=0)
    axes.set_xlabel("frame size (bytes, FCS included)")
    axes.set_ylabel("Mpps")
    link = f"virtual link ({pair.driver}), no line rate" if pair.virtual_link else _speed(pair.speed_mbps)
    axes.set_title(f"{pair.name}: {pair.sender.label}, {link}")
    axes.grid(alpha=0.3)
    axes.legend()
    png = io.BytesIO()
    figure.savefig(png, format="png")
    return png.getvalue()


def build_report(title: str, pairs_input: list, generated_at: str) -> dict[str, bytes]:
    """Every file of the report by name. Raises ReportInputError for bad input, before anything is rendered."""
    pairs = parse_pairs(pairs_input)
    document = {"title": title, "generated_at": generated_at, "pairs": pairs_input}
    files = {
        JSON_FILE: (json.dumps(document, indent=2, sort_keys=True) + "\n").encode(),
        MARKDOWN_FILE: render_markdown(title, pairs).encode(),
    }
    for pair in pairs:
        files[plot_file(pair)] = render_plot(pair)
    return files
