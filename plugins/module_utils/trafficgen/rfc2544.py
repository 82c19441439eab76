# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""RFC 2544-style zero-loss throughput search: the largest offered rate a device forwards without loss.

Pure Python: the traffic generator module runs it on the sender host with a callable that runs one trial.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

# RFC 2544 section 9.1's Ethernet frame sizes, FCS included.
SWEEP_FRAME_SIZES = (64, 128, 256, 512, 1024, 1280, 1518)

# What every frame costs on the wire beyond its bytes: 7 B preamble + 1 B start delimiter + 12 B inter-frame gap.
L1_OVERHEAD_BYTES = 20


# Drivers of links without a wire of their own (ethtool's driver name): the speed they report is nominal (veth says
# 10000, tun 10) and the rate they carry is set by the CPUs that move the frames, so they have no line rate.
VIRTUAL_LINK_DRIVERS = frozenset(
    {"veth", "netkit", "tun", "virtio_net", "vmxnet3", "hv_netvsc", "vif", "dummy", "bridge", "macvlan", "ipvlan"}
)


def is_virtual_link(driver: str | None) -> bool:
    return driver in VIRTUAL_LINK_DRIVERS


def line_rate_speed_mbps(driver: str | None, speed_mbps: int | None) -> int | None:
    """The speed a link's line rate follows from; None when it has no line rate (a virtual link, whatever speed it
    reports) or its speed is unknown."""
    if is_virtual_link(driver) or not speed_mbps or speed_mbps <= 0:
        return None
    return speed_mbps


def line_rate_pps(speed_mbps: float, frame_size: int) -> float:
    """Frames per second a link of `speed_mbps` carries at `frame_size` bytes (FCS included)."""
    if speed_mbps <= 0:
        raise ValueError(f"speed_mbps: must be > 0, got {speed_mbps}")
    if frame_size <= 0:
        raise ValueError(f"frame_size: must be > 0, got {frame_size}")
    return speed_mbps * 1e6 / ((frame_size + L1_OVERHEAD_BYTES) * 8)


@dataclass
class Trial:
    """One run at one rate: `rate_pps` is what was asked for (None: unpaced, as fast as the sender can)."""

    rate_pps: float | None
    seconds: float
    sent: int
    received: int

    def __post_init__(self) -> None:
        if self.seconds <= 0:
            raise ValueError(f"seconds: must be > 0, got {self.seconds}")
        if self.sent < 0 or self.received < 0:
            raise ValueError(f"sent and received: must be >= 0, got {self.sent} and {self.received}")

    @property
    def loss(self) -> int:
        # Negative when the receiver counted more than was sent (frames of someone else): reported as it is.
        return self.sent - self.received

    @property
    def loss_ratio(self) -> float:
        return self.loss / self.sent if self.sent else 0.0

    @property
    def offered_pps(self) -> float:
        return self.sent / self.seconds

    @property
    def received_pps(self) -> float:
        return self.received / self.seconds

    def as_dict(self) -> dict:
        return {
            "rate_pps": self.rate_pps,
            "seconds": self.seconds,
            "sent": self.sent,
            "received": self.received,
            "loss": self.loss,
            "loss_ratio": self.loss_ratio,
            "offered_pps": self.offered_pps,
            "received_pps": self.received_pps,
        }


@dataclass
class SearchResult:
    trials: list[Trial]
    max_trial: Trial
    zero_loss: Trial | None

    def as_dict(self) -> dict:
        return {
            "trials": [trial.as_dict() for trial in self.trials],
            "max": self.max_trial.as_dict(),
            "zero_loss": self.zero_loss.as_dict() if self.zero_loss else None,
        }


def check_search_arguments(
    *, loss_tolerance: float, resolution: float, max_trials: int, ceiling_pps: float | None = None
) -> None:
    """Raise ValueError naming the first bad argument of search_zero_loss, for callers that check before sending."""
    if not 0.0 <= loss_tolerance <= 1.0:
        raise ValueError(f"loss_tolerance: must be between 0 and 1, got {loss_tolerance}")
    if not 0.0 < resolution <= 0.5:
        raise ValueError(f"resolution: must be > 0 and <= 0.5, got {resolution}")
    if max_trials < 2:
        raise ValueError(f"max_trials: must be >= 2 (the unpaced trial and one paced), got {max_trials}")
    if ceiling_pps is not None and ceiling_pps <= 0:
        raise ValueError(f"ceiling_pps: must be > 0, got {ceiling_pps}")


def search_zero_loss(
    run_trial: Callable[[float | None], Trial],
    *,
    loss_tolerance: float = 0.0,
    resolution: float = 0.02,
    max_trials: int = 10,
    ceiling_pps: float | None = None,
) -> SearchResult:
    """Find the highest rate whose trial loses at most `loss_tolerance` of its frames.

    The first trial is unpaced; when it passes it is the answer. Otherwise the rate is bisected between 0 and
    the rate the unpaced trial offered (or `ceiling_pps`, the line rate, when lower), until the bracket is at
    most `resolution` of its upper end or `max_trials` trials, the unpaced one included, have run.
    `zero_loss` is the passing trial at the highest rate, None when no trial passed. A trial that sent nothing
    passes (its loss ratio is 0): whether a silent sender is an error is the caller's to say.
    """
    check_search_arguments(
        loss_tolerance=loss_tolerance, resolution=resolution, max_trials=max_trials, ceiling_pps=ceiling_pps
    )

    def passes(trial: Trial) -> bool:
        return trial.loss_ratio <= loss_tolerance

    max_trial = run_trial(None)
    trials = [max_trial]
    if passes(max_trial):
        return SearchResult(trials, max_trial, max_trial)

    low, high = 0.0, max_trial.offered_pps
    if ceiling_pps is not None:
        high = min(high, ceiling_pps)
    zero_loss = None
    while len(trials) < max_trials and high - low > resolution * high:
        rate = (low + high) / 2
        trial = run_trial(rate)
        trials.append(trial)
        # The bracket moves by the rate asked for: what the sender managed is the trial's own offered_pps.
        if passes(trial):
            low, zero_loss = rate, trial
        else:
            high = rate
    return SearchResult(trials, max_trial, zero_loss)
