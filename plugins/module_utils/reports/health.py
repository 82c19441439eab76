# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The health check of one VTEP (roles/vtep/tasks/health.yml): which probes it needs, and how what they left behind
is judged. Plain data in, plain data out; the tasks send the pings and read the counters, the filters
xdpfleet.fabric.vtep_health_plan and vtep_health_verdict (plugins/filter/vtep_health.py) call these functions.

Every probe must get a reply, and the counters must grow while the probes run, which shows that the frames went
through this VTEP's XDP program rather than around it. On an XDP VTEP, no peer may be sent to a MAC that is not its
next hop's (vtep_info's next_hops: a wrong mac in the document, or a next hop that moved). Without probes given,
they are derived from the VTEP's peers: the host pings each peer's tunnel address on the underlay, the tunnel ports
the peers are behind must count the replies, and every peer's next-hop MAC must be the one the host's neighbour
table confirmed for those pings. With neither probes nor peers nothing can be checked, and the verdict says so. On
an XDP or TC VTEP every access port and trunk must be promiscuous.
"""

from __future__ import annotations

from collections.abc import Mapping

# Backends whose VTEP is an XDP data plane with the collection's counters and next hops; linux is the kernel's
# bridge + vxlan, whose bridge counts its ports promiscuous without the flag.
COUNTED_BACKENDS = ("xdp", "tc")
DEFAULT_COUNT = 3
IFF_PROMISC = 0x100  # linux/if.h; /sys/class/net/<port>/flags shows the flags as `ip link` does
DERIVED_COUNTER = "rx_packets"  # what a tunnel port counts of the derived probes' replies
NOT_PROMISCUOUS = "not in promiscuous mode (frames for the MACs behind other VTEPs are dropped before XDP)"


def _peers(document: Mapping) -> list[Mapping]:
    return [peer for vni in document.get("vnis") or [] for peer in vni.get("peers") or []]


def peer_addresses(document: Mapping) -> list[str]:
    """Every peer's tunnel address, once each, in the document's order."""
    return list(dict.fromkeys(peer["ip"] for peer in _peers(document)))


def tunnel_ports(document: Mapping) -> list[str]:
    """The tunnel ports the peers are behind, sorted: the ports whose counters the derived probes' replies move."""
    return sorted({peer["via"] for peer in _peers(document)})


def local_ports(document: Mapping) -> list[str]:
    """The access ports and trunks, sorted: the ports that must be promiscuous."""
    ports = set()
    for vni in document.get("vnis") or []:
        ports.update(vni.get("access_ports") or [])
        ports.update(trunk["port"] for trunk in vni.get("trunks") or [])
    return sorted(ports)


def ping_argv(probe: Mapping) -> list[str]:
    """The probe's ping: one reply out of `count` passes it."""
    argv = ["ip", "netns", "exec", probe["netns"]] if probe.get("netns") is not None else []
    count = probe.get("count")
    argv += ["ping", "-q", "-n", "-c", str(DEFAULT_COUNT if count is None else count), "-i", "0.2", "-W", "2"]
    if probe.get("interface") is not None:
        argv += ["-I", probe["interface"]]
    return [*argv, probe["to"]]


def plan(host: str, document: Mapping, backend: str, probes: list, counters: list) -> dict:
    """What the check of VTEP `host` (its document, backend, the probes given and the counters that must grow) runs:
    the probes (given, else derived from the peers), each with its ping's argv, the host it runs on (`from`) and its
    label; the ports whose promiscuous flag is read and the argv that reads it; whether the counters are read
    before and after the probes."""
    derived = not probes
    if derived:
        probes = [{"to": address, "name": f"{host} -> peer {address}"} for address in peer_addresses(document)]
    counted = backend in COUNTED_BACKENDS
    promiscuous = local_ports(document) if counted else []
    return {
        "host": host,
        "derived": derived,
        "probes": [
            {
                **probe,
                "argv": ping_argv(probe),
                "from": probe.get("from") or host,
                "label": probe.get("name")
                or f"{probe.get('netns') or probe.get('from') or host} -> {probe['to']}",
            }
            for probe in probes
        ],
        "counters": list(counters),
        "tunnel_ports": tunnel_ports(document),
        "promiscuous_ports": promiscuous,
        "flags_argv": ["cat", *(f"/sys/class/net/{port}/flags" for port in promiscuous)],
        "read_counters_before": counted and bool(probes) and (derived or bool(counters)),
        "read_counters_after": counted and bool(probes),
    }


