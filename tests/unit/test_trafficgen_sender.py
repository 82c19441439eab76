"""Stopping a sender by its record (trafficgen state=absent and teardown), with real processes standing in for
senders: one that ends on SIGTERM, one that ignores it."""

import os
import signal
import subprocess
import sys

import pytest
from ansible.module_utils.basic import missing_required_lib

from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import echo, generator, sender

IGNORES_SIGTERM = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def records(tmp_path):
    """The run dir, and a function that records a process as the sender on p3 (pid file and live statistics)."""

    def record(process: subprocess.Popen) -> None:
        (tmp_path / "trafficgen-p3.pid").write_text(f"{process.pid} {generator.process_start_time(process.pid)}\n")
        (tmp_path / "trafficgen-p3.jsonl").write_text("{}\n")

    return tmp_path, record


def test_a_sender_that_ignores_sigterm_is_killed(records):
    run_dir, record = records
    stubborn = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout.readline() == "ready\n"  # SIGTERM is ignored from here on
        record(stubborn)
        pid, changes = sender.stop(str(run_dir), "p3", check_mode=False, timeout=0.5)
        assert pid == stubborn.pid
        assert stubborn.wait(timeout=5) == -signal.SIGKILL
        assert changes.steps == [f"stop sender on p3 (pid {pid}), killed after 0.5 s"]
        assert changes.diff()["before"] == f"sender on p3 (pid {pid})\n" and changes.diff()["after"] == ""
        assert list(run_dir.iterdir()) == [], "its records went with it"
    finally:
        if stubborn.poll() is None:
            stubborn.kill()
            stubborn.wait()


def test_a_sender_that_ends_on_sigterm_is_not_killed_and_check_mode_stops_nothing(records):
    run_dir, record = records
    polite = subprocess.Popen(["sleep", "60"])
    try:
        record(polite)
        pid, checked = sender.stop(str(run_dir), "p3", check_mode=True)
        assert pid == polite.pid and checked.steps == [f"stop sender on p3 (pid {pid})"]
        assert polite.poll() is None and len(list(run_dir.iterdir())) == 2, "check mode"

        pid, changes = sender.stop(str(run_dir), "p3", check_mode=False, timeout=5)
        assert polite.wait(timeout=5) == -signal.SIGTERM
        assert changes.steps == checked.steps and list(run_dir.iterdir()) == []
    finally:
        if polite.poll() is None:
            polite.kill()
            polite.wait()


def test_no_record_is_no_change_and_a_stale_one_goes(records):
    run_dir, _ = records
    assert sender.stop(str(run_dir), "p3", check_mode=False)[1].result() == {"changed": False, "changes": []}
    exited = subprocess.Popen(["true"])
    exited.wait()
    (run_dir / "trafficgen-p3.pid").write_text(f"{exited.pid}\n")
    pid, changes = sender.stop(str(run_dir), "p3", check_mode=False)
    assert pid is None and changes.steps == [f"remove stale sender record {run_dir}/trafficgen-p3.pid"]
    assert list(run_dir.iterdir()) == []


def test_a_record_whose_pid_now_names_another_process_stops_nothing(records):
    """A sender killed by SIGKILL leaves its record; the kernel may give its pid to any later process. Only the
    process with the recorded pid and start time is ours: an unrelated one with that pid must survive."""
    run_dir, _ = records
    unrelated = subprocess.Popen(["sleep", "60"])
    try:
        started = generator.process_start_time(unrelated.pid)
        for record in (f"{unrelated.pid}\n", f"{unrelated.pid} {started - 1}\n"):  # no start time, another one
            (run_dir / "trafficgen-p3.pid").write_text(record)
            assert generator.running_sender(str(run_dir / "trafficgen-p3.pid")) is None
            pid, changes = sender.stop(str(run_dir), "p3", check_mode=False, timeout=1)
            assert pid is None and changes.steps == [f"remove stale sender record {run_dir}/trafficgen-p3.pid"]
            assert unrelated.poll() is None, f"record {record!r}: the unrelated process was signalled"
            assert list(run_dir.iterdir()) == []
    finally:
        unrelated.kill()
        unrelated.wait()


