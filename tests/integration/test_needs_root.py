"""`make test` as another user than root stops at once, saying it needs root: without root most of the suite could
only skip and the run would pass having tested nothing (the same check stops `pytest` outside tests/unit, in
tests/conftest.py)."""

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")


def test_make_test_as_another_user_stops_before_deps_and_lint():
    proc = subprocess.run(
        ["runuser", "-u", "nobody", "--", "make", "--no-print-directory", "-C", str(REPO), "test"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode != 0
    assert "test: make test needs root" in proc.stderr
    assert "deps:" not in proc.stdout + proc.stderr and "ruff" not in proc.stdout + proc.stderr
