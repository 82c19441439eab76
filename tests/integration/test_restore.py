"""Restore after a reboot, on the lab: the VTEPs of playbooks/vtep.yml carry BUM frames; restarting lab host a (as a
reboot would: its bpffs and XDP links go, its interfaces and /var/lib/xdpfleet stay) breaks delivery through a;
xdpfleet.fabric.xdp_restore brings it back from the state files, and a second restore changes nothing. The boot
entry point a real host runs from xdpfleet-restore.service (roles/xdp_host/files/xdpfleet-restore) does the same
for host b."""

import json
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from l2lib import bum_probe, ports

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = REPO / "roles" / "xdp_host" / "files" / "xdpfleet-restore"
VTEP_HOSTS = ("a", "b", "c", "d")
VTEP_TASK = "xdpfleet.fabric.vtep : Configure the XDP VTEP"
RESTORE = [{"name": "restore", "xdpfleet.fabric.xdp_restore": {}}]


@pytest.fixture(scope="module")
def fabric(lab):
    up = lab.run_playbook("playbooks/vtep.yml")
    assert up.rc == 0, up
    try:
        yield lab, ports(lab.prefix, ["a100", "b100", "c100"])
    finally:
        gone = lab.run_playbook("playbooks/teardown.yml")
        assert gone.rc == 0, gone


def xdp_ports(lab, host: str) -> set[str]:
    links = json.loads(lab.host_exec(host, ["ip", "-j", "link"]).stdout)
    return {link["ifname"] for link in links if "xdp" in link}


def wait_detached(lab, host: str, timeout: float = 10.0) -> None:
    """The kernel releases links whose last pin went with the bpffs a little after the mount namespace ends."""
    deadline = time.monotonic() + timeout
    while xdp_ports(lab, host) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert xdp_ports(lab, host) == set(), f"{host} still runs XDP on {xdp_ports(lab, host)} after its restart"


def test_restore_after_restarting_a_host_brings_bum_delivery_back(fabric):
    lab, endpoints = fabric
    receivers = {"b100": endpoints["b100"], "c100": endpoints["c100"]}
    assert bum_probe(endpoints["a100"], receivers, timeout=2) == {"b100", "c100"}

    lab.restart_host("a")
    wait_detached(lab, "a")
    assert lab.host_exec("a", ["test", "-e", "/sys/fs/bpf/xdpfleet"], check=False).returncode != 0
    assert "vtep.json" in lab.host_exec("a", ["ls", "/var/lib/xdpfleet/programs"]).stdout.split()
    assert bum_probe(endpoints["a100"], receivers, timeout=1) == set(), "nothing forwards through a after its restart"

    checked = lab.run_tasks(RESTORE, check=True, diff=True)
    assert checked.rc == 0, checked
    assert checked.result(task="restore", host="a")["changed"] and xdp_ports(lab, "a") == set(), "check mode"

    restored = lab.run_tasks(RESTORE)
    assert restored.rc == 0, restored
    report = restored.result(task="restore", host="a")["instances"]["vtep"]
    assert report["kind"] == "vtep" and report["changed"], report
    assert "VNI 100: + access port acc100" in report["changes"], report
    for host in VTEP_HOSTS[1:]:
        assert restored.changed(host) == 0, f"{host} runs as recorded: nothing to restore"
    assert {"acc100", "acclocal", "acc200", "ul-b", "ul-c", "ul-d", "ul-l"} <= xdp_ports(lab, "a")
    assert bum_probe(endpoints["a100"], receivers, timeout=2) == {"b100", "c100"}
    assert bum_probe(endpoints["b100"], {"a100": endpoints["a100"]}, timeout=2) == {"a100"}

    again = lab.run_tasks(RESTORE)
    assert again.rc == 0, again
    assert again.changed() == 0, again
    rerun = lab.run_playbook("playbooks/vtep.yml", extra_vars={"vtep_hosts": "a"})
    assert rerun.rc == 0, rerun
    assert rerun.result(task=VTEP_TASK, host="a")["changed"] is False, "the restored VTEP is the inventory's"


def test_the_boot_entry_point_restores_through_the_same_code(fabric):
    """What xdpfleet-restore.service runs on a real host, run inside restarted lab host b (the lab has no systemd);
    --lib-dir points at the collection in place instead of the copy the role installs in /usr/local/lib/xdpfleet."""
    lab, endpoints = fabric
    lab.restart_host("b")
    wait_detached(lab, "b")
    entry_point = [sys.executable, str(ENTRY_POINT), "--lib-dir", str(REPO / "collection")]
    checked = lab.host_exec("b", [*entry_point, "--check"])
    assert "vtep (vtep): would be restored" in checked.stdout and xdp_ports(lab, "b") == set(), checked.stdout
    booted = lab.host_exec("b", entry_point)
    assert "vtep (vtep): restored" in booted.stdout, booted.stdout
    assert bum_probe(endpoints["a100"], {"b100": endpoints["b100"]}, timeout=2) == {"b100"}
    assert "vtep (vtep): already running" in lab.host_exec("b", entry_point).stdout
    assert lab.run_tasks(RESTORE, hosts="b").changed() == 0
