#!/usr/bin/env python3
"""Benchmark: one pass of the next-hop refresher (vtep/next_hops.refresh, what xdpfleet-next-hops.service runs every
xdp_host_next_hop_refresh_interval seconds) over a VTEP with many VNIs that share a few peers.

Not a test (pytest does not collect bench_*.py): it prints a table from one run. Needs root.

The maps are real BPF maps in the layouts of the VTEP's port_config, port_vnis and tunnel_peers, filled as the
vtep module fills them: one tunnel port (ul, a veth in a namespace of the benchmark's own), and every VNI with the
same peers behind it (198.51.100.194 and up, on ul's link: addresses of the veth's far end, in a second namespace,
which answers ARP; the peers' entries hold its MAC, so nothing is stale and a pass writes nothing). For each size
(--vnis, --peers) the table gives the peer entries, the netlink requests of a pass (route lookups, neighbour reads,
NTF_USE confirmations: counted where host/neighbours.py makes them) and its wall time (median of --passes).

Measured on the 2-core development machine, 1,000 VNIs, median of 3 passes:

  peers  peer entries   before: requests, s a pass   after (one lookup per distinct peer): requests, s a pass
      3         3,000           6,003    7.9                      9    0.24
     12        12,000          24,012   34.6 (over the 10 s       36    0.88
                                               interval)
What is left of a pass is the read of the maps (one lookup of tunnel_peers per entry).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import neighbours
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import next_hops as nh
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import PORT_TUNNEL
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import (
    PeerValue,
    PortConfig,
    PortVni,
    PortVniKey,
    mac_bytes,
    u32,
)

PREFIX = os.environ.get("XDPFLEET_TEST_LAB_PREFIX", "xt")
LOCAL = "198.51.100.193/26"
HASH, ARRAY = 1, 2  # BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_ARRAY (the VTEP's port_vnis is a hash, tunnel_peers an array)
FIRST_PEER = 194


def peer_ip(n: int) -> str:
    return f"198.51.100.{FIRST_PEER + n}"


def maps_for(vnis: int, peers: int, ifindex: int, mac: str) -> dict[str, libbpf.Map]:
    made = {}
    for name, kind, key, value, entries in (
        ("port_config", HASH, 4, ctypes.sizeof(PortConfig), 16),
        ("port_vnis", HASH, ctypes.sizeof(PortVniKey), ctypes.sizeof(PortVni), vnis),
        ("tunnel_peers", ARRAY, 4, ctypes.sizeof(PeerValue), vnis * peers),
    ):
        made[name] = libbpf.Map.from_fd(libbpf.map_create(kind, name, key, value, entries))
    made["port_config"].update(u32(ifindex), bytes(PortConfig(kind=PORT_TUNNEL)))
    for v in range(vnis):
        vni = 10000 + v
        made["port_vnis"].update(bytes(PortVniKey(vni, ifindex)), bytes(PortVni(first_peer=v * peers, peers=peers)))
        for p in range(peers):
            remote = int.from_bytes(socket.inet_aton(peer_ip(p)), "little")
            value = PeerValue(remote_ip=remote, vni=vni)
            value.mac[:] = list(mac_bytes(mac))
            made["tunnel_peers"].update(u32(v * peers + p), bytes(value))
    return made


def count_requests() -> dict[str, int]:
    """Counts the netlink requests the refresher makes: host/neighbours.py's next_hop (a route lookup), _entry (a
    neighbour read) and confirm (NTF_USE), each one request."""
    counts = {"next_hop": 0, "_entry": 0, "confirm": 0}
    for name in counts:
        original = getattr(neighbours, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            counts[_name] += 1
            return _original(*args, **kwargs)

        setattr(neighbours, name, counted)
    return counts


def child(sizes: list[tuple[int, int]], passes: int, mac: str) -> None:
    """In the namespace: one row per size."""
    ifindex = socket.if_nametoindex("ul")
    counts = count_requests()
    rows = []
    for vnis, peers in sizes:
        maps = maps_for(vnis, peers, ifindex, mac)
        times, requests = [], []
        for _ in range(passes):
            for key in counts:
                counts[key] = 0
            start = time.perf_counter()
            changed, unknown = nh.refresh(maps, {ifindex: "ul"}, set())
            times.append(time.perf_counter() - start)
            requests.append(sum(counts.values()))
            assert not changed and not unknown, f"{len(changed)} changed, {len(unknown)} unknown: {unknown[:1]}"
        for m in maps.values():
            os.close(m.fd)
        rows.append({"vnis": vnis, "peers": peers, "requests": statistics.median(requests),
                     "ms": statistics.median(times) * 1000})  # fmt: skip
    print(json.dumps(rows))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vnis", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--peers", type=int, nargs="+", default=[3, 12])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [(v, p) for v in args.vnis for p in args.peers]
    if args.child:
        child(sizes, args.passes, args.child)
        return 0
    if os.geteuid() != 0:
        sys.exit("bench_next_hops: needs root (a namespace, BPF maps)")
    ns, far = f"{PREFIX}-nhb-{os.getpid()}", f"{PREFIX}-nhp-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "netns", "add", far], check=True)
    try:
        sh = lambda *argv, where=ns: subprocess.run(["ip", "-n", where, *argv], check=True)  # noqa: E731
        sh("link", "add", "ul", "type", "veth", "peer", "name", "ulp", "netns", far)
        sh("link", "set", "ul", "up")
        sh("link", "set", "ulp", "up", where=far)
        sh("addr", "add", LOCAL, "dev", "ul")
        mac = json.loads(subprocess.run(["ip", "-n", far, "-j", "link", "show", "ulp"], capture_output=True,
                                        check=True).stdout)[0]["address"]  # fmt: skip
        for p in range(max(args.peers)):
            # the peers answer ARP (the kernel verifies the entries the refresher confirms) from ulp's MAC
            sh("addr", "add", f"{peer_ip(p)}/26", "dev", "ulp", where=far)
            sh("neigh", "replace", peer_ip(p), "lladdr", mac, "dev", "ul", "nud", "stale")
        run = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, __file__, "--child", mac, "--vnis", *map(str, args.vnis),
             "--peers", *map(str, args.peers), "--passes", str(args.passes)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if run.returncode:
            sys.exit(run.stderr[-3000:])
        rows = json.loads(run.stdout)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
        subprocess.run(["ip", "netns", "del", far], check=False)
    print(f"next-hop refresher, one pass (median of {args.passes})")
    print(f"{'VNIs':>6} {'peers':>6} {'peer entries':>13} {'netlink requests':>17} {'ms':>9}")
    for row in rows:
        entries = row["vnis"] * row["peers"]
        print(f"{row['vnis']:>6} {row['peers']:>6} {entries:>13} {row['requests']:>17g} {row['ms']:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
