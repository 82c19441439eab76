"""playbooks/teardown.yml on the lab: everything brought up by the real playbooks and modules (the router of
site.yml's xdp_router role, l's packet filter at tc, VTEPs on a, b, c (the TC backend: XDP and tc programs) and l,
playbooks/tune.yml, then an echo server on b:p3 with a sender on a:p3 running in the background) goes, from what the
hosts recorded; a second run changes nothing; a host where an instance was partly removed by hand is torn down all
the same."""

import json

HOSTS = ("a", "b", "c", "d", "l")
TEARDOWN = "playbooks/teardown.yml"
TEARDOWN_TASK = "Stop the senders and remove every recorded XDP program instance"


def grub(lab, host: str) -> str:
    return lab.host_exec(host, ["cat", "/etc/default/grub"]).stdout


def xdp_interfaces(lab, host: str) -> list[str]:
    links = json.loads(lab.host_exec(host, ["ip", "-j", "link"]).stdout)
    return [link["ifname"] for link in links if "xdp" in link]


def records(lab, host: str) -> list[str]:
    """Files under /var/lib/xdpfleet other than the copied sources and the compile cache, and sender records."""
    found = lab.host_exec(
        host,
        ["find", "/var/lib/xdpfleet", "/run/xdpfleet", "-path", "/var/lib/xdpfleet/src", "-prune", "-o",
         "-path", "/var/lib/xdpfleet/cache", "-prune", "-o", "-type", "f", "-print"],
        check=False,
    )  # fmt: skip
    return found.stdout.split()


def programs(lab, host: str) -> list[str]:
    return lab.host_exec(host, ["ls", "/var/lib/xdpfleet/programs"]).stdout.split()


def tc_links(lab, host: str, instance: str) -> list[str]:
    """The interfaces an instance runs a program at tc ingress on, by its pinned links."""
    return lab.host_exec(host, ["ls", f"/sys/fs/bpf/xdpfleet/{instance}/tc-links"], check=False).stdout.split()


def bring_up(lab) -> None:
    counter = lab.run_tasks(
        [
            {"ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_host"}},
            {"ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_router"}},
            {"ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_filter"}},  # l's, at tc on ul-a
        ]
    )
    assert counter.rc == 0, counter
    vtep = lab.run_playbook("playbooks/vtep.yml", extra_vars={"vtep_hosts": "a,b,c,l"})
    assert vtep.rc == 0, vtep
    tune = lab.run_playbook("playbooks/tune.yml")
    assert tune.rc == 0, tune
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


def test_teardown_removes_everything_and_converges(lab):
    grub_before = {h: grub(lab, h) for h in HOSTS}
    bring_up(lab)
    assert {"p1", "p2", "acc100", "p3"} <= set(xdp_interfaces(lab, "a"))  # router, VTEP, the sender's return counter
    assert "p3" in xdp_interfaces(lab, "b")
    assert any(grub(lab, h) != grub_before[h] for h in HOSTS)
    assert {"router.json", "vtep.json"} <= set(programs(lab, "a"))
    assert {"vtep.json", "tg-echo-p3.json"} <= set(programs(lab, "b"))
    assert "filter.json" in programs(lab, "l")
    assert tc_links(lab, "c", "vtep") == ["acc100", "acc200", "ul-a"] and "ul-a" in xdp_interfaces(lab, "c")

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
        "vtep: acc100: promisc off", "vtep: acc200: promisc off", "vtep: acclocal: promisc off"
    ]
    assert {"p1", "p2", "acc100", "p3"} <= set(xdp_interfaces(lab, "a")), "check mode changes nothing"

    run = lab.run_playbook(TEARDOWN)
    assert run.rc == 0, run
    (stopped,) = run.result(task=TEARDOWN_TASK, host="a")["senders"]
    assert stopped.startswith("stop sender on p3 (pid ") and "killed" not in stopped, stopped
    assert set(run.result(task=TEARDOWN_TASK, host="b")["instances"]) == {"vtep", "tg-echo-p3"}
    assert "vtep" in run.result(task=TEARDOWN_TASK, host="c")["instances"]  # both programs: no pins are left below
    assert run.result(task="Remove the Linux VTEP baseline", host="l")["changed"]
    assert "filter" in run.result(task=TEARDOWN_TASK, host="l")["instances"]
    for host in HOSTS:
        assert xdp_interfaces(lab, host) == [], host
        assert lab.host_exec(host, ["test", "-e", "/sys/fs/bpf/xdpfleet"], check=False).returncode != 0, host
        assert records(lab, host) == [], host
        assert grub(lab, host) == grub_before[host], f"{host}: /etc/default/grub is back byte for byte"
    assert "rx-vlan-offload: on" in lab.host_exec("d", ["ethtool", "-k", "trunk0"]).stdout

    again = lab.run_playbook(TEARDOWN)
    assert again.rc == 0, again
    for host in HOSTS:
        assert again.changed(host) == 0, (host, again)


def test_teardown_of_a_partly_removed_instance(lab):
    counter = {
        "ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_counter"},
        "vars": {"xdp_counter_interfaces": ["p1"]},  # a runs the router on p1 in the inventory, not the counter
    }
    up = lab.run_tasks([counter], hosts="a")
    assert up.rc == 0, up
    # A link pin removed by hand detaches the program (the pin held the link) and leaves the rest behind.
    lab.host_exec("a", ["rm", "/sys/fs/bpf/xdpfleet/counter/links/p1"])
    assert xdp_interfaces(lab, "a") == []
    run = lab.run_playbook(TEARDOWN, extra_vars={"teardown_hosts": "a"})
    assert run.rc == 0, run
    removed = run.result(task=TEARDOWN_TASK, host="a")["instances"]["counter"]
    assert "p1: remove stale pin" in removed and "remove state file /var/lib/xdpfleet/programs/counter.json" in removed
    assert lab.host_exec("a", ["test", "-e", "/sys/fs/bpf/xdpfleet"], check=False).returncode != 0
    assert records(lab, "a") == []
    assert lab.run_playbook(TEARDOWN, extra_vars={"teardown_hosts": "a"}).changed("a") == 0
