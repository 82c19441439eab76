"""The network-namespace lab, through the real playbook (playbooks/lab.yml) and real SSH.

Order matters: the first tests use the session lab as it is; the lifecycle tests after them take it down, refuse
to start it, and leave it up again (restore_lab), so test modules that run later find it up.
"""

import ipaddress
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lablib import Lab, lab_spec, lab_state, labutil, standard_topology

LAB_MODULE = "xdpfleet.fabric.lab"
UDP_RECEIVER = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.bind((sys.argv[1], 9000)); s.settimeout(5); print('ready', flush=True)\n"
    "print(s.recv(100).decode(), flush=True)\n"
)
UDP_SENDER = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET, socket.SOCK_DGRAM)\n"
    "s.sendto(sys.argv[2].encode(), (sys.argv[1], 9000))\n"
)


def _ok(result):
    assert result.rc == 0 and result.failed() == 0, str(result)
    return result


def _wait_dead(pids, timeout=10.0):
    deadline = time.monotonic() + timeout
    while any(lab_state.is_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"pids {pids} still alive"
        time.sleep(0.05)


def _nothing_left(lab: Lab, allowed_links=()):
    assert lab.namespaces() == []
    assert sorted(lab.root_links()) == sorted(allowed_links)
    assert not os.path.exists(lab.lab_dir)


@pytest.fixture(scope="module")
def restore_lab(lab):
    """For tests that take the session lab down: bring it up again when this module is done."""
    yield lab
    if lab.health():
        _ok(lab.up())


# ------------------------------------------------------------------------------------------ the running lab


def test_hosts_answer_over_ssh_with_their_own_hostname(lab):
    result = _ok(lab.run_tasks([{"name": "hostname", "ansible.builtin.command": "hostname", "changed_when": False}]))
    for host in ("a", "b"):
        assert result.result("hostname", host)["stdout"] == host
        # Out of band, the host is its own UTS and PID namespace, with sshd as PID 1 and no default route.
        assert lab.host_exec(host, ["hostname"]).stdout.strip() == host
        assert lab.host_exec(host, ["cat", "/proc/1/comm"]).stdout.strip() == "sshd"
        assert "default" not in lab.host_exec(host, ["ip", "route"]).stdout


def test_lab_dir_is_private_and_sshd_checks_the_key_modes(lab):
    # The hosts' sshd (root) trusts the key in the lab dir: only root may reach it, and sshd itself checks that no one
    # else can write the key file it reads or a directory above it (the hosts answer over SSH above with this).
    st = os.lstat(lab.lab_dir)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == 0
    for host in ("a", "b"):
        config = Path(lab.lab_dir, "hosts", host, "sshd_config").read_text().splitlines()
        assert "StrictModes yes" in config and f"AuthorizedKeysFile {labutil.AUTHORIZED_KEYS}" in config
        effective = lab.host_exec(host, ["/usr/sbin/sshd", "-T", "-f", f"{lab.lab_dir}/hosts/{host}/sshd_config"])
        assert "strictmodes yes" in effective.stdout.splitlines()


def test_each_host_has_its_own_bpffs_shared_by_its_sessions(lab):
    pin = f"/sys/fs/bpf/lab-test-{lab.prefix}"
    create = f"bpftool map create {pin} type array key 4 value 4 entries 1 name labtest"
    tasks = [
        {"name": "pin a map", "ansible.builtin.command": create, "when": "inventory_hostname == 'a'"},
        # A pinned map cannot be read as a file (EIO): no checksum, mime type or attributes.
        {
            "name": "look for the pin",
            "ansible.builtin.stat": {"path": pin, "get_checksum": False, "get_mime": False, "get_attributes": False},
        },
    ]
    result = _ok(lab.run_tasks(tasks))
    try:
        # The stat ran in a later SSH session than the pin: a host's sessions share its bpffs.
        assert result.result("look for the pin", "a")["stat"]["exists"]
        assert not result.result("look for the pin", "b")["stat"]["exists"]
        assert lab.host_exec("a", ["test", "-e", pin], check=False).returncode == 0
        assert not os.path.exists(pin)  # not in the root namespace either
    finally:
        lab.host_exec("a", ["rm", "-f", pin])


def test_writes_under_var_stay_private_to_the_host(lab):
    path = f"/var/lib/xdpfleet/lab-test-{lab.prefix}"
    tasks = [
        {
            "name": "state dir on a",
            "ansible.builtin.file": {"path": "/var/lib/xdpfleet", "state": "directory", "mode": "0755"},
            "when": "inventory_hostname == 'a'",
        },
        {
            "name": "write on a",
            "ansible.builtin.copy": {"dest": path, "content": "only on a\n", "mode": "0644"},
            "when": "inventory_hostname == 'a'",
        },
        {"name": "look for the file", "ansible.builtin.stat": {"path": path}},
    ]
    result = _ok(lab.run_tasks(tasks))
    assert result.result("write on a", "a")["changed"]
    assert result.result("look for the file", "a")["stat"]["exists"]
    assert not result.result("look for the file", "b")["stat"]["exists"]
    assert not os.path.exists(path)
    assert lab.host_exec("a", ["cat", path]).stdout == "only on a\n"
    # The write landed in a's overlay layer in the lab dir.
    upper = f"{lab.lab_dir}/hosts/a/overlay/var/upper/lib/xdpfleet/lab-test-{lab.prefix}"
    assert Path(upper).read_text() == "only on a\n"


@pytest.mark.parametrize("dst", ["198.51.100.70", "2001:db8:64:2::2"])
def test_endpoint_traffic_crosses_host_a(lab, dst):
    def p1_rx():
        return int(lab.host_exec("a", ["cat", "/sys/class/net/p1/statistics/rx_packets"]).stdout)

    before = p1_rx()
    netns = lab_spec.ns_name(lab.prefix, "e2")
    receiver = subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, "-c", UDP_RECEIVER, dst],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout.readline().strip() == "ready", receiver.stderr.read()
        lab.endpoint_exec("e1", [sys.executable, "-c", UDP_SENDER, dst, "through a"])
        out, err = receiver.communicate(timeout=10)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    assert out.strip() == "through a", err
    assert p1_rx() > before


