"""playbooks/perf.yml and the trafficgen module over SSH on the lab's back-to-back pair a:p3 === b:p3 (2-queue veth)."""

import json

import pytest

PAIR = "lab-a-b"


@pytest.fixture(scope="module")
def prepared(lab):
    """a and b with the collection's sources and bpffs (the xdp_host role), as perf.yml would leave them."""
    run = lab.run_tasks([{"ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_host"}}], hosts="a,b")
    assert run.rc == 0, run
    return lab


def xdp_on(lab, host: str, ifname: str):
    return json.loads(lab.host_exec(host, ["ip", "-j", "link", "show", ifname]).stdout)[0].get("xdp")


def assert_nothing_left(lab):
    assert xdp_on(lab, "a", "p3") is None, "the sender's return counter went with the sender"
    assert xdp_on(lab, "b", "p3") is None, "the echo server was stopped"
    assert lab.host_exec("b", ["test", "-e", "/sys/fs/bpf/xdpfleet/tg-echo-p3"], check=False).returncode != 0
    assert lab.host_exec("a", ["test", "-e", "/run/xdpfleet/trafficgen-p3.pid"], check=False).returncode != 0


def test_perf_playbook_sweeps_searches_and_reports(lab, tmp_path):
    run = lab.run_playbook("playbooks/perf.yml", extra_vars={"perf_pair_report_dir": str(tmp_path)})
    assert run.rc == 0, run
    assert_nothing_left(lab)

    report = json.loads((tmp_path / "perf.json").read_text())
    (pair,) = report["pairs"]
    assert pair["name"] == PAIR
    sender, echo = pair["sender"], pair["echo"]
    assert sender["environment"]["driver"] == "veth" and sender["environment"]["queues"] == {"rx": 2, "tx": 2}
    assert sender["template"]["flows"] == 64
    assert [r["frame_size"] for r in sender["results"]] == [64, 1518]
    for result in sender["results"]:
        best = result["zero_loss"]
        assert best is not None, result
        assert best["received"] > 0 and best["loss_ratio"] <= 0.001
        assert 1 <= len(result["trials"]) <= 6
        if result["max"]["loss_ratio"] <= 0.001:
            assert result["trials"] == [result["max"]] and best == result["max"], "no loss flat out: no search"
        else:
            assert len(result["trials"]) >= 2 and best["rate_pps"] < result["max"]["offered_pps"]
    assert echo["counters"]["packets"] >= sum(t["received"] for r in sender["results"] for t in r["trials"])

    markdown = (tmp_path / "perf.md").read_text()
    assert "sender a:p3 -> echo b:p3" in markdown
    assert f"perf-{PAIR}.png" in markdown
    assert (tmp_path / f"perf-{PAIR}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_mode_sends_nothing_and_attaches_nothing(lab, tmp_path):
    run = lab.run_playbook("playbooks/perf.yml", check=True, extra_vars={"perf_pair_report_dir": str(tmp_path)})
    assert run.rc == 0, run
    assert_nothing_left(lab)
    assert not any(tmp_path.iterdir()), "check mode writes no report"


def test_bad_template_is_refused_naming_the_field_before_anything_changes(lab):
    template = {
        "name": "bad",
        "packets": [
            {
                "headers": [
                    {"ethernet": {}},
                    {"ipv4": {"src": "198.51.100.73", "dst": "198.51.100.74"}},
                    {"udp": {"src": 1024, "dst": 70000}},
                ]
            }
        ],
    }
    task = {
        "xdpfleet.fabric.trafficgen": {
            "mode": "send",
            "interface": "p3",
            "template": template,
            "dst_mac": "02:00:00:00:00:02",
            "count": 10,
        }
    }
    run = lab.run_tasks([task], hosts="a")
    assert run.rc != 0
    msg = run.result(host="a", action="xdpfleet.fabric.trafficgen")["msg"]
    assert "packets[0].headers[2].udp.dst" in msg and "70000" in msg, msg
    assert_nothing_left(lab)


def test_a_sender_running_in_the_background_is_stopped_by_state_absent(prepared):
    lab = prepared
    echo = {"xdpfleet.fabric.trafficgen": {"mode": "echo", "interface": "p3", "template": "udp4"}}
    assert lab.run_tasks([{"name": "echo", **echo}], hosts="b").rc == 0
    mac = json.loads(lab.host_exec("b", ["ip", "-j", "link", "show", "p3"]).stdout)[0]["address"]
    tasks = [
        {
            "name": "send",
            "xdpfleet.fabric.trafficgen": {
                "mode": "send",
                "interface": "p3",
                "template": "udp4",
                "dst_mac": mac,
                "duration": 120,
                "rate_pps": 1000,
            },
            "async": 300,
            "poll": 0,
            "register": "job",
        },
        {"name": "let it start", "ansible.builtin.wait_for": {"path": "/run/xdpfleet/trafficgen-p3.pid"}},
        {"name": "stop", "xdpfleet.fabric.trafficgen": {"mode": "send", "interface": "p3", "state": "absent"}},
        {
            "name": "wait",
            "ansible.builtin.async_status": {"jid": "{{ job.ansible_job_id }}"},
            "register": "done",
            "until": "done.finished",
            "retries": 30,
            "delay": 1,
        },
    ]
    try:
        run = lab.run_tasks(tasks, hosts="a")
        assert run.rc == 0, run
        assert run.result(host="a", task="stop")["stopped"] > 0
        done = run.result(host="a", task="wait")
        assert any("stopped by SIGTERM" in w for w in done["warnings"]), done
        (result,) = done["results"]
        assert 0 < result["run"]["sent"] < 120 * 1000, "stopped long before its 120 s"
    finally:
        assert (
            lab.run_tasks(
                [
                    {
                        "name": "stop echo",
                        **echo,
                        "xdpfleet.fabric.trafficgen": {**echo["xdpfleet.fabric.trafficgen"], "state": "absent"},
                    }
                ],
                hosts="b",
            ).rc
            == 0
        )
    assert_nothing_left(lab)
