"""On a lab inventory whose lab is not up, site.yml and the playbooks fail at once saying how to bring the lab up,
instead of timing out over SSH on every host (playbooks/lab_check.yml). Real ansible-playbook runs against a lab
inventory as the tests' labs write it; no lab is brought up, and no host is contacted."""

import json
import subprocess
from pathlib import Path

import pytest
from lablib import REPO, Lab, run_playbook

from ansible_collections.xdpfleet.fabric.plugins.filter.lab_host_problem import lab_host_problem

CHECK_TASK = "Check that each lab host of this run is running"


@pytest.fixture
def lab(tmp_path) -> Lab:
    """The standard lab's inventory, with a lab dir of its own that no lab has ever used."""
    lab = Lab.standard("xchk", "198.51.100.224/27", tmp_path / "work")
    lab.lab_dir = str(tmp_path / "lab")
    lab.write_inventory()
    return lab


def record(lab: Lab, pids: dict[str, int]) -> None:
    """A lab record (state.json) as xdpfleet.fabric.lab writes it for a lab that is up, with these host pids."""
    hosts = {host["name"]: {"pid": pids.get(host["name"], 0), "mgmt_ip": host["mgmt_ip"]} for host in lab.hosts}
    Path(lab.lab_dir).mkdir(mode=0o700)
    (Path(lab.lab_dir) / "state.json").write_text(json.dumps({"status": "up", "hosts": hosts}))


def check_items(result) -> dict[str, dict]:
    """The check's result per lab host (a loop on the controller, one item per host)."""
    (task,) = result.results(task=CHECK_TASK, host="localhost")
    return {item["item"]: item for item in task["result"]["results"]}


def check_failures(result) -> dict[str, str]:
    return {host: item["msg"] for host, item in check_items(result).items() if item.get("failed")}


@pytest.mark.parametrize("playbook", ["site.yml", "playbooks/vtep.yml", "playbooks/teardown.yml"])
def test_a_lab_that_is_not_up_fails_at_once_saying_how_to_bring_it_up(lab, playbook):
    result = lab.run_playbook(playbook)
    assert result.rc != 0, result
    hosts = [host["name"] for host in lab.hosts]
    failures = check_failures(result)
    assert sorted(failures) == sorted(hosts), result
    for message in failures.values():
        assert message.startswith(f"The lab is not up (no lab is recorded in {lab.lab_dir}). Bring it up with")
        assert f"ansible-playbook -i {lab.inventory} {REPO}/playbooks/lab.yml" in message
    # At once: no host was contacted (each would wait out SSH's 10 s connect timeout), nothing ran after the check.
    assert list(result.stats) == ["localhost"], result
    assert [task["task"] for task in result.tasks] == [CHECK_TASK]


def test_a_host_whose_processes_are_gone_is_named(lab):
    """A stale lab (a killed session, a reboot): its record says up, a's processes run, b's are gone. a passes."""
    # A stand-in for a's unshare: a process of the lab dir with a child, as the lab's hosts are (sshd under unshare).
    host_a = subprocess.Popen(["sh", "-c", "sleep 60; true", f"{lab.lab_dir}/hosts/a"])
    try:
        record(lab, {"a": host_a.pid})
        result = lab.run_playbook("playbooks/lab_check.yml")
    finally:
        host_a.kill()
        host_a.wait()
    failures = check_failures(result)
    assert "a" not in failures and not check_items(result)["a"].get("skipped"), result
    assert failures["b"].startswith(f"The lab is not up (host 'b' of the lab in {lab.lab_dir} is not running).")


def test_any_other_inventory_is_left_alone():
    result = run_playbook(REPO / "playbooks" / "lab_check.yml", REPO / "inventories" / "examples" / "vtep-fleet")
    assert result.rc == 0, result
    assert all(item.get("skipped") for item in check_items(result).values()), result


def test_what_the_filter_says_of_a_record_that_does_not_match(tmp_path):
    lab_dir = tmp_path / "lab"
    lab_dir.mkdir(mode=0o700)
    state = lab_dir / "state.json"
    state.write_text(json.dumps({"status": "building", "hosts": {}}))
    building = f"the lab in {lab_dir} is 'building', not 'up' (its start was interrupted)"
    assert lab_host_problem(str(lab_dir), "a") == building
    state.write_text(json.dumps({"status": "up", "hosts": {"a": {"pid": 0, "mgmt_ip": "198.51.100.2"}}}))
    assert lab_host_problem(str(lab_dir), "e1") == f"host 'e1' is not a host of the lab in {lab_dir}"
    assert lab_host_problem(str(lab_dir), "a", "198.51.100.3") == (
        f"host 'a' of the lab in {lab_dir} listens on 198.51.100.2, not on 198.51.100.3"
    )
