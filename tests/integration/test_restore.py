"""Restore after a reboot, on the lab: the VTEPs of playbooks/vtep.yml carry BUM frames; restarting lab host a (as a
reboot would: its bpffs and XDP links go, its interfaces and /var/lib/xdpfleet stay) breaks delivery through a;
xdpfleet.fabric.xdp_restore brings it back from the state files, and a second restore changes nothing. The boot
entry point a real host runs from xdpfleet-restore.service (roles/xdp_host/files/xdpfleet-restore) does the same
for host b. The entry point also waits for a next hop that answers late (its retries) and follows a next hop that
changes its MAC (--refresh-next-hops)."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from l2lib import bum_probe, ports

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINT = REPO / "roles" / "xdp_host" / "files" / "xdpfleet-restore"
VTEP_HOSTS = ("a", "b", "c", "d")
VTEP_TASK = "xdpfleet.fabric.vtep : Configure the XDP VTEP"
RESTORE = [{"name": "restore", "xdpfleet.fabric.xdp_restore": {}}]
ENTRY_POINT_ARGV = [sys.executable, str(ENTRY_POINT), "--lib-dir", str(REPO / "collection")]
C100_IP = "198.51.100.164"
A_UL_B_IP = "198.51.100.97"  # a's port towards b: b's next hop to every peer
FILTER_RULES = [
    {"name": "vxlan", "action": "count", "protocol": "udp", "dst_port": 4789},
    {"name": "discard", "action": "drop", "protocol": "udp", "dst_port": 9},
]


@pytest.fixture(scope="module")
def fabric(lab):
    up = lab.run_playbook("playbooks/vtep.yml")
    assert up.rc == 0, up
    # A packet filter at tc beside a's XDP VTEP on ul-l (l's rules) and the router, for the restore to bring back
    # with their rules and ports; first in check mode with --diff, which shows both and changes nothing.
    filter_and_router = [
        {"xdpfleet.fabric.xdp_filter": {"interfaces": ["ul-l"], "hook": "tc", "rules": FILTER_RULES}},
        {"ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_router"}},
    ]
    checked = lab.run_tasks(filter_and_router, hosts="a", check=True, diff=True)
    assert checked.rc == 0 and checked.changed("a") == 2, checked
    assert "+port p1 (ifindex " in checked.stdout and "+vxlan: count udp to any port 4789" in checked.stdout, checked
    assert not {"p1", "p2"} & lab.xdp_interfaces("a"), "check mode attaches nothing"
    assert "filter" not in lab.host_exec("a", ["ls", "/sys/fs/bpf/xdpfleet"]).stdout.split(), "nor pins the filter"
    up = lab.run_tasks(filter_and_router, hosts="a")
    assert up.rc == 0, up
    try:
        yield lab, ports(lab.prefix, ["a100", "b100", "c100"])
    finally:
        gone = lab.run_playbook("playbooks/teardown.yml")
        assert gone.rc == 0, gone


def wait_detached(lab, host: str, timeout: float = 10.0) -> None:
    """The kernel releases links whose last pin went with the bpffs a little after the mount namespace ends."""
    deadline = time.monotonic() + timeout
    while lab.xdp_interfaces(host) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert lab.xdp_interfaces(host) == set(), f"{host} still runs XDP on {lab.xdp_interfaces(host)} after its restart"


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
    assert checked.result(task="restore", host="a")["changed"] and lab.xdp_interfaces("a") == set(), "check mode"

    restored = lab.run_tasks(RESTORE)
    assert restored.rc == 0, restored
    report = restored.result(task="restore", host="a")["instances"]["vtep"]
    assert report["kind"] == "vtep" and report["changed"], report
    assert "VNI 100: + access port acc100" in report["changes"], report
    filter_report = restored.result(task="restore", host="a")["instances"]["filter"]
    assert (
        filter_report["kind"] == "filter" and "add rule vxlan: count udp to any port 4789" in filter_report["changes"]
    )
    router = restored.result(task="restore", host="a")["instances"]["router"]
    assert router["kind"] == "router" and any(c.startswith("+ port p2 (ifindex ") for c in router["changes"]), router
    for host in VTEP_HOSTS[1:]:
        assert restored.changed(host) == 0, f"{host} runs as recorded: nothing to restore"
    assert {"acc100", "acclocal", "acc200", "ul-b", "ul-c", "ul-d", "ul-l", "p1", "p2"} <= lab.xdp_interfaces("a")
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
    assert "vtep (vtep): would be restored" in checked.stdout and lab.xdp_interfaces("b") == set(), checked.stdout
    booted = lab.host_exec("b", entry_point)
    assert "vtep (vtep): restored" in booted.stdout, booted.stdout
    assert bum_probe(endpoints["a100"], {"b100": endpoints["b100"]}, timeout=2) == {"b100"}
    assert "vtep (vtep): already running" in lab.host_exec("b", entry_point).stdout
    assert lab.run_tasks(RESTORE, hosts="b").changed() == 0


def host_popen(lab, host: str, argv: list[str]) -> subprocess.Popen:
    """argv started inside a host (as lab.host_exec), not waited for."""
    _, sshd = lab.host_pids(host)
    return subprocess.Popen(
        ["nsenter", "-t", str(sshd), "-m", "-n", "-u", "-p", "--", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_boot_restore_waits_for_a_next_hop_that_answers_late(fabric):
    """A slow underlay at boot: restarted host c has forgotten its neighbours and its next hop (a's port ul-c) does
    not answer ARP yet. The entry point as xdpfleet-restore.service runs it (--retry-seconds) reports the VTEP as
    waiting, keeps retrying, and brings it back by itself once a answers a few seconds later."""
    lab, endpoints = fabric
    lab.restart_host("c")
    wait_detached(lab, "c")
    lab.host_exec("a", ["ip", "link", "set", "dev", "ul-c", "arp", "off"])
    boot = None
    try:
        lab.host_exec("c", ["ip", "neigh", "flush", "dev", "ul-a"])
        boot = host_popen(lab, "c", [*ENTRY_POINT_ARGV, "--retry-seconds", "60"])
        time.sleep(5)  # longer than a first try's ARP wait (3 s): it has failed, and a retry waits
        assert boot.poll() is None and lab.xdp_interfaces("c") == set(), "c waits for its next hop"
        lab.host_exec("a", ["ip", "link", "set", "dev", "ul-c", "arp", "on"])
        output, _ = boot.communicate(timeout=60)
    finally:
        lab.host_exec("a", ["ip", "link", "set", "dev", "ul-c", "arp", "on"])
        if boot is not None and boot.poll() is None:
            boot.kill()
            boot.wait()
    assert boot.returncode == 0, output
    assert re.search(r"^vtep \(vtep\): WAITING, will retry: .*did not answer ARP", output, re.M), output
    assert re.search(r"^vtep \(vtep\): restored \(attempt [2-9]\)$", output, re.M), output
    # c is a TC VTEP: decapsulated BUM reaches c100 only through its tc program, restored with the XDP one
    assert bum_probe(endpoints["a100"], {"c100": endpoints["c100"]}, timeout=2) == {"c100"}
    tc_links = lab.host_exec("c", ["ls", "/sys/fs/bpf/xdpfleet/vtep/tc-links"]).stdout.split()
    assert tc_links == ["acc100", "acc200", "ul-a"] and lab.xdp_interfaces("c") == set(tc_links)
    assert lab.run_tasks(RESTORE, hosts="c").changed() == 0


def overlay_ping(lab, src: str, dst_ip: str, count: int = 3) -> bool:
    argv = ["ping", "-q", "-n", "-c", str(count), "-i", "0.2", "-W", "1", dst_ip]
    return lab.endpoint_exec(src, argv, check=False).returncode == 0


def refresh_until_reachable(lab, timeout: float = 30.0) -> str:
    """Passes of b's next-hop refresher, a second apart as xdpfleet-next-hops.service would run them, until b100
    reaches c100; their output."""
    output = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        output += lab.host_exec("b", [*ENTRY_POINT_ARGV, "--refresh-next-hops"]).stdout
        if overlay_ping(lab, "b100", C100_IP, count=1):
            return output
        time.sleep(1)
    raise AssertionError(f"b100 does not reach c100 after {timeout:g} s of refreshes:\n{output}")


def test_a_next_hop_that_changes_its_mac_is_followed(fabric):
    """b reaches c (and d and l) through its next hop a:ul-b. That port gets another MAC and announces nothing (no
    gratuitous ARP): b's VTEP still sends c's copies to the old MAC, a's kernel drops them (not for its MAC), and
    b100 cannot reach c100. The refresher (--refresh-next-hops, what xdpfleet-next-hops.service runs) has b's
    kernel verify the next hop and writes the MAC it finds: b100 reaches c100 again, no playbook run. b's neighbour
    timers on ul-a are shortened so the kernel's verification takes seconds rather than up to a minute."""
    lab, _endpoints = fabric
    sysctls = {
        f"net.ipv4.neigh.ul-a.{name}": value
        for name, value in (("base_reachable_time_ms", "1000"), ("delay_first_probe_time", "1"))
    }
    saved = {key: lab.host_exec("b", ["sysctl", "-n", key]).stdout.strip() for key in sysctls}
    old_mac = json.loads(lab.host_exec("a", ["ip", "-j", "link", "show", "dev", "ul-b"]).stdout)[0]["address"]
    new_mac = "02:00:00:00:97:01"
    assert overlay_ping(lab, "b100", C100_IP)
    try:
        lab.host_exec("b", ["sysctl", "-q", *(f"{key}={value}" for key, value in sysctls.items())])
        lab.host_exec("b", ["ip", "neigh", "flush", "dev", "ul-a"])  # the entry comes back under the short timers
        lab.host_exec("b", ["ping", "-q", "-c", "1", "-W", "1", A_UL_B_IP])
        lab.host_exec("a", ["ip", "link", "set", "dev", "ul-b", "address", new_mac])
        assert not overlay_ping(lab, "b100", C100_IP), "b's VTEP sends to a's old MAC: black-holed"

        moved = refresh_until_reachable(lab)
        # Every peer of b is behind a:ul-b: VNI 100's four and VNI 200's three, c's among them.
        assert moved.count(f"next hop {A_UL_B_IP} moved to {new_mac} (was {old_mac})") == 7, moved
        for vni in (100, 200):
            assert f"vtep: VNI {vni} peer 198.51.100.102 via ul-a: next hop {A_UL_B_IP} moved" in moved, moved
        assert lab.host_exec("b", [*ENTRY_POINT_ARGV, "--refresh-next-hops"]).stdout == "", "nothing left to follow"
        assert lab.run_tasks(RESTORE, hosts="b").changed() == 0, "what the refresher wrote is what a restore writes"
    finally:
        lab.host_exec("a", ["ip", "link", "set", "dev", "ul-b", "address", old_mac])
        back = refresh_until_reachable(lab)
        lab.host_exec("b", ["sysctl", "-q", *(f"{key}={value}" for key, value in saved.items())])
    assert f"moved to {old_mac} (was {new_mac})" in back, back
