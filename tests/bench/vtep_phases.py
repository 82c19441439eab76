#!/usr/bin/env python3
"""The VTEP module's work on one host, phase by phase: deploy() with a document read from stdin, each phase timed.

Run inside a lab host (bench_vtep_document.py runs it through nsenter, with the controller's Python, which the lab
hosts share), as root: it applies the document to the host's VTEP instance `vtep`, as the vtep module would with
its default paths. Prints one JSON object: phase -> seconds (wall), and "calls" per phase.

  --check       check mode (nothing written)
  --profile N   also print cProfile's N most expensive functions (cumulative) to stderr
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))
sys.path.insert(0, str(REPO / "tests" / "bench"))

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from phase_timer import PhaseTimer

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config, deploy, fdb, plan, words, writer

TIMER = PhaseTimer()


# (owner, attribute, label): each phase where deploy() and update() look it up. Indented labels are inside the one
# above them.
PHASES = (
    (deploy, "host_ports", "host interfaces"),
    (deploy, "validate", "validate"),
    (config, "check_schema", "  JSON Schema"),
    (config, "semantic_problems", "  rules"),
    (config, "_model", "  model"),
    (deploy, "host_problems", "host addresses"),
    (deploy, "resolve_peer_macs", "peer next hops"),
    (xp, "compiled_instance", "compile + load object"),
    (xp.Instance, "plan", "attach plan"),
    (xp, "load_state", "read state file"),
    (xp, "write_state", "write state file"),
    (writer, "read", "read maps"),
    (plan, "compile_desired", "plan: compile"),
    (plan, "diff", "plan: diff"),
    (plan, "capacity_problems", "plan: capacity"),
    (writer.Writer, "apply", "write maps"),
    (xp.Instance, "apply", "attach"),
    (words, "changes", "changes in words"),
    (fdb, "facts", "facts (counters, FDB)"),
)


def module_arguments(document: dict) -> None:
    """What AnsibleModule does with the document before the module runs: decode its JSON, validate the arguments."""
    raw = json.dumps({"ANSIBLE_MODULE_ARGS": {"config": document}})
    start = time.perf_counter()
    params = json.loads(raw)["ANSIBLE_MODULE_ARGS"]
    ArgumentSpecValidator({"config": {"type": "dict"}}).validate(params)
    TIMER.add("module arguments", time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="check mode: nothing is written")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N functions to stderr")
    args = parser.parse_args()
    document = json.load(sys.stdin)
    for owner, attr, label in PHASES:
        TIMER.wrap(owner, attr, label)
    module_arguments(document)
    paths = xp.InstancePaths("vtep", xp.PIN_ROOT, xp.STATE_DIR)
    profiler = cProfile.Profile() if args.profile else None
    start = time.perf_counter()
    if profiler:
        profiler.enable()
    result = deploy.Vtep(
        paths, xp.CACHE_DIR, document=document, check_mode=args.check, check_host=True, build_dir="/tmp"
    ).deploy()
    if profiler:
        profiler.disable()
    TIMER.add("deploy() in all", time.perf_counter() - start)
    start = time.perf_counter()
    output = json.dumps(result)
    TIMER.add("module result (JSON)", time.perf_counter() - start)
    if profiler:
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
    print(json.dumps({"seconds": TIMER.seconds, "changed": result["changed"], "result_bytes": len(output)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
