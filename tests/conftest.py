"""Session fixtures: the collection on sys.path, and the test lab.

The test lab mirrors the default inventory's topology (hosts a, b; endpoints e1, e2; see lablib.Lab.standard)
under prefix `xt` with management subnet 198.51.100.128/26, so it never clashes with the default lab `xf`
(198.51.100.0/27). XDPFLEET_TEST_LAB_PREFIX / XDPFLEET_TEST_LAB_SUBNET override both, for running a second
test session next to one already running.

Under pytest-xdist (`make test` runs three workers, `--dist loadfile`: every file on one worker) each worker has a
lab of its own: prefix `xt0`, `xt1`, ... and an equal share of the subnet (198.51.100.128/28, .144/28, .160/28), so
the workers' labs run side by side. (The lab's overlay addresses, 198.51.100.160/28 and .176/28, live in endpoint
namespaces, where no management subnet is routed.)
"""

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# The collection is assembled in place: modules import ansible_collections.xdpfleet.fabric.plugins.module_utils.
sys.path.insert(0, str(REPO / "collection"))
sys.path.insert(0, str(REPO / "tests"))

from lablib import Lab

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import mounts

# The smallest share of the subnet a worker's lab may get: the bridge and the standard topology's five hosts fit a
# /28, with room for test_lab's clash address (the share's last address but one).
SMALLEST_WORKER_SUBNET = 28


def worker_lab(prefix: str, subnet: str) -> tuple[str, str]:
    """(prefix, management subnet) of this process's test lab: as given, or this xdist worker's own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return prefix, subnet
    index, count = int(worker.removeprefix("gw")), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    network = ipaddress.ip_network(subnet)
    split = (count - 1).bit_length()
    if network.prefixlen + split > SMALLEST_WORKER_SUBNET:
        raise pytest.UsageError(
            f"XDPFLEET_TEST_LAB_SUBNET: {subnet} is too small for {count} workers' labs (each needs a "
            f"/{SMALLEST_WORKER_SUBNET}): use fewer workers or a larger subnet"
        )
    return f"{prefix}{index}", str(list(network.subnets(prefixlen_diff=split))[index])


LAB_PREFIX, LAB_SUBNET = worker_lab(
    os.environ.get("XDPFLEET_TEST_LAB_PREFIX", "xt"), os.environ.get("XDPFLEET_TEST_LAB_SUBNET", "198.51.100.128/26")
)

# The files that start first, in this order; every other file follows in collection order. Under xdist a worker
# takes the next file when it is done with its own, so the longest files go first and the workers finish together
# (seconds: the file's tests in a clean-clone `make test` on this 2-core machine, two workers). test_lab goes first:
# it takes the lab down and brings it up fresh, so the files after it on the same worker find the C sources copied
# and the objects compiled on the hosts, once. The schedule is all that depends on this list.
START_FIRST = (
    "integration/test_lab.py",  # 117 s
    "integration/test_vtep.py",  # 283 s
    "integration/test_site.py",  # 246 s: site.yml twice, then teardown.yml
    "integration/test_restore.py",  # 153 s
    "integration/test_rollout.py",  # 150 s
    "integration/test_xdp_program.py",  # 137 s
    "kernel/test_vtep_forwarding.py",  # 96 s
    "kernel/test_vtep_crash_consistency.py",  # 75 s
    "integration/test_linux_vtep.py",  # 61 s
    "integration/test_nic_tuning_lab.py",  # 58 s
    "kernel/test_vtep_dataplane.py",  # 50 s
    "integration/test_perf.py",  # 49 s
)


def pytest_collection_modifyitems(items):
    # Every test that uses the lab is a `lab` test: `-m "not lab"` runs the rest without the lab.
    for item in items:
        if "lab" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.lab)

    def start_rank(item) -> int:
        path = Path(item.path).relative_to(REPO / "tests").as_posix()
        return START_FIRST.index(path) if path in START_FIRST else len(START_FIRST)

    items.sort(key=start_rank)  # stable: the tests of a file keep their order


UNIT_TESTS = REPO / "tests" / "unit"


def pytest_configure(config):
    # make test hides the machine's bpffs (Makefile, AS_ON_A_FRESH_MACHINE): if that ever stops working, a test that
    # leans on a bpffs someone mounted by hand would pass here and fail on a fresh machine.
    if os.environ.get("XDPFLEET_TEST_FRESH_MOUNTS") == "1" and mounts.mounted_type("/sys/fs/bpf") is not None:
        raise pytest.UsageError(
            f"XDPFLEET_TEST_FRESH_MOUNTS: /sys/fs/bpf still has a {mounts.mounted_type('/sys/fs/bpf')} mount: the "
            "tests must see what a fresh machine has (nothing mounted there)"
        )
    # Without root every test outside tests/unit would only skip, and the run pass having tested nothing. Decided
    # from the paths asked for, before collection, so that it stops a run with pytest-xdist workers the same way.
    if os.geteuid() != 0:
        paths = [Path(config.invocation_params.dir, arg.split("::")[0]).resolve() for arg in config.args]
        needs_root = [str(path) for path in paths if not path.is_relative_to(UNIT_TESTS)]
        if needs_root:
            raise pytest.UsageError(
                f"{needs_root[0]}: these tests need root (network namespaces, XDP, the lab's sshd) and would only "
                "skip without it; run them as root, or only tests/unit (make unit) without root"
            )


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


@pytest.fixture(scope="session")
def bpf_cache(tmp_path_factory) -> str:
    """The session's compile cache for BPF objects: compile_object keys an object by everything that built it, so
    every test may share it, and each object is compiled once per session."""
    return str(tmp_path_factory.mktemp("bpfcache"))


@pytest.fixture
def bpffs(tmp_path):
    """A bpffs instance of the test's own (every mount is a new one) for its pins, gone with the test: a test never
    pins in the machine's /sys/fs/bpf, which a fresh machine does not even have mounted."""
    root = tmp_path / "bpffs"
    root.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(root)], check=True)
    yield root
    subprocess.run(["umount", str(root)], check=True)
