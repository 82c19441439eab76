"""Timing a program's phases where it looks them up: each phase's function replaced by the same function, timed
(summed over its calls), for the benchmarks' per-phase tables."""

from __future__ import annotations

import functools
import time
from collections import defaultdict


class PhaseTimer:
    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, owner, attr: str, label: str) -> None:
        """Replace owner.attr (a module's function, or a class's method) by the same, timed under `label`."""
        function = getattr(owner, attr)

        @functools.wraps(function)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start
                self.calls[label] += 1

        setattr(owner, attr, timed)

    def add(self, label: str, seconds: float) -> None:
        self.seconds[label] += seconds
        self.calls[label] += 1
