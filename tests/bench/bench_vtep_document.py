#!/usr/bin/env python3
"""Benchmark: one VTEP with a large document, through ansible-playbook and phase by phase inside the host.

Not a test (pytest does not collect bench_*.py): it prints tables from one run. Needs root.

The document: lab host d, trunk0 VIDs 1..N each in its own VNI (VNI 10000 + VID), every VNI with the
same 3 peers via ul-a (next hops from the host's neighbour table, as the lab's documents have them), written by hand
as d's vtep_config in host_vars. The peers are VTEPs of the fabric model in the inventory (peer1..peer3, outside
the lab: no play here reaches them), each serving d's VNIs, so the fleet check that playbooks/vtep.yml runs first
passes, and costs what it costs for 4 VTEPs of N VNIs. For each N (--vnis, default 1000 and 4000), wall time of
`ansible-playbook playbooks/vtep.yml -e vtep_hosts=d -e vtep_health_check=false`:

  first apply       the host has no VTEP (removed before, untimed); the compiled object is in the host's cache
  no-op re-run      the same document again
  one peer added    a 4th peer in the last VNI (and its VTEP, peer4, in the inventory)

A run with 10 VNIs first (compiles the object, copies the sources) gives the floor: what a run costs with a small
document, the time that is not the document's.

Then the phases of the vtep module's work inside the host (tests/bench/vtep_phases.py through nsenter: deploy()
with each phase timed, as the module runs it, without Ansible's transfer around it), for a first apply, a one-change
run (the 4th peer removed again) and a no-op run. The issue measured, before this benchmark: 1,000 VNIs: first
apply 24 s, no-op 6.8 s, one peer added 7.4 s; 4,000 VNIs: 80 s, 25 s, 25 s. Goal for 4,000 VNIs: a no-op or
one-change run within 5 s, a first apply within 20 s.

The lab: host d with ul-a (198.51.100.106/30, MTU 1600) to a hub endpoint at 198.51.100.105, which answers ARP for
the route to the peers (198.51.100.96/27 via .105), and trunk0 to an endpoint; torn down at the end (--keep-lab
keeps it). make bench-document runs it (BENCH_DOCUMENT_ARGS="--vnis 1000" for a short try).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))
sys.path.insert(0, str(REPO / "tests"))

from lablib import Lab

PLAYBOOK = "playbooks/vtep.yml"
PHASES_SCRIPT = REPO / "tests" / "bench" / "vtep_phases.py"
LOCAL_IP = "198.51.100.106"
PEERS = ("198.51.100.98", "198.51.100.102", "198.51.100.110")
ADDED_PEER = "198.51.100.114"
VNI_BASE = 10000
# The issue's figures (seconds), measured before this benchmark existed.
ISSUE = {1000: (24.0, 6.8, 7.4), 4000: (80.0, 25.0, 25.0)}
GOAL = {"first apply": 20.0, "no-op re-run": 5.0, "one peer added": 5.0}
RUNS = ("first apply", "no-op re-run", "one peer added")


def topology() -> dict:
    return {
        "hosts": [{"name": "d", "routes": [{"to": "198.51.100.96/27", "via": "198.51.100.105"}]}],
        "endpoints": [{"name": "dhub"}, {"name": "dtrunk"}],
        "links": [
            {
                "mtu": 1600,
                "ends": [
                    {"node": "d", "ifname": "ul-a", "addresses": [f"{LOCAL_IP}/30"]},
                    {"node": "dhub", "ifname": "eth0", "addresses": ["198.51.100.105/30"]},
                ],
            },
            {"ends": [{"node": "d", "ifname": "trunk0"}, {"node": "dtrunk", "ifname": "eth0"}]},
        ],
    }


def document(vnis: int, added_peer: bool = False) -> dict:
    """trunk0 VIDs 1..vnis, VID v in VNI 10000 + v, each with the 3 peers (and the 4th in the last, added_peer)."""
    entries = []
    for vid in range(1, vnis + 1):
        peers = [*PEERS, ADDED_PEER] if added_peer and vid == vnis else PEERS
        entries.append(
            {
                "vni": VNI_BASE + vid,
                "trunks": [{"port": "trunk0", "vid": vid}],
                "peers": [{"ip": ip, "via": "ul-a"} for ip in peers],
            }
        )
    return {"tunnel_ports": [{"port": "ul-a", "local_ip": LOCAL_IP}], "vnis": entries}


def write_host_vars(lab: Lab, doc: dict) -> None:
    """d's host_vars: the document by hand, as a user writes it (YAML); and its peers, VTEPs of the fabric model
    outside the lab (inventory hosts that no play of the benchmark reaches), so that the fleet check
    (playbooks/fabric_check.yml) passes: each serves the VNIs d lists it in, on a trunk, and its peers are derived;
    fabric_vnis (in place of the default inventory's) lists the VNIs."""
    # host_tuning_nics tells the fleet check ul-a's MTU (a hand-written document does not).
    d_vars = {"vtep_config": doc, "host_tuning_nics": [{"name": "ul-a", "mtu": 1600}]}
    (lab.inventory / "host_vars" / "d.yml").write_text(_yaml(d_vars))
    serves: dict[str, list[int]] = {}
    for entry in doc["vnis"]:
        for peer in entry["peers"]:
            serves.setdefault(peer["ip"], []).append(entry["vni"])
    peers = {}
    for n, (ip, vnis) in enumerate(sorted(serves.items()), start=1):
        peers[f"peer{n}"] = None
        vtep = {
            "tunnel_ports": [{"port": "ul-a", "local_ip": f"{ip}/30"}],
            "routes": [{"to": "198.51.100.96/27", "via": "ul-a"}],
            "mtu": {"ul-a": 1600},
            "vnis": [{"vni": vni, "trunks": [{"port": "trunk0", "vid": vni - VNI_BASE}]} for vni in vnis],
        }
        (lab.inventory / "host_vars" / f"peer{n}.yml").write_text(_yaml({"fabric_vtep": vtep}))
    hosts_yml = lab.inventory / "hosts.yml"
    hosts = yaml.safe_load(hosts_yml.read_text())
    hosts["all"]["hosts"] = peers
    hosts_yml.write_text(yaml.safe_dump(hosts, sort_keys=False))
    fabric_vnis = [{"vni": entry["vni"]} for entry in doc["vnis"]]
    fabric = {"fabric_vnis": fabric_vnis, "fabric_vteps": ["d", *peers]}
    (lab.inventory / "group_vars" / "all" / "vtep.yml").write_text(_yaml(fabric))


def _yaml(data: dict) -> str:
    return "---\n" + yaml.dump(data, Dumper=yaml.CSafeDumper, sort_keys=False)


def playbook(lab: Lab, state: str = "present") -> float:
    """One run of playbooks/vtep.yml on d; its wall time. Raises when it fails."""
    start = time.monotonic()
    run = lab.run_playbook(PLAYBOOK, {"vtep_hosts": "d", "vtep_health_check": False, "vtep_state": state})
    seconds = time.monotonic() - start
    if run.rc != 0 or run.failed():
        raise RuntimeError(f"playbooks/vtep.yml failed:\n{run}")
    return seconds


def phases(lab: Lab, doc: dict, profile: int) -> dict:
    """deploy() of the document inside d, phase by phase (vtep_phases.py)."""
    argv = [sys.executable, str(PHASES_SCRIPT)] + (["--profile", str(profile)] if profile else [])
    proc = lab.host_exec("d", argv, input=json.dumps(doc), timeout=900)
    if profile:
        print(proc.stderr, file=sys.stderr)
    return json.loads(proc.stdout)


def print_runs(runs: dict[int, dict[str, list[float]]]) -> None:
    print("\nansible-playbook playbooks/vtep.yml -e vtep_hosts=d (health check off), wall seconds, median of rounds")
    print(f"{'VNIs':>6} | " + " | ".join(f"{name:>16}" for name in RUNS) + " | issue's figures (before)")
    for vnis, times in runs.items():
        cells = []
        for name in RUNS:
            median = statistics.median(times[name])
            goal = GOAL[name] if vnis >= 4000 else None
            mark = "" if goal is None else (" ok" if median <= goal else " MISS")
            cells.append(f"{median:13.1f}{mark:>3}")
        before = " / ".join(f"{t:g}" for t in ISSUE[vnis]) if vnis in ISSUE else ""
        print(f"{vnis:>6} | " + " | ".join(cells) + f" | {before}")
    print(f"goal at 4,000 VNIs: first apply <= {GOAL['first apply']:g} s, no-op and one change <= 5 s")


def print_phases(table: dict[int, dict[str, dict]]) -> None:
    print("\nthe vtep module's deploy() inside d, per phase, wall seconds (one run each)")
    for vnis, cases in table.items():
        labels: list[str] = []
        for data in cases.values():
            labels += [label for label in data["seconds"] if label not in labels]
        print(f"\n{vnis} VNIs {'':27} | " + " | ".join(f"{case:>14}" for case in cases))
        for label in labels:
            cells = [f"{data['seconds'].get(label, 0.0):14.3f}" for data in cases.values()]
            print(f"  {label:<36} | " + " | ".join(cells))
        print(f"  {'result size (bytes)':<36} | " + " | ".join(f"{d['result_bytes']:14d}" for d in cases.values()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vnis", type=int, nargs="+", default=[1000, 4000], help="document sizes (VNIs)")
    parser.add_argument("--rounds", type=int, default=1, help="timed runs of each kind per size (default 1)")
    parser.add_argument("--no-phases", action="store_true", help="skip the per-phase runs inside the host")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N of each phase run")
    parser.add_argument("--prefix", default="xbd", help="the lab's name prefix (default xbd)")
    parser.add_argument("--subnet", default="198.51.100.224/28", help="the lab's management subnet")
    parser.add_argument("--keep-lab", action="store_true", help="leave the lab up at the end")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_vtep_document: needs root (the lab's namespaces, XDP)", file=sys.stderr)
        return 1
    if any(not 1 <= n <= 4094 for n in args.vnis):
        print("bench_vtep_document: --vnis: 1..4094 (one trunk VID each)", file=sys.stderr)
        return 1
    workdir = tempfile.mkdtemp(prefix=f"xdpf-bench-{args.prefix}-")
    lab = Lab(args.prefix, args.subnet, workdir=workdir, **topology())
    lab.down()  # a stale lab of the same prefix
    up = lab.up()
    if up.rc:
        print(f"bench_vtep_document: the lab did not come up:\n{up}", file=sys.stderr)
        return 1
    runs: dict[int, dict[str, list[float]]] = {}
    table: dict[int, dict[str, dict]] = {}
    try:
        for vnis in [10, *args.vnis]:
            runs[vnis] = {name: [] for name in RUNS}
            for _ in range(args.rounds):
                playbook(lab, "absent")
                write_host_vars(lab, document(vnis))
                runs[vnis]["first apply"].append(playbook(lab))
                runs[vnis]["no-op re-run"].append(playbook(lab))
                write_host_vars(lab, document(vnis, added_peer=True))
                runs[vnis]["one peer added"].append(playbook(lab))
                print(f"{vnis} VNIs: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in runs[vnis].items()), flush=True)
            if args.no_phases or vnis == 10:
                continue
            playbook(lab, "absent")
            table[vnis] = {"first apply": phases(lab, document(vnis), args.profile)}
            table[vnis]["one change"] = phases(lab, document(vnis, added_peer=True), args.profile)
            table[vnis]["no-op"] = phases(lab, document(vnis, added_peer=True), args.profile)
        print_runs(runs)
        if table:
            print_phases(table)
    finally:
        if not args.keep_lab:
            lab.down()
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
