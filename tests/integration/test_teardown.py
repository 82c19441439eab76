"""playbooks/teardown.yml on a host where an instance was partly removed by hand: torn down all the same, and the
metrics files the exporter wrote for it removed. (The teardown of everything site.yml brings up is
tests/integration/test_site.py's last test.)"""

TEARDOWN = "playbooks/teardown.yml"
TEARDOWN_TASK = "Stop the senders and remove every recorded XDP program instance"
TEXTFILES = "/var/lib/prometheus/node-exporter"


def test_teardown_of_a_partly_removed_instance(lab):
    counter = {
        "ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_counter"},
        "vars": {"xdp_counter_interfaces": ["p1"]},  # a runs the router on p1 in the inventory, not the counter
    }
    metrics = {"ansible.builtin.include_role": {"name": "xdpfleet.fabric.prometheus_textfile"}}
    prepare = {"ansible.builtin.include_role": {"name": "xdpfleet.fabric.xdp_host"}}  # the sources, run alone
    up = lab.run_tasks([prepare, counter, metrics], hosts="a")
    assert up.rc == 0, up.stdout[-3000:]
    assert "xdpfleet_xdp_counter_packets_total" in lab.host_exec("a", ["cat", f"{TEXTFILES}/xdpfleet.prom"]).stdout
    # A link pin removed by hand detaches the program (the pin held the link) and leaves the rest behind.
    lab.host_exec("a", ["rm", "/sys/fs/bpf/xdpfleet/counter/links/p1"])
    assert lab.xdp_interfaces("a") == set()
    run = lab.run_playbook(TEARDOWN, extra_vars={"teardown_hosts": "a"})
    assert run.rc == 0, run
    removed = run.result(task=TEARDOWN_TASK, host="a")["instances"]["counter"]
    assert "p1: remove stale pin" in removed and "remove state file /var/lib/xdpfleet/programs/counter.json" in removed
    assert lab.host_exec("a", ["test", "-e", "/sys/fs/bpf/xdpfleet"], check=False).returncode != 0
    assert lab.state_files("a") == []
    # node_exporter would serve the removed counter's last numbers as live
    assert lab.host_exec("a", ["ls", "-A", TEXTFILES]).stdout == ""
    removed_files = run.result(task="Remove the metrics files the exporter wrote", host="a")["files"]
    assert removed_files[f"{TEXTFILES}/xdpfleet.prom"]["changed"]
    assert lab.run_playbook(TEARDOWN, extra_vars={"teardown_hosts": "a"}).changed("a") == 0
