"""VMs as managed hosts: Debian's kernel with Debian's systemd as init, state on a disk image of each VM's own that
survives a reboot, its own sshd with a host key generated once, reached by Ansible over SSH like any server.

Root file system: an overlayfs whose lower layer is this machine's root over 9p (read-only, as in vmlib.py) and
whose upper layer is an ext4 disk image on virtio-blk (/dev/vda). The initramfs (INIT) mounts both and switches root
to the overlay before it execs /lib/systemd/systemd. What the guest writes (/etc, /etc/systemd/system, /var/lib/
xdpfleet, /usr/local) lands on the image and is there after a reboot. The image is made by `mkfs.ext4 -d` from a
staging tree with the guest's own configuration (stage()): hostname, machine-id, sshd config and host key, root's
authorized key, the unit that names and addresses its NICs, and masks for the services this machine enables that a
test host has no use for. The guest kernel's modules (the extracted package, read over 9p) are bind-mounted at
/lib/modules/<release>, so modprobe works in the guest (vxlan and bridge for the Linux VTEP).

Reboot: QEMU runs without -no-reboot, so a reboot in the guest resets the machine and QEMU boots the same kernel,
initramfs and disk again.

Network (namespace NS; only xhm0 is in the root namespace, where Ansible runs): bridge xhmgmt joins the VMs'
management taps and xhm1, the peer of xhm0 (MGMT_HOST); bridge xhul joins the VMs' underlay taps; each VM's access
tap is where the tests inject and capture frames. Addresses: management 198.51.100.240/29, underlay .248/29.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import initramfs
from kernels import Kernel
from vmlib import MEMORY_MB, QUEUES, REPO, TSC_KHZ, VCPUS, stop_qemu, tail

NS = "xhvm"
MGMT_HOST = "198.51.100.241"
MGMT_PREFIX = 29
UNDERLAY = "ul"  # the data NIC whose taps bridge xhul joins
DISK_SIZE = "1G"
# A systemd boot under TCG with a loaded host: from QEMU's start (or the reboot) to sshd answering.
BOOT_SECONDS = 300
SSH_PORT = 22
PR_SET_PDEATHSIG = 1
# Loaded in the initramfs, dependencies first: the microvm's virtio-mmio bus, the 9p lower layer, the disk and its
# ext4 (crc32c by name through the crypto API, so not in modules.dep), the overlay, the NICs.
MODULES = ("virtio_mmio", "9pnet_virtio", "9p", "virtio_blk", "crc32c_generic", "ext4", "overlay", "virtio_net")
# Services and timers this machine enables (or that start on a serial console) which a test host has no use for:
# a database, apt's and the file systems' upkeep, time sync without a network, gettys on terminals nobody reads.
MASKED = (
    "postgresql.service", "systemd-timesyncd.service", "getty@tty1.service", "serial-getty@ttyS0.service",
    "apt-daily.timer", "apt-daily-upgrade.timer", "man-db.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
    "fstrim.timer", "e2scrub_reap.service",
)  # fmt: skip

INIT = (
    initramfs.init_prologue("xh")
    + r"""
for word in $(cat /proc/cmdline); do
    case "$word" in
        xh.modules=*) modules="${word#xh.modules=}";;
        xh.repo=*) repo="${word#xh.repo=}";;
    esac