def test_back_to_back_link_has_two_queues_on_both_ends(lab):
    for host in ("a", "b"):
        queues = lab.host_exec(host, ["ls", "/sys/class/net/p3/queues"]).stdout.split()
        assert sorted(queues) == ["rx-0", "rx-1", "tx-0", "tx-1"]


def test_second_present_changes_nothing(lab):
    result = _ok(lab.up(diff=True))
    assert result.changed() == 0, str(result)
    lab_result = result.result(action=LAB_MODULE)
    assert lab_result["changed"] is False and lab_result["reasons"] == []
    assert set(lab_result["hosts"]) == {h["name"] for h in lab.hosts}
    assert _ok(lab.up(check=True)).changed() == 0


# ------------------------------------------------------------------------------------------ lifecycle


def test_absent_removes_everything_and_twice_changes_nothing(restore_lab):
    lab = restore_lab
    pids = [pid for host in ("a", "b") for pid in lab.host_pids(host)]
    check = _ok(lab.down(check=True))
    assert check.changed("localhost") == 1 and lab.namespaces()  # check mode removed nothing

    result = _ok(lab.down())
    assert result.changed("localhost") == 1
    removed = result.result(action=LAB_MODULE)["removed"]
    assert set(pids) <= set(removed["processes"])
    assert len(removed["namespaces"]) == len(lab.hosts) + len(lab.endpoints)
    _wait_dead(pids, timeout=1)
    _nothing_left(lab)
    assert _ok(lab.down()).changed() == 0


