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

Used on the controller by the ``xdpfleet.fabric.lab`` module and directly by the tests (tests/lablib.py).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import time

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import records

try:
    from pyroute2 import IPRoute, NetNS, netns
    from pyroute2.netlink.exceptions import NetlinkError

    HAS_PYROUTE2 = True
except ImportError:  # the module reports this with missing_required_lib
    HAS_PYROUTE2 = False

ALLOWED_NETWORKS = (ipaddress.ip_network("198.51.100.0/24"), ipaddress.ip_network("2001:db8::/32"))
IFNAMSIZ_MAX = 15  # IFNAMSIZ is 16 including the trailing NUL
SSHD = "/usr/sbin/sshd"
# The client key a host's sshd accepts, copied at the host's start into its own /run (a fresh tmpfs, mode 0755,
# root's): sshd checks with StrictModes that no one but root can write the file or a directory above it, which no
# path under /tmp passes (/tmp is writable by everyone).
AUTHORIZED_KEYS = "/run/lab-sshd/authorized_keys"
STATE_FILE = "state.json"
MGMT_IFNAME = "mgmt0"
DEFAULT_PRIVATE_DIRS = ("/etc", "/var", "/boot")
# /etc/default/grub as Debian installs it, written into a lab host's private /etc when the machine has none.
LAB_GRUB_DEFAULTS = """\
# The lab host's boot configuration (Debian layout). The lab has no boot loader: nothing reads this file at boot.
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""
"""
# Directories a host must not overlay: kernel/virtual filesystems, the lab dir's home, and the root itself.
FORBIDDEN_PRIVATE_DIRS = ("/", "/proc", "/sys", "/dev", "/run", "/tmp")
IFA_F_NODAD = 0x02

_NAME_RE = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?")  # valid as a hostname and inside an ifname
_PREFIX_RE = re.compile(r"[a-z][a-z0-9]{0,5}")
_IFNAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_PATH_RE = re.compile(r"/[A-Za-z0-9._/-]+")  # safe inside overlay mount options and sh -c

_ROUTES = {
    "type": "list",
    "elements": "dict",
    "default": [],
    "options": {"to": {"type": "str", "default": "default"}, "via": {"type": "str", "required": True}},
}
# The options of the xdpfleet.fabric.lab module, also applied (types and defaults) by normalize() to a description
# that did not come through the module (tests/lablib.py).
ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "prefix": {"type": "str", "required": True},
    "mgmt_subnet": {"type": "str"},
    "lab_dir": {"type": "path"},
    "private_dirs": {"type": "list", "elements": "path", "default": list(DEFAULT_PRIVATE_DIRS)},
    "hosts": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "name": {"type": "str", "required": True},
            "mgmt_ip": {"type": "str", "required": True},
            "forwarding": {"type": "bool", "default": False},
            "routes": _ROUTES,
        },
    },
    "endpoints": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "name": {"type": "str", "required": True},
            "forwarding": {"type": "bool", "default": False},
            "routes": _ROUTES,
        },
    },
    "links": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "ends": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "node": {"type": "str", "required": True},
                    "ifname": {"type": "str", "required": True},
                    "addresses": {"type": "list", "elements": "str", "default": []},
                },
            },
            "mtu": {"type": "int", "default": 1500},
            "queues": {"type": "int"},
        },
    },
    "start_timeout": {"type": "float", "default": 20.0},
}


class LabError(Exception):
    """A refusal or failure; the message names the field or the object concerned."""


def default_lab_dir(prefix: str) -> str:
    return f"/tmp/xdpfleet-lab-{prefix}"


def ns_name(prefix: str, node: str) -> str:
    return f"{prefix}-{node}"


def bridge_name(prefix: str) -> str:
    return f"{prefix}-mgmt"


def mgmt_veth_name(prefix: str, host: str) -> str:
    return f"{prefix}-{host}-m"


# --------------------------------------------------------------------------------------------------------------
# Validation: everything is checked before anything changes; every message starts with the field it concerns.


