# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt)
"""The lab as it is on the machine: its lab dir (who may own it, making it), its record (<lab_dir>/state.json), what
exists by its prefix (namespaces, links, processes), and its health against its description.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import stat

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.lab_spec import (
    LabError,
    bridge_name,
    mgmt_veth_name,
    ns_name,
)

with contextlib.suppress(ImportError):  # lab.py reports a missing pyroute2 (HAS_PYROUTE2) before any of this runs
    from pyroute2 import IPRoute, NetNS, netns

STATE_FILE = "state.json"


def check_lab_dir_ancestors(lab_dir: str) -> None:
    """Refuse a lab dir whose parent directories let another user replace it: each must belong to root or to this
    user and, where group or others may write into it, have the sticky bit (as /tmp has)."""
    me = os.geteuid()
    parent = os.path.dirname(lab_dir)
    while True:
        st = os.stat(parent)
        if st.st_uid not in (0, me):
            raise LabError(
                f"lab_dir: {lab_dir} lies in {parent}, which belongs to uid {st.st_uid}: a directory above the lab "
                f"dir must belong to root or to uid {me} (the user running the lab)"
            )
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise LabError(
                f"lab_dir: {lab_dir} lies in {parent} (mode {stat.S_IMODE(st.st_mode):04o}), which others may write "
                "into without the sticky bit: they could replace the lab dir"
            )
        if parent == "/":
            return
        parent = os.path.dirname(parent)


def check_lab_dir_owner(lab_dir: str) -> None:
    """Refuse an existing lab dir that another user made or may change: its sshd trusts the keys inside it and runs
    as root, so it must be a real directory (not a symbolic link) of this user's with mode 0700."""
    st = os.lstat(lab_dir)
    if stat.S_ISLNK(st.st_mode):
        raise LabError(f"lab_dir: {lab_dir} is a symbolic link, not a directory of the lab's own; remove it")
    if not stat.S_ISDIR(st.st_mode):
        raise LabError(f"lab_dir: {lab_dir} exists and is not a directory; remove it")
    if st.st_uid != os.geteuid():
        raise LabError(
            f"lab_dir: {lab_dir} belongs to uid {st.st_uid}, not to uid {os.geteuid()} (the user running the lab): "
            "someone else made it; remove it"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        raise LabError(
            f"lab_dir: {lab_dir} has mode {stat.S_IMODE(st.st_mode):04o}, not 0700: others could read or change "
            "the lab's keys; remove it"
        )
    check_lab_dir_ancestors(lab_dir)


def make_lab_dir(lab_dir: str) -> None:
    """Create the lab dir, mode 0700 (and its missing parents, also 0700): mkdir fails on anything already there
    (a directory, a file, a symbolic link) instead of using it, so whoever made a path first cannot hand the lab a
    directory they control."""
    missing = []
    parent = os.path.dirname(lab_dir)
    while not os.path.lexists(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    check_lab_dir_ancestors(missing[-1] if missing else lab_dir)
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: the check below tells whose it is
            os.mkdir(path, 0o700)
    try:
        os.mkdir(lab_dir, 0o700)
    except FileExistsError:
        raise LabError(f"lab_dir: {lab_dir} already exists") from None
    os.chmod(lab_dir, 0o700)  # mkdir's mode passed through the umask
    check_lab_dir_owner(lab_dir)


def mgmt_clashes(spec: dict) -> list[str]:
    """Addresses and routes in the root namespace that overlap the lab's management subnet.

    The lab's own bridge is excluded: a running or stale lab of the same prefix does not clash with itself.
    The default route overlaps everything and is ignored.
    """
    subnet = ipaddress.ip_network(spec["mgmt_subnet"])
    own = bridge_name(spec["prefix"])
    clashes = []
    with IPRoute() as ipr:
        names = {link["index"]: link.get("ifname") for link in ipr.get_links()}
        for addr in ipr.get_addr(family=4):
            ifname = names.get(addr["index"], f"index {addr['index']}")
            iface = ipaddress.ip_interface(f"{addr.get('address')}/{addr['prefixlen']}")
            if ifname != own and iface.network.overlaps(subnet):
                clashes.append(f"address {iface} on {ifname}")
        for route in ipr.route("dump", family=4):
            if not route["dst_len"]:
                continue
            dst = ipaddress.ip_network(f"{route.get('dst')}/{route['dst_len']}", strict=False)
            ifname = names.get(route.get("oif"), "?")
            if ifname != own and dst.overlaps(subnet):
                via = f" via {route.get('gateway')}" if route.get("gateway") else ""
                clashes.append(f"route {dst}{via} dev {ifname} table {route.get('table')}")
    return sorted(set(clashes))


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def is_alive(pid: int) -> bool:
    stat = read_text(f"/proc/{pid}/stat")
    # A zombie has exited; its parent (init) reaps it eventually.
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def child_pids(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        out += [int(child) for child in read_text(f"/proc/{pid}/task/{task}/children").split()]
    return out


def is_lab_process(pid: int, lab_dir: str) -> bool:
    """Guards against pid reuse: a host's unshare has the lab dir in its command line."""
    return is_alive(pid) and f"{lab_dir}/" in read_text(f"/proc/{pid}/cmdline").replace("\0", " ")


def host_pids(lab_dir: str, host: str) -> tuple[int, int]:
    """(unshare pid, sshd pid) of a running host, both as seen from the root namespace.

    The sshd is PID 1 of the host's PID namespace; enter the host with `nsenter -t <sshd pid> -m -n -u -p`.
    """
    state = load_state(lab_dir)
    pid = ((state or {}).get("hosts") or {}).get(host, {}).get("pid")
    if not pid or not is_lab_process(pid, lab_dir):
        raise LabError(f"host {host!r} of the lab in {lab_dir} is not running")
    children = child_pids(pid)
    if not children:
        raise LabError(f"host {host!r}: unshare pid {pid} has no sshd child")
    return pid, children[0]


def load_state(lab_dir: str) -> dict | None:
    """The lab's record, None when there is none. Raises LabError for a lab dir that is not safely the lab's."""
    if not os.path.lexists(lab_dir):
        return None
    check_lab_dir_owner(lab_dir)
    try:
        return records.Record(lab_dir, STATE_FILE, "lab_dir").load()
    except records.RecordError:
        return None  # as no record: `down` still finds what the lab made by its prefix


def save_state(lab_dir: str, state: dict) -> None:
    records.Record(lab_dir, STATE_FILE, "lab_dir").save(state)


def ns_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return None


def existing(prefix: str, lab_dir: str) -> dict:
    """Everything of this prefix that exists now: namespaces, root-namespace links, lab dir, live processes."""
    if os.path.lexists(lab_dir):
        check_lab_dir_owner(lab_dir)
    mine = prefix + "-"
    namespaces = sorted(n for n in netns.listnetns() if n.startswith(mine))
    with IPRoute() as ipr:
        links = sorted(link.get("ifname") for link in ipr.get_links() if link.get("ifname", "").startswith(mine))
    hosts = _recorded_hosts(lab_dir)
    inodes = {ns_inode(n) for n in namespaces} - {None}
    return {
        "namespaces": namespaces,
        "root_links": links,
        "lab_dir": lab_dir if os.path.isdir(lab_dir) else None,
        "hosts": hosts,  # host name -> pid of its unshare, for the hosts still running
        "processes": sorted(set(hosts.values()) | set(processes_in_netns(inodes))),
    }


def _recorded_hosts(lab_dir: str) -> dict[str, int]:
    recorded = ((load_state(lab_dir) or {}).get("hosts") or {}).items()
    return {name: h["pid"] for name, h in recorded if h.get("pid") and is_lab_process(h["pid"], lab_dir)}


def processes_in_netns(inodes: set[int]) -> list[int]:
    """Processes (other than this one) whose network namespace is one of the lab's."""
    if not inodes:
        return []
    wanted = {f"net:[{ino}]" for ino in inodes}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") in wanted and is_alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return sorted(found)


def _link_names(namespace: str) -> set[str] | None:
    if ns_inode(namespace) is None:
        return None
    with NetNS(namespace, flags=0) as ns:
        return {link.get("ifname") for link in ns.get_links()}


def health(spec: dict) -> list[str]:
    """Why the running lab does not match `spec` (empty list: it does, nothing to do)."""
    prefix, lab_dir = spec["prefix"], spec["lab_dir"]
    state = load_state(lab_dir)
    if state is None:
        return ["no lab is recorded in " + lab_dir]
    problems = []
    if state.get("status") != "up":
        problems.append(f"the recorded lab is {state.get('status')!r}, not 'up' (a start was interrupted)")
    if state.get("spec") != spec:
        problems.append("the lab description changed")
    found = existing(prefix, lab_dir)
    nodes = [h["name"] for h in spec["hosts"]] + [e["name"] for e in spec["endpoints"]]
    wanted_ns = sorted(ns_name(prefix, n) for n in nodes)
    if found["namespaces"] != wanted_ns:
        problems.append(f"namespaces are {found['namespaces']}, want {wanted_ns}")
    wanted_links = sorted([bridge_name(prefix)] + [mgmt_veth_name(prefix, h["name"]) for h in spec["hosts"]])
    if found["root_links"] != wanted_links:
        problems.append(f"root-namespace links are {found['root_links']}, want {wanted_links}")
    for host in spec["hosts"]:
        try:
            host_pids(lab_dir, host["name"])
        except LabError as exc:
            problems.append(str(exc))
    if problems:
        return problems
    for link in spec["links"]:
        for end in link["ends"]:
            names = _link_names(ns_name(prefix, end["node"])) or set()
            if end["ifname"] not in names:
                problems.append(f"{end['node']}:{end['ifname']} is missing")
    return problems
