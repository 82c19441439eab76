"""Fixtures the kernel tests share."""

import subprocess

import pytest


@pytest.fixture
def bpffs(tmp_path):
    """A bpffs instance of the test's own (every mount is a new one) for its pins, gone with the test: a test never
    pins in the machine's /sys/fs/bpf, which a fresh machine does not even have mounted."""
    root = tmp_path / "bpffs"
    root.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(root)], check=True)
    yield root
    subprocess.run(["umount", str(root)], check=True)