def _allowed(net, field: str) -> None:
    if not any(net.version == allowed.version and net.subnet_of(allowed) for allowed in ALLOWED_NETWORKS):
        raise LabError(f"{field}: {net} is outside the lab ranges 198.51.100.0/24 and 2001:db8::/32")


def _network(value, field: str):
    try:
        return ipaddress.ip_network(str(value), strict=True)
    except ValueError as exc:
        raise LabError(f"{field}: {value!r} is not a network address with prefix length ({exc})") from None


def _interface(value, field: str):
    if "/" not in str(value):
        raise LabError(f"{field}: {value!r} needs a prefix length, e.g. 198.51.100.1/30")
    try:
        iface = ipaddress.ip_interface(str(value))
    except ValueError as exc:
        raise LabError(f"{field}: {value!r} is not an address with prefix length ({exc})") from None
    _allowed(iface.network, field)
    return iface


def _address(value, field: str):
    try:
        addr = ipaddress.ip_address(str(value))
    except ValueError:
        raise LabError(f"{field}: {value!r} is not an IP address") from None
    _allowed(ipaddress.ip_network(addr), field)
    return addr


def _name(value, field: str) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise LabError(f"{field}: {value!r} must be lower-case letters, digits and '-' (a valid hostname)")
    return value


def _routes(routes, field: str) -> list[dict]:
    out = []
    for i, route in enumerate(routes):
        rfield = f"{field}[{i}]"
        via = _address(route["via"], f"{rfield}.via")
        to = route["to"]
        if to == "default":
            dst = ipaddress.ip_network("0.0.0.0/0" if via.version == 4 else "::/0")
        else:
            dst = _network(to, f"{rfield}.to")
            _allowed(dst, f"{rfield}.to")
        if dst.version != via.version:
            raise LabError(f"{rfield}.via: {via} is not of the same IP version as {rfield}.to {dst}")
        out.append({"to": str(dst), "via": str(via)})
    return out


def check_prefix(prefix) -> str:
    if not isinstance(prefix, str) or not _PREFIX_RE.fullmatch(prefix):
        raise LabError(f"prefix: {prefix!r} must be 1-6 lower-case letters or digits, starting with a letter")
    return prefix


def check_lab_dir(lab_dir: str | None, prefix: str) -> str:
    """The lab dir to use (default /tmp/xdpfleet-lab-<prefix>), normalized and checked."""
    lab_dir = os.path.normpath(lab_dir or default_lab_dir(prefix))
    if not _PATH_RE.fullmatch(lab_dir) or lab_dir.count("/") < 2:
        raise LabError(f"lab_dir: {lab_dir!r} must be an absolute path of at least two levels, [A-Za-z0-9._-]")
    return lab_dir


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


def _make_lab_dir(lab_dir: str) -> None:
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


