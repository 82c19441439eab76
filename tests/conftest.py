"""Session fixtures: the collection on sys.path, and the test lab.

The test lab mirrors the default inventory's topology (hosts a, b; endpoints e1, e2; see lablib.Lab.standard)
under prefix `xt` with management subnet 198.51.100.128/27, so it never clashes with the default lab `xf`
(198.51.100.0/27). XDPFLEET_TEST_LAB_PREFIX / XDPFLEET_TEST_LAB_SUBNET override both, for running a second
test session next to one already running.
"""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The collection is assembled in place: modules import ansible_collections.xdpfleet.fabric.plugins.module_utils.
sys.path.insert(0, str(REPO / "collection"))
sys.path.insert(0, str(REPO / "tests"))

from lablib import Lab

LAB_PREFIX = os.environ.get("XDPFLEET_TEST_LAB_PREFIX", "xt")
LAB_SUBNET = os.environ.get("XDPFLEET_TEST_LAB_SUBNET", "198.51.100.128/27")


def pytest_collection_modifyitems(items):
    # Every test that uses the lab is a `lab` test: `-m "not lab"` runs the rest without root.
    for item in items:
        if "lab" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """The test lab, fresh for the session (a leftover of the same prefix, stale or running, is removed first),
    torn down at the end also when tests fail."""
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces, mounts, veth, sshd)")
    lab = Lab.standard(LAB_PREFIX, LAB_SUBNET, tmp_path_factory.mktemp("lab"))
    down = lab.down()
    assert down.rc == 0, f"removing a leftover {LAB_PREFIX} lab failed:\n{down}"
    try:
        result = lab.up()
        assert result.rc == 0, f"lab up failed:\n{result}"
        yield lab
    finally:
        result = lab.down()
        assert result.rc == 0, f"lab down failed:\n{result}"
