"""A fleet of XDP VTEPs on the lab, built from the fabric model: the rolling rollout of playbooks/vtep.yml, its
idempotent re-run, and a host that becomes unreachable in the middle of a rollout. `make scale` runs them with 12
VTEPs (XDPFLEET_SCALE_VTEPS sets the count, up to 30; 6 without it); `make test` leaves them out (minutes of
rollouts; test_rollout.py rolls out the lab in batches).
Wall times go to stdout (pytest -s) and to <basetemp>/scale-timings.txt (.pytest-tmp/ by default).

The inventory is the fabric model (plugins/module_utils/fabric): fabric_vnis in group vars (8 VNIs), and per VTEP
a fabric_vtep with its ports only; the controller derives every peer (a full mesh per VNI, through the hub).
Topology (built here, not the default inventory's): hosts v01..vNN and a hub that only routes the underlay.
  underlay   vNN:ul-hub 198.51.100.(128+4(N-1)+2)/30 -- hub:ul-vNN .(128+4(N-1)+1), MTU 1600; every VTEP routes
             198.51.100.128/25 via the hub, so all VTEPs reach each other (198.51.100.0/25 when the management
             subnet is in 198.51.100.128/25)
  VNI 100    endpoint vNN-100 on vNN:acc100, 198.51.100.(64+N)/27; v01 also has v01-local on acclocal
  VNI 200    endpoint vNN-200 on vNN:acc200, 198.51.100.(96+N)/27, on v01, v04, v07, ...
  VNI 300..800  every VTEP's trunk0, VID 30..80 (the VNI / 10); trunk0's other end is hub:tr-vNN, which has no
             address (the hub drops what comes out of the trunks: these VNIs are there for the size of the fabric)
The mid-rollout test commissions a VTEP: vnew, an inventory host outside the lab (not in lab_hosts, never reached)
whose fabric_vtep serves VNI 100 at the underlay's last address (198.51.100.254), so every VTEP gets it as a new
peer.
Data addresses exist only inside this lab's namespaces; the management subnet (default 198.51.100.32/27, prefix xs)
is the only thing that must be unique on the machine. XDPFLEET_SCALE_LAB_PREFIX / XDPFLEET_SCALE_LAB_SUBNET
override them.
"""

import ipaddress
import math
import os
import signal
import threading
import time

import pytest
import yaml
from lablib import REPO, Lab, run_playbook

PREFIX = os.environ.get("XDPFLEET_SCALE_LAB_PREFIX", "xs")
MGMT_SUBNET = os.environ.get("XDPFLEET_SCALE_LAB_SUBNET", "198.51.100.32/27")
SCALE_RUN = "XDPFLEET_SCALE_VTEPS" in os.environ  # make scale
VTEPS = [f"v{n:02d}" for n in range(1, int(os.environ.get("XDPFLEET_SCALE_VTEPS", "6")) + 1)]
VNI200_MEMBERS = VTEPS[::3]
# 32 /30s, the last one the commissioned VTEP's: the half of 198.51.100.0/24 that the management subnet is not in (a
# VTEP's route to the underlay must not take its management addresses). In the other half it shares addresses with
# the endpoints, harmlessly: those live in namespaces of their own, which no underlay address or route reaches.
UNDERLAY = next(
    net
    for net in reversed(list(ipaddress.ip_network("198.51.100.0/24").subnets(1)))
    if not net.overlaps(ipaddress.ip_network(MGMT_SUBNET))
)
TRUNK_VNIS = [300, 400, 500, 600, 700, 800]
FABRIC_VNIS = [{"vni": 100, "name": "servers"}, {"vni": 200, "name": "vms"}] + [
    {"vni": vni, "name": f"trunk-vid{vni // 10}"} for vni in TRUNK_VNIS
]
PLAYBOOK = "playbooks/vtep.yml"
# One canary, then half of the fleet at a time: with 12 VTEPs, batches [v01], [v02..v07], [v08..v12].
SERIAL = len(VTEPS) // 2
ROLLOUT = {"vtep_hosts": "lab_hosts:!hub", "vtep_canary": True, "vtep_serial": SERIAL}
LAST_BATCH = VTEPS[1 + SERIAL :]
CONFIGURE = "xdpfleet.fabric.vtep : Configure the XDP VTEP"
HEALTH = "xdpfleet.fabric.vtep : Require every probe answered and the counters grown"
# The tunnel address of a VTEP being commissioned (inventory host NEW_VTEP): every VTEP gets it as a new peer in the
# mid-rollout test.
NEW_VTEP = "vnew"
NEW_PEER = str(UNDERLAY.broadcast_address - 1)
assert len(VTEPS) <= 30, "XDPFLEET_SCALE_VTEPS: at most 30 (the VNI 100 endpoints' /27, the underlay's /30s)"
TIMINGS = {}