def _without_nulls(value):
    """A null option is one left out, so that its default applies (Ansible keeps an explicit null)."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def normalize(params: dict) -> dict:
    """Check a lab description and return its canonical form (plain JSON types, stored in state.json).

    params: prefix, mgmt_subnet, lab_dir (optional), private_dirs (optional), hosts, endpoints, links, as
    documented in the module (ARGUMENT_SPEC). Raises LabError naming the field on the first problem.
    """
    checked = ArgumentSpecValidator(ARGUMENT_SPEC).validate(_without_nulls(params))
    if checked.error_messages:
        raise LabError("; ".join(checked.error_messages))
    params = checked.validated_parameters
    prefix = check_prefix(params["prefix"])

    subnet = _network(params["mgmt_subnet"], "mgmt_subnet")
    if subnet.version != 4:
        raise LabError(f"mgmt_subnet: {subnet} must be an IPv4 network")
    _allowed(subnet, "mgmt_subnet")
    if subnet.prefixlen > 29:
        raise LabError(f"mgmt_subnet: {subnet} is too small; use a /29 or larger (bridge + hosts)")
    bridge_ip = next(subnet.hosts())

    lab_dir = check_lab_dir(params["lab_dir"], prefix)

    private_dirs = []
    for i, path in enumerate(params["private_dirs"]):
        field = f"private_dirs[{i}]"
        path = os.path.normpath(str(path))
        if not _PATH_RE.fullmatch(path) or path in FORBIDDEN_PRIVATE_DIRS:
            raise LabError(f"{field}: {path!r} cannot be made private (not one of {', '.join(FORBIDDEN_PRIVATE_DIRS)})")
        if not os.path.isdir(path):
            raise LabError(f"{field}: {path} is not a directory on this machine")
        if lab_dir == path or lab_dir.startswith(path + "/"):
            raise LabError(f"lab_dir: {lab_dir} must not lie inside the private directory {path} ({field})")
        private_dirs.append(path)

    nodes: dict[str, str] = {}  # name -> "host" | "endpoint"
    mgmt_ips: dict[str, str] = {}
    hosts = []
    for i, host in enumerate(params["hosts"]):
        field = f"hosts[{i}]"
        name = _name(host["name"], f"{field}.name")
        if name in nodes:
            raise LabError(f"{field}.name: {name!r} is defined twice")
        root_link = mgmt_veth_name(prefix, name)
        if len(root_link) > IFNAMSIZ_MAX:
            raise LabError(
                f"{field}.name: {name!r} makes the root-namespace link name {root_link!r} longer than "
                f"{IFNAMSIZ_MAX} characters (IFNAMSIZ); use a shorter host name or prefix"
            )
        if not host["mgmt_ip"]:
            raise LabError(f"{field}.mgmt_ip: missing for host {name!r} (set lab_mgmt_ip in the inventory)")
        ip = _address(host["mgmt_ip"], f"{field}.mgmt_ip")
        if ip not in subnet or ip in (subnet.network_address, subnet.broadcast_address, bridge_ip):
            raise LabError(
                f"{field}.mgmt_ip: {ip} must be a host address in mgmt_subnet {subnet} other than {bridge_ip} "
                "(the bridge)"
            )
        if str(ip) in mgmt_ips:
            raise LabError(f"{field}.mgmt_ip: {ip} is already used by host {mgmt_ips[str(ip)]!r}")
        mgmt_ips[str(ip)] = name
        nodes[name] = "host"
        hosts.append(
            {
                "name": name,
                "mgmt_ip": str(ip),
                "forwarding": host["forwarding"],
                "routes": _routes(host["routes"], f"{field}.routes"),
            }
        )

    endpoints = []
    for i, endpoint in enumerate(params["endpoints"]):
        field = f"endpoints[{i}]"
        name = _name(endpoint["name"], f"{field}.name")
        if name in nodes:
            raise LabError(f"{field}.name: {name!r} is already a {nodes[name]} of the lab")
        nodes[name] = "endpoint"
        endpoints.append(
            {
                "name": name,
                "forwarding": endpoint["forwarding"],
                "routes": _routes(endpoint["routes"], f"{field}.routes"),
            }
        )

    ifnames: dict[tuple[str, str], str] = {(h["name"], MGMT_IFNAME): "the management interface" for h in hosts}
    ifnames.update({(n, "lo"): "the loopback" for n in nodes})
    links = []
    for i, link in enumerate(params["links"]):
        field = f"links[{i}]"
        ends = link["ends"]
        if len(ends) != 2:
            raise LabError(f"{field}.ends: a link has exactly two ends, got {len(ends)}")
        out_ends = []
        for j, end in enumerate(ends):
            efield = f"{field}.ends[{j}]"
            node = end["node"]
            if node not in nodes:
                known = ", ".join(sorted(nodes)) or "none"
                raise LabError(f"{efield}.node: {node!r} is not a host or endpoint of the lab (known: {known})")
            ifname = end["ifname"]
            if not isinstance(ifname, str) or not _IFNAME_RE.fullmatch(ifname):
                raise LabError(f"{efield}.ifname: {ifname!r} is not a valid interface name")
            if len(ifname) > IFNAMSIZ_MAX:
                raise LabError(f"{efield}.ifname: {ifname!r} is longer than {IFNAMSIZ_MAX} characters (IFNAMSIZ)")
            if (node, ifname) in ifnames:
                raise LabError(f"{efield}.ifname: {node} already has an interface {ifname!r} ({ifnames[node, ifname]})")
            ifnames[node, ifname] = field
            addresses = []
            for k, value in enumerate(end["addresses"]):
                iface = _interface(value, f"{efield}.addresses[{k}]")
                if nodes[node] == "host" and iface.network.overlaps(subnet):
                    raise LabError(f"{efield}.addresses[{k}]: {iface} overlaps the management subnet {subnet}")
                addresses.append(str(iface))
            out_ends.append({"node": node, "ifname": ifname, "addresses": addresses})
        mtu = link["mtu"]
        if not 68 <= mtu <= 65535:
            raise LabError(f"{field}.mtu: {mtu} is outside 68..65535")
        queues = link["queues"]
        if queues is not None and not 1 <= int(queues) <= 256:
            raise LabError(f"{field}.queues: {queues} is outside 1..256")
        links.append({"ends": out_ends, "mtu": mtu, "queues": None if queues is None else int(queues)})

    return {
        "prefix": prefix,
        "mgmt_subnet": str(subnet),
        "lab_dir": lab_dir,
        "private_dirs": private_dirs,
        "hosts": hosts,
        "endpoints": endpoints,
        "links": links,
    }


def summary(spec: dict | None) -> list[str]:
    """A readable one-object-per-line view of a lab, for --diff."""
    if not spec:
        return []
    lines = [f"lab {spec['prefix']}: mgmt {spec['mgmt_subnet']} bridge {bridge_name(spec['prefix'])}"]
    for host in spec["hosts"]:
        extra = " forwarding" if host["forwarding"] else ""
        lines.append(f"host {host['name']}: ns {ns_name(spec['prefix'], host['name'])} mgmt {host['mgmt_ip']}{extra}")
        lines += [f"  route {r['to']} via {r['via']}" for r in host["routes"]]
    for endpoint in spec["endpoints"]:
        extra = " forwarding" if endpoint["forwarding"] else ""
        lines.append(f"endpoint {endpoint['name']}: ns {ns_name(spec['prefix'], endpoint['name'])}{extra}")
        lines += [f"  route {r['to']} via {r['via']}" for r in endpoint["routes"]]
    for link in spec["links"]:
        a, b = link["ends"]
        queues = f" queues {link['queues']}" if link["queues"] else ""
        lines.append(f"link {a['node']}:{a['ifname']} <-> {b['node']}:{b['ifname']} mtu {link['mtu']}{queues}")
        lines += [f"  {end['node']}:{end['ifname']} {addr}" for end in (a, b) for addr in end["addresses"]]
    return lines


# --------------------------------------------------------------------------------------------------------------
# What exists now


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


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    stat = _read(f"/proc/{pid}/stat")
    # A zombie has exited; its parent (init) reaps it eventually.
    return bool(stat) and stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _children(pid: int) -> list[int]:
    out = []
    for task in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        out += [int(child) for child in _read(f"/proc/{pid}/task/{task}/children").split()]
    return out


def _is_lab_process(pid: int, lab_dir: str) -> bool:
    """Guards against pid reuse: a host's unshare has the lab dir in its command line."""
    return _alive(pid) and f"{lab_dir}/" in _read(f"/proc/{pid}/cmdline").replace("\0", " ")


