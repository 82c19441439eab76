"""The zero-loss throughput search against model devices whose capacity is known, so its answer can be checked."""

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.rfc2544 import (
    SWEEP_FRAME_SIZES,
    SearchResult,
    Trial,
    check_search_arguments,
    line_rate_pps,
    line_rate_speed_mbps,
    search_zero_loss,
)

UNPACED_PPS = 20e6  # what the model sender offers when it is not paced
SECONDS = 10.0


class ModelDevice:
    """Forwards up to `capacity_pps` and drops the rest; `lost_per_mille` more are lost at any rate.

    Records the rate of every trial it ran, None for the unpaced one.
    """

    def __init__(self, capacity_pps: float, lost_per_mille: int = 0):
        self.capacity_pps = capacity_pps
        self.lost_per_mille = lost_per_mille
        self.rates: list[float | None] = []

    def __call__(self, rate_pps: float | None) -> Trial:
        self.rates.append(rate_pps)
        sent = int((UNPACED_PPS if rate_pps is None else rate_pps) * SECONDS)
        forwarded = min(sent, int(self.capacity_pps * SECONDS))
        received = forwarded - sent * self.lost_per_mille // 1000
        return Trial(rate_pps, SECONDS, sent, received)


def close_enough(capacity_pps: float, found_pps: float, resolution: float) -> bool:
    # At the end low <= C < high and high - low <= resolution * high, so C - low < resolution * C / (1 - resolution).
    return capacity_pps - found_pps <= resolution * capacity_pps / (1 - resolution)


def test_line_rate():
    assert line_rate_pps(100_000, 64) == pytest.approx(148.81e6, rel=1e-4)
    assert line_rate_pps(100_000, 1518) == pytest.approx(8.127e6, rel=1e-3)
    assert line_rate_pps(25_000, 64) == pytest.approx(line_rate_pps(100_000, 64) / 4)
    assert SWEEP_FRAME_SIZES == (64, 128, 256, 512, 1024, 1280, 1518)
    with pytest.raises(ValueError, match="speed_mbps"):
        line_rate_pps(0, 64)
    with pytest.raises(ValueError, match="frame_size"):
        line_rate_pps(100_000, 0)


@pytest.mark.parametrize(
    ("driver", "speed_mbps", "line_rate_speed"),
    [
        ("ice", 100_000, 100_000),  # E810
        ("mlx5_core", 25_000, 25_000),
        ("ice", None, None),  # link down: speed unknown
        ("veth", 10_000, None),  # what a veth reports is nominal
        ("virtio_net", -1, None),
        ("tun", 10, None),
    ],
)
def test_only_a_physical_link_of_known_speed_has_a_line_rate(driver, speed_mbps, line_rate_speed):
    assert line_rate_speed_mbps(driver, speed_mbps) == line_rate_speed


def test_trial_numbers():
    trial = Trial(rate_pps=1e6, seconds=2.0, sent=2_000_000, received=1_999_000)
    assert trial.loss == 1000
    assert trial.loss_ratio == pytest.approx(0.0005)
    assert trial.offered_pps == 1e6
    assert trial.received_pps == 999_500
    assert trial.as_dict() == {
        "rate_pps": 1e6,
        "seconds": 2.0,
        "sent": 2_000_000,
        "received": 1_999_000,
        "loss": 1000,
        "loss_ratio": pytest.approx(0.0005),
        "offered_pps": 1e6,
        "received_pps": 999_500,
    }
    assert Trial(None, 1.0, 0, 0).loss_ratio == 0
    with pytest.raises(ValueError, match="seconds"):
        Trial(None, 0.0, 1, 1)
    with pytest.raises(ValueError, match="sent"):
        Trial(None, 1.0, -1, 0)


@pytest.mark.parametrize("share", [0.12, 0.37, 0.5, 0.93, 0.999])
def test_finds_the_capacity_within_resolution_never_above(share):
    capacity = share * UNPACED_PPS
    device = ModelDevice(capacity)
    result = search_zero_loss(device)
    assert result.max_trial.rate_pps is None and result.max_trial is result.trials[0]
    assert result.max_trial.received_pps == pytest.approx(capacity)
    found = result.zero_loss
    assert found is not None and found.loss == 0
    assert found.offered_pps <= capacity
    assert close_enough(capacity, found.rate_pps, 0.02)
    assert len(result.trials) <= 10
    assert device.rates == [trial.rate_pps for trial in result.trials]


@pytest.mark.parametrize("resolution", [0.5, 0.1, 0.01, 0.001])
def test_resolution_decides_when_to_stop(resolution):
    capacity = 0.61 * UNPACED_PPS
    result = search_zero_loss(ModelDevice(capacity), resolution=resolution, max_trials=100)
    assert result.zero_loss.offered_pps <= capacity
    assert close_enough(capacity, result.zero_loss.rate_pps, resolution)
    # Bisection halves the bracket per trial: no more than it takes to get from [0, unpaced] to the resolution.
    paced = len(result.trials) - 1
    assert UNPACED_PPS / 2 ** (paced - 1) > resolution * capacity


