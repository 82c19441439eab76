"""The VM's initramfs: busybox-static, the kernel modules the guest needs (with their dependencies, in load order)
and an /init that mounts this machine's root file system read-only over 9p and runs the guest agent in it.

Cached next to the kernel, keyed by what goes into it.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import shutil
import subprocess
import tempfile
from pathlib import Path

from kernels import Kernel

BUSYBOX = Path("/bin/busybox")  # package busybox-static: no shared libraries to carry along
# What the guest loads, dependencies first (resolved from modules.dep): the virtio-mmio bus of the microvm machine,
# the 9p root, the NICs, what the tc hook's fallbacks use (clsact, cls_bpf) and nf_tables (the router reads the
# host's netfilter rules with nft before it attaches; its libcrc32c asks the crypto API for crc32c by name, so that
# is not in modules.dep), which a chrooted guest could not load later (its /lib/modules is this machine's).
MODULES = ("virtio_mmio", "9pnet_virtio", "9p", "virtio_net", "sch_ingress", "cls_bpf", "crc32c_generic", "nf_tables")


def init_prologue(tag: str) -> str:
    """The start every guest's /init shares: busybox's applets, the kernel's file systems, the modules loaded in
    /modules/order (failures logged under `tag`)."""
    return rf"""#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "{tag}: init at $(cut -d' ' -f1 /proc/uptime) s"
for module in $(cat /modules/order); do
    insmod "/modules/$module" || echo "{tag}: insmod $module failed"
done
"""


# The guest's /init. The kernel command line names the agent to run (xv.python, xv.agent); everything it needs
# besides the kernel is this machine's, read through 9p. /tmp and /run are the guest's own (tmpfs), and so is bpffs;
# the checkout (xv.repo) is bound back in where it lives under one of them.
INIT = (
    init_prologue("xv")
    + r"""
# The kernel starts init with HOME=/; root's own lets scapy read its data cache (~/.cache/scapy, written on the host
# by the harness's own scapy) instead of decoding its OUI table again, 15-25 s in pure Python under TCG.
export HOME=/root
for word in $(cat /proc/cmdline); do
    case "$word" in
        xv.python=*) python="${word#xv.python=}";;
        xv.agent=*) agent="${word#xv.agent=}";;
        xv.repo=*) repo="${word#xv.repo=}";;
    esac
done
if mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /root; then
    mount -t proc proc /root/proc
    mount -t sysfs sysfs /root/sys
    mount -t bpf bpf /root/sys/fs/bpf
    mount -t devtmpfs devtmpfs /root/dev
    # A checkout under /tmp or /run (a CI clone) stays visible in the guest's own tmpfs there: bound back in.
    mkdir -p /host && mount --bind /root /host
    mount -t tmpfs tmpfs /root/tmp
    mount -t tmpfs tmpfs /root/run
    case "$repo" in /tmp/*|/run/*) mkdir -p "/root$repo" && mount --bind "/host$repo" "/root$repo";; esac
    echo "xv: agent starts at $(cut -d' ' -f1 /proc/uptime) s"
    # The PATH a root shell on the host has (the collection runs nft, tc and ip by name).
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin chroot /root "$python" "$agent"
    echo "xv: agent exited with $?"
else
    echo "xv: mounting the host's root over 9p failed"
fi
poweroff -f
"""
)


def module_order(kernel: Kernel, wanted=MODULES) -> list[Path]:
    """The module files to load, each after the modules it depends on (modules.dep); built-in ones left out."""
    modules_dir = kernel.modules
    deps: dict[str, tuple[str, list[str]]] = {}  # name -> (path, dependency paths)
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, needs = line.partition(":")
        deps[_name(path)] = (path, needs.split())
    builtin = {_name(p) for p in (modules_dir / "modules.builtin").read_text().split()}
    order: list[str] = []

    def visit(name: str) -> None:
        if name in builtin or any(_name(p) == name for p in order):
            return
        if name not in deps:
            raise FileNotFoundError(f"{kernel.release}: module {name} is neither in modules.dep nor built in")
        path, needs = deps[name]
        for need in needs:
            visit(_name(need))
        order.append(path)

    for name in wanted:
        visit(name.replace("-", "_"))
    return [modules_dir / p for p in order]


def _name(path: str) -> str:
    return Path(path).name.split(".ko")[0].replace("-", "_")


def build(kernel: Kernel, init: str = INIT, wanted: tuple[str, ...] = MODULES) -> Path:
    """The initramfs for this kernel (cached: rebuilt when /init, the module list or busybox change); `init` and
    `wanted` for a guest that boots otherwise (tests/vm/managed.py: systemd on a disk)."""
    modules = module_order(kernel, wanted)
    digest = hashlib.sha256(init.encode() + BUSYBOX.read_bytes())
    for path in modules:
        digest.update(str(path).encode())
    target = kernel.root.parent / f"initramfs-{digest.hexdigest()[:16]}.cpio.gz"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory(prefix="xv-initramfs-") as staging:
        root = Path(staging)
        for sub in ("bin", "proc", "sys", "dev", "root", "modules"):
            (root / sub).mkdir()
        shutil.copy2(BUSYBOX, root / "bin" / "busybox")
        (root / "init").write_text(init)
        (root / "init").chmod(0o755)
        names = []
        for path in modules:
            data = path.read_bytes()
            if path.suffix == ".xz":  # busybox's insmod takes plain ELF only
                data = lzma.decompress(data)
            name = path.name.split(".ko")[0] + ".ko"
            (root / "modules" / name).write_bytes(data)
            names.append(name)
        (root / "modules" / "order").write_text("\n".join(names) + "\n")
        listing = "\n".join(str(p.relative_to(root)) for p in sorted(root.rglob("*"))) + "\n"
        archive = subprocess.run(
            ["cpio", "--quiet", "-o", "-H", "newc", "-R", "0:0"],
            input=listing.encode(), cwd=root, capture_output=True, check=True,
        ).stdout  # fmt: skip
    partial = target.with_suffix(".partial")
    partial.write_bytes(gzip.compress(archive, compresslevel=1))
    partial.rename(target)
    return target
