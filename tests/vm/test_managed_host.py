"""VMs as managed hosts (tests/vm/managed.py): Debian's kernel, Debian's systemd as init, state on a disk image,
their own sshd. Real ansible-playbook runs with tests/vm/inventory: a VXLAN VTEP between the XDP backend on xh1 and
the Linux backend on xh2 through virtio-net (BUM and known unicast both ways), the router on xh1, the packet filter
on xh2. Then xh1 reboots through its own systemd (`systemctl reboot`, QEMU restarts it on the same disk) and its
data planes come back through xdpfleet-restore.service, while the next-hop refresher and the metrics timer run on
their schedule. Last, playbooks/teardown.yml leaves nothing on either VM. Slow (software emulation): in
`make test-kernels`, not `make test`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

import kernels
import lablib
import managed
import pytest
import yaml
from l2lib import BROADCAST, Capture, build_frame, new_marker, send
from managed import NS, Guest, Nic
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

pytestmark = pytest.mark.kernel_matrix

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
INVENTORY = HERE / "inventory"
PLAYBOOK = HERE / "managed_host.yml"
SUITE = os.environ.get("XDPFLEET_VMHOST_SUITE", "trixie")
# The servers behind each VTEP's access port: MACs the tests send from (the taps are their wire).
SERVER = {"xh1": "02:00:00:f2:00:01", "xh2": "02:00:00:f2:00:02"}
UNDERLAY = Nic("ul", "198.51.100.{}/30", mtu=1600)
# xh1 routes between r1 and r2; the taps' ends are its neighbours .253 and .255 (managed.Nic.neighbour).
ROUTER_NICS = (
    Nic("r1", "198.51.100.252/31", neighbour="198.51.100.253", forwarding=True),
    Nic("r2", "198.51.100.254/31", neighbour="198.51.100.255", forwarding=True),
)
UNITS = ("xdpfleet-restore.service", "xdpfleet-next-hops.service", "xdpfleet-metrics.timer")
TIMINGS: dict[str, float] = {}


def guests(kernel, work: Path) -> list[Guest]:
    def nics(index: int) -> tuple[Nic, ...]:
        underlay = Nic(UNDERLAY.name, UNDERLAY.address.format(248 + index), UNDERLAY.mtu)
        return (underlay, Nic("acc"), *(ROUTER_NICS if index == 1 else ()))

    return [Guest(f"xh{i}", i, kernel, work, nics(i)) for i in (1, 2)]


@pytest.fixture(scope="module")
def vms(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("the VM host tests need root (network namespaces, taps)")
    started = time.monotonic()
    work = tmp_path_factory.mktemp("vmhost")
    client_key = work / "id_ed25519"
    managed.sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(client_key))
    hosts = guests(kernels.kernel(SUITE), work)
    (work / "known_hosts").write_text("".join(g.stage(client_key) for g in hosts))
    os.environ["XDPFLEET_VMHOST_DIR"] = str(work)
    try:
        managed.make_network(hosts)
        for guest in hosts:
            guest.launch()
        for guest in hosts:
            guest.wait_for_sshd(guest.launched)
            state = ssh(guest, "systemctl", "is-system-running", "--wait", check=False).stdout.strip()
            assert state == "running", f"{guest.name}: {state}; failed: {ssh(guest, 'systemctl', '--failed').stdout}"
        TIMINGS["boot to sshd (s, both VMs at once)"] = max(g.boots[0] for g in hosts)
        yield {g.name: g for g in hosts}
    finally:
        for guest in hosts:
            guest.stop()
        managed.remove_network()
        os.environ.pop("XDPFLEET_VMHOST_DIR", None)
        TIMINGS["whole test (s)"] = time.monotonic() - started
        print("\nVM hosts on", SUITE, {name: round(seconds, 1) for name, seconds in TIMINGS.items()})


def ssh(guest: Guest, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """A command in the guest over its sshd (host key checked against the test's known_hosts), not through Ansible;
    `argv` quoted for the guest's shell, which parses what ssh sends."""
    work = Path(os.environ["XDPFLEET_VMHOST_DIR"])
    options = ["-o", f"UserKnownHostsFile={work}/known_hosts", "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]
    done = subprocess.run(
        ["ssh", "-i", str(work / "id_ed25519"), *options, f"root@{guest.mgmt_ip}", "--", shlex.join(argv)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if check and done.returncode:
        raise AssertionError(f"{guest.name}: {' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return done


def playbook(path: Path, **extra_vars) -> lablib.PlaybookResult:
    return lablib.run_playbook(path, INVENTORY, extra_vars or None, timeout=1800)


def run_tasks(tasks: list[dict], hosts: str) -> lablib.PlaybookResult:
    play = [{"name": "vm host tasks", "hosts": hosts, "gather_facts": False, "tasks": tasks}]
    with tempfile.NamedTemporaryFile("w", suffix=".yml", dir=os.environ["XDPFLEET_VMHOST_DIR"]) as path:
        path.write(yaml.safe_dump(play))
        path.flush()
        return playbook(Path(path.name))


def crosses(from_tap: str, to_tap: str, dst: str, src: str, udp_port: int | None = None) -> bool:
    """Whether a frame sent into one tap (towards its VM) comes out of another: a plain marked frame, or with
    `udp_port` an IPv4 UDP datagram to that port carrying the marker."""
    marker = new_marker()
    if udp_port is None:
        frame = build_frame(dst, src, marker=marker)
    else:
        ip = IP(src="198.51.100.161", dst="198.51.100.162")
        frame = bytes(Ether(dst=dst, src=src) / ip / UDP(sport=4000, dport=udp_port) / marker)
    with Capture(NS, to_tap) as capture:
        send(NS, from_tap, frame)
        # wait_for returns what it found by the timeout, possibly nothing: it never raises.
        return bool(capture.wait_for(marker, timeout=5))


def vtep_facts(host: str) -> dict:
    done = run_tasks([{"name": "read", "xdpfleet.fabric.vtep_info": {}}], hosts=host)
    assert done.rc == 0, done
    return done.result(task="read", host=host)["ansible_facts"]["xdpfleet_vtep"]


def xdp_ports(guest: Guest) -> set[str]:
    links = json.loads(ssh(guest, "ip", "-j", "link").stdout)
    return {link["ifname"] for link in links if "xdp" in link}


def check_overlay(vms: dict[str, Guest]) -> None:
    """BUM both ways, then known unicast both ways, counted as such by xh1's XDP VTEP."""
    xh1, xh2 = vms["xh1"], vms["xh2"]
    a, b = xh1.tap("acc"), xh2.tap("acc")
    assert crosses(b, a, BROADCAST, SERVER["xh2"]), "BUM from the Linux VTEP through the XDP VTEP"
    assert crosses(a, b, BROADCAST, SERVER["xh1"]), "BUM from the XDP VTEP through the Linux VTEP"
    before = vtep_facts("xh1")["vnis"]["100"]
    assert before["fdb"][SERVER["xh2"]]["remote"] == "198.51.100.250", before["fdb"]
    assert crosses(a, b, SERVER["xh2"], SERVER["xh1"]), "known unicast from the XDP VTEP"
    assert crosses(b, a, SERVER["xh1"], SERVER["xh2"]), "known unicast from the Linux VTEP"
    after = vtep_facts("xh1")["vnis"]["100"]["fdb_events"]
    assert after["known_unicast"] >= before["fdb_events"]["known_unicast"] + 2, (before, after)
    assert after["flooded"] == before["fdb_events"]["flooded"], "the unicast frames were not flooded"


def check_router(xh1: Guest) -> None:
    """A frame from r1's neighbour to r2's leaves r2 with the MACs rewritten and the TTL one less; the kernel
    forwards too, so the router's own counter must show it."""
    marker = new_marker()
    ip = IP(src="198.51.100.253", dst="198.51.100.255", ttl=9)
    frame = bytes(Ether(dst=xh1.mac("r1"), src=xh1.tap_mac("r1")) / ip / UDP(dport=7) / marker)
    with Capture(NS, xh1.tap("r2")) as capture:
        send(NS, xh1.tap("r1"), frame)
        [got] = capture.wait_for(marker, timeout=3)
    forwarded = Ether(got.data)
    assert (forwarded.src, forwarded.dst, forwarded[IP].ttl) == (xh1.mac("r2"), xh1.tap_mac("r2"), 8), forwarded


def test_the_roles_run_on_vm_hosts(vms):
    xh1, xh2 = vms["xh1"], vms["xh2"]
    started = time.monotonic()
    deployed = playbook(PLAYBOOK)
    TIMINGS["first deploy (s)"] = time.monotonic() - started
    assert deployed.rc == 0, deployed.messages() or deployed.stdout[-4000:]
    assert xdp_ports(xh1) == {"ul", "acc", "r1", "r2"} and xdp_ports(xh2) == {"acc"}
    check_overlay(vms)
    check_router(xh1)
    for guest in (xh1, xh2):
        for unit in UNITS if guest is xh1 else UNITS[:2]:
            assert ssh(guest, "systemctl", "is-enabled", unit).stdout.strip() == "enabled", (guest.name, unit)
    again = playbook(PLAYBOOK)
    assert again.rc == 0 and again.changed() == 0, again


def rule_packets(guest: Guest, rule: str, instance: str = "filter") -> int:
    """The packets a filter rule counted, on every CPU, read from its pinned maps: the slot of the active order whose
    rule is named `rule`."""

    def dump(name: str) -> list[dict]:  # bpftool -j gives each entry's BTF view as "formatted"
        entries = json.loads(ssh(guest, "bpftool", "-j", "map", "dump", "pinned", f"{maps}/{name}").stdout)
        return [entry.get("formatted", entry) for entry in entries]

    maps = f"/sys/fs/bpf/xdpfleet/{instance}/maps"
    [generation] = [a["value"] for a in dump("filter_active")]
    [order] = [o["value"] for o in dump("filter_order") if o["key"] == generation]
    names = {r["key"]: bytes(r["value"]["name"]).rstrip(b"\0").decode() for r in dump("filter_rules")}
    [slot] = [slot for slot in order["slot"][: order["count"]] if names[slot] == rule]
    [entry] = [c for c in dump("filter_counters") if c["key"] == slot]
    return sum(cpu["value"]["packets"] for cpu in entry["values"])


def test_the_filter_on_the_peer_drops_what_its_rule_says(vms):
    """xh2's filter drops what its server sends to UDP port 9, and only that: the frame that does not cross is the
    one its rule counted."""
    xh2 = vms["xh2"]
    a, b = vms["xh1"].tap("acc"), xh2.tap("acc")
    before = rule_packets(xh2, "discard")
    assert crosses(b, a, SERVER["xh1"], SERVER["xh2"], udp_port=10)
    assert rule_packets(xh2, "discard") == before
    assert not crosses(b, a, SERVER["xh1"], SERVER["xh2"], udp_port=9)
    assert rule_packets(xh2, "discard") == before + 1


def journal(guest: Guest, unit: str) -> str:
    return ssh(guest, "journalctl", "-b", "-o", "cat", "--no-pager", "-u", unit).stdout


def test_a_reboot_by_systemd_brings_the_data_planes_back_through_the_units(vms):
    xh1 = vms["xh1"]
    boot_id = ssh(xh1, "cat", "/proc/sys/kernel/random/boot_id").stdout
    ssh(xh1, "systemctl", "reboot")
    asked = time.monotonic()
    xh1.wait_for_sshd_gone()
    xh1.wait_for_sshd(asked)
    assert ssh(xh1, "systemctl", "is-system-running", "--wait", check=False).stdout.strip() == "running", ssh(
        xh1, "systemctl", "--failed"
    ).stdout
    TIMINGS["reboot round trip: systemctl reboot to running (s)"] = time.monotonic() - asked
    assert ssh(xh1, "cat", "/proc/sys/kernel/random/boot_id").stdout != boot_id, "a new boot"
    assert xh1.process.poll() is None, "the same QEMU: the guest reset, on the same disk"

    restored = journal(xh1, "xdpfleet-restore.service")
    for instance in ("vtep (vtep): restored", "router (router): restored"):
        assert instance in restored, restored
    state = ssh(xh1, "systemctl", "show", "-p", "ActiveState,Result", "xdpfleet-restore.service").stdout.split()
    assert state == ["Result=success", "ActiveState=active"], state
    pins = ssh(xh1, "find", "/sys/fs/bpf/xdpfleet", "-maxdepth", "2").stdout.split()
    assert {"/sys/fs/bpf/xdpfleet/vtep", "/sys/fs/bpf/xdpfleet/router"} <= set(pins), pins
    assert xdp_ports(xh1) == {"ul", "acc", "r1", "r2"}
    check_overlay(vms)
    check_router(xh1)

    # The refresher runs since the boot, and the metrics timer fires every 15 s: two runs a timer interval apart.
    assert ssh(xh1, "systemctl", "is-active", "xdpfleet-next-hops.service").stdout.strip() == "active"
    timers = ssh(xh1, "systemctl", "list-timers", "--all", "--no-legend", "xdpfleet-metrics.timer").stdout
    assert "xdpfleet-metrics.service" in timers, timers
    deadline = time.monotonic() + 120
    while journal(xh1, "xdpfleet-metrics.service").count("Finished xdpfleet-metrics.service") < 2:
        assert time.monotonic() < deadline, journal(xh1, "xdpfleet-metrics.service")
        time.sleep(5)
    metrics = ssh(xh1, "cat", "/var/lib/prometheus/node-exporter/xdpfleet.prom").stdout
    # The metrics name an instance by kind and name, a VTEP's counters by vtep=<name>: read from its pins again.
    assert 'xdpfleet_instance_read_success{kind="vtep",name="vtep"} 1' in metrics, metrics[:2000]
    assert 'xdpfleet_vtep_vni_rx_packets_total{vtep="vtep",vni="100"}' in metrics, metrics[:2000]


def test_teardown_leaves_nothing(vms):
    gone = playbook(REPO / "playbooks" / "teardown.yml")
    assert gone.rc == 0, gone.messages() or gone.stdout[-4000:]
    for guest in vms.values():
        assert xdp_ports(guest) == set(), guest.name
        pins = ssh(guest, "find", "/sys/fs/bpf", "-mindepth", "1").stdout.split()
        assert not [p for p in pins if "xdpfleet" in p], (guest.name, pins)
        # The C sources and the compile cache stay (playbooks/teardown.yml says so); no record of an instance does.
        records = ssh(
            guest,
            "find",
            "/var/lib/xdpfleet",
            "(",
            "-path",
            "/var/lib/xdpfleet/cache",
            "-o",
            "-path",
            "/var/lib/xdpfleet/src",
            ")",
            "-prune",
            "-o",
            "-name",
            "*.json",
            "-print",
        ).stdout.split()
        assert records == [], (guest.name, records)
        links = json.loads(ssh(guest, "ip", "-j", "-d", "link").stdout)
        kinds = {link["ifname"]: link.get("linkinfo", {}).get("info_kind") for link in links}
        assert not {name for name, kind in kinds.items() if kind in ("vxlan", "bridge")}, (guest.name, kinds)
        active = ssh(guest, "systemctl", "list-units", "--no-legend", "--plain", "xdpfleet-*").stdout
        assert active.strip() == "", (guest.name, active)
    again = playbook(REPO / "playbooks" / "teardown.yml")
    assert again.rc == 0 and again.changed() == 0, again
