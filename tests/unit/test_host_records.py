"""host_records' teardown on a host where things are already half gone, without root or a bpffs: sender records
(one running, one stale, one that names no process), and an instance record whose pins never existed."""

import json
import subprocess

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.records import RecordError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records as hr
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator


def test_teardown_stops_senders_and_forgets_records(tmp_path):
    host = hr.HostPaths(str(tmp_path / "state"), str(tmp_path / "pins"), str(tmp_path / "cache"), str(tmp_path / "run"))
    (tmp_path / "state" / "programs").mkdir(parents=True)
    (tmp_path / "state" / "programs" / "gone.json").write_text(json.dumps({"name": "gone", "interfaces": {"p9": {}}}))
    (tmp_path / "state" / "nic_tuning.json").write_text("{}")
    (tmp_path / "run").mkdir()
    sender = subprocess.Popen(["sleep", "60"])  # stands in for a sender: it ends on SIGTERM
    exited = subprocess.Popen(["true"])
    exited.wait()
    (tmp_path / "run" / "trafficgen-p3.pid").write_text(f"{sender.pid} {generator.process_start_time(sender.pid)}\n")
    (tmp_path / "run" / "trafficgen-p3.jsonl").write_text("{}\n")
    (tmp_path / "run" / "trafficgen-p4.pid").write_text(f"{exited.pid}\n")
    (tmp_path / "run" / "trafficgen-p5.pid").write_text("0\n")  # never a signal to the process group
    try:
        checked = hr.teardown(host, check_mode=True)
        assert checked.senders.steps == [
            f"stop sender on p3 (pid {sender.pid})",
            f"remove stale sender record {tmp_path}/run/trafficgen-p4.pid",
            f"remove stale sender record {tmp_path}/run/trafficgen-p5.pid",
        ]
        state_file = host.instance("gone").state_file
        assert {name: c.steps for name, c in checked.instances.items()} == {
            "gone": ["p9: remove stale pin", f"remove state file {state_file}"]
        }
        # Everything that goes is a line of `before` only: Ansible shows each as a removal.
        assert checked.diff()["before"] == (
            f"sender on p3 (pid {sender.pid})\n"
            f"stale sender record {tmp_path}/run/trafficgen-p4.pid\n"
            f"stale sender record {tmp_path}/run/trafficgen-p5.pid\n"
            "gone: p9: stale pin\n"
            f"gone: state file {state_file}\n"
        )
        assert checked.diff()["after"] == ""
        assert sender.poll() is None and (tmp_path / "state" / "programs" / "gone.json").exists(), "check mode"

        done = hr.teardown(host, check_mode=False, stop_timeout=5)
        assert done.changed and done.senders.steps == checked.senders.steps
        assert done.diff() == checked.diff()
        assert sender.wait(timeout=5) == -15
        assert sorted(p.name for p in (tmp_path / "run").iterdir()) == []
        assert not (tmp_path / "state" / "programs" / "gone.json").exists()
        assert hr.other_records(host) == ["nic_tuning.json"], "left to nic_tuning's own restore"
        assert not hr.teardown(host, check_mode=False).changed
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()


def test_restore_follows_the_order_of_deployment_which_an_update_keeps(tmp_path):
    """Instances are restored in the order they were deployed, not by name: tc runs a hook's programs in the order
    they were attached. An update keeps an instance's place (its attachments stay where they are); a removal and a new
    deployment, or a move onto the tc hook, puts it last, as the kernel does."""
    host = hr.HostPaths(str(tmp_path / "state"), str(tmp_path / "pins"))
    (tmp_path / "state" / "programs").mkdir(parents=True)

    def deploy(name, mode="tc", tag="t1", tc_program=None):
        record = {"name": name, "mode": mode, "tag": tag, "interfaces": {"p0": {}}, "tc_program": tc_program}
        with xp.recording(host.instance(name), record, check_mode=False):
            pass

    def order():
        return hr.in_deploy_order(host, hr.recorded_instances(host))

    for name in ("zz-vtep", "mm-filter", "aa-filter"):
        deploy(name)
    assert order() == ["zz-vtep", "mm-filter", "aa-filter"]
    deploy("zz-vtep", tag="t2")  # an upgrade: same place
    assert order() == ["zz-vtep", "mm-filter", "aa-filter"]
    xp.remove(host.instance("mm-filter"), check_mode=False)
    deploy("mm-filter")  # removed and deployed again: attached after the others
    assert order() == ["zz-vtep", "aa-filter", "mm-filter"]
    deploy("xdp-only", mode="native")
    deploy("zz-vtep", mode="native")  # off tc: its XDP attachment has no order to keep, nor does its place change
    assert order() == ["zz-vtep", "aa-filter", "mm-filter", "xdp-only"]
    deploy("zz-vtep", mode="native", tc_program="tc_part")  # onto tc again: its tc program now runs last
    assert order() == ["aa-filter", "mm-filter", "xdp-only", "zz-vtep"]
    # A record written before the order was kept comes first (its instance was deployed before any that has one).
    (tmp_path / "state" / "programs" / "old.json").write_text(json.dumps({"name": "old", "interfaces": {}}))
    assert order() == ["old", "aa-filter", "mm-filter", "xdp-only", "zz-vtep"]
    assert hr.in_deploy_order(host, ["zz-vtep", "aa-filter"]) == ["aa-filter", "zz-vtep"]


def test_instance_records_are_common_records(tmp_path):
    """An instance's state file is a record of common/records.py: a corrupt one names its field and file, and does
    not count for the order of deployment; the file stays the JSON it was."""
    paths = xp.InstancePaths("one", str(tmp_path / "pins"), str(tmp_path / "state"))
    assert paths.state_file == str(tmp_path / "state" / "programs" / "one.json") and xp.load_state(paths) == {}
    xp.write_state(paths, {"name": "one", "deploy_order": 3})
    assert json.loads((tmp_path / "state" / "programs" / "one.json").read_text()) == {"deploy_order": 3, "name": "one"}
    (tmp_path / "state" / "programs" / "two.json").write_text("[1]")
    (tmp_path / "state" / "programs" / "three.json").write_text("{")
    assert xp.recorded_deploy_orders(str(tmp_path / "state")) == {"one": 3, "two": None, "three": None}
    with pytest.raises(RecordError, match=r"^state_dir: the record .*/programs/two.json is corrupt \(a JSON list"):
        xp.load_state(xp.InstancePaths("two", str(tmp_path / "pins"), str(tmp_path / "state")))