def underlay(n: int) -> tuple[str, str]:
    """(hub side, VTEP side) addresses of vNN's underlay /30."""
    base = UNDERLAY.network_address + 4 * (n - 1)
    return str(base + 1), str(base + 2)


def vni100_ip(n: int) -> str:
    return f"198.51.100.{64 + n}"


V01_LOCAL_IP = f"198.51.100.{64 + len(VTEPS) + 1}"


def topology() -> dict:
    hosts = [{"name": "hub", "forwarding": True}]
    endpoints, links = [], []
    for n, name in enumerate(VTEPS, start=1):
        hub_ip, vtep_ip = underlay(n)
        hosts.append({"name": name, "routes": [{"to": str(UNDERLAY), "via": hub_ip}]})
        links.append(
            {
                "mtu": 1600,
                "ends": [
                    {"node": "hub", "ifname": f"ul-{name}", "addresses": [f"{hub_ip}/30"]},
                    {"node": name, "ifname": "ul-hub", "addresses": [f"{vtep_ip}/30"]},
                ],
            }
        )
        links.append({"ends": [{"node": name, "ifname": "trunk0"}, {"node": "hub", "ifname": f"tr-{name}"}]})
        access = [("100", "acc100", f"{vni100_ip(n)}/27")]
        if name in VNI200_MEMBERS:
            access.append(("200", "acc200", f"198.51.100.{96 + n}/27"))
        if n == 1:
            access.append(("local", "acclocal", f"{V01_LOCAL_IP}/27"))
        for suffix, port, address in access:
            endpoints.append({"name": f"{name}-{suffix}"})
            links.append(
                {
                    "ends": [
                        {"node": name, "ifname": port},
                        {"node": f"{name}-{suffix}", "ifname": "eth0", "addresses": [address]},
                    ]
                }
            )
    return {"hosts": hosts, "endpoints": endpoints, "links": links}


