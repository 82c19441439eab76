"""site.yml on the lab over SSH, end to end: probe, tune, prepare and route in XDP, VTEPs, overlay checks, a perf pair,
report; twice (the second run changes no host)."""

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROUTER_LINK = "/sys/fs/bpf/xdpfleet/router/links/{}"
LAB_HOSTS = ("a", "b", "c", "d", "l")
TEXTFILES = "/var/lib/prometheus/node-exporter/"  # the lab opts in to the prometheus_textfile role


def exported(lab, host: str, name: str) -> dict:
    """A host's Prometheus text file, read by prometheus_client's parser: {family: its samples}."""
    text = lab.host_exec(host, ["cat", TEXTFILES + name]).stdout
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def reports_in(path) -> dict:
    return {"site_report_dir": str(path), "perf_pair_report_dir": str(path)}


@pytest.fixture
def site_lab(lab, tmp_path):
    yield lab
    # Undo what site.yml set up, so the session's later tests find the lab as it was.
    assert lab.run_playbook("playbooks/vtep.yml", extra_vars={"vtep_state": "absent"}).rc == 0
    assert lab.run_playbook("playbooks/tune.yml", extra_vars={"host_tuning_state": "absent"}).rc == 0
    removal = [{"name": "Remove the router", "xdpfleet.fabric.xdp_router": {"state": "absent"}}]
    assert lab.run_tasks(removal, hosts="a").rc == 0


def test_site_runs_the_whole_job_and_converges(site_lab, tmp_path):
    lab = site_lab
    first = lab.run_playbook("site.yml", extra_vars=reports_in(tmp_path))
    assert first.rc == 0, first
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
