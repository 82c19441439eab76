# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The fabric model in the inventory: its variables, their JSON Schema, and the rules of one host's part of it.

Once per fabric (group vars):

    fabric_vnis:                          # every VNI of the fabric
      - {vni: 100, name: servers}         # name: a label; vlan_mode (translate|preserve): the VNI's, fleet-wide
    fabric_mtu: 1500                      # the MTU assumed for a VTEP port the model is not told about
    fabric_vteps: [a, b, c]               # every VTEP (inventory host names): a run that sees only some (a sliced
                                          # job, a partial inventory) is refused, not derived as a partial mesh

Per VTEP (host vars), its ports only; the controller derives the VTEP document (plugins/module_utils/vtep/config.py)
with every peer (fabric/derive.py):

    fabric_vtep:
      tunnel_ports:
        - {port: ul-a, local_ip: 198.51.100.98/30}   # with the prefix length: the connected subnet
      routes:                                        # which tunnel port reaches which underlay prefix
        - {to: 198.51.100.96/27, via: ul-a}
      mtu: {ul-a: 1600}                              # port MTUs (else host_tuning_nics' mtu, else fabric_mtu)
      vnis:
        - {vni: 100, access_ports: [acc100]}
        - {vni: 200, trunks: [{port: trunk0, vid: 20}]}
      # fdb_aging, fdb_size and a VNI's fdb pass through to the document; a VNI's peers written by hand replace
      # the derived ones for that VNI

The schema reuses the VTEP document's own definitions (ports, VNIs, trunks, peers, FDB entries), so a value is
held to the same rule in both. Problems are "<variable path>: <rule>" (fabric_vtep.vnis[1].trunks[0].vid: ...).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import schema as schema_words
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vtep_config

MTU_MIN, MTU_MAX = 68, 65535  # IPv4's minimum link MTU; the largest the kernel's netdev takes
FABRIC_MTU_DEFAULT = 1500

_DOCUMENT_DEFS = vtep_config.SCHEMA["$defs"]
_MTU = {
    "title": "MTU",
    "description": f"the port's MTU in bytes, {MTU_MIN}..{MTU_MAX}",
    "type": "integer",
    "minimum": MTU_MIN,
    "maximum": MTU_MAX,
}
# A VNI entry of fabric_vtep: the document's, without vlan_mode (a VNI's VLAN handling is the fabric's, in
# fabric_vnis, so that its VTEPs agree).
_VNI_ENTRY = {
    **_DOCUMENT_DEFS["vni"],
    "description": "a VNI entry has a vni and optionally access_ports, trunks, fdb and peers (written by hand: "
    "they replace the derived ones)",
    "properties": {key: value for key, value in _DOCUMENT_DEFS["vni"]["properties"].items() if key != "vlan_mode"},
}
_DEFS = {
    **_DOCUMENT_DEFS,
    "mtu": _MTU,
    "vni_entry": _VNI_ENTRY,
    "model_tunnel_port": {
        "title": "tunnel port",
        "description": "a tunnel port has a port and a local_ip (the tunnel address with its prefix length)",
        "type": "object",
        "additionalProperties": False,
        "required": ["port", "local_ip"],
        "properties": {
            "port": {"$ref": "#/$defs/ifname"},
            "local_ip": {
                "title": "tunnel address",
                "description": "an IPv4 address with its prefix length, such as 198.51.100.98/30 (the connected "
                "subnet; without one, no subnet is assumed); IPv6 underlay is not supported yet",
                "type": "string",
                "pattern": r"^[0-9]{1,3}(\.[0-9]{1,3}){3}(/[0-9]{1,2})?$",
            },
        },
    },
    "route": {
        "title": "route",
        "description": "a route has a to (an IPv4 prefix) and a via (the tunnel port that reaches it)",
        "type": "object",
        "additionalProperties": False,
        "required": ["to", "via"],
        "properties": {
            "to": {
                "title": "underlay prefix",
                "description": "an IPv4 prefix such as 198.51.100.96/27",
                "type": "string",
                "pattern": r"^[0-9]{1,3}(\.[0-9]{1,3}){3}/[0-9]{1,2}$",
            },
            "via": {"$ref": "#/$defs/ifname"},
        },
    },
    "fabric_vtep": {
        "title": "fabric_vtep",
        "description": "a VTEP of the fabric has tunnel_ports and vnis, and optionally routes, mtu, fdb_aging and "
        "fdb_size",
        "type": "object",
        "additionalProperties": False,
        "required": ["tunnel_ports", "vnis"],
        "properties": {
            "tunnel_ports": {
                **vtep_config.SCHEMA["properties"]["tunnel_ports"],
                "minItems": 1,
                "items": {"$ref": "#/$defs/model_tunnel_port"},
            },
            "routes": {
                "title": "routes",
                "description": "which tunnel port reaches which underlay prefix (the longest prefix wins)",
                "type": "array",
                "items": {"$ref": "#/$defs/route"},
            },
            "mtu": {
                "title": "port MTUs",
                "description": "port name: MTU, for the ports whose MTU is not fabric_mtu",
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/ifname"},
                "additionalProperties": {"$ref": "#/$defs/mtu"},
            },
            # The VNI entries are checked one by one (VNI_ENTRY_SCHEMA), each distinct entry once: a fleet repeats
            # the same entries on many hosts.
            "vnis": {**vtep_config.SCHEMA["properties"]["vnis"], "items": True},
            "fdb_aging": vtep_config.SCHEMA["properties"]["fdb_aging"],
            "fdb_size": vtep_config.SCHEMA["properties"]["fdb_size"],
        },
    },
    "fabric_vni": {
        "title": "fabric VNI",
        "description": "a VNI of the fabric has a vni and optionally a name and a vlan_mode",
        "type": "object",
        "additionalProperties": False,
        "required": ["vni"],
        "properties": {
            "vni": _DOCUMENT_DEFS["vni"]["properties"]["vni"],
            "name": {"title": "VNI name", "description": "a label for reports and metrics", "type": "string"},
            "vlan_mode": {"$ref": "#/$defs/vlan_mode"},
        },
    },
}


