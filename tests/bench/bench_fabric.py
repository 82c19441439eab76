#!/usr/bin/env python3
"""Benchmark: deriving every VTEP's document from the fabric model and checking the fleet, on the controller only.

Not a test (pytest does not collect bench_*.py): it prints a table from one run. Needs no root and no lab: no host
is contacted.

A synthetic fleet (1,000 VTEPs, 100 VNIs): VTEP i serves 10 VNIs (--vnis-per-vtep), VNI (i + 7j) mod 100
for j = 0..9 on an access port each, so every VNI has 100 VTEPs, each VTEP 10 x 99 derived peers. Each VTEP has one
tunnel port ul0 with a /30 of 198.18.0.0/15 (RFC 2544's benchmarking range: inventory data only, never put on an
interface) and a route to the whole range through it, as a routed underlay has.

  functions   fleet.check() in this process, with its phases timed: each host's model against the schema, the
              derivation, each derived document against the VTEP's own rules, the rules across the fleet
  playbook    ansible-playbook playbooks/fabric_check.yml -e vtep_hosts=all on an inventory of the fleet's hosts
              (a host_vars file each, fabric_vnis in group_vars): once with the check skipped
              (-e vtep_fabric_checked=true: reading the inventory and a play over every host, the floor), then with
              the action xdpfleet.fabric.vtep_fabric, which derives and checks, keeps the documents on the
              controller and hands every host the digest (fact xdpfleet_fabric); then the check and a task on
              every host that reads its own document by the digest (lookup xdpfleet.fabric.vtep_document), as the
              vtep role does

make bench-fabric runs it (BENCH_FABRIC_ARGS="--vteps 200" for a short try).
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from lablib import run_playbook
from phase_timer import PhaseTimer

from ansible_collections.xdpfleet.fabric.plugins.module_utils.fabric import derive, fleet, model
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vtep_config

UNDERLAY = ipaddress.ip_network("198.18.0.0/15")
VNI_BASE = 1000
# (owner, attribute, label): where fleet.check() looks each phase up.
PHASES = (
    (model, "fabric_problems", "fabric_vnis against its schema"),
    (model, "fabric_vtep_problems", "each host's fabric_vtep against the schema"),
    (derive, "from_model", "each host's addresses and routes"),
    (derive, "document", "derivation (every document and its peers)"),
    (vtep_config, "semantic_problems", "each derived document against the VTEP's rules"),
    (fleet, "_peer_problems", "fleet: peers listed back"),
    (fleet, "_vlan_problems", "fleet: VLAN handling per VNI"),
    (fleet, "_mtu_problems", "fleet: underlay MTU"),
    (fleet, "_report", "the fact's per-VTEP and per-VNI report"),
)


def fleet_vars(vteps: int, vnis: int, per_vtep: int) -> tuple[dict[str, dict], list[dict]]:
    """(host -> its fabric_vtep, fabric_vnis)."""
    hosts = {}
    for i in range(vteps):
        address = UNDERLAY.network_address + 4 * i + 2
        served = sorted(VNI_BASE + (i + 7 * j) % vnis for j in range(per_vtep))
        hosts[f"v{i + 1:04d}"] = {
            "tunnel_ports": [{"port": "ul0", "local_ip": f"{address}/30"}],
            "routes": [{"to": str(UNDERLAY), "via": "ul0"}],
            "mtu": {"ul0": 1600},
            "vnis": [{"vni": vni, "access_ports": [f"acc{vni}"]} for vni in served],
        }
    fabric_vnis = [{"vni": VNI_BASE + v, "name": f"segment{v}"} for v in range(vnis)]
    return hosts, fabric_vnis


def time_functions(hosts: dict[str, dict], fabric_vnis: list[dict]) -> tuple[PhaseTimer, fleet.Fabric]:
    timer = PhaseTimer()
    for owner, attr, label in PHASES:
        timer.wrap(owner, attr, label)
    variables = {
        host: {"fabric_vtep": spec, "vtep_config": None, "vtep_backend": None, "host_tuning_nics": None}
        for host, spec in hosts.items()
    }
    start = time.perf_counter()
    fabric = fleet.check(variables, fabric_vnis, None, list(variables))
    timer.add("fleet.check() in all", time.perf_counter() - start)
    return timer, fabric


def write_inventory(directory: Path, hosts: dict[str, dict], fabric_vnis: list[dict]) -> Path:
    inventory = directory / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": dict.fromkeys(hosts)}}))
    fabric = {"fabric_vnis": fabric_vnis, "fabric_vteps": list(hosts)}
    (inventory / "group_vars" / "all" / "fabric.yml").write_text(yaml.safe_dump(fabric))
    for host, spec in hosts.items():
        text = yaml.dump({"fabric_vtep": spec}, Dumper=yaml.CSafeDumper, sort_keys=False)
        (inventory / "host_vars" / f"{host}.yml").write_text(text)
    return inventory


def time_playbook(inventory: Path, skip_check: bool, read_documents: bool = False) -> float:
    extra = {"vtep_hosts": "all", **({"vtep_fabric_checked": True} if skip_check else {})}
    playbook = REPO / "playbooks" / "fabric_check.yml"
    if read_documents:
        playbook = inventory / "read_documents.yml"
        lookup = "{{ lookup('xdpfleet.fabric.vtep_document', inventory_hostname) }}"
        read = {"ansible.builtin.set_fact": {"document": lookup}}
        plays = [
            {"name": "Check", "ansible.builtin.import_playbook": str(REPO / "playbooks" / "fabric_check.yml")},
            {"name": "Read", "hosts": "all", "gather_facts": False, "tasks": [{"name": "Read its document", **read}]},
        ]
        playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    start = time.monotonic()
    run = run_playbook(playbook, inventory, extra, timeout=3600)
    seconds = time.monotonic() - start
    if run.rc != 0:
        raise RuntimeError(f"{playbook} failed:\n{run}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vteps", type=int, default=1000, help="VTEPs in the fleet (default 1000)")
    parser.add_argument("--vnis", type=int, default=100, help="VNIs of the fabric (default 100)")
    parser.add_argument("--vnis-per-vtep", type=int, default=10, help="VNIs each VTEP serves (default 10)")
    parser.add_argument("--no-playbook", action="store_true", help="time the functions only")
    args = parser.parse_args()
    if not 1 <= args.vnis_per_vtep <= args.vnis or args.vteps * 4 > UNDERLAY.num_addresses:
        print("bench_fabric: --vnis-per-vtep must be 1..--vnis, --vteps at most 32768", file=sys.stderr)
        return 1
    hosts, fabric_vnis = fleet_vars(args.vteps, args.vnis, args.vnis_per_vtep)
    timer, fabric = time_functions(hosts, fabric_vnis)
    if fabric.problems:
        print("bench_fabric: the synthetic fleet was refused:\n" + "\n".join(fabric.problems[:20]), file=sys.stderr)
        return 1
    peers = sum(len(entry.get("peers", [])) for doc in fabric.documents.values() for entry in doc["vnis"])
    print(
        f"{args.vteps} VTEPs, {args.vnis} VNIs, {args.vnis_per_vtep} per VTEP: {len(fabric.documents)} documents, "
        f"{peers} derived peers, {len(fabric.warnings)} warnings"
    )
    print("\nfleet.check() in one process, wall seconds")
    for label, seconds in timer.seconds.items():
        print(f"  {label:<52} {seconds:8.2f}  ({timer.calls[label]} calls)")
    if args.no_playbook:
        return 0
    with tempfile.TemporaryDirectory(prefix="xdpf-bench-fabric-") as tmp:
        inventory = write_inventory(Path(tmp), hosts, fabric_vnis)
        floor = time_playbook(inventory, skip_check=True)
        checked = time_playbook(inventory, skip_check=False)
        read = time_playbook(inventory, skip_check=False, read_documents=True)
    print(f"\nansible-playbook playbooks/fabric_check.yml, {args.vteps} inventory hosts, no host contacted")
    print(f"  {'the check skipped (inventory, a play over every host)':<52} {floor:8.1f}")
    print(f"  {'with the check (xdpfleet.fabric.vtep_fabric)':<52} {checked:8.1f}")
    print(f"  {'the check alone (difference)':<52} {checked - floor:8.1f}")
    print(f"  {'the check, then every host reads its document':<52} {read:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