def vtep_host_vars(name: str) -> dict:
    """vNN's part of the fabric model (its ports; the peers are derived) and its health probes: every VTEP pings
    v01's VNI 100 endpoint, the canary v01 pings it from its local endpoint."""
    n = VTEPS.index(name) + 1
    vnis = [{"vni": 100, "access_ports": ["acc100", "acclocal"] if n == 1 else ["acc100"]}]
    if name in VNI200_MEMBERS:
        vnis.append({"vni": 200, "access_ports": ["acc200"]})
    vnis += [{"vni": vni, "trunks": [{"port": "trunk0", "vid": vni // 10}]} for vni in TRUNK_VNIS]
    source = f"{PREFIX}-v01-local" if n == 1 else f"{PREFIX}-{name}-100"
    return {
        "fabric_vtep": fabric_vtep(f"{underlay(n)[1]}/30", vnis),
        "vtep_health_probes": [{"from": "localhost", "netns": source, "to": vni100_ip(1)}],
    }


def fabric_vtep(local_ip: str, vnis: list[dict]) -> dict:
    return {
        "tunnel_ports": [{"port": "ul-hub", "local_ip": local_ip}],
        "routes": [{"to": str(UNDERLAY), "via": "ul-hub"}],
        "mtu": {"ul-hub": 1600},
        "vnis": vnis,
    }


def write_inventory(lab: Lab, commissioned: bool = False) -> None:
    """The fabric: its VNIs in group vars (in place of the default inventory's), each VTEP's host vars, and with
    `commissioned` the new VTEP NEW_VTEP, an inventory host outside the lab."""
    fabric = {"fabric_vnis": FABRIC_VNIS, "fabric_vteps": VTEPS + [NEW_VTEP] * commissioned, "vtep_backend": "xdp"}
    (lab.inventory / "group_vars" / "all" / "vtep.yml").write_text(yaml.safe_dump(fabric, sort_keys=False))
    for name in VTEPS:
        path = lab.inventory / "host_vars" / f"{name}.yml"
        path.write_text(yaml.safe_dump(vtep_host_vars(name), sort_keys=False))
    hosts_yml = lab.inventory / "hosts.yml"
    hosts = yaml.safe_load(hosts_yml.read_text())
    hosts["all"].pop("hosts", None)
    if commissioned:
        new_vtep = {"fabric_vtep": fabric_vtep(f"{NEW_PEER}/30", [{"vni": 100, "access_ports": ["acc100"]}])}
        hosts["all"]["hosts"] = {NEW_VTEP: new_vtep}
    hosts_yml.write_text(yaml.safe_dump(hosts, sort_keys=False))


def timed_rollout(lab: Lab, label: str, **kwargs):
    start = time.monotonic()
    # A generous timeout: this machine is shared, and a loaded one takes minutes for a fleet.
    result = run_playbook(REPO / PLAYBOOK, lab.inventory, extra_vars={**ROLLOUT, **kwargs}, timeout=3000)
    TIMINGS[label] = time.monotonic() - start
    return result


@pytest.fixture(scope="module")
def scale_lab(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces, mounts, veth, sshd)")
    lab = Lab(PREFIX, MGMT_SUBNET, workdir=tmp_path_factory.mktemp("scale"), **topology())
    write_inventory(lab)
    down = lab.down()
    assert down.rc == 0, f"removing a leftover {PREFIX} lab failed:\n{down}"
    try:
        start = time.monotonic()
        result = lab.up()
        TIMINGS["lab up"] = time.monotonic() - start
        assert result.rc == 0, f"lab up failed:\n{result}"
        yield lab
    finally:
        result = lab.down()
        report = tmp_path_factory.getbasetemp() / "scale-timings.txt"
        forks = os.environ.get("ANSIBLE_FORKS", "16 (ansible.cfg)")
        lines = [f"{len(VTEPS)} VTEPs + 1 hub, {len(FABRIC_VNIS)} VNIs, serial [1, {SERIAL}], forks {forks}"]
        lines += [f"{label}: {seconds:.1f} s" for label, seconds in TIMINGS.items()]
        report.write_text("\n".join(lines) + "\n")
        print("\n" + "\n".join(lines) + f"\n(written to {report})")
        assert result.rc == 0, f"lab down failed:\n{result}"


pytestmark = [pytest.mark.lab, pytest.mark.skipif(not SCALE_RUN, reason="the fleet tests run in make scale")]


def test_fleet_rollout_and_idempotent_rerun(scale_lab):
    first = timed_rollout(scale_lab, "first rollout")
    assert first.rc == 0 and first.failed() == 0, first
    for name in VTEPS:
        assert first.result(task=CONFIGURE, host=name)["changed"] is True
        assert first.result(task=HEALTH, host=name)["msg"].startswith(f"VTEP {name} healthy"), first
    second = timed_rollout(scale_lab, "idempotent re-run")
    assert second.rc == 0 and second.changed() == 0, second
    assert set(second.stats) == {*VTEPS, "localhost"}  # localhost: the lab pre-flight (playbooks/lab_check.yml)


def stop_when_canary_done(lab: Lab, victim: str, stopped: threading.Event, give_up: threading.Event) -> None:
    """SIGSTOP the victim's sshd once the canary v01 holds the new configuration (batch 1 applied), so the victim,
    in the last batch, is made unreachable in the middle of the rollout, before anything connects to it."""
    state_file = "/var/lib/xdpfleet/programs/vtep.json"
    while not give_up.is_set():
        if NEW_PEER in lab.host_exec("v01", ["cat", state_file], check=False).stdout:
            os.kill(lab.host_pids(victim)[1], signal.SIGSTOP)
            stopped.set()
            return
        time.sleep(0.5)


def test_unreachable_host_mid_rollout_then_rerun_converges(scale_lab):
    lab, victim = scale_lab, LAST_BATCH[-1]
    write_inventory(lab, commissioned=True)
    stopped, give_up = threading.Event(), threading.Event()
    watcher = threading.Thread(target=stop_when_canary_done, args=(lab, victim, stopped, give_up))
    watcher.start()
    try:
        # One host of the last batch may fail (the play stops only above the percentage), so the others finish.
        one_host = math.ceil(100 / len(LAST_BATCH))
        during = timed_rollout(lab, "rollout with one host unreachable", vtep_max_fail_percentage=one_host)
    finally:
        give_up.set()
        watcher.join()
        if stopped.is_set():
            os.kill(lab.host_pids(victim)[1], signal.SIGCONT)
    assert stopped.is_set(), during
    assert during.rc != 0, during
    assert during.stats.get(victim, {}).get("unreachable") == 1, during
    assert during.results(task=CONFIGURE, host=victim) == []
    for name in VTEPS:
        if name == victim:
            continue
        assert during.stats[name]["failed"] == during.stats[name]["unreachable"] == 0, during
        changes = during.result(task=CONFIGURE, host=name)["changes"]
        assert f"VNI 100: + peer {NEW_PEER} via ul-hub" in " ".join(changes), changes
        assert during.result(task=HEALTH, host=name)["msg"].startswith(f"VTEP {name} healthy")

    after = timed_rollout(lab, "re-run after the host is back")
    assert after.rc == 0 and after.failed() == 0, after
    assert after.result(task=CONFIGURE, host=victim)["changed"] is True
    assert [name for name in VTEPS if after.changed(name)] == [victim], after.stats
