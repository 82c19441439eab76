# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see https://www.gnu.org/licenses/old-licenses/gpl-2.0.txt)
"""The lab's description: the options of the xdpfleet.fabric.lab module, checked and made canonical (normalize), the
names it gives what it makes, and LabError. Nothing here looks at the machine.
"""

from __future__ import annotations

import ipaddress
import os
import re

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

ALLOWED_NETWORKS = (ipaddress.ip_network("198.51.100.0/24"), ipaddress.ip_network("2001:db8::/32"))
IFNAMSIZ_MAX = 15  # IFNAMSIZ is 16 including the trailing NUL
MGMT_IFNAME = "mgmt0"
DEFAULT_PRIVATE_DIRS = ("/etc", "/var", "/boot")
# Directories a host must not overlay: kernel/virtual filesystems, the lab dir's home, and the root itself.
FORBIDDEN_PRIVATE_DIRS = ("/", "/proc", "/sys", "/dev", "/run", "/tmp")

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