def test_every_rate_lies_strictly_inside_the_bracket_of_its_time():
    device = ModelDevice(0.44 * UNPACED_PPS)
    result = search_zero_loss(device, resolution=0.001, max_trials=30)
    low, high = 0.0, UNPACED_PPS
    for trial in result.trials[1:]:
        assert low < trial.rate_pps < high
        if trial.loss == 0:
            low = trial.rate_pps
        else:
            high = trial.rate_pps
    assert result.zero_loss.rate_pps == low


@pytest.mark.parametrize("max_trials", [2, 3, 5, 10, 12])
def test_max_trials_counts_the_unpaced_trial(max_trials):
    device = ModelDevice(0.3 * UNPACED_PPS)
    result = search_zero_loss(device, resolution=1e-6, max_trials=max_trials)
    assert len(result.trials) == len(device.rates) == max_trials


def test_a_device_that_keeps_up_is_answered_by_the_unpaced_trial():
    device = ModelDevice(2 * UNPACED_PPS)
    result = search_zero_loss(device)
    assert device.rates == [None]
    assert result.zero_loss is result.max_trial
    assert result.zero_loss.offered_pps == UNPACED_PPS


def test_a_device_that_loses_everything_has_no_zero_loss_rate():
    device = ModelDevice(0.0)
    result = search_zero_loss(device, max_trials=7)
    assert result.zero_loss is None
    assert len(result.trials) == 7
    assert all(trial.received == 0 for trial in result.trials)


def test_constant_loss_fails_zero_tolerance_at_every_rate():
    result = search_zero_loss(ModelDevice(0.5 * UNPACED_PPS, lost_per_mille=1))
    assert result.zero_loss is None
    assert len(result.trials) == 10


def test_loss_tolerance_admits_the_constant_loss_but_not_overload():
    capacity = 0.5 * UNPACED_PPS
    result = search_zero_loss(ModelDevice(capacity, lost_per_mille=1), loss_tolerance=0.001)
    found = result.zero_loss
    assert found is not None
    assert 0 < found.loss_ratio <= 0.001
    assert found.offered_pps <= capacity
    assert close_enough(capacity, found.rate_pps, 0.02)
    # Every trial above the answer failed the tolerance.
    for trial in result.trials[1:]:
        if trial.rate_pps > found.rate_pps:
            assert trial.loss_ratio > 0.001


def test_ceiling_caps_the_bracket():
    line_rate = 0.5 * UNPACED_PPS
    capacity = 0.8 * line_rate
    device = ModelDevice(capacity)
    result = search_zero_loss(device, ceiling_pps=line_rate)
    assert all(rate < line_rate for rate in device.rates[1:])
    assert result.zero_loss.offered_pps <= capacity
    assert close_enough(capacity, result.zero_loss.rate_pps, 0.02)


def test_a_ceiling_below_the_capacity_is_approached_from_below():
    ceiling = 0.2 * UNPACED_PPS
    device = ModelDevice(0.6 * UNPACED_PPS)
    result = search_zero_loss(device, ceiling_pps=ceiling, max_trials=20)
    # The unpaced trial failed (0.6 < 1), every paced one passes: the answer climbs towards the ceiling.
    assert all(trial.loss == 0 for trial in result.trials[1:])
    assert ceiling * 0.98 <= result.zero_loss.rate_pps < ceiling


def test_as_dict():
    result = search_zero_loss(ModelDevice(0.0), max_trials=2)
    assert isinstance(result, SearchResult)
    as_dict = result.as_dict()
    assert as_dict["zero_loss"] is None
    assert as_dict["max"] == result.max_trial.as_dict()
    assert [trial["rate_pps"] for trial in as_dict["trials"]] == [None, UNPACED_PPS / 2]


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"loss_tolerance": -0.01}, "loss_tolerance"),
        ({"loss_tolerance": 1.5}, "loss_tolerance"),
        ({"resolution": 0}, "resolution"),
        ({"resolution": 0.6}, "resolution"),
        ({"max_trials": 1}, "max_trials"),
        ({"ceiling_pps": 0}, "ceiling_pps"),
    ],
)
def test_bad_arguments_fail_before_any_trial(arguments, named):
    device = ModelDevice(1.0)
    with pytest.raises(ValueError, match=named):
        search_zero_loss(device, **arguments)
    assert device.rates == []
    with pytest.raises(ValueError, match=named):
        check_search_arguments(**{"loss_tolerance": 0.0, "resolution": 0.02, "max_trials": 10, **arguments})


def test_good_arguments_pass_the_check():
    check_search_arguments(loss_tolerance=1.0, resolution=0.5, max_trials=2, ceiling_pps=1.0)
