"""The rolling VTEP rollout of playbooks/vtep.yml on the test lab: batches with a canary, a health check after each
batch (roles/vtep/tasks/health.yml, probes declared in inventories/lab/host_vars), check mode with --diff, a fleet
the controller refuses (nothing on any host changes), and a broken host that stops the rollout while the batches
already done keep forwarding, and probes derived from the peers when none are given, which stop the rollout at a host
whose peer has a wrong next-hop MAC.

With the canary and vtep_serial=2 the lab's five VTEPs (inventory order a, b, c, d, l) go in three batches:
[a], [b, c], [d, l].
"""

import contextlib
import itertools
import re

import pytest
import yaml
from l2lib import bum_probe, ports
from lablib import printed_diff, split_promisc

PLAYBOOK = "playbooks/vtep.yml"
ROLLOUT = {"vtep_canary": True, "vtep_serial": 2}
BATCHES = [["a"], ["b", "c"], ["d", "l"]]
VTEPS = [host for batch in BATCHES for host in batch]
CONFIGURE = {
    "xdp": "xdpfleet.fabric.vtep : Configure the XDP VTEP",
    "linux": "xdpfleet.fabric.vtep : Configure the Linux kernel VTEP",
}
HEALTH = "xdpfleet.fabric.vtep : Require every probe answered and the counters grown"
FABRIC_CHECK = "Derive every VTEP's document and check the fleet"
LAB_CHECK = "Check that each lab host of this run is running"
PEERS_MAP = "/sys/fs/bpf/xdpfleet/vtep/maps/tunnel_peers"
WRONG_MAC = "02:00:00:00:de:ad"


@pytest.fixture(scope="module")
def rollout_lab(lab):
    yield lab
    gone = lab.run_playbook(PLAYBOOK, extra_vars={"vtep_state": "absent"})
    assert gone.rc == 0, gone


@contextlib.contextmanager
def host_vars_changed(lab, host, change):
    """The lab inventory's host_vars/<host>.yml with `change(vars)` applied, put back afterwards."""
    path = lab.inventory / "host_vars" / f"{host}.yml"
    original = path.read_text()
    host_vars = yaml.safe_load(original)
    change(host_vars)
    path.write_text(yaml.safe_dump(host_vars, sort_keys=False))
    try:
        yield
    finally:
        path.write_text(original)


def configured(result, host):
    """Index of the host's configure record in the run (the order tasks finished in)."""
    backend = "linux" if host == "l" else "xdp"
    return next(i for i, t in enumerate(result.tasks) if t["host"] == host and t["task"] == CONFIGURE[backend])


def health_checked(result, host):
    return next(i for i, t in enumerate(result.tasks) if t["host"] == host and t["task"] == HEALTH)


def ping(lab, src, dst_ip):
    return lab.endpoint_exec(src, ["ping", "-q", "-c", "3", "-i", "0.2", "-W", "2", dst_ip], check=False).returncode


def test_rollout_in_batches_with_a_health_check_after_each(rollout_lab):
    lab = rollout_lab
    first = lab.run_playbook(PLAYBOOK, extra_vars=ROLLOUT)
    assert first.rc == 0 and first.failed() == 0, first
    for host in VTEPS:
        assert first.result(task=HEALTH, host=host)["msg"].startswith(f"VTEP {host} healthy"), first
    assert "counters grew" in first.result(task=HEALTH, host="a")["msg"]
    # Every host of a batch is health-checked before any host of the next batch is configured.
    for done, following in itertools.pairwise(BATCHES):
        assert max(health_checked(first, h) for h in done) < min(configured(first, h) for h in following)
    assert set(first.stats) == {*VTEPS, "localhost"}  # localhost: the lab pre-flight (playbooks/lab_check.yml)
    # A re-run changes nothing: test_vtep.py's first test runs the same playbook twice.


def test_check_mode_shows_the_change_and_changes_nothing(rollout_lab):
    lab = rollout_lab
    endpoints = ports(lab.prefix, ["a100", "c100"])

    def c100_leaves_vni_100(host_vars):
        host_vars["fabric_vtep"]["vnis"][0]["access_ports"] = []

    with host_vars_changed(lab, "c", c100_leaves_vni_100):
        check = lab.run_playbook(PLAYBOOK, extra_vars=ROLLOUT, check=True, diff=True)
    assert check.rc == 0, check
    assert check.result(task=CONFIGURE["xdp"], host="c")["changes"] == [
        "VNI 100: - access port acc100", "acc100: promisc off (as before the VTEP served it)"
    ]
    # --diff prints it, and that neither of the programs of c (a TC VTEP) would run on acc100 any more
    flags, (removed, *detached) = split_promisc(printed_diff(check.stdout, "vtep vtep"))
    assert flags == ["+acc100: promisc off", "-acc100: promisc on"], flags
    assert removed == "-VNI 100: access port acc100"
    assert sorted(re.sub(r" tag [0-9a-f]{16} ", " tag T ", line) for line in detached) == [
        "-acc100 (tc): vtep_replicate tag T tc",
        "-acc100: vtep_ingress_tc tag T native",
    ], detached
    for host in ("a", "b", "d"):
        assert check.result(task=CONFIGURE["xdp"], host=host)["changes"] == []
    assert check.results(task=HEALTH) == []  # no probes in check mode
    assert "c100" in bum_probe(endpoints["a100"], {"c100": endpoints["c100"]}, timeout=2)  # still a member
    again = lab.run_playbook(PLAYBOOK)
    assert again.rc == 0, again
    assert [(t["host"], t["task"]) for t in again.tasks if t["changed"]] == [], again


