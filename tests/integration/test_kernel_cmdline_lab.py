"""xdpfleet.fabric.kernel_cmdline on lab hosts over real SSH, against each host's private /etc/default/grub.

Each lab host has a private /etc (an overlay on the machine's), with the lab's stand-in /etc/default/grub where the
machine has none; these tests replace it on every lab host with Debian 12's stock file, run the module with
update_command: [], read the file back out of band, and put the lab's file back at the end. The machine's own
/etc/default/grub, present or not, stays as it was throughout.
"""

import json
import os
from pathlib import Path

import pytest

GRUB = "/etc/default/grub"
RECORD = "/var/lib/xdpfleet/kernel_cmdline.json"
HOSTS = ("a", "b")  # asserted on; the tasks run on every lab host
LAB_HOSTS = ("a", "b", "c", "d", "l")
DEBIAN_GRUB = (
    Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "kernel_cmdline" / "debian12_grub"
).read_text()
TASK = "kernel command line"


def kernel_cmdline(lab, check=False, diff=False, **params):
    task = {"name": TASK, "xdpfleet.fabric.kernel_cmdline": {"update_command": [], **params}}
    return lab.run_tasks([task], check=check, diff=diff)


def grub_text(lab, host):
    return lab.host_exec(host, ["cat", GRUB]).stdout


def machine_grub() -> str | None:
    """The machine's own /etc/default/grub (None: it has none), which no lab host's write may reach."""
    return Path(GRUB).read_text() if os.path.exists(GRUB) else None


MACHINE_GRUB = machine_grub()


def has_record(lab, host):
    return lab.host_exec(host, ["test", "-e", RECORD], check=False).returncode == 0


@pytest.fixture(scope="module")
def grub_hosts(lab):
    """Lab hosts with Debian 12's /etc/default/grub; the lab's own file is back at the end."""
    lab_files = {host: grub_text(lab, host) for host in LAB_HOSTS}
    write = {"name": "GRUB defaults", "ansible.builtin.copy": {"content": DEBIAN_GRUB, "dest": GRUB, "mode": "0644"}}
    written = lab.run_tasks([write])
    assert written.rc == 0, written
    yield lab
    for host in LAB_HOSTS:
        lab.host_exec(host, ["sh", "-c", f"cat > {GRUB}; rm -f {RECORD}"], input=lab_files[host])
        assert grub_text(lab, host) == lab_files[host]
    assert machine_grub() == MACHINE_GRUB


def test_add_check_diff_restore_on_private_grub_files(grub_hosts):
    lab = grub_hosts
    running = lab.host_exec("a", ["cat", "/proc/cmdline"]).stdout
    assert "iommu=pt" not in running.split("--")[0].split()

    first = kernel_cmdline(lab, present=["iommu=pt"])
    assert first.rc == 0, first
    for host in HOSTS:
        result = first.result(TASK, host)
        assert result["changed"] is True and result["bootloader"] == "grub"
        assert result["added"] == ["iommu=pt"] and result["removed"] == []
        assert result["reboot_required"] is True, "the lab's /proc/cmdline has no iommu=pt"
        assert result["cmdline_configured"] == ["quiet", "iommu=pt"]
        assert result["cmdline_running"] == running.split(" -- ")[0].split()
        expected = DEBIAN_GRUB.replace('DEFAULT="quiet"', 'DEFAULT="quiet iommu=pt"')
        assert grub_text(lab, host) == expected
        assert json.loads(lab.host_exec(host, ["cat", RECORD]).stdout)["original"] == '"quiet"'
    assert machine_grub() == MACHINE_GRUB, "the lab's writes stay in the hosts' own /etc"

    second = kernel_cmdline(lab, present=["iommu=pt"])
    assert second.rc == 0, second
    assert second.changed() == 0, second
    assert all(second.result(TASK, h)["reboot_required"] for h in HOSTS)

    before = grub_text(lab, "a")
    checked = kernel_cmdline(lab, check=True, diff=True, present=["iommu=pt", "nosmt"])
    assert checked.rc == 0, checked
    result = checked.result(TASK, "a")
    assert result["changed"] is True and result["added"] == ["nosmt"]
    assert result["diff"]["before"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"\n'
    assert result["diff"]["after"] == 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt nosmt"\n'
    assert "--- before: /etc/default/grub GRUB_CMDLINE_LINUX_DEFAULT" in checked.stdout
    assert '+GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt nosmt"' in checked.stdout
    assert grub_text(lab, "a") == before

    restored = kernel_cmdline(lab, state="restore")
    assert restored.rc == 0, restored
    for host in HOSTS:
        result = restored.result(TASK, host)
        assert result["changed"] is True and result["removed"] == ["iommu=pt"]
        assert result["reboot_required"] is False
        assert grub_text(lab, host) == DEBIAN_GRUB, "the original file, byte for byte"
        assert not has_record(lab, host)
    again = kernel_cmdline(lab, state="restore")
    assert again.rc == 0, again
    assert again.changed() == 0, again
    assert machine_grub() == MACHINE_GRUB


def test_bad_input_changes_nothing(grub_hosts):
    lab = grub_hosts
    refused = kernel_cmdline(lab, present=["intel_iommu on"])
    assert refused.rc != 0
    assert "present[0]: 'intel_iommu on' must not contain whitespace" in refused.messages()
    missing = kernel_cmdline(lab, present=["iommu=pt"], grub_file="/etc/default/no-such-grub")
    assert "grub_file: /etc/default/no-such-grub does not exist" in missing.messages()
    for host in HOSTS:
        assert grub_text(lab, host) == DEBIAN_GRUB
        assert not has_record(lab, host)
