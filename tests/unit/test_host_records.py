"""host_records' teardown on a host where things are already half gone, without root or a bpffs: sender records
(one running, one stale, one that names no process), and an instance record whose pins never existed."""

import json
import subprocess

from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import records as hr
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
