# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The whole fleet of VTEPs, checked on the controller before any host is reached.

check() takes every VTEP host's variables (fabric_vtep or a hand-written vtep_config, vtep_backend,
host_tuning_nics) and the fabric's (fabric_vnis, fabric_mtu), derives the documents of the model's VTEPs
(fabric/derive.py) and checks, all at once:
  - each host's part: the model's schema (fabric/model.py), and every document, derived or hand-written, against
    the VTEP's own document rules (plugins/module_utils/vtep/config.py, without the host's interfaces), its
    problems named by the field the user wrote (a derived peer says so);
  - across hosts: a tunnel address on two VTEPs; a model VTEP's VNI missing from fabric_vnis; hand-written peers
    that are not symmetric, or are no VTEP of the VNI; a VNI whose VTEPs handle VLANs differently (translate and
    preserve; in preserve, access ports on one and trunks on another, or different VIDs); a tunnel port whose MTU
    cannot carry the largest frame of a VNI anywhere in the fleet; a pair of VTEPs with no port between them.
Warnings: a VNI served by one VTEP (or none), a host with both fabric_vtep and vtep_config (vtep_config wins).

Each problem is "<host>: <field path>: <rule>"; a fabric variable's problems start with its name. The shape
(schemas and each host's own rules) is checked first, then the tunnel addresses; the documents and the other fleet
rules only when those are sound, as they need every host's addresses and VNIs.

The checked fabric stays on the controller (keep, document, report). Handing the whole fabric to every host as a
fact costs what the fleet weighs on every host and every task (Ansible copies a host's facts into its variables
for each task), and a fact cache would keep it past the run that checked it. Instead keep() writes it into a
directory of the run, named by the fabric's digest:

    <run directory>/<digest>/fabric.json           the report's view (vteps, vnis, warnings), for fabric_report
    <run directory>/<digest>/documents/<host>.json one VTEP's document, with the digest it was derived under

and the hosts receive only the digest (the fact xdpfleet_fabric). A host reads its own document by the digest from
the directory of the run it is in (plugins/lookup/vtep_document.py): a digest from another run (a cached fact, a
check skipped) names a directory this run does not have, and is refused.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from urllib.parse import quote

from ansible_collections.xdpfleet.fabric.plugins.module_utils.fabric import derive, model
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vtep_config
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import VXLAN_OVERHEAD

VLAN_TAG_LEN = vtep_config.VLAN_TAG_LEN
# A path inside a document, where a message quotes one: "(also vnis[0].access_ports[1])".
_INNER_PATH = re.compile(r"(?<=[( ])((?:tunnel_ports|vnis)\[\d+\](?:\.\w+|\[\d+\])*)")
_PEER_PATH = re.compile(r"^vnis\[(\d+)\]\.peers\[(\d+)\]")


@dataclass
class Fabric:
    """The checked fleet: each VTEP's document, the report's view of the fabric, and the problems that refuse it."""

    documents: dict[str, dict] = field(default_factory=dict)
    vteps: dict[str, dict] = field(default_factory=dict)
    vnis: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def report(self) -> dict:
        """What xdpfleet.fabric.fabric_report reads (reports/fabric.py parse_fabric)."""
        return {"vteps": self.vteps, "vnis": self.vnis, "warnings": self.warnings}


def _present(value) -> bool:
    return value is not None and value != {} and value != ""


class _Paths:
    """A document's problem in the user's terms: the document's paths under the variable that holds it, and a
    derived peer named as derived."""

    def __init__(self, vtep: derive.Vtep, document: dict):
        self.root = vtep.root
        self.document = document
        # the VNI entries whose peers the model derived
        self.derived = set()
        if vtep.source == "model":
            self.derived = {i for i, entry in enumerate(vtep.spec["vnis"]) if "peers" not in entry}

    def path(self, path: str) -> str:
        if path == "document":
            return self.root
        out = f"{self.root}.{path}"
        peer = _PEER_PATH.match(path)
        if peer and int(peer.group(1)) in self.derived:
            item = self.document["vnis"][int(peer.group(1))]["peers"][int(peer.group(2))]
            out += f" (derived peer {item['ip']} via {item['via']})"
        return out

    def message(self, host: str, message: str) -> str:
        head, _colon, rest = message.partition(": ")
        rest = _INNER_PATH.sub(lambda m: self.path(m.group(1)), rest)
        return f"{host}: {self.path(head)}: {rest}"


def _nic_mtus(nics) -> dict[str, tuple[int, str]]:
    """host_tuning_nics' MTUs: port -> (MTU, path). The tuning role validates the rest of the list."""
    found = {}
    for i, nic in enumerate(nics if isinstance(nics, list) else []):
        if isinstance(nic, dict) and isinstance(nic.get("mtu"), int) and isinstance(nic.get("name"), str):
            found.setdefault(nic["name"], (nic["mtu"], f"host_tuning_nics[{i}].mtu"))
    return found


def _roster_problems(hosts: dict[str, dict], fabric_vteps) -> list[str]:
    """The VTEPs this run sees against fabric_vteps, the fabric's list of them: a run that sees part of the fleet
    (an AWX or Automation Platform sliced job, whose inventory is one slice; a partial inventory) cannot derive the
    peers of the VTEPs it does not see, and is refused rather than configuring a partial mesh."""
    seen = [host for host, v in hosts.items() if _present(v.get("fabric_vtep")) or _present(v.get("vtep_config"))]
    if fabric_vteps is None:
        if not seen:
            return []
        return [
            "fabric_vteps: required: list every VTEP of the fabric (inventory host names) once, in group vars that "
            "every host loads (group_vars/all), so that a run that sees part of the fleet (a sliced job, a partial "
            "inventory) is refused instead of deriving a partial mesh"
        ]
    listed = set(fabric_vteps)
    problems = [
        f"{host}: not in fabric_vteps: every VTEP of the fabric (a host with fabric_vtep or vtep_config) is listed "
        "there"
        for host in seen
        if host not in listed
    ]
    unseen = [host for host in fabric_vteps if host not in seen]
    if unseen:
        problems.append(
            f"fabric_vteps: {', '.join(unseen)}: not a VTEP of this run's inventory (no such host, or neither "
            "fabric_vtep nor vtep_config): this run sees part of the fabric (a sliced job or a partial inventory) and "
            "cannot derive every peer; run the fabric on the whole inventory"
        )
    return problems


def check(hosts: dict[str, dict], fabric_vnis, fabric_mtu, fabric_vteps=None) -> Fabric:
    """hosts: inventory host -> {fabric_vtep, vtep_config, vtep_backend, host_tuning_nics} (None where unset), in
    inventory order. fabric_vnis, fabric_mtu, fabric_vteps: None where unset."""
    fabric = Fabric()
    fabric_vnis = [] if fabric_vnis is None else fabric_vnis
    fabric_mtu = model.FABRIC_MTU_DEFAULT if fabric_mtu is None else fabric_mtu
    fabric.problems += model.fabric_problems(fabric_vnis, fabric_mtu, fabric_vteps)
    if not fabric.problems:
        fabric.problems += _roster_problems(hosts, fabric_vteps)

    # Each host's part on its own.
    vteps: dict[str, derive.Vtep] = {}
    entries = model.EntryChecker()
    for host, variables in hosts.items():
        backend = variables.get("vtep_backend") or "xdp"
        written, spec = variables.get("vtep_config"), variables.get("fabric_vtep")
        if _present(written):
            if _present(spec):
                fabric.warnings.append(
                    f"{host}: fabric_vtep: the host also has a vtep_config, which wins: fabric_vtep is not used"
                )
            problems = vtep_config.check_schema(written)
            if not problems:
                problems = vtep_config.semantic_problems(written, None)
            if problems:
                paths = _Paths(derive.Vtep(host, "vtep_config", backend, written, []), written)
                fabric.problems += [paths.message(host, p) for p in problems]
            else:
                vteps[host] = derive.from_document(host, written, backend)
        elif _present(spec):
            problems = model.fabric_vtep_problems(spec, entries)
            if problems:
                fabric.problems += [f"{host}: {p}" for p in problems]
            else:
                vteps[host] = derive.from_model(host, spec, backend)
    if fabric.problems:
        return fabric

    # Addresses and VNIs across the fleet.
    owner: dict[int, tuple[str, str]] = {}  # tunnel address -> (host, path)
    for vtep in vteps.values():
        for address in vtep.addresses:
            if address.value in owner and owner[address.value][0] != vtep.host:
                other, path = owner[address.value]
                fabric.problems.append(
                    f"{vtep.host}: {address.path}: {address.ip} is also a tunnel address of {other} ({path}); a "
                    "tunnel address belongs to one VTEP"
                )
            else:
                owner.setdefault(address.value, (vtep.host, address.path))
    if fabric.problems:  # peers cannot be derived to an address that two VTEPs claim
        return fabric
    fabric_vni = {entry["vni"]: (i, entry) for i, entry in enumerate(fabric_vnis)}
    vlan_modes = {vni: entry["vlan_mode"] for vni, (_index, entry) in fabric_vni.items() if "vlan_mode" in entry}
    members: dict[int, list[derive.Vtep]] = {}
    for vtep in vteps.values():
        for vni, i in vtep.vni_index.items():
            members.setdefault(vni, []).append(vtep)
            if vtep.source == "model" and vni not in fabric_vni:
                fabric.problems.append(
                    f"{vtep.host}: fabric_vtep.vnis[{i}].vni: VNI {vni} is not in fabric_vnis; every VNI of the "
                    "fabric is listed there once"
                )

    # The documents: derived, or as written.
    underlay = derive.Underlay()
    unreachable: set[frozenset] = set()
    for vtep in vteps.values():
        if vtep.source == "vtep_config":
            fabric.documents[vtep.host] = vtep.spec
            continue
        document, pairs = derive.document(vtep, members, vlan_modes, underlay)
        fabric.documents[vtep.host] = document
        for other, why in pairs:
            if frozenset((vtep.host, other)) not in unreachable:  # once per pair: the same reason either way
                unreachable.add(frozenset((vtep.host, other)))
                fabric.problems.append(f"{vtep.host}: fabric_vtep.tunnel_ports: no port towards {other}: {why}")
        problems = vtep_config.semantic_problems(document, None)
        if problems:
            paths = _Paths(vtep, document)
            fabric.problems += [paths.message(vtep.host, p) for p in problems]

    fabric.problems += _peer_problems(vteps, members, owner, fabric.documents)
    fabric.problems += _vlan_problems(vteps, members, fabric_vni, fabric.documents)
    fabric.problems += _mtu_problems(hosts, vteps, members, fabric.documents, fabric_mtu)
    _report(fabric, vteps, members, fabric_vni)
    return fabric


def _written_peers(vtep: derive.Vtep, vni: int, document: dict) -> tuple[int, list[dict]] | None:
    """(entry index, peers) of a VNI whose peers this VTEP's user wrote; None when the model derived them."""
    i = vtep.vni_index[vni]
    if vtep.source == "model" and "peers" not in vtep.spec["vnis"][i]:
        return None
    return i, document["vnis"][i].get("peers", [])


def _peer_problems(vteps, members, owner, documents) -> list[str]:
    """Hand-written peers: each a VTEP of the VNI, and listed back by it."""
    problems = []
    by_ip = {value: host for value, (host, _path) in owner.items()}
    for vni, serving in members.items():
        serving_hosts = {v.host for v in serving}
        listed: dict[str, set[str]] = {}  # host -> the hosts its hand-written peers are
        written: dict[str, int] = {}
        for vtep in serving:
            found = _written_peers(vtep, vni, documents[vtep.host])
            if found is None:
                continue
            i, peers = found
            written[vtep.host] = i
            hosts = listed[vtep.host] = set()
            for j, peer in enumerate(peers):
                path = f"{vtep.root}.vnis[{i}].peers[{j}].ip"
                other = by_ip.get(derive.address_value(peer["ip"]))
                if other is None:
                    problems.append(
                        f"{vtep.host}: {path}: {peer['ip']} is the tunnel address of no VTEP in the inventory; a peer "
                        f"of VNI {vni} is a VTEP that serves it"
                    )
                elif other not in serving_hosts:
                    problems.append(
                        f"{vtep.host}: {path}: {peer['ip']} is {other}'s tunnel address, but {other} does not serve "
                        f"VNI {vni}"
                    )
                else:
                    hosts.add(other)
        for host, i in written.items():
            vtep = vteps[host]
            for other in serving:
                if other.host == host or other.host in listed[host]:
                    continue
                lists_back = other.host not in written or host in listed[other.host]
                if lists_back:
                    how = "derived" if other.host not in written else f"{other.root}.vnis[{written[other.host]}].peers"
                    problems.append(
                        f"{host}: {vtep.root}.vnis[{i}].peers: does not list {other.host}, which serves VNI {vni} and "
                        f"lists {host} ({how}); a VNI's peers are symmetric, or one direction is lost"
                    )
    return problems


def _vni_entry(vtep: derive.Vtep, document: dict, vni: int) -> tuple[int, dict]:
    i = vtep.vni_index[vni]
    return i, document["vnis"][i]


def _vlan_problems(vteps, members, fabric_vni, documents) -> list[str]:
    """Every VTEP of a VNI handles its VLANs alike: one vlan_mode; in preserve, one kind of port and one VID."""
    problems = []
    for vni, serving in members.items():
        seen = []  # (vtep, entry index, entry, mode)
        for vtep in serving:
            document = documents[vtep.host]
            i, entry = _vni_entry(vtep, document, vni)
            seen.append((vtep, i, entry, vtep_config.vlan_mode(document, entry)))
        if vni in fabric_vni:
            reference_mode = fabric_vni[vni][1].get("vlan_mode", "translate")
            where = f"fabric_vnis[{fabric_vni[vni][0]}]"
        else:
            reference_mode, where = seen[0][3], f"{seen[0][0].host}"
        wrong = [(v, i) for v, i, _entry, mode in seen if mode != reference_mode]
        for vtep, i in wrong:
            problems.append(
                f"{vtep.host}: {vtep.root}.vnis[{i}]: VNI {vni} is in vlan_mode "
                f"{'preserve' if reference_mode == 'translate' else 'translate'} here but {reference_mode} in "
                f"{where}; every VTEP of a VNI handles tags alike (preserve keeps the tag inside the tunnelled "
                "frame, translate takes it off), or their frames are dropped between them"
            )
        if wrong or reference_mode != "preserve":
            continue
        kind = vid = None  # the first VTEP's: (kind, host), (VID, host)
        for vtep, i, entry, _mode in seen:
            path = f"{vtep.root}.vnis[{i}]"
            here = "trunks" if entry.get("trunks") else "access_ports" if entry.get("access_ports") else None
            if here is None:
                continue
            if kind is None:
                kind = (here, vtep.host)
            elif here != kind[0]:
                problems.append(
                    f"{vtep.host}: {path}.{here}: VNI {vni} is in vlan_mode preserve and has {kind[0]} on {kind[1]}; "
                    f"its {here} here would drop every frame between them (the tag stays inside the tunnelled "
                    "frame): in preserve a VNI has one kind of local port fleet-wide (vlan_mode translate mixes them)"
                )
                continue
            for j, trunk in enumerate(entry.get("trunks", [])):
                if vid is None:
                    vid = (trunk["vid"], vtep.host)
                elif trunk["vid"] != vid[0]:
                    problems.append(
                        f"{vtep.host}: {path}.trunks[{j}].vid: VNI {vni} uses VID {trunk['vid']} here but VID "
                        f"{vid[0]} on {vid[1]}; in vlan_mode preserve the tag travels inside the tunnelled frame, so "
                        "every trunk of the VNI uses one VID (vlan_mode translate maps each trunk's VID)"
                    )
    return problems


def _mtu_problems(hosts, vteps, members, documents, fabric_mtu) -> list[str]:
    """The MTU of every tunnel port that carries a VNI holds the largest frame of its access ports and trunks
    anywhere in the fleet, plus the VXLAN headers (and the tag where the VNI keeps it)."""
    nics = {host: _nic_mtus(hosts[host].get("host_tuning_nics")) for host in vteps}

    def mtu(vtep: derive.Vtep, port: str) -> tuple[int, str]:
        """(MTU, where it comes from)."""
        given = vtep.spec.get("mtu", {}) if vtep.source == "model" else {}
        if port in given:
            return given[port], f"fabric_vtep.mtu.{port}"
        if port in nics[vtep.host]:
            return nics[vtep.host][port]
        return fabric_mtu, "fabric_mtu: the model is not told this port's MTU"

    short: dict[tuple[str, str], tuple[int, int, str, str]] = {}  # (host, port) -> (needed, VNI, why, where)
    for vni, serving in members.items():
        largest = None  # (MTU, port, host)
        tagged = False
        carried = []  # (vtep, tunnel port)
        for vtep in serving:
            document = documents[vtep.host]
            entry = _vni_entry(vtep, document, vni)[1]
            trunks = entry.get("trunks", [])
            tagged = tagged or (bool(trunks) and vtep_config.vlan_mode(document, entry) == "preserve")
            for port in (*entry.get("access_ports", []), *(t["port"] for t in trunks)):
                size = mtu(vtep, port)[0]
                if largest is None or size > largest[0]:
                    largest = (size, port, vtep.host)
            carried += [(vtep, via) for via in sorted({peer["via"] for peer in entry.get("peers", [])})]
        if largest is None:
            continue
        needed = largest[0] + VXLAN_OVERHEAD + (VLAN_TAG_LEN if tagged else 0)
        tag = f" + {VLAN_TAG_LEN} VLAN tag" if tagged else ""
        why = f"inner MTU {largest[0]} of {largest[1]} on {largest[2]} + {VXLAN_OVERHEAD} VXLAN{tag}"
        for vtep, port in carried:
            size, where = mtu(vtep, port)
            if size < needed:
                key = (vtep.host, port)
                if key not in short or (needed, -vni) > (short[key][0], -short[key][1]):
                    short[key] = (needed, vni, why, where)
    problems = []
    for (host, port), (needed, vni, why, where) in short.items():
        vtep = vteps[host]
        size = mtu(vtep, port)[0]
        index = next(i for i, a in enumerate(vtep.addresses) if a.port == port)
        problems.append(
            f"{host}: {vtep.root}.tunnel_ports[{index}].port: {port} has MTU {size} ({where}), below {needed} "
            f"needed for VNI {vni} ({why})"
        )
    return problems


def _report(fabric: Fabric, vteps, members, fabric_vni) -> None:
    """The fact's vteps and vnis, and the warnings of VNIs with fewer than two VTEPs."""
    for host, vtep in vteps.items():
        fabric.vteps[host] = {
            "backend": vtep.backend,
            "source": vtep.source,
            "tunnel_ips": [a.ip for a in vtep.addresses],
            "vnis": sorted(vtep.vni_index),
        }
    for vni in sorted(set(members) | set(fabric_vni)):
        serving = members.get(vni, [])
        settings = fabric_vni[vni][1] if vni in fabric_vni else {}
        row = {"vni": vni, "name": settings.get("name"), "members": {}}
        for vtep in serving:
            document = fabric.documents[vtep.host]
            entry = _vni_entry(vtep, document, vni)[1]
            row.setdefault("vlan_mode", vtep_config.vlan_mode(document, entry))
            row["members"][vtep.host] = {
                "access_ports": list(entry.get("access_ports", [])),
                "trunks": [dict(t) for t in entry.get("trunks", [])],
                "peers": [p["ip"] for p in entry.get("peers", [])],
            }
        row.setdefault("vlan_mode", settings.get("vlan_mode", "translate"))
        fabric.vnis.append(row)
        if len(serving) == 1:
            vtep = serving[0]
            i = vtep.vni_index[vni]
            fabric.warnings.append(
                f"{vtep.host}: {vtep.root}.vnis[{i}]: VNI {vni} is served by {vtep.host} only: it reaches no other VTEP"
            )
        elif not serving:
            fabric.warnings.append(f"fabric_vnis[{fabric_vni[vni][0]}]: VNI {vni} is served by no VTEP")


# ---- the checked fabric, kept on the controller for the hosts ---------------------------------------------------

FABRIC_FILE = "fabric.json"
DOCUMENTS = "documents"
DIGEST = re.compile(r"[0-9a-f]{64}")


class KeptFabricError(Exception):
    """A digest this run did not check, or a file of the checked fabric that cannot be read."""


def _encoded(value) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _host_file(host: str) -> str:
    # Inventory names are free text: one file name each, whatever they hold.
    return quote(host, safe="") + ".json"


def keep(run_directory: str, documents: dict[str, dict], report: dict) -> str:
    """Keep the checked fabric under run_directory and return its digest: the SHA-256 of every document and of the
    report's view, so that two checks that derived the same fabric name the same directory."""
    encoded = {host: _encoded(document) for host, document in documents.items()}
    report_bytes = _encoded(report)
    digest = hashlib.sha256()
    for host in sorted(encoded):
        digest.update(_encoded(host) + b"\0" + encoded[host] + b"\n")
    digest.update(report_bytes)
    name = digest.hexdigest()
    where = os.path.join(run_directory, name)
    if os.path.isdir(where):
        return name
    # Written beside and renamed into place: a reader finds the whole fabric or none of it.
    partial = f"{where}.partial-{os.getpid()}"
    os.makedirs(os.path.join(partial, DOCUMENTS), mode=0o700)
    for host, document in encoded.items():
        with open(os.path.join(partial, DOCUMENTS, _host_file(host)), "wb") as f:
            f.write(b'{"digest":"' + name.encode() + b'","document":' + document + b"}")
    with open(os.path.join(partial, FABRIC_FILE), "wb") as f:
        f.write(report_bytes)
    try:
        os.rename(partial, where)
    except OSError:
        if not os.path.isdir(where):  # else another check of the same fabric was first
            raise
    return name


def _checked(run_directory: str, digest) -> str:
    if (
        not isinstance(digest, str)
        or not DIGEST.fullmatch(digest)
        or not os.path.isdir(os.path.join(run_directory, digest))
    ):
        raise KeptFabricError(
            f"xdpfleet_fabric: the fabric {digest!r} was not checked by this run (the fact comes from an earlier run, "
            "e.g. a fact cache, or the check was skipped): run xdpfleet.fabric.vtep_fabric in this run "
            "(playbooks/fabric_check.yml), so that no host is configured from a derivation this run did not check"
        )
    return os.path.join(run_directory, digest)


def document(run_directory: str, digest, host: str) -> dict | None:
    """host's document in the fabric `digest` this run checked; None when that fabric has no document for host."""
    path = os.path.join(_checked(run_directory, digest), DOCUMENTS, _host_file(host))
    try:
        with open(path, "rb") as f:
            entry = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise KeptFabricError(f"{path}: cannot read the checked document of {host}: {exc}") from exc
    if entry.get("digest") != digest:
        raise KeptFabricError(f"{path}: derived under fabric {entry.get('digest')!r}, not {digest!r}")
    return entry["document"]


def report(run_directory: str, digest) -> dict:
    """The report's view (vteps, vnis, warnings) of the fabric `digest` this run checked."""
    path = os.path.join(_checked(run_directory, digest), FABRIC_FILE)
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        raise KeptFabricError(f"{path}: cannot read the checked fabric: {exc}") from exc
