"""playbooks/tune.yml on the lab from the inventory alone: iommu=pt into every host's private /etc/default/grub, the
NIC settings of host_vars (d:trunk0 rx-vlan-offload off); converge; host_tuning_state=absent puts everything back."""

HOSTS = ("a", "b", "c", "d", "l")


def grub(lab, host: str) -> str:
    return lab.host_exec(host, ["cat", "/etc/default/grub"]).stdout


def rxvlan(lab) -> bool:
    return "rx-vlan-offload: on" in lab.host_exec("d", ["ethtool", "-k", "trunk0"]).stdout


def test_tune_converges_and_absent_restores_exactly(lab):
    before = {h: grub(lab, h) for h in HOSTS}
    assert rxvlan(lab)

    checked = lab.run_playbook("playbooks/tune.yml", check=True, diff=True)
    assert checked.rc == 0, checked
    assert {h: grub(lab, h) for h in HOSTS} == before and rxvlan(lab), "check mode writes nothing"

    tuned = lab.run_playbook("playbooks/tune.yml")
    assert tuned.rc == 0, tuned
    for host in HOSTS:
        assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"' in grub(lab, host), host
    assert not rxvlan(lab)
    message = tuned.result(task="Say which hosts still need a reboot", host="localhost")["msg"]
    assert message == "Hosts that need a reboot for their kernel command line: a, b, c, d, l", message
    assert not tuned.results(task="Reboot and wait for the host", host="a")[0]["changed"], "reboots stay off"

    again = lab.run_playbook("playbooks/tune.yml")
    assert again.rc == 0
    for host in HOSTS:
        assert again.changed(host) == 0, (host, again)

    restored = lab.run_playbook("playbooks/tune.yml", extra_vars={"host_tuning_state": "absent"})
    assert restored.rc == 0, restored
    assert {h: grub(lab, h) for h in HOSTS} == before, "the GRUB files are byte for byte what they were"
    assert rxvlan(lab)
    for host in HOSTS:
        records = lab.host_exec(host, ["ls", "/var/lib/xdpfleet"], check=False).stdout.split()
        assert not {"kernel_cmdline.json", "nic_tuning.json"} & set(records), (host, records)

    restored_again = lab.run_playbook("playbooks/tune.yml", extra_vars={"host_tuning_state": "absent"})
    assert restored_again.rc == 0
    for host in HOSTS:
        assert restored_again.changed(host) == 0, (host, restored_again)
