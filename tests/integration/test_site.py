"""site.yml on the lab over SSH, end to end: probe, tune, prepare and route in XDP, VTEPs, overlay checks, a perf pair,
reports (site.md, fabric.md and fabric.svg); twice (the second run changes no host); then playbooks/fabric_report.yml,
which changes no host either. Then, with an echo server on b:p3 and a sender on a:p3 running in the background as
well, playbooks/teardown.yml takes it all down from what the hosts recorded, and a second run changes nothing."""

import json
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROUTER_LINK = "/sys/fs/bpf/xdpfleet/router/links/{}"
LAB_HOSTS = ("a", "b", "c", "d", "l")
LAB_VTEPS = {"a": "xdp", "b": "xdp", "c": "tc", "d": "xdp", "l": "linux"}
LAB_VNIS = (100, 200)
SVG = "{http://www.w3.org/2000/svg}"
TEXTFILES = "/var/lib/prometheus/node-exporter/"  # the lab opts in to the prometheus_textfile role


def exported(lab, host: str, name: str) -> dict:
    """A host's Prometheus text file, read by prometheus_client's parser: {family: its samples}."""
    text = lab.host_exec(host, ["cat", TEXTFILES + name]).stdout
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def reports_in(path) -> dict:
    return {"site_report_dir": str(path), "perf_pair_report_dir": str(path)}


def check_fabric_report(path) -> None:
    """fabric.md names every lab VTEP and VNI and has the counters of the run; fabric.svg has a node per VTEP."""
    report = (path / "fabric.md").read_text()
    for host, backend in LAB_VTEPS.items():
        assert f"| {host} | {backend} |" in report, host
    for vni in LAB_VNIS:
        assert f"### VNI {vni}" in report, vni
    for host in ("a", "c"):  # c: the TC backend, the same counters
        row = [line for line in report.splitlines() if line.startswith(f"| {host} | 100 |")]
        assert row and int(row[0].split("|")[3]) > 0, f"VTEP {host} counted VNI 100 frames from the overlay checks"
    assert "- l: the linux backend is the kernel's VXLAN" in report
    svg = ET.parse(path / "fabric.svg").getroot()
    nodes = {g.find(f"{SVG}title").text for g in svg.iter(f"{SVG}g") if g.get("class") == "node"}
    assert nodes >= set(LAB_VTEPS), nodes


TEARDOWN = "playbooks/teardown.yml"
TEARDOWN_TASK = "Stop the senders and remove every recorded XDP program instance"


def grub(lab, host: str) -> str:
    return lab.host_exec(host, ["cat", "/etc/default/grub"]).stdout


def programs(lab, host: str) -> list[str]:
    return lab.host_exec(host, ["ls", "/var/lib/xdpfleet/programs"]).stdout.split()


def tc_links(lab, host: str, instance: str) -> list[str]:
    """The interfaces an instance runs a program at tc ingress on, by its pinned links."""
    return lab.host_exec(host, ["ls", f"/sys/fs/bpf/xdpfleet/{instance}/tc-links"], check=False).stdout.split()


@dataclass
class SiteRun:
    reports: object  # the directory of its reports
    grub_before: dict[str, str]  # /etc/default/grub of each host before it
    deployed: bool = False  # site.yml's first run passed
    torn_down: bool = False  # teardown.yml ran to the end and was checked


@pytest.fixture(scope="module")
def site(lab, tmp_path_factory):
    """The module's site.yml job on the lab; teardown.yml takes it down again when the teardown test did not get to
    the end, so the session's later tests find the lab as it was."""
    run = SiteRun(tmp_path_factory.mktemp("site"), {host: grub(lab, host) for host in LAB_HOSTS})
    yield run
    if not run.torn_down:
        gone = lab.run_playbook(TEARDOWN)
        assert gone.rc == 0, gone


