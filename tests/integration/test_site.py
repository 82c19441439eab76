"""site.yml on the lab over SSH: probe, prepare, attach the counter, send traffic, report; twice."""

import json

import pytest

COUNTER_LINK = "/sys/fs/bpf/xdpfleet/counter/links/p1"


@pytest.fixture
def site_lab(lab):
    yield lab
    removal = [{"name": "Remove the counter", "xdpfleet.fabric.xdp_program": {"name": "counter", "state": "absent"}}]
    assert lab.run_tasks(removal, hosts="a").rc == 0


def test_site_attaches_counts_reports_and_converges(site_lab):
    lab = site_lab
    first = lab.run_playbook("site.yml")
    assert first.rc == 0, first
    probe = first.result(task="Probe kernel, libbpf, bpffs and interfaces", host="a")["ansible_facts"]["xdpfleet_probe"]
    assert probe["interfaces"]["p1"]["driver"] == "veth"
    assert probe["interfaces"]["p3"]["queues"] == {"rx": 2, "tx": 2}
    assert probe["interfaces"]["p1"]["attach_test"]["native"]["ok"] is True

    link = json.loads(lab.host_exec("a", ["bpftool", "-j", "link", "show", "pinned", COUNTER_LINK]).stdout)
    on_p1 = json.loads(lab.host_exec("a", ["ip", "-j", "link", "show", "p1"]).stdout)[0]["xdp"]["prog"]["id"]
    assert link["prog_id"] == on_p1

    totals = first.result(task="xdpfleet.fabric.xdp_counter : Keep the totals per slot", host="a")
    packets = totals["ansible_facts"]["xdp_counter_totals"]["0"]["packets"]
    assert packets >= 40, "the pings from e1 to e2 cross a:p1: 20 over IPv4 and 20 over IPv6"
    printed = [r for r in first.results(task="Print the counters", host="localhost")]
    assert printed and f"a p1: {packets} packets" in json.dumps(printed)

    second = lab.run_playbook("site.yml")
    assert second.rc == 0, second
    for host in ("a", "b", "c", "d", "l"):
        assert second.changed(host) == 0, (host, second)  # only the controller's report is rewritten