def test_a_sender_records_itself_privately(tmp_path):
    run_dir = tmp_path / "run" / "xdpfleet"
    record = generator.sender_pid_file(str(run_dir), "p3")
    generator.record_sender(record)
    assert generator.running_sender(record) == os.getpid()
    modes = {path: oct(os.stat(path).st_mode & 0o777) for path in (record, run_dir, run_dir.parent)}
    assert modes == {record: "0o600", run_dir: "0o700", run_dir.parent: "0o700"}


def in_fresh_interpreter(program: str) -> subprocess.CompletedProcess:
    """`program` run by a new Python process whose path holds the collection alone."""
    collection = next(p for p in sys.path if p.endswith("/collection"))
    env = {"PYTHONPATH": collection}
    return subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, check=False)


def test_without_pyroute2_the_module_imports_and_resolving_dst_mac_says_what_is_missing():
    """In a fresh interpreter where pyroute2 cannot be imported (as on a host without it)."""
    program = (
        "import sys; sys.modules['pyroute2'] = None\n"
        "import ansible_collections.xdpfleet.fabric.plugins.modules.trafficgen\n"
        "from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator, sender\n"
        "ipv4 = {'src': '198.51.100.1', 'dst': '198.51.100.2'}\n"
        "try:\n"
        "    sender.resolve_dst_mac({'packets': [{'headers': [{'ethernet': {}}, {'ipv4': ipv4}]}]}, 'lo')\n"
        "except generator.TrafficgenError as exc:\n"
        "    print(exc)\n"
    )
    run = in_fresh_interpreter(program)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("dst_mac: not given and not resolvable: ")
    assert missing_required_lib("pyroute2") in run.stdout


def test_the_trafficgen_module_imports_pyroute2_only_to_resolve_a_mac():
    """pyroute2's import costs more than the rest of an echo or sender task that is given its MACs."""
    program = (
        "import sys\n"
        "import ansible_collections.xdpfleet.fabric.plugins.modules.trafficgen\n"
        "from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import echo, sender\n"
        "print('pyroute2' in sys.modules)\n"
    )
    run = in_fresh_interpreter(program)
    assert (run.returncode, run.stdout.strip()) == (0, "False"), run.stderr


def test_the_echo_servers_addresses_are_given_or_the_templates():
    assert echo.echo_addresses(None, "udp6") == ("2001:db8::2",)
    assert echo.echo_addresses(["198.51.100.7"], "udp4") == ("198.51.100.7",)
    with pytest.raises(generator.TrafficgenError, match=r"^addresses\[1\]: .198.51.100. is not an IPv4 or IPv6"):
        echo.echo_addresses(["198.51.100.7", "198.51.100"], None)
    with pytest.raises(generator.TrafficgenError, match=r"^addresses: required with mode=echo when no template"):
        echo.echo_addresses(None, None)


@pytest.mark.parametrize("driver", ["virtio_net", "ice", "i40e", "ixgbe"])
def test_generic_mode_is_refused_where_the_driver_transmits_xdp_frames_only_for_a_native_program(driver):
    problem = generator.generic_send_problem("eth0", driver, "generic")
    assert problem.startswith(f"attach_mode: generic cannot send from eth0: driver {driver} transmits XDP frames")
    assert "attached natively" in problem and problem.endswith("use attach_mode: native")
    assert generator.generic_send_problem("eth0", driver, "native") is None


@pytest.mark.parametrize("driver", ["mlx5_core", "veth", None])
def test_generic_mode_is_allowed_where_the_driver_transmits_without_a_native_program(driver):
    """mlx5 opens its redirect send queues with every channel; a veth depends on its peer (checked when sending);
    an interface whose driver is unknown is not refused on a guess."""
    assert generator.generic_send_problem("eth0", driver, "generic") is None