def test_site_runs_the_whole_job_and_converges(lab, site):
    tmp_path = site.reports
    first = lab.run_playbook("site.yml", extra_vars=reports_in(tmp_path))
    assert first.rc == 0, first
    site.deployed = True
    probe = first.result(task="Probe kernel, libbpf, bpffs and interfaces", host="a")["ansible_facts"]["xdpfleet_probe"]
    assert probe["interfaces"]["p1"]["driver"] == "veth"
    assert probe["interfaces"]["p3"]["queues"] == {"rx": 2, "tx": 2}
    assert probe["interfaces"]["p1"]["attach_test"]["native"]["ok"] is True

    # host tuning: the lab's private GRUB file carries iommu=pt
    assert "iommu=pt" in lab.host_exec("c", ["cat", "/etc/default/grub"]).stdout

    for port in ("p1", "p2"):
        pinned = ["bpftool", "-j", "link", "show", "pinned", ROUTER_LINK.format(port)]
        link = json.loads(lab.host_exec("a", pinned).stdout)
        on_port = json.loads(lab.host_exec("a", ["ip", "-j", "link", "show", port]).stdout)[0]["xdp"]["prog"]["id"]
        assert link["prog_id"] == on_port, port
    read = first.result(task="xdpfleet.fabric.xdp_router : Read the router's counters", host="a")
    counters = read["ansible_facts"]["xdpfleet_router"]["counters"]
    # The pings from e1 to e2 cross a both ways, 20 requests and 20 replies per family, forwarded in XDP but for the
    # first frame towards a next hop a had not resolved yet, which the kernel forwarded.
    assert counters["forwarded_v4"]["packets"] >= 38 and counters["forwarded_v6"]["packets"] >= 38, counters
    packets = counters["forwarded_v4"]["packets"]

    overlay = first.result(task="Ping each declared pair of endpoints across the overlay", host="localhost")
    assert len(overlay["results"]) >= 7 and all(r["rc"] == 0 for r in overlay["results"]), overlay

    # l's packet filter at tc on ul-a: deployed, then read after the overlay checks with no change; the overlay's
    # VXLAN to l crossed it, counted by its first rule
    deployed, read = first.results(task="xdpfleet.fabric.xdp_filter : Deploy the packet filter", host="l")
    assert deployed["result"]["changed"] and not read["result"]["changed"], read
    filtered = {r["name"]: r for r in read["result"]["ansible_facts"]["xdpfleet_filter"]["rules"]}
    assert filtered["vxlan"]["packets"] > 0 and filtered["discard"]["packets"] == 0, filtered

    report = (tmp_path / "site.md").read_text()
    assert f"| l | tc | ul-a | vxlan | count | {filtered['vxlan']['packets']} |" in report
    assert f"| a | p1, p2 | native | forwarded_v4 | {packets} |" in report
    for host in ("a", "c"):  # c: the TC backend, the same counters
        vtep = [line for line in report.splitlines() if line.startswith(f"| {host} | 100 |")]
        assert vtep and int(vtep[0].split("|")[3]) > 0, f"VTEP {host} counted VNI 100 frames from the overlay checks"
    assert report.count("| reachable |") == len(overlay["results"])
    assert "lab-a-b: a:p3 -> b:p3" in report and "| 64 |" in report
    check_fabric_report(tmp_path)

    # The counters for Prometheus, read after the report's: a's VTEP per VNI, and the perf pair's results.
    rx = {s.labels["vni"]: s.value for s in exported(lab, "a", "xdpfleet.prom")["xdpfleet_vtep_vni_rx_packets"]}
    reported = int(next(line for line in report.splitlines() if line.startswith("| a | 100 |")).split("|")[3])
    assert rx.keys() == {"100", "200"} and rx["100"] >= reported > 0, (rx, reported)
    zero_loss = exported(lab, "a", "xdpfleet_perf.prom")["xdpfleet_perf_zero_loss_packets_per_second"]
    assert {(s.labels["pair"], s.labels["end"], s.labels["frame_size"]) for s in zero_loss} == {
        ("lab-a-b", "sender", "64"), ("lab-a-b", "sender", "1518")
    }  # fmt: skip

    second = lab.run_playbook("site.yml", extra_vars=reports_in(tmp_path))
    assert second.rc == 0, second
    for host in LAB_HOSTS:
        assert second.changed(host) == 0, (host, second)  # only the controller's reports are rewritten

    # The fabric report of the running fabric: the fabric check and vtep_info only, so no host changes.
    fabric = lab.run_playbook("playbooks/fabric_report.yml", extra_vars=reports_in(tmp_path / "fabric"))
    assert fabric.rc == 0, fabric
    for host in LAB_HOSTS:
        assert fabric.changed(host) == 0, (host, fabric)
    check_fabric_report(tmp_path / "fabric")