def host_pids(lab_dir: str, host: str) -> tuple[int, int]:
    """(unshare pid, sshd pid) of a running host, both as seen from the root namespace.

    The sshd is PID 1 of the host's PID namespace; enter the host with `nsenter -t <sshd pid> -m -n -u -p`.
    """
    state = load_state(lab_dir)
    pid = ((state or {}).get("hosts") or {}).get(host, {}).get("pid")
    if not pid or not _is_lab_process(pid, lab_dir):
        raise LabError(f"host {host!r} of the lab in {lab_dir} is not running")
    children = _children(pid)
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


def _save_state(lab_dir: str, state: dict) -> None:
    records.Record(lab_dir, STATE_FILE, "lab_dir").save(state)


def _ns_inode(name: str) -> int | None:
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
    inodes = {_ns_inode(n) for n in namespaces} - {None}
    return {
        "namespaces": namespaces,
        "root_links": links,
        "lab_dir": lab_dir if os.path.isdir(lab_dir) else None,
        "hosts": hosts,  # host name -> pid of its unshare, for the hosts still running
        "processes": sorted(set(hosts.values()) | set(_processes_in_netns(inodes))),
    }


def _recorded_hosts(lab_dir: str) -> dict[str, int]:
    recorded = ((load_state(lab_dir) or {}).get("hosts") or {}).items()
    return {name: h["pid"] for name, h in recorded if h.get("pid") and _is_lab_process(h["pid"], lab_dir)}


