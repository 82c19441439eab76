# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt)
"""The network-namespace lab: real SSH hosts and plain traffic endpoints on one machine.

A lab *host* is a network namespace ``<prefix>-<host>`` in which ``unshare`` starts a process tree with its own
mount, UTS and PID namespaces; its PID 1 is an sshd listening on the host's management address. The host mounts
its own bpffs once at start (so every SSH session shares its pins) and overlays the directories the collection
writes (/etc, /var, /boot by default) with upper dirs in the lab dir: it reads the machine's files, its writes stay
private. An *endpoint* is a plain namespace ``<prefix>-<endpoint>`` without sshd. *Links* are veth pairs between
nodes. The management network is a bridge ``<prefix>-mgmt`` in the root namespace with one veth per host.

Everything the lab makes is named ``<prefix>-...`` and recorded in ``<lab_dir>/state.json``, so ``down`` can remove
a lab left behind by a killed session from what exists by prefix plus that record.

Used on the controller by the ``xdpfleet.fabric.lab`` module and directly by the tests (tests/lablib.py). This module
brings a lab up and down; lab_spec.py checks its description, lab_state.py reads what exists and keeps the record.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shlex
import shutil
import signal
import subprocess
import time

from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.lab_spec import (
    MGMT_IFNAME,
    LabError,
    bridge_name,
    mgmt_veth_name,
    ns_name,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.lab_state import (
    STATE_FILE,
    child_pids,
    existing,
    host_pids,
    is_alive,
    load_state,
    make_lab_dir,
    ns_inode,
    processes_in_netns,
    read_text,
    save_state,
)

try:
    from pyroute2 import IPRoute, NetNS, netns
    from pyroute2.netlink.exceptions import NetlinkError

    HAS_PYROUTE2 = True
except ImportError:  # the module reports this with missing_required_lib
    HAS_PYROUTE2 = False

SSHD = "/usr/sbin/sshd"
# The client key a host's sshd accepts, copied at the host's start into its own /run (a fresh tmpfs, mode 0755,
# root's): sshd checks with StrictModes that no one but root can write the file or a directory above it, which no
# path under /tmp passes (/tmp is writable by everyone).
AUTHORIZED_KEYS = "/run/lab-sshd/authorized_keys"
# /etc/default/grub as Debian installs it, written into a lab host's private /etc when the machine has none.
LAB_GRUB_DEFAULTS = """\
# The lab host's boot configuration (Debian layout). The lab has no boot loader: nothing reads this file at boot.
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""
"""
IFA_F_NODAD = 0x02


# --------------------------------------------------------------------------------------------------------------
# Down


def _end_processes(pids: list[int], timeout: float = 5.0) -> list[int]:
    """SIGTERM, wait, SIGKILL what is left, wait again. Returns the pids that were alive."""
    alive = [p for p in pids if is_alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while any(is_alive(p) for p in alive) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not any(is_alive(p) for p in alive):
            break
    stuck = [p for p in alive if is_alive(p)]
    if stuck:
        raise LabError(f"processes {stuck} did not exit after SIGKILL")
    return alive


def down(prefix: str, lab_dir: str) -> dict:
    """Remove everything of this prefix: processes, root-namespace links, namespaces, the lab dir.

    Works on a running lab and on a stale one (processes gone, namespaces/links/files left). Mounts live only in the
    hosts' mount namespaces, so nothing is unmounted in the root namespace (except each namespace's /run/netns
    entry, which is how a network namespace is deleted).
    """
    found = existing(prefix, lab_dir)
    ended = []
    # Hosts first: SIGTERM to the sshd (PID 1 of the host) ends the whole PID namespace; unshare then exits.
    # unshare itself ignores SIGTERM while it waits, so it only gets the SIGKILL if it is still there.
    for pid in found["hosts"].values():
        ended += _end_processes([*child_pids(pid), pid])
    # Then anything else still running inside a lab namespace (e.g. a traffic generator a test left behind).
    inodes = {ns_inode(n) for n in found["namespaces"]} - {None}
    ended += _end_processes(processes_in_netns(inodes))

    removed_links = []
    with IPRoute() as ipr:
        for name in found["root_links"]:
            index = ipr.link_lookup(ifname=name)
            if index:  # deleting one end of a veth also deletes its peer
                try:
                    ipr.link("del", index=index[0])
                    removed_links.append(name)
                except NetlinkError as exc:
                    if exc.code != 19:  # ENODEV: gone with its peer meanwhile
                        raise
    for name in found["namespaces"]:
        netns.remove(name)

    removed_dir = None
    if found["lab_dir"]:
        if os.path.exists(os.path.join(lab_dir, STATE_FILE)) or not os.listdir(lab_dir):
            shutil.rmtree(lab_dir)
            removed_dir = lab_dir
        else:
            raise LabError(f"lab_dir: {lab_dir} has no {STATE_FILE}; not removing a directory the lab did not make")
    return {
        "processes": sorted(set(ended)),
        "root_links": removed_links,
        "namespaces": found["namespaces"],
        "lab_dir": removed_dir,
    }


# --------------------------------------------------------------------------------------------------------------
# Up


def _run(argv: list[str], what: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise LabError(f"{what}: {shlex.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _keygen(path: str, comment: str) -> tuple[str, str]:
    """A new ed25519 key pair at path (+ .pub); returns (key type, base64 key) of the public key."""
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", path], "ssh-keygen")
    key_type, key = read_text(path + ".pub").split()[:2]
    return key_type, key


def _sshd_config(host: dict, host_dir: str) -> str:
    return "\n".join(
        [
            f"ListenAddress {host['mgmt_ip']}",
            f"HostKey {host_dir}/ssh_host_ed25519_key",
            "PidFile none",  # the lab records the pid itself
            "UsePAM no",
            "StrictModes yes",
            "PermitRootLogin prohibit-password",
            f"AuthorizedKeysFile {AUTHORIZED_KEYS}",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PrintMotd no",
            "X11Forwarding no",
            "MaxStartups 64:30:128",  # ansible forks connect at once
            "MaxSessions 64",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


def _host_setup(host: dict, lab_dir: str, private_dirs: list[str]) -> str:
    """The shell run as PID 1 of a new host before it becomes the sshd."""
    host_dir = f"{lab_dir}/hosts/{host['name']}"
    q = shlex.quote
    steps = ["set -e", f"hostname {q(host['name'])}", "mount -t bpf bpf /sys/fs/bpf"]
    for path in private_dirs:
        layer = f"{host_dir}/overlay/{path.strip('/').replace('/', '_')}"
        options = f"lowerdir={path},upperdir={layer}/upper,workdir={layer}/work"
        steps.append(f"mount -t overlay overlay -o {q(options)} {q(path)}")
    if "/etc" in private_dirs:
        # A Debian host's boot configuration, for the kernel_cmdline module (this machine boots without GRUB).
        steps.append(
            f"[ -e /etc/default/grub ] || {{ mkdir -p /etc/default; printf %s {q(LAB_GRUB_DEFAULTS)} "
            "> /etc/default/grub; }"
        )
    steps += [
        "mount -t tmpfs -o mode=0755 tmpfs /run",
        "mkdir -m 0755 /run/sshd",
        f"mkdir -m 0700 {q(os.path.dirname(AUTHORIZED_KEYS))}",
        f"install -m 0600 {q(lab_dir + '/id_ed25519.pub')} {q(AUTHORIZED_KEYS)}",
        f"exec {SSHD} -D -f {q(host_dir + '/sshd_config')} -E {q(host_dir + '/sshd.log')}",
    ]
    return "; ".join(steps)


def _start_host(spec: dict, host: dict, host_dir: str) -> int:
    namespace = ns_name(spec["prefix"], host["name"])
    argv = ["ip", "netns", "exec", namespace]
    argv += ["unshare", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private"]
    argv += ["sh", "-c", _host_setup(host, spec["lab_dir"], spec["private_dirs"])]
    with open(f"{host_dir}/start.log", "wb") as log:
        # A session of its own: the host outlives this process and is not hit by the caller's terminal signals.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    with open(f"{host_dir}/pid", "w", encoding="utf-8") as fh:
        fh.write(f"{proc.pid}\n")
    return proc.pid


def _wait_listening(spec: dict, pids: dict[str, int], timeout: float) -> None:
    waiting = dict(pids)
    deadline = time.monotonic() + timeout
    while waiting:
        for name, pid in list(waiting.items()):
            host_dir = f"{spec['lab_dir']}/hosts/{name}"
            if "Server listening on" in read_text(f"{host_dir}/sshd.log"):
                del waiting[name]
            elif not is_alive(pid):
                logs = (read_text(f"{host_dir}/start.log") + read_text(f"{host_dir}/sshd.log")).strip()
                raise LabError(f"host {name!r}: sshd exited at start: {logs[-600:]}")
        if waiting and time.monotonic() > deadline:
            raise LabError(f"hosts {sorted(waiting)}: sshd not listening after {timeout:.0f} s")
        time.sleep(0.05)


def _set_sysctls(namespace: str, forwarding: bool) -> None:
    # accept_dad=0 before any interface exists in the namespace: addresses are usable at once.
    values = ["net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"]
    if forwarding:
        values += ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"]
    _run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w", *values], f"sysctl in {namespace}")


def _add_addresses(ns, index: int, addresses: list[str]) -> None:
    for value in addresses:
        iface = ipaddress.ip_interface(value)
        flags = IFA_F_NODAD if iface.version == 6 else 0
        ns.addr("add", index=index, address=str(iface.ip), prefixlen=iface.network.prefixlen, flags=flags)


def _make_links(spec: dict) -> None:
    prefix = spec["prefix"]
    for link in spec["links"]:
        a, b = link["ends"]
        queues = {"num_rx_queues": link["queues"], "num_tx_queues": link["queues"]} if link["queues"] else {}
        peer = {"ifname": b["ifname"], **queues}
        if b["node"] != a["node"]:
            peer["net_ns_fd"] = ns_name(prefix, b["node"])
        # Created inside a's namespace, the peer directly inside b's: the names never pass through the root
        # namespace, where they could collide with the machine's own interfaces.
        with NetNS(ns_name(prefix, a["node"]), flags=0) as ns:
            ns.link("add", ifname=a["ifname"], kind="veth", peer=peer, **queues)
        for end in (a, b):
            with NetNS(ns_name(prefix, end["node"]), flags=0) as ns:
                index = ns.link_lookup(ifname=end["ifname"])[0]
                ns.link("set", index=index, mtu=link["mtu"])
                _add_addresses(ns, index, end["addresses"])
                ns.link("set", index=index, state="up")
            # A veth takes XDP_TX and redirected frames only with NAPI on: GRO on every end lets an XDP program
            # anywhere in the lab send into any lab link, as a NIC would take them.
            _run(["ip", "netns", "exec", ns_name(prefix, end["node"]), "ethtool", "-K", end["ifname"], "gro", "on"],
                 f"gro on {end['node']}:{end['ifname']}")  # fmt: skip


def _add_routes(spec: dict) -> None:
    for node in spec["hosts"] + spec["endpoints"]:
        if node["routes"]:
            with NetNS(ns_name(spec["prefix"], node["name"]), flags=0) as ns:
                for route in node["routes"]:
                    ns.route("add", dst=route["to"], gateway=route["via"])


def up(spec: dict, start_timeout: float = 20.0) -> dict:
    """Build the lab described by a normalized spec. Nothing of its prefix may exist (call down first).

    On any failure the half-built lab is removed again and LabError raised.
    """
    prefix, lab_dir = spec["prefix"], spec["lab_dir"]
    make_lab_dir(lab_dir)
    os.mkdir(f"{lab_dir}/hosts")
    state = {"spec": spec, "status": "building", "hosts": {}}
    save_state(lab_dir, state)  # first, so an interrupted start can be cleaned up by prefix + record
    try:
        client_key = f"{lab_dir}/id_ed25519"
        _keygen(client_key, f"xdpfleet-lab-{prefix}")
        nodes = spec["hosts"] + spec["endpoints"]
        for node in nodes:
            namespace = ns_name(prefix, node["name"])
            netns.create(namespace)
            _set_sysctls(namespace, node["forwarding"])
            with NetNS(namespace, flags=0) as ns:
                ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")

        subnet = ipaddress.ip_network(spec["mgmt_subnet"])
        with IPRoute() as ipr:
            ipr.link("add", ifname=bridge_name(prefix), kind="bridge")
            bridge = ipr.link_lookup(ifname=bridge_name(prefix))[0]
            ipr.addr("add", index=bridge, address=str(next(subnet.hosts())), prefixlen=subnet.prefixlen)
            ipr.link("set", index=bridge, state="up")
            for host in spec["hosts"]:
                namespace = ns_name(prefix, host["name"])
                root_side = mgmt_veth_name(prefix, host["name"])
                ipr.link("add", ifname=root_side, kind="veth", peer={"ifname": MGMT_IFNAME, "net_ns_fd": namespace})
                index = ipr.link_lookup(ifname=root_side)[0]
                ipr.link("set", index=index, master=bridge, state="up")
                with NetNS(namespace, flags=0) as ns:
                    index = ns.link_lookup(ifname=MGMT_IFNAME)[0]
                    ns.addr("add", index=index, address=host["mgmt_ip"], prefixlen=subnet.prefixlen)
                    ns.link("set", index=index, state="up")
        _make_links(spec)
        _add_routes(spec)

        known_hosts = []
        pids = {}
        for host in spec["hosts"]:
            host_dir = f"{lab_dir}/hosts/{host['name']}"
            os.makedirs(host_dir)
            for path in spec["private_dirs"]:
                layer = f"{host_dir}/overlay/{path.strip('/').replace('/', '_')}"
                os.makedirs(f"{layer}/upper")
                os.makedirs(f"{layer}/work")
            key_type, key = _keygen(f"{host_dir}/ssh_host_ed25519_key", f"{prefix}-{host['name']}")
            known_hosts.append(f"{host['mgmt_ip']} {key_type} {key}\n")
            with open(f"{host_dir}/sshd_config", "w", encoding="utf-8") as fh:
                fh.write(_sshd_config(host, host_dir))
            pids[host["name"]] = _start_host(spec, host, host_dir)
            state["hosts"][host["name"]] = {"pid": pids[host["name"]], "mgmt_ip": host["mgmt_ip"]}
            save_state(lab_dir, state)
        with open(f"{lab_dir}/known_hosts", "w", encoding="utf-8") as fh:
            fh.writelines(known_hosts)
        _wait_listening(spec, pids, start_timeout)
    except Exception as exc:
        try:
            down(prefix, lab_dir)
        except Exception as cleanup_exc:  # report both; the first one is the cause
            raise LabError(f"lab start failed: {exc}; cleanup also failed: {cleanup_exc}") from exc
        if isinstance(exc, LabError):
            raise
        raise LabError(f"lab start failed: {type(exc).__name__}: {exc}") from exc

    state["status"] = "up"
    state["namespaces"] = sorted(ns_name(prefix, n["name"]) for n in nodes)
    state["root_links"] = sorted([bridge_name(prefix)] + [mgmt_veth_name(prefix, h["name"]) for h in spec["hosts"]])
    save_state(lab_dir, state)
    return describe(spec)


def restart_host(lab_dir: str, name: str, start_timeout: float = 20.0) -> int:
    """Restart one host as a reboot would: its processes end (sshd is PID 1: the PID namespace goes with it), and with
    its mount namespace go its bpffs and /run, so every pin and every XDP link held only by a pin is gone. What
    stays is what survives a reboot: the network namespace with its interfaces and the overlay upper dirs, i.e. the
    host's /etc, /var and /boot (/var/lib/xdpfleet among them). Returns the new unshare pid."""
    state = load_state(lab_dir)
    spec = (state or {}).get("spec") or {}
    host = next((h for h in spec.get("hosts", []) if h["name"] == name), None)
    if host is None:
        raise LabError(f"host {name!r} is not a host of the lab in {lab_dir}")
    pid, _sshd_pid = host_pids(lab_dir, name)
    _end_processes([*child_pids(pid), pid])
    host_dir = f"{lab_dir}/hosts/{name}"
    with open(f"{host_dir}/sshd.log", "w", encoding="utf-8"):
        pass  # _wait_listening reads this log: start from an empty one
    new_pid = _start_host(spec, host, host_dir)
    state["hosts"][name]["pid"] = new_pid
    save_state(lab_dir, state)
    _wait_listening(spec, {name: new_pid}, start_timeout)
    return new_pid


def describe(spec: dict) -> dict:
    """What the module returns about a running lab."""
    prefix, lab_dir = spec["prefix"], spec["lab_dir"]
    state = load_state(lab_dir) or {}
    hosts = {}
    for host in spec["hosts"]:
        pid = (state.get("hosts") or {}).get(host["name"], {}).get("pid")
        children = child_pids(pid) if pid else []
        hosts[host["name"]] = {
            "namespace": ns_name(prefix, host["name"]),
            "mgmt_ip": host["mgmt_ip"],
            "pid": pid,
            "sshd_pid": children[0] if children else None,
        }
    return {
        "lab_dir": lab_dir,
        "private_key": f"{lab_dir}/id_ed25519",
        "known_hosts": f"{lab_dir}/known_hosts",
        "bridge": bridge_name(prefix),
        "hosts": hosts,
        "endpoints": {e["name"]: {"namespace": ns_name(prefix, e["name"])} for e in spec["endpoints"]},
    }