done
mkdir -p /lower /disk /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /lower || exec sh
mount -t ext4 /dev/vda /disk || exec sh
mount -t overlay overlay -o lowerdir=/lower,upperdir=/disk/upper,workdir=/disk/work /newroot || exec sh
release=$(uname -r)
mkdir -p "/newroot/lib/modules/$release"
mount --bind "/lower$modules" "/newroot/lib/modules/$release"
# The guest's own /tmp; a checkout under it (a CI clone, with the .venv whose Python Ansible runs there) is bound
# back in from this machine's.
mount -t tmpfs -o nosuid,nodev tmpfs /newroot/tmp
case "$repo" in /tmp/*) mkdir -p "/newroot$repo" && mount --bind "/lower$repo" "/newroot$repo";; esac
echo "xh: systemd starts at $(cut -d' ' -f1 /proc/uptime) s"
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /lib/systemd/systemd
"""
)

# The guest's NICs have no udev to name them: xh-network (network_script()) names them by MAC and gives them this
# test's addresses, before network.target (sshd listens on the management address; xdpfleet-restore waits for
# network-online.target).
NETWORK_UNIT = """[Unit]
Description=xdpfleet tests: name the NICs by their MACs and address them
Before=network.target ssh.service
Wants=network.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/xh-network

[Install]
WantedBy=multi-user.target
"""
RENAME_FUNCTION = """rename() {
    for dev in /sys/class/net/*; do
        if [ "$(cat "$dev/address")" = "$1" ]; then ip link set dev "${dev##*/}" name "$2"; return; fi
    done
    echo "no NIC with MAC $1" >&2
    exit 1
}"""
SSHD_CONFIG = """# The test VM's sshd: its own host key (made for this disk image) only; root by key only.
ListenAddress {mgmt_ip}
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def sh(*argv: str, ns: str | None = None) -> str:
    if ns:
        argv = ("ip", "netns", "exec", ns, *argv)
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


@dataclass(frozen=True)
class Nic:
    """A data NIC: its name in the guest, its address (CIDR) if any, and, with `neighbour`, the far end's address,
    which the guest knows statically (the tap's MAC, tap_mac()); `forwarding` turns IPv4 forwarding on for it."""

    name: str
    address: str | None = None
    mtu: int = 1500
    neighbour: str | None = None
    forwarding: bool = False


def guest_mac(index: int, position: int) -> str:
    return f"02:00:00:f0:{index:02x}:{position:02x}"


def tap_mac(index: int, position: int) -> str:
    return f"02:00:00:f1:{index:02x}:{position:02x}"


