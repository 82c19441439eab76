"""What the traffic benches' main() share: their measuring options, the refusal of a machine they cannot run on, and
SIGTERM turned into KeyboardInterrupt so that their `finally` removes the namespaces they made."""

from __future__ import annotations

import argparse
import os
import signal


def measuring_parser(doc: str, rounds: str, batch: int | None = None) -> argparse.ArgumentParser:
    """A parser with --seconds, --rounds (`rounds` says what one round is), --warmup and, given its default, --batch."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per point (default 5)")
    parser.add_argument("--rounds", type=int, default=3, help=f"{rounds} (default 3)")
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each measurement")
    if batch is not None:
        parser.add_argument("--batch", type=int, default=batch, help="frames per live-frames batch (<= 256)")
    return parser


def cannot_run(bench: str, cpus: str) -> str | None:
    """Why this bench cannot run here (not root, or CPUs 0 and 1 not both its own; `cpus` says what runs on them),
    or None."""
    if os.geteuid() != 0:
        return f"{bench}: needs root (network namespaces, XDP, BPF_PROG_RUN)"
    if not {0, 1} <= os.sched_getaffinity(0):
        return f"{bench}: needs CPUs 0 and 1 ({cpus})"
    return None


def interrupt_on(*signals: signal.Signals) -> None:
    """Raise KeyboardInterrupt on these signals (SIGTERM from make or a shell's kill), as on ^C."""

    def interrupt(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for number in signals:
        signal.signal(number, interrupt)