def test_mgmt_subnet_clash_is_refused_before_anything_is_made(restore_lab):
    lab = restore_lab
    _ok(lab.down())
    clash = f"{lab.prefix}-clash"
    subnet = ipaddress.ip_network(lab.mgmt_subnet)
    address = str(subnet.broadcast_address - 1)  # inside the subnet (also a /28) and no host's address
    from pyroute2 import IPRoute  # a bridge: this kernel has no dummy links

    with IPRoute() as ipr:
        ipr.link("add", ifname=clash, kind="bridge")
        ipr.addr("add", index=ipr.link_lookup(ifname=clash)[0], address=address, prefixlen=subnet.prefixlen)
    try:
        result = lab.up()
        assert result.rc != 0
        message = result.messages()
        assert clash in message and str(subnet) in message and address in message, message
        _nothing_left(lab, allowed_links=[clash])
    finally:
        with IPRoute() as ipr:
            ipr.link("del", index=ipr.link_lookup(ifname=clash)[0])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda t: t["links"][0]["ends"][1].update(node="e9"), "links[0].ends[1].node"),
        (lambda t: t["links"][1]["ends"][0].update(ifname="p1"), "links[1].ends[0].ifname"),
        (lambda t: t["links"][2]["ends"][1].update(ifname="averyveryverylongname"), "links[2].ends[1].ifname"),
        (lambda t: t["links"][0]["ends"][0]["addresses"].append("192.0.2.9/24"), "links[0].ends[0].addresses[2]"),
        (lambda t: t["hosts"][1].update(name="averylonghostname"), "hosts[1].name"),
        (lambda t: t["hosts"][1].update(mgmt_ip="198.51.100.250"), "hosts[1].mgmt_ip"),
        (lambda t: t["endpoints"][0]["routes"][0].update(via="203.0.113.1"), "endpoints[0].routes[0].via"),
        (lambda t: t.update(mgmt_subnet="192.0.2.0/27"), "mgmt_subnet"),
    ],
)
def test_invalid_topology_errors_name_the_field(change, field):
    params = {"prefix": "xt", "mgmt_subnet": "198.51.100.128/27", **standard_topology()}
    for i, host in enumerate(params["hosts"]):
        host["mgmt_ip"] = f"198.51.100.{130 + i}"
    change(params)
    with pytest.raises(lab_spec.LabError, match=f"^{re.escape(field)}: "):
        lab_spec.normalize(params)


def test_invalid_topology_fails_the_playbook_before_anything_is_made(restore_lab, tmp_path):
    lab = restore_lab
    _ok(lab.down())
    bad = Lab.standard(lab.prefix, lab.mgmt_subnet, tmp_path / "unknown-node")
    bad.links[0]["ends"][1]["node"] = "e9"
    bad.write_inventory()
    result = bad.up()
    assert result.rc != 0 and "links[0].ends[1].node: 'e9' is not a host or endpoint" in result.messages()
    _nothing_left(lab)

    # Wrong types stop at the role's argument spec, also naming the field.
    bad = Lab.standard(lab.prefix, lab.mgmt_subnet, tmp_path / "bad-type")
    bad.links[2]["queues"] = "two"
    bad.write_inventory()
    result = bad.up()
    assert result.rc != 0 and "queues" in result.messages(), result.messages()
    _nothing_left(lab)


def test_stale_lab_is_cleaned_up_by_absent_and_by_present(restore_lab):
    lab = restore_lab

    def kill_hosts():
        # What a killed session leaves: the hosts' processes gone, namespaces, links and files still there.
        pids = [lab.host_pids(host) for host in ("a", "b")]
        for _, sshd in pids:
            os.kill(sshd, signal.SIGKILL)
        _wait_dead([pid for pair in pids for pid in pair])
        assert lab.namespaces() and lab.root_links() and os.path.exists(lab.lab_dir)
        assert any("not running" in problem for problem in lab.health())
        return pids

    _ok(lab.up())
    kill_hosts()
    result = _ok(lab.down())
    assert result.changed("localhost") == 1
    _nothing_left(lab)

    _ok(lab.up())
    old = kill_hosts()
    result = _ok(lab.up())
    assert result.changed("localhost") == 1
    lab_result = result.result(action=LAB_MODULE)
    assert any("not running" in reason for reason in lab_result["reasons"])
    assert lab_result["removed"]["namespaces"]  # the stale remains went first
    assert lab.health() == []
    assert all(lab.host_pids(host) != pair for host, pair in zip(("a", "b"), old, strict=True))
    hostname = _ok(lab.run_tasks([{"name": "hostname", "ansible.builtin.command": "hostname"}]))
    assert [hostname.result("hostname", h)["stdout"] for h in ("a", "b")] == ["a", "b"]