@dataclass
class Guest:
    """One VM: `name` is its inventory name and hostname, `index` (1, 2, ...) numbers its addresses and taps."""

    name: str
    index: int
    kernel: Kernel
    work: Path
    nics: tuple[Nic, ...]
    process: subprocess.Popen | None = None
    launched: float = 0.0  # time.monotonic() at launch()
    boots: list[float] = field(default_factory=list)  # seconds from each start or reboot to sshd answering

    @property
    def mgmt_ip(self) -> str:
        return f"198.51.100.{241 + self.index}"

    def tap(self, nic: str) -> str:
        """The host's end of the guest's NIC `nic` (mgmt or a data NIC's name)."""
        return f"xh{self.index}{nic}"

    def mac(self, nic: str) -> str:
        """The guest's MAC on NIC `nic`."""
        return guest_mac(self.index, self._position(nic))

    def tap_mac(self, nic: str) -> str:
        return tap_mac(self.index, self._position(nic))

    def _position(self, nic: str) -> int:
        names = ["mgmt", *(n.name for n in self.nics)]
        return names.index(nic) + 1

    def network_script(self) -> str:
        lines = ["#!/bin/sh", "set -e", RENAME_FUNCTION]
        lines += [f"rename {self.mac(nic)} {nic}" for nic in ("mgmt", *(n.name for n in self.nics))]
        lines += [f"ip addr add {self.mgmt_ip}/{MGMT_PREFIX} dev mgmt", "ip link set mgmt up"]
        for nic in self.nics:
            lines.append(f"ip link set {nic.name} mtu {nic.mtu}")
            if nic.address:
                lines.append(f"ip addr add {nic.address} dev {nic.name}")
            lines.append(f"ip link set {nic.name} up")
            if nic.neighbour:
                lines.append(
                    f"ip neigh replace {nic.neighbour} lladdr {self.tap_mac(nic.name)} dev {nic.name} nud permanent"
                )
            if nic.forwarding:  # IPv4 only: the router would want IPv6 forwarded too on a port that has IPv6
                lines.append(
                    f"sysctl -qw net.ipv4.conf.{nic.name}.forwarding=1 net.ipv6.conf.{nic.name}.disable_ipv6=1"
                )
        return "\n".join(lines) + "\n"

    @property
    def disk(self) -> Path:
        return self.work / f"{self.name}.img"

    @property
    def console(self) -> Path:
        return self.work / f"{self.name}-console.log"

    def stage(self, client_key: Path) -> str:
        """The disk image with the guest's own configuration; returns its host key's known_hosts line."""
        staging = self.work / f"{self.name}-staging"
        shutil.rmtree(staging, ignore_errors=True)
        upper = staging / "upper"
        (staging / "work").mkdir(parents=True)
        files = {
            "etc/hostname": f"{self.name}\n",
            "etc/machine-id": secrets.token_hex(16) + "\n",
            "etc/ssh/sshd_config": SSHD_CONFIG.format(mgmt_ip=self.mgmt_ip),
            "root/.ssh/authorized_keys": client_key.with_suffix(".pub").read_text(),
            # root's shell start-up files shadow this machine's, whose pyenv set-up cost every SSH command, so
            # every Ansible task, about 20 s under TCG (the rest of /root stays: the controller's Python is there)
            "root/.bashrc": "# root on a test VM: nothing to set up\n",
            "root/.profile": "# root on a test VM: nothing to set up\n",
            "etc/systemd/system/xh-network.service": NETWORK_UNIT,
            "usr/local/sbin/xh-network": self.network_script(),
        }
        for relative, text in files.items():
            path = upper / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        (upper / "root").chmod(0o700)
        (upper / "root/.ssh").chmod(0o700)
        (upper / "root/.ssh/authorized_keys").chmod(0o600)
        (upper / "usr/local/sbin/xh-network").chmod(0o755)
        wants = upper / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir()
        (wants / "xh-network.service").symlink_to("/etc/systemd/system/xh-network.service")
        for unit in MASKED:
            (upper / "etc/systemd/system" / unit).symlink_to("/dev/null")
        # This machine is a Docker container: its /.dockerenv would make the guest's systemd believe it runs in one
        # too and skip what a machine does at shutdown (sync, unmount), losing the last writes to the disk. An
        # overlayfs whiteout hides it.
        os.mknod(upper / ".dockerenv", stat.S_IFCHR | 0o000, os.makedev(0, 0))
        host_key = upper / "etc/ssh/ssh_host_ed25519_key"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{self.name}", "-f", str(host_key))
        key_type, key = host_key.with_suffix(".pub").read_text().split()[:2]
        self.disk.unlink(missing_ok=True)
        sh("truncate", "-s", DISK_SIZE, str(self.disk))
        sh("mkfs.ext4", "-q", "-F", "-L", f"{self.name}-state", "-d", str(staging), str(self.disk))
        shutil.rmtree(staging)
        return f"{self.mgmt_ip} {key_type} {key}\n"

    def qemu_argv(self, image: Path) -> list[str]:
        modules = self.kernel.modules
        argv = [
            "qemu-system-x86_64", "-machine", "microvm,x-option-roms=off,rtc=on", "-accel", "tcg", "-cpu", "max",
            "-m", str(MEMORY_MB), "-smp", str(VCPUS), "-nodefaults", "-no-user-config", "-display", "none",
            "-serial", f"file:{self.console}",
            "-kernel", str(self.kernel.vmlinuz), "-initrd", str(image),
            "-append", f"console=ttyS0 rdinit=/init {TSC_KHZ} xh.modules={modules} xh.repo={REPO}",
            "-fsdev", "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
            "-device", "virtio-9p-device,fsdev=root,mount_tag=hostroot",
            "-drive", f"file={self.disk},format=raw,if=none,id=state",
            "-device", "virtio-blk-device,drive=state",
            "-netdev", f"tap,id=mgmt,ifname={self.tap('mgmt')},script=no,downscript=no,vhost=off",
            "-device", f"virtio-net-device,netdev=mgmt,mac={self.mac('mgmt')}",
        ]  # fmt: skip
        for nic in self.nics:
            # as vmlib.py's data NICs: native XDP, XDP_TX queues of their own
            tap = f"tap,id={nic.name},ifname={self.tap(nic.name)},script=no,downscript=no,vhost=off,queues={QUEUES}"
            device = f"virtio-net-device,netdev={nic.name},mac={self.mac(nic.name)},mq=on,ctrl_guest_offloads=on"
            argv += ["-netdev", tap, "-device", device]
        return argv

    def launch(self) -> None:
        """Start QEMU; wait_for_sshd(self.launched) then waits for the boot."""
        image = initramfs.build(self.kernel, INIT, MODULES)
        self.launched = time.monotonic()
        with self.console.with_suffix(".qemu").open("w") as qemu_log:
            self.process = subprocess.Popen(
                ["ip", "netns", "exec", NS, *self.qemu_argv(image)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=qemu_log, preexec_fn=die_with_parent,
            )  # fmt: skip

    def wait_for_sshd(self, since: float) -> None:
        """Until sshd answers; the time since `since` (the launch or the reboot) goes into self.boots."""
        deadline = since + BOOT_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name}: QEMU exited with {self.process.returncode}: {tail(self.console)}")
            with contextlib.suppress(OSError):
                socket.create_connection((self.mgmt_ip, SSH_PORT), timeout=2).close()
                self.boots.append(time.monotonic() - since)
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.name}: no sshd after {BOOT_SECONDS} s: {tail(self.console)}")
            time.sleep(1)

    def wait_for_sshd_gone(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection((self.mgmt_ip, SSH_PORT), timeout=2).close()
            except OSError:
                return
            time.sleep(0.5)
        raise TimeoutError(f"{self.name}: sshd still answers {timeout} s after the reboot")

    def stop(self) -> None:
        stop_qemu(self.process)
        self.process = None


def die_with_parent() -> None:
    """In the child before exec: QEMU gets SIGTERM when the test process dies (killed, not only failed)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def remove_network() -> None:
    """This harness's namespace and root-namespace link, also a stale pair left by an earlier run."""
    subprocess.run(["ip", "netns", "del", NS], capture_output=True, check=False)
    subprocess.run(["ip", "link", "del", "xhm0"], capture_output=True, check=False)


def make_network(guests: list[Guest]) -> None:
    remove_network()
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", "xhm0", "type", "veth", "peer", "name", "xhm1", "netns", NS)
    sh("ip", "addr", "add", f"{MGMT_HOST}/{MGMT_PREFIX}", "dev", "xhm0")
    sh("ip", "link", "set", "xhm0", "up")
    for bridge in ("xhmgmt", "xhul"):
        sh("ip", "-n", NS, "link", "add", bridge, "type", "bridge")
        sh("ip", "-n", NS, "link", "set", bridge, "up")
    sh("ip", "-n", NS, "link", "set", "xhm1", "master", "xhmgmt", "up")
    for guest in guests:
        sh("ip", "-n", NS, "tuntap", "add", "dev", guest.tap("mgmt"), "mode", "tap")
        sh("ip", "-n", NS, "link", "set", guest.tap("mgmt"), "master", "xhmgmt", "up")
        for nic in guest.nics:
            tap = guest.tap(nic.name)
            sh("ip", "-n", NS, "tuntap", "add", "dev", tap, "mode", "tap", "multi_queue")
            # The host's own IPv6 chatter (router solicitations, MLD) would be frames on the guests' NICs.
            sh("sysctl", "-qw", f"net.ipv6.conf.{tap}.disable_ipv6=1", ns=NS)
            sh("ip", "-n", NS, "link", "set", tap, "address", guest.tap_mac(nic.name), "mtu", str(nic.mtu), "up")
            if nic.name == UNDERLAY:
                sh("ip", "-n", NS, "link", "set", tap, "master", "xhul")
