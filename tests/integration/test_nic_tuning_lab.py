"""nic_tuning over SSH on the lab's 2-queue veth a:p3 (channels, features and MTU are what veth lets us change):
apply, check with ethtool, converge, restore exactly; refusals change nothing; XDP survives a channel change."""

import json

import pytest

SETTINGS = {"name": "p3", "channels": {"rx": 1, "tx": 1}, "features": {"rxvlan": False, "gro": False}, "mtu": 1400}


def tune(lab, interfaces=None, state="present", check=False, diff=False):
    args = {"state": state}
    if interfaces is not None:
        args["interfaces"] = interfaces
    return lab.run_tasks([{"name": "tune", "xdpfleet.fabric.nic_tuning": args}], hosts="a", check=check, diff=diff)


def observed(lab) -> dict:
    """p3 as ethtool and ip see it, read inside host a without SSH."""
    channels = lab.host_exec("a", ["ethtool", "-l", "p3"]).stdout.split("Current hardware settings:")[1]
    current = dict(line.replace(":", "").split()[:2] for line in channels.strip().splitlines())
    features = lab.host_exec("a", ["ethtool", "-k", "p3"]).stdout
    link = json.loads(lab.host_exec("a", ["ip", "-j", "link", "show", "p3"]).stdout)[0]
    return {
        "rx": current["RX"],
        "tx": current["TX"],
        "rx-vlan-offload": "rx-vlan-offload: on" in features,
        "gro": "generic-receive-offload: on" in features,
        "mtu": link["mtu"],
    }


@pytest.fixture
def tuned_lab(lab):
    before = observed(lab)
    yield lab, before
    assert tune(lab, state="absent").rc == 0
    assert observed(lab) == before


def test_apply_converge_and_restore_exactly(tuned_lab):
    lab, before = tuned_lab
    assert before == {"rx": "2", "tx": "2", "rx-vlan-offload": True, "gro": True, "mtu": 1500}

    checked = tune(lab, [SETTINGS], check=True, diff=True)
    assert checked.rc == 0 and observed(lab) == before, "check mode changes nothing"
    assert "p3: channels rx 2 -> 1" in checked.result(task="tune", host="a")["changes"]

    first = tune(lab, [SETTINGS])
    assert first.rc == 0, first
    assert observed(lab) == {"rx": "1", "tx": "1", "rx-vlan-offload": False, "gro": False, "mtu": 1400}
    record = json.loads(lab.host_exec("a", ["cat", "/var/lib/xdpfleet/nic_tuning.json"]).stdout)
    assert record["interfaces"]["p3"]["channels"] == {"rx": 2, "tx": 2}
    assert record["interfaces"]["p3"]["mtu"] == 1500

    second = tune(lab, [SETTINGS])
    assert second.rc == 0 and second.changed("a") == 0

    # A later change to the same setting keeps the first original: teardown still goes back to 1500.
    assert tune(lab, [{"name": "p3", "mtu": 1450}]).rc == 0
    record = json.loads(lab.host_exec("a", ["cat", "/var/lib/xdpfleet/nic_tuning.json"]).stdout)
    assert record["interfaces"]["p3"]["mtu"] == 1500

    restored = tune(lab, state="absent")
    assert restored.rc == 0 and observed(lab) == before
    assert lab.host_exec("a", ["test", "-e", "/var/lib/xdpfleet/nic_tuning.json"], check=False).returncode != 0
    again = tune(lab, state="absent")
    assert again.rc == 0 and again.changed("a") == 0


@pytest.mark.parametrize(
    ("interfaces", "field"),
    [
        ([{"name": "nope0", "mtu": 1400}], "interfaces[0].name: interface nope0 does not exist"),
        ([{"name": "p3", "channels": {"rx": 3}}], "interfaces[0].channels.rx: 3 is more than the maximum 2"),
        ([{"name": "p3", "channels": {"combined": 1}}], "interfaces[0].channels.combined: driver veth does not have"),
        ([{"name": "p3", "rings": {"rx": 4096}}], "interfaces[0].rings: driver veth has no rings settings"),
        ([{"name": "p3", "features": {"lro": True}}], "interfaces[0].features.lro: fixed off by the driver"),
        ([{"name": "p3", "features": {"warp-drive": False}}], "interfaces[0].features.warp-drive: the driver has no"),
        ([{"name": "p3", "mtu": 70000}], "interfaces[0].mtu: 70000 is outside 68..65535"),
        ([{"name": "p3", "mtu": 1400}, {"name": "p3", "channels": {"rx": 9}}], "interfaces[1].channels.rx"),
    ],
)
def test_bad_input_changes_nothing(tuned_lab, interfaces, field):
    lab, before = tuned_lab
    run = tune(lab, interfaces)
    assert run.rc != 0
    assert field in run.messages(), run.messages()
    assert observed(lab) == before, "a refusal leaves every interface as it was, also the valid first one"


def test_xdp_keeps_counting_across_a_channel_change(tuned_lab):
    lab, _ = tuned_lab
    counter = {
        "name": "counter",
        "source": "/var/lib/xdpfleet/src/counter/counter.c",
        "include_dirs": ["/var/lib/xdpfleet/src/include"],
        "interfaces": ["p3"],
    }
    prepare = [
        {"ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_host"}},
        {"name": "attach", "xdpfleet.fabric.xdp_program": counter},
    ]
    assert lab.run_tasks(prepare, hosts="a").rc == 0
    try:
        prog = json.loads(lab.host_exec("a", ["ip", "-j", "link", "show", "p3"]).stdout)[0]["xdp"]["prog"]["id"]
        fewer_queues = [{"name": "p3", "channels": {"rx": 1, "tx": 1}}]
        refused = tune(lab, fewer_queues)
        assert refused.rc != 0 and "change the peer first" in refused.messages(), "b:p3 still sends on 2 queues"
        peer = {"name": "tune", "xdpfleet.fabric.nic_tuning": {"interfaces": [{"name": "p3", "channels": {"tx": 1}}]}}
        assert lab.run_tasks([peer], hosts="b").rc == 0
        assert tune(lab, fewer_queues).rc == 0
        after = json.loads(lab.host_exec("a", ["ip", "-j", "link", "show", "p3"]).stdout)[0]["xdp"]
        assert after["prog"]["id"] == prog and after["mode"] == 1, "the same program, still native"

        def counted() -> int:
            read = {"name": "read", "xdpfleet.fabric.bpf_map_info": {"instance": "counter", "map": "xdp_counters"}}
            entries = lab.run_tasks([read], hosts="a").result(task="read", host="a")["entries"]
            return next(e["value"]["packets"] for e in entries if e["key"] == 0)

        start = counted()
        lab.host_exec("b", ["ping", "-c", "20", "-i", "0.01", "-W", "1", "198.51.100.73"])
        assert counted() - start >= 20, "frames arriving on p3 after the change still run through XDP"
    finally:
        remove = {"name": "detach", "xdpfleet.fabric.xdp_program": {"name": "counter", "state": "absent"}}
        assert lab.run_tasks([remove], hosts="a").rc == 0
        restore = {"name": "restore", "xdpfleet.fabric.nic_tuning": {"state": "absent"}}
        assert lab.run_tasks([restore], hosts="b").rc == 0
