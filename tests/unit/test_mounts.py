"""The mount table as every module reads it: what is mounted at a point, and which file system holds a path."""

import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import mounts


def test_the_mount_table_says_what_is_mounted_where(tmp_path):
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
        "30 22 0:26 / /sys/fs/bpf rw,nosuid shared:11 - bpf bpf rw,mode=700\n"
        "31 22 0:27 / /mnt/with\\040space rw master:1 - tmpfs tmpfs rw\n"
        "32 30 0:28 / /sys/fs/bpf rw - tmpfs tmpfs rw\n"
        "a short line\n"
    )
    assert mounts.mounted_type("/sys/fs/bpf", str(mountinfo)) == "tmpfs", "the topmost mount counts"
    assert mounts.mounted_type("/mnt/with space", str(mountinfo)) == "tmpfs"
    assert mounts.mounted_type("/sys/fs", str(mountinfo)) is None
    assert mounts.mounted_type("/sys", str(mountinfo)) == "sysfs"


def test_the_file_system_holding_a_path_is_found_by_its_device(tmp_path):
    st = os.stat(tmp_path)
    device = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"40 1 {device} / /elsewhere rw - bpf bpf rw\n41 1 0:99 / {tmp_path} rw - tmpfs tmpfs rw\n")
    # Not by the mount point: the pin root's nearest existing directory is on the device listed as a bpffs.
    assert mounts.holding_type(str(tmp_path / "xdpfleet" / "vtep"), str(mountinfo)) == "bpf"
    mountinfo.write_text("41 1 0:99 / /x rw - bpf bpf rw\n")
    assert mounts.holding_type(str(tmp_path), str(mountinfo)) is None


def test_pins_under_a_path_no_bpffs_holds_are_refused_naming_where_to_mount(tmp_path):
    pin_root = tmp_path / "bpf" / "xdpfleet"
    assert xp.bpffs_problem(str(pin_root)) == (
        f"bpffs is not mounted at {tmp_path}/bpf: mount -t bpf bpf {tmp_path}/bpf (the xdpfleet.fabric.xdp_host role "
        f"mounts it), so no pin can be made under {pin_root}"
    )
