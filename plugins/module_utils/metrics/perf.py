# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The last perf results of a host's sender/echo pairs as Prometheus gauges.

The results are the controller's: the perf_pair role runs the pairs and the xdpfleet.fabric.perf_report action
writes them to reports/perf.json (with perf.md); the prometheus_textfile role reads that file on the controller and
hands each host the pairs it is an end of. So they are as old as that file: written by the last run of
playbooks/perf.yml or site.yml that was not in check mode, whatever ran since.
xdpfleet_perf_results_timestamp_seconds{pair} is when it was written (perf.json's generated_at): alert on
`time() - xdpfleet_perf_results_timestamp_seconds > ...`.

Per pair, labels {pair, end (sender or echo: this host's end), frame_size}, the numbers perf.md shows by frame size:
the zero-loss rate (NaN when no rate passed the loss tolerance), as frames and as bytes on the wire per second
(perf.md's "Gbit/s (L1)", in bytes, Prometheus' unit: every frame with its 20 bytes of preamble, start delimiter and
inter-frame gap), the unpaced trial's offered and received rates and loss ratio, and the link's line rate where it
has one (not on a virtual link such as veth, whose speed is nominal).
"""

from __future__ import annotations

from datetime import datetime

from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics.exposition import Family
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.rfc2544 import (
    L1_OVERHEAD_BYTES,
    Trial,
    line_rate_speed_mbps,
)

PERF_FILE = "xdpfleet_perf.prom"


class PerfResultsError(ValueError):
    """perf results not in perf.json's shape; the message names the field."""


def _get(parent, path: str, key: str, kinds: tuple = (dict,), nullable: bool = False):
    if not isinstance(parent, dict) or key not in parent:
        raise PerfResultsError(f"{path}.{key}: required (is this perf.json, written by xdpfleet.fabric.perf_report?)")
    value = parent[key]
    if (value is None and nullable) or (isinstance(value, kinds) and not isinstance(value, bool)):
        return value
    raise PerfResultsError(f"{path}.{key}: must be {' or '.join(k.__name__ for k in kinds)}, got {value!r}")


def _trial(parent: dict, path: str, key: str) -> Trial | None:
    raw = _get(parent, path, key, nullable=key == "zero_loss")
    if raw is None:
        return None
    where = f"{path}.{key}"
    try:
        return Trial(
            _get(raw, where, "rate_pps", (int, float), nullable=True),
            _get(raw, where, "seconds", (int, float)),
            _get(raw, where, "sent", (int,)),
            _get(raw, where, "received", (int,)),
        )
    except PerfResultsError:
        raise
    except ValueError as exc:
        raise PerfResultsError(f"{where}: {exc}") from exc


def timestamp(generated_at: str, path: str) -> float:
    try:
        return datetime.fromisoformat(generated_at).timestamp()
    except (TypeError, ValueError):
        raise PerfResultsError(f"{path}: {generated_at!r} is not an ISO 8601 time with its offset") from None


def families(results: dict, host: str) -> list[Family]:
    """The gauges of every pair in `results` (perf.json's document: generated_at, pairs) that `host` is an end of;
    no family when it is in none."""
    when = timestamp(_get(results, "perf_results", "generated_at", (str,)), "perf_results.generated_at")
    stamp = Family(
        "xdpfleet_perf_results_timestamp_seconds",
        "gauge",
        "When the controller wrote the perf results below (perf.json's generated_at), Unix time.",
    )
    zero_loss_pps = Family(
        "xdpfleet_perf_zero_loss_packets_per_second",
        "gauge",
        "Zero-loss throughput: the highest offered rate received without loss (NaN: no rate passed).",
    )
    zero_loss_bytes = Family(
        "xdpfleet_perf_zero_loss_wire_bytes_per_second",
        "gauge",
        f"Zero-loss throughput on the wire: frames of frame_size + {L1_OVERHEAD_BYTES} bytes (preamble, start "
        "delimiter, inter-frame gap) per second (NaN: no rate passed).",
    )
    offered = Family("xdpfleet_perf_max_offered_packets_per_second", "gauge", "The unpaced trial's offered rate.")
    received = Family("xdpfleet_perf_max_received_packets_per_second", "gauge", "The unpaced trial's received rate.")
    loss = Family("xdpfleet_perf_max_loss_ratio", "gauge", "The unpaced trial's loss: (sent - received) / sent.")
    line_rate = Family(
        "xdpfleet_perf_line_rate_packets_per_second",
        "gauge",
        "The link's line rate at frame_size (only for a link that has one: not a virtual link).",
    )
    pairs = _get(results, "perf_results", "pairs", (list,))
    for n, pair in enumerate(pairs):
        path = f"perf_results.pairs[{n}]"
        name = _get(pair, path, "name", (str,))
        sender = _get(pair, path, "sender")
        echo = pair.get("echo") or {}
        ends = [end for end, part in (("sender", sender), ("echo", echo)) if part.get("host") == host]
        environment = _get(sender, f"{path}.sender", "environment")
        has_line_rate = line_rate_speed_mbps(environment.get("driver"), environment.get("speed_mbps")) is not None
        for end in ends:
            stamp.add(when, pair=name, end=end)
            for r, result in enumerate(_get(sender, f"{path}.sender", "results", (list,))):
                where = f"{path}.sender.results[{r}]"
                size = _get(result, where, "frame_size", (int,))
                labels = {"pair": name, "end": end, "frame_size": size}
                best, unpaced = _trial(result, where, "zero_loss"), _trial(result, where, "max")
                pps = best.offered_pps if best else float("nan")
                zero_loss_pps.add(pps, **labels)
                zero_loss_bytes.add(pps * (size + L1_OVERHEAD_BYTES), **labels)
                offered.add(unpaced.offered_pps, **labels)
                received.add(unpaced.received_pps, **labels)
                loss.add(unpaced.loss_ratio, **labels)
                rate = _get(result, where, "line_rate_pps", (int, float), nullable=True)
                if has_line_rate and rate is not None:
                    line_rate.add(float(rate), **labels)
    return [stamp, zero_loss_pps, zero_loss_bytes, offered, received, loss, line_rate]