def test_teardown_removes_everything_site_brought_up_and_converges(lab, site):
    assert site.deployed, "site.yml's run failed: nothing to tear down"
    echo = {"mode": "echo", "interface": "p3", "template": "udp4"}
    assert lab.run_tasks([{"xdpfleet.fabric.trafficgen": echo}], hosts="b").rc == 0
    mac = json.loads(lab.host_exec("b", ["ip", "-j", "link", "show", "p3"]).stdout)[0]["address"]
    send = {"mode": "send", "interface": "p3", "template": "udp4", "dst_mac": mac, "duration": 300, "rate_pps": 1000}
    sender = lab.run_tasks(
        [
            {"name": "send", "xdpfleet.fabric.trafficgen": send, "async": 600, "poll": 0},
            {"ansible.builtin.wait_for": {"path": "/run/xdpfleet/trafficgen-p3.pid"}},
        ],
        hosts="a",
    )
    assert sender.rc == 0, sender
    # router, VTEP, the sender's return counter
    assert {"p1", "p2", "acc100", "p3"} <= lab.xdp_interfaces("a") and "p3" in lab.xdp_interfaces("b")
    assert any(grub(lab, host) != site.grub_before[host] for host in LAB_HOSTS)
    assert {"router.json", "vtep.json"} <= set(programs(lab, "a"))
    assert {"vtep.json", "tg-echo-p3.json"} <= set(programs(lab, "b"))
    assert "filter.json" in programs(lab, "l")
    assert tc_links(lab, "c", "vtep") == ["acc100", "acc200", "ul-a"] and "ul-a" in lab.xdp_interfaces("c")

    checked = lab.run_playbook(TEARDOWN, check=True, diff=True)
    assert checked.rc == 0, checked
    would = checked.result(task=TEARDOWN_TASK, host="a")
    assert would["changed"] and {"router", "vtep"} <= set(would["instances"]) and would["senders"]
    # The --diff, one line per thing that would go, each in `before` only (shown as a removal).
    assert "-router: p1: xdp_router" in checked.stdout
    gone = would["diff"]["before"].splitlines()
    assert [line.split(" tag ")[0] for line in gone if line.startswith("router: ")] == [
        "router: p1: xdp_router",
        "router: p2: xdp_router",
        "router: map router_ports",
        "router: map router_stats",
        "router: state file /var/lib/xdpfleet/programs/router.json",
    ]
    assert gone[0].startswith("sender on p3 (pid ")
    # what stays: the VTEP's ports with the promiscuous flag they had before it served them
    assert would["diff"]["after"].splitlines() == [
        "vtep: acc100: promisc off",
        "vtep: acc200: promisc off",
        "vtep: acclocal: promisc off",
    ]
    assert {"p1", "p2", "acc100", "p3"} <= lab.xdp_interfaces("a"), "check mode changes nothing"

    run = lab.run_playbook(TEARDOWN)
    assert run.rc == 0, run
    (stopped,) = run.result(task=TEARDOWN_TASK, host="a")["senders"]
    assert stopped.startswith("stop sender on p3 (pid ") and "killed" not in stopped, stopped
    assert set(run.result(task=TEARDOWN_TASK, host="b")["instances"]) == {"vtep", "tg-echo-p3"}
    assert "vtep" in run.result(task=TEARDOWN_TASK, host="c")["instances"]  # both programs: no pins are left below
    assert run.result(task="Remove the Linux VTEP baseline", host="l")["changed"]
    assert "filter" in run.result(task=TEARDOWN_TASK, host="l")["instances"]
    for host in LAB_HOSTS:
        assert lab.xdp_interfaces(host) == set(), host
        assert lab.host_exec(host, ["test", "-e", "/sys/fs/bpf/xdpfleet"], check=False).returncode != 0, host
        assert lab.state_files(host) == [], host
        assert grub(lab, host) == site.grub_before[host], f"{host}: /etc/default/grub is back byte for byte"
    assert "rx-vlan-offload: on" in lab.host_exec("d", ["ethtool", "-k", "trunk0"]).stdout

    again = lab.run_playbook(TEARDOWN)
    assert again.rc == 0, again
    for host in LAB_HOSTS:
        assert again.changed(host) == 0, (host, again)
    site.torn_down = True