def _processes_in_netns(inodes: set[int]) -> list[int]:
    """Processes (other than this one) whose network namespace is one of the lab's."""
    if not inodes:
        return []
    wanted = {f"net:[{ino}]" for ino in inodes}
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") in wanted and _alive(int(entry)):
                    found.append(int(entry))
            except OSError:
                continue
    return sorted(found)


def _link_names(namespace: str) -> set[str] | None:
    if _ns_inode(namespace) is None:
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


# --------------------------------------------------------------------------------------------------------------
# Down


def _end_processes(pids: list[int], timeout: float = 5.0) -> list[int]:
    """SIGTERM, wait, SIGKILL what is left, wait again. Returns the pids that were alive."""
    alive = [p for p in pids if _alive(p)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while any(_alive(p) for p in alive) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not any(_alive(p) for p in alive):
            break
    stuck = [p for p in alive if _alive(p)]
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
        ended += _end_processes([*_children(pid), pid])
    # Then anything else still running inside a lab namespace (e.g. a traffic generator a test left behind).
    inodes = {_ns_inode(n) for n in found["namespaces"]} - {None}
    ended += _end_processes(_processes_in_netns(inodes))

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
    key_type, key = _read(path + ".pub").split()[:2]
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
            if "Server listening on" in _read(f"{host_dir}/sshd.log"):
                del waiting[name]
            elif not _alive(pid):
                logs = (_read(f"{host_dir}/start.log") + _read(f"{host_dir}/sshd.log")).strip()
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
    _make_lab_dir(lab_dir)
    os.mkdir(f"{lab_dir}/hosts")
    state = {"spec": spec, "status": "building", "hosts": {}}
    _save_state(lab_dir, state)  # first, so an interrupted start can be cleaned up by prefix + record
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
            _save_state(lab_dir, state)
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
    _save_state(lab_dir, state)
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
    _end_processes([*_children(pid), pid])
    host_dir = f"{lab_dir}/hosts/{name}"
    with open(f"{host_dir}/sshd.log", "w", encoding="utf-8"):
        pass  # _wait_listening reads this log: start from an empty one
    new_pid = _start_host(spec, host, host_dir)
    state["hosts"][name]["pid"] = new_pid
    _save_state(lab_dir, state)
    _wait_listening(spec, {name: new_pid}, start_timeout)
    return new_pid


def describe(spec: dict) -> dict:
    """What the module returns about a running lab."""
    prefix, lab_dir = spec["prefix"], spec["lab_dir"]
    state = load_state(lab_dir) or {}
    hosts = {}
    for host in spec["hosts"]:
        pid = (state.get("hosts") or {}).get(host["name"], {}).get("pid")
        children = _children(pid) if pid else []
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
