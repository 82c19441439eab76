"""The VM kernel matrix's fixtures: the six objects compiled on the host once, the kernels fetched (cached), and the
table of every round run, printed at the end of the session (and written to .build/kernel-matrix.md)."""

from __future__ import annotations

import os

import kernels
import planes
import pytest


@pytest.fixture(scope="session")
def objects() -> tuple[dict[str, str], str]:
    """(data plane -> object path, cache dir): outside the guest's /tmp (its own tmpfs), read by it over 9p."""
    cache_dir = str(kernels.CACHE_ROOT / "bpf-cache")
    return planes.compile_objects(cache_dir), cache_dir


@pytest.fixture
def vm_work(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the VM tests need root (network namespaces, taps)")
    return tmp_path_factory.mktemp("vm")


def pytest_terminal_summary(terminalreporter):
    if not planes.ROUNDS:
        return
    text = planes.table(planes.ROUNDS)
    terminalreporter.section("VM kernel matrix")
    terminalreporter.write_line(text)
    build = planes.REPO / ".build"
    build.mkdir(exist_ok=True)
    (build / "kernel-matrix.md").write_text(text + "\n")