def unanswered(probes: list[Mapping], return_codes: list[int]) -> list[str]:
    """The addresses of the probes whose ping got no reply (a non-zero exit)."""
    return [probe["to"] for probe, rc in zip(probes, return_codes) if rc != 0]


def _sum(vnis: Mapping, counter: str) -> int:
    return sum(entry[counter] for entry in vnis.values())


def stuck_counters(check: Mapping, before: Mapping, after: Mapping) -> list[str]:
    """`<counter> <before> -> <after>` for each counter that did not grow between the two xdpfleet_vtep facts: with
    derived probes rx_packets of each tunnel port a peer is behind, else each counter summed over the VNIs."""
    stuck = []
    if check["derived"]:
        for port in check["tunnel_ports"]:
            was = (before.get("ports") or {}).get(port, {}).get(DERIVED_COUNTER, 0)
            now = (after.get("ports") or {}).get(port, {}).get(DERIVED_COUNTER, 0)
            if now <= was:
                stuck.append(f"port {port} {DERIVED_COUNTER} {was} -> {now}")
    else:
        for counter in check["counters"]:
            was, now = _sum(before.get("vnis") or {}, counter), _sum(after.get("vnis") or {}, counter)
            if now <= was:
                stuck.append(f"{counter} {was} -> {now}")
    return stuck


def wrong_next_hops(check: Mapping, next_hops: list[Mapping]) -> list[str]:
    """One line per peer the data plane sends to another MAC than its next hop's; with derived probes (which made
    the host resolve every peer's next hop) also per peer whose next hop is not known."""
    wrong = []
    for hop in next_hops:
        if not (hop["stale"] or (check["derived"] and "problem" in hop)):
            continue
        why = (
            f"tunnel_peers sends to {hop['mac']}, but next hop {hop['next_hop']} is at {hop['next_hop_mac']}"
            if hop["stale"]
            else hop["problem"]
        )
        wrong.append(f"probe {check['host']} -> peer {hop['remote']} (VNI {hop['vni']} via {hop['port']}): {why}")
    return wrong


def not_promiscuous(ports: list[str], flags: list[str]) -> list[str]:
    """The ports whose flags (hexadecimal, as /sys/class/net/<port>/flags has them, in the order of `ports`) lack
    IFF_PROMISC."""
    return [port for port, value in zip(ports, flags) if not int(value, 16) & IFF_PROMISC]


def verdict(
    check: Mapping,
    return_codes: list[int],
    before: Mapping | None,
    after: Mapping | None,
    next_hops: list[Mapping] | None,
    flags: list[str] | None,
) -> dict:
    """{healthy, msg, and each kind of problem as a list} for the plan `check` and what its tasks read: each probe's
    ping exit code, the xdpfleet_vtep fact before and after the probes and the next hops after them (None where not
    read), and each promiscuous port's flags (None where not read)."""
    problems = {
        "unanswered": unanswered(check["probes"], return_codes),
        "stuck": stuck_counters(check, before or {}, after or {}) if before is not None else [],
        "wrong_next_hops": wrong_next_hops(check, next_hops or []),
        "not_promiscuous": not_promiscuous(check["promiscuous_ports"], flags) if flags is not None else [],
    }
    host = check["host"]
    if any(problems.values()):
        parts = [f"VTEP {host} is not healthy:"]
        if problems["unanswered"]:
            parts.append(f"no reply from {', '.join(problems['unanswered'])}.")
        if problems["stuck"]:
            parts.append("counters did not grow during the probes: " + "".join(f"{s}; " for s in problems["stuck"]))
        if problems["wrong_next_hops"]:
            parts.append("wrong next hop: " + "".join(f"{w}; " for w in problems["wrong_next_hops"]))
        if problems["not_promiscuous"]:
            parts.append(f"{NOT_PROMISCUOUS}: {', '.join(problems['not_promiscuous'])}")
        msg = " ".join(part.strip() for part in parts)
    elif not check["probes"]:
        msg = f"VTEP {host}: NOTHING WAS CHECKED (no vtep_health_probes, and no peers to derive them from)"
    else:
        probes = (
            "derived probe(s) (no vtep_health_probes given: the peers' tunnel addresses on the underlay)"
            if check["derived"]
            else "probe(s)"
        )
        grew = ", counters grew" if before is not None else ""
        matched = ", next hops match" if after is not None else ""
        msg = f"VTEP {host} healthy: {len(check['probes'])} {probes} answered{grew}{matched}"
    return {"healthy": not any(problems.values()), "msg": msg, **problems}