def test_a_refused_fleet_leaves_the_running_vteps_as_they_were(rollout_lab):
    lab = rollout_lab
    before = {host: lab.host_exec(host, ["bpftool", "-j", "map", "dump", "pinned", PEERS_MAP]).stdout for host in "ab"}

    def vni_not_in_the_fabric(host_vars):
        host_vars["fabric_vtep"]["vnis"][1]["vni"] = 300

    with host_vars_changed(lab, "c", vni_not_in_the_fabric):
        refused = lab.run_playbook(PLAYBOOK, extra_vars=ROLLOUT)
    assert refused.rc != 0, refused
    assert "- c: fabric_vtep.vnis[1].vni: VNI 300 is not in fabric_vnis" in refused.messages(), refused
    assert [t["task"] for t in refused.tasks] == [LAB_CHECK, FABRIC_CHECK], "nothing ran on any host"
    assert refused.changed() == 0
    assert ping(lab, "c200", "198.51.100.177") == 0  # c still serves VNI 200
    assert {h: lab.host_exec(h, ["bpftool", "-j", "map", "dump", "pinned", PEERS_MAP]).stdout for h in "ab"} == before


def test_a_broken_host_stops_the_rollout_and_a_fixed_one_converges(rollout_lab):
    lab = rollout_lab

    def unknown_access_port(host_vars):
        host_vars["fabric_vtep"]["vnis"][0]["access_ports"] = ["nope0"]

    with host_vars_changed(lab, "b", unknown_access_port):
        broken = lab.run_playbook(PLAYBOOK, extra_vars=ROLLOUT)
    assert broken.rc != 0, broken
    assert broken.stats["b"]["failed"] == 1, broken
    assert "interface nope0 does not exist" in broken.messages()
    assert re.search(r"^b\s+: ok=\d+ .*failed=1 ", broken.stdout, re.M), broken  # the recap names b
    # The last batch never started; the first one was done and keeps forwarding.
    assert "d" not in broken.stats and "l" not in broken.stats
    assert broken.results(host="d") == [] and broken.results(host="l") == []
    assert broken.stats["a"]["failed"] == 0
    assert ping(lab, "alocal", "198.51.100.161") == 0  # a100, through a's XDP VTEP
    assert ping(lab, "c100", "198.51.100.161") == 0  # b's batch mate ran the same tasks, unharmed
    assert ping(lab, "b100", "198.51.100.161") == 0  # b's refused document changed nothing: its VTEP still works

    # Without vtep_health_probes the check derives them from the peers (roles/vtep/tasks/health.yml): b passes
    # them; c, whose peer b has a wrong next-hop MAC, fails them, and the rollout stops before d.
    def derived_probes(host_vars):
        host_vars["vtep_health_probes"] = []

    def derived_probes_and_a_wrong_mac(host_vars):
        derived_probes(host_vars)
        # VNI 100's peers written by hand (they replace the derived ones): peer b (198.51.100.98) with a wrong MAC
        host_vars["fabric_vtep"]["vnis"][0]["peers"] = [
            {"ip": "198.51.100.101", "via": "ul-a"},
            {"ip": "198.51.100.98", "via": "ul-a", "mac": WRONG_MAC},
            {"ip": "198.51.100.106", "via": "ul-a"},
            {"ip": "198.51.100.110", "via": "ul-a"},
        ]

    with host_vars_changed(lab, "b", derived_probes), host_vars_changed(lab, "c", derived_probes_and_a_wrong_mac):
        wrong = lab.run_playbook(PLAYBOOK, extra_vars={"vtep_hosts": "b:c:d", "vtep_serial": 1})
    assert wrong.rc != 0 and wrong.stats["c"]["failed"] == 1, wrong
    assert "d" not in wrong.stats, "the rollout stopped at c"
    assert wrong.result(task=HEALTH, host="b")["msg"].startswith("VTEP b healthy: 4 derived probe(s)"), wrong
    unhealthy = wrong.result(task=HEALTH, host="c")["msg"]
    assert unhealthy.startswith("VTEP c is not healthy:"), unhealthy
    assert (
        f"probe c -> peer 198.51.100.98 (VNI 100 via ul-a): tunnel_peers sends to {WRONG_MAC}, "
        "but next hop 198.51.100.101 is at "
    ) in unhealthy, unhealthy
    assert "VNI 200" not in unhealthy, "only the peer given the wrong MAC"

    fixed = lab.run_playbook(PLAYBOOK, extra_vars=ROLLOUT)
    assert fixed.rc == 0 and fixed.failed() == 0, fixed
    assert set(fixed.stats) == {*VTEPS, "localhost"}  # localhost: the lab pre-flight (playbooks/lab_check.yml)
    for host in VTEPS:
        assert fixed.result(task=HEALTH, host=host)["msg"].startswith(f"VTEP {host} healthy"), fixed