def _schema(properties: dict) -> dict:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": properties,
        "$defs": _DEFS,
    }


# The variables as one mapping each is checked in: the messages' paths then start with the variable's name.
FABRIC_SCHEMA = _schema(
    {
        "fabric_vnis": {
            "title": "fabric_vnis",
            "description": "every VNI of the fabric",
            "type": "array",
            "items": {"$ref": "#/$defs/fabric_vni"},
        },
        "fabric_mtu": {
            **_MTU,
            "description": f"the MTU assumed for a port the model is not told about, {MTU_MIN}..{MTU_MAX}",
        },
        "fabric_vteps": {
            "title": "fabric_vteps",
            "description": "every VTEP of the fabric, by inventory host name, each once",
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "uniqueItems": True,
        },
    }
)
FABRIC_VTEP_SCHEMA = _schema({"fabric_vtep": {"$ref": "#/$defs/fabric_vtep"}})
VNI_ENTRY_SCHEMA = _schema({"entry": {"$ref": "#/$defs/vni_entry"}})


def _special(error, where: str) -> list[str] | None:
    """The VTEP document's wording of an IPv6 underlay address, for the model's tunnel addresses too."""
    worded = vtep_config.ipv6_underlay(error, where)
    if worded is None and error.validator == "pattern" and isinstance(error.instance, str):
        address = error.instance.split("/")[0]
        if schema_words.is_ipv6(address):
            quoted = schema_words.quote(error.instance)
            return [f"{where}: {quoted} is an IPv6 address; IPv6 underlay is not supported yet (IPv4 only)"]
    return worded


def fabric_problems(fabric_vnis: Any, fabric_mtu: Any, fabric_vteps: Any = None) -> list[str]:
    """fabric_vnis, fabric_mtu and fabric_vteps (None: unset): their schema, then each VNI listed once."""
    given = {"fabric_vnis": fabric_vnis, "fabric_mtu": fabric_mtu}
    if fabric_vteps is not None:
        given["fabric_vteps"] = fabric_vteps
    problems = schema_words.problems(FABRIC_SCHEMA, given)
    if problems:
        return problems
    seen: dict[int, str] = {}
    for i, entry in enumerate(fabric_vnis):
        if entry["vni"] in seen:
            problems.append(f"fabric_vnis[{i}].vni: VNI {entry['vni']} is listed twice (also {seen[entry['vni']]})")
        else:
            seen[entry["vni"]] = f"fabric_vnis[{i}]"
    return problems


class EntryChecker:
    """The schema of fabric_vtep's VNI entries, each distinct entry checked once (a fleet of a thousand VTEPs
    repeats a few entries: checking each again would cost about a millisecond per host)."""

    def __init__(self):
        self._known: dict[str, list[str]] = {}

    def problems(self, path: str, entry: Any) -> list[str]:
        key = json.dumps(entry, sort_keys=True, default=str)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = schema_words.problems(VNI_ENTRY_SCHEMA, {"entry": entry}, special=_special)
        return [path + message[len("entry") :] for message in found]


def fabric_vtep_problems(value: Any, entries: EntryChecker) -> list[str]:
    """One host's fabric_vtep: the schema, then the rules of the model itself (addresses, routes, MTU keys). The
    document rules (duplicates, one role per port, limits) are checked on the derived document (fabric/fleet.py)."""
    problems = schema_words.problems(FABRIC_VTEP_SCHEMA, {"fabric_vtep": value}, special=_special)
    if isinstance(value, dict) and isinstance(value.get("vnis"), list):
        for i, entry in enumerate(value["vnis"]):
            problems += entries.problems(f"fabric_vtep.vnis[{i}]", entry)
    if problems:
        return problems
    ports = {tunnel["port"] for tunnel in value["tunnel_ports"]}
    for i, tunnel in enumerate(value["tunnel_ports"]):
        try:
            ipaddress.IPv4Interface(tunnel["local_ip"])
        except ValueError:
            problems.append(
                f"fabric_vtep.tunnel_ports[{i}].local_ip: {schema_words.quote(tunnel['local_ip'])} is not an IPv4 "
                "address with a prefix length (such as 198.51.100.98/30)"
            )
    for i, route in enumerate(value.get("routes", [])):
        path = f"fabric_vtep.routes[{i}]"
        try:
            ipaddress.IPv4Network(route["to"])
        except ValueError as error:
            problems.append(f"{path}.to: {schema_words.quote(route['to'])} is not an IPv4 prefix ({error})")
        if route["via"] not in ports:
            problems.append(
                f"{path}.via: {route['via']} is not one of fabric_vtep.tunnel_ports ({', '.join(sorted(ports))})"
            )
    used = set(ports)
    for entry in value["vnis"]:
        used.update(entry.get("access_ports", []))
        used.update(trunk["port"] for trunk in entry.get("trunks", []))
    for port in value.get("mtu", {}):
        if port not in used:
            problems.append(
                f"fabric_vtep.mtu.{port}: {port} is not a port of this VTEP (its tunnel ports, access ports and "
                f"trunks: {', '.join(sorted(used))})"
            )
    return problems
