#!/usr/bin/env python3
"""Benchmark: what a deploy pays for its object when the compile cache already holds it (bpf/build.py).

Not a test (pytest does not collect bench_*.py): it prints a table from one run. Needs no root.

For each data plane's source, with the cache filled first:

  with clang   the key worked out as every hit did before the manifests: `clang --version`, `clang -M` and every file
               read hashed (build.cache_key, which also builds the manifest)
  manifest     compile_object on the hit as it is now: the manifest read and its inputs hashed, no compiler run

Rounds alternate (with clang, manifest, with clang, ...); the table has each one's median and the ratio.

  .venv/bin/python tests/bench/bench_build.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build

SOURCES = {
    "counter": "counter/counter.c",
    "echo": "trafficgen/echo.c",
    "sender": "trafficgen/sender.c",
    "filter": "filter/filter.c",
    "router": "router/router.c",
    "vtep": "vtep/vtep.c",
}


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    include = [str(REPO / "bpf" / "include")]
    flags = bpf_build.compile_flags(include, {})
    print(f"compile cache hit per deploy, median of {args.rounds} rounds (ms)\n")
    print("| data plane | with clang | manifest | ratio |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-build-") as cache:
        for plane, relative in SOURCES.items():
            source = str(REPO / "bpf" / relative)
            path, _ = bpf_build.compile_object(source, cache, include)
            clang, manifest = [], []
            for _ in range(args.rounds):
                clang.append(timed(lambda: bpf_build.cache_key(source, flags)))  # noqa: B023
                hit = []
                manifest.append(timed(lambda: hit.append(bpf_build.compile_object(source, cache, include))))  # noqa: B023
                if hit != [(path, False)]:
                    raise SystemExit(f"{plane}: the cache did not hit: {hit}")
            before, after = statistics.median(clang) * 1e3, statistics.median(manifest) * 1e3
            print(f"| {plane} | {before:.1f} | {after:.1f} | {before / after:.0f}x |")


if __name__ == "__main__":
    main()
