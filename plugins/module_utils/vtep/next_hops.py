# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The next hops of a deployed VTEP's peers: the MAC the data plane sends each peer's tunnel copies to (its entry in
tunnel_peers) against the host's neighbour table, and following a next hop that changes its MAC.

Why a refresher on the host, and why this way:
- The vtep module resolves a peer's next hop (the host's route to the peer, then the neighbour table) when it applies
  a document, and writes that MAC into tunnel_peers. The data plane then sends to that MAC, and the host's kernel
  never does, so nothing on the host notices when the next hop (a router, or the peer itself on a shared link)
  answers from another MAC: a replaced router or NIC, a first-hop failover to another box. Every peer behind it is
  black-holed until the playbook runs again, and even that run would read the kernel's old entry.
- The kernel's neighbour table is the authority the host already has: it takes gratuitous ARP, and it re-verifies
  an entry that is in use (reachable -> stale -> delay -> probe, and resolved afresh when the probes go unanswered).
  refresh() marks every peer's next hop as in use (neighbours.confirm, NTF_USE), so the kernel keeps verifying it as
  if the host sent traffic there, and writes the table's MAC into the peers whose MAC differs. No ARP of our own and
  nothing sent to the peers.
- It rewrites a MAC in place and nothing else: the same entry, with the remote address and VNI it was read with
  (compared just before the write); it never adds, removes or moves peers (the vtep module's job), and it leaves
  alone a peer whose MAC the document gives. The module resolves afresh on its next run and finds the new MAC too,
  so the two agree; the record (the document) holds no resolved MACs and does not change.
- It runs on the host without a controller: xdpfleet-restore --refresh-next-hops (xdpfleet-next-hops.service of the
  xdpfleet.fabric.xdp_host role, every xdp_host_next_hop_refresh_interval seconds).
How long a changed MAC black-holes: a next hop that announces its new MAC (gratuitous ARP, as routers and failover
protocols do) is followed within one interval. One that does not is found by the kernel's verification: when the old
entry's reachable time ends (base_reachable_time_ms, 30 s by default, so 15-45 s), after delay_first_probe_time
(5 s) and the unicast probes (ucast_solicit x retrans_time_ms, 3 x 1 s), plus one interval: about a minute at worst
with the kernel's defaults, less with shorter neighbour timers on the underlay ports.

check() is the same comparison without writing or touching the neighbour table: vtep_info's next_hops, which the
vtep role's health check reads to name a peer whose MAC is not its next hop's.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import LayoutMismatch
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import neighbours
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import PORT_TUNNEL
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import (
    LAYOUTS,
    PeerValue,
    PortConfig,
    PortVni,
    PortVniKey,
    ip_str,
    mac_bytes,
    mac_str,
    u32,
)

MAP_NAMES = ("port_config", "port_vnis", "tunnel_peers")


class NextHopError(RuntimeError):
    pass


@dataclass
class PeerHop:
    """One peer of one VNI as the data plane has it, and its next hop as the host's kernel has it."""

    vni: int
    remote: str  # the peer's tunnel address
    port: str  # the tunnel port its copies leave through
    index: int  # its entry in tunnel_peers
    mac: str  # the MAC its copies are sent to
    next_hop: str = ""  # the host's next hop towards the peer ("" when there is no usable route)
    next_hop_mac: str | None = None  # the neighbour table's MAC of the next hop (None: no usable entry)
    problem: str = ""  # why the next hop's MAC is not known, or "" when it is

    @property
    def stale(self) -> bool:
        """The next hop answers from another MAC than the one the data plane sends to."""
        return self.next_hop_mac is not None and self.next_hop_mac != self.mac

    def report(self) -> dict:
        out = {
            "vni": self.vni,
            "remote": self.remote,
            "port": self.port,
            "mac": self.mac,
            "next_hop": self.next_hop,
            "next_hop_mac": self.next_hop_mac,
            "stale": self.stale,
        }
        if self.problem:
            out["problem"] = self.problem
        return out

    def __str__(self) -> str:
        return f"VNI {self.vni} peer {self.remote} via {self.port}"


def _peers(maps: dict[str, libbpf.Map], names: dict[int, str]) -> list[tuple[PeerHop, bytes, int]]:
    """Every peer behind a tunnel port (port_vnis rows of tunnel ports), with its raw tunnel_peers value as read and
    the tunnel port's ifindex."""
    tunnel_ports = {
        int.from_bytes(key, "little")
        for key, value in maps["port_config"].dump()
        if PortConfig.from_buffer_copy(value).kind == PORT_TUNNEL
    }
    found = []
    for raw_key, raw_row in maps["port_vnis"].dump():
        key, row = PortVniKey.from_buffer_copy(raw_key), PortVni.from_buffer_copy(raw_row)
        if key.ifindex not in tunnel_ports:
            continue
        for index in range(row.first_peer, row.first_peer + row.peers):
            raw = maps["tunnel_peers"].lookup(u32(index))
            peer = PeerValue.from_buffer_copy(raw) if raw else None
            if peer is None or peer.vni != key.vni or not peer.remote_ip:
                continue
            port = names.get(key.ifindex, str(key.ifindex))
            hop = PeerHop(key.vni, ip_str(peer.remote_ip), port, index, mac_str(peer.mac))
            found.append((hop, raw, key.ifindex))
    found.sort(key=lambda item: (item[0].vni, ipaddress.ip_address(item[0].remote)))
    return found


def _inspect(maps: dict[str, libbpf.Map], names: dict[int, str], confirm: bool) -> list[tuple[PeerHop, bytes]]:
    missing = NextHopError("the next hops are read from the neighbour table with pyroute2, which is not installed")
    with neighbours.ip_route(missing) as ipr:
        found = _peers(maps, names)
        # One route lookup and one neighbour read per distinct peer address, not per (VNI, peer): a peer serves many
        # VNIs (1,000 VNIs of 12 peers made 24,000 requests a pass, tests/bench/bench_next_hops.py)
        looked_up: dict[str, neighbours.NextHop | neighbours.NeighbourError] = {}
        confirmed: set[tuple[int, str]] = set()
        for hop, _raw, ifindex in found:
            if hop.remote not in looked_up:
                try:
                    looked_up[hop.remote] = neighbours.current(ipr, hop.remote)
                except neighbours.NeighbourError as exc:
                    looked_up[hop.remote] = exc
            kernel = looked_up[hop.remote]
            if isinstance(kernel, neighbours.NeighbourError):
                hop.problem = str(kernel)
                continue
            if kernel.ifindex != ifindex:
                leaves = names.get(kernel.ifindex, f"ifindex {kernel.ifindex}") if kernel.ifindex else "nowhere"
                hop.problem = f"the host's route to {hop.remote} leaves through {leaves}, not {hop.port}"
                continue
            hop.next_hop, hop.next_hop_mac = kernel.address, kernel.mac
            if kernel.mac is None:
                hop.problem = f"next hop {kernel.address} has no usable neighbour entry (it does not answer ARP)"
            if confirm and (ifindex, kernel.address) not in confirmed:
                confirmed.add((ifindex, kernel.address))
                try:
                    neighbours.confirm(ipr, kernel)
                except neighbours.NeighbourError as exc:
                    hop.problem = hop.problem or str(exc)
    return [(hop, raw) for hop, raw, _ifindex in found]


def check(maps: dict[str, libbpf.Map], names: dict[int, str]) -> list[PeerHop]:
    """Every peer with the MAC the data plane sends to and its next hop's MAC in the neighbour table now. Reads
    only: nothing is written and nothing is sent."""
    return [hop for hop, _raw in _inspect(maps, names, confirm=False)]


def refresh(
    maps: dict[str, libbpf.Map], names: dict[int, str], given: set[tuple[int, str]], write: bool = True
) -> tuple[list[PeerHop], list[PeerHop]]:
    """Follow next hops that changed their MAC: write the neighbour table's MAC into each stale peer's entry, except
    the peers in `given` ((vni, address): their MAC is the document's), and ask the kernel to keep verifying every
    next hop. Returns (the peers whose MAC was (or, without `write`, would be) rewritten, with the old MAC in `mac`;
    the peers whose next hop is not known, with the problem)."""
    changed, unknown = [], []
    for hop, raw in _inspect(maps, names, confirm=write):
        if hop.problem:
            unknown.append(hop)
        if not hop.stale or (hop.vni, hop.remote) in given:
            continue
        if write:
            key = u32(hop.index)
            if maps["tunnel_peers"].lookup(key) != raw:  # the vtep module rewrote it meanwhile: its word stands
                continue
            value = PeerValue.from_buffer_copy(raw)
            value.mac[:] = list(mac_bytes(hop.next_hop_mac))
            maps["tunnel_peers"].update(key, bytes(value))
        changed.append(hop)
    return changed, unknown


def given_macs(document: dict) -> set[tuple[int, str]]:
    """(vni, address) of the peers whose next-hop MAC a VTEP document gives."""
    return {
        (vni["vni"], str(ipaddress.ip_address(peer["ip"])))
        for vni in document.get("vnis", [])
        for peer in vni.get("peers", [])
        if peer.get("mac")
    }


def open_maps(paths: xp.InstancePaths) -> dict[str, libbpf.PinnedMap] | None:
    """The pinned maps refresh() and check() use, their layouts checked; None when the VTEP is not running (no
    pins). The caller closes them."""
    pins = {name: paths.map_pin(name) for name in MAP_NAMES}
    if not any(os.path.exists(pin) for pin in pins.values()):
        return None
    maps: dict[str, libbpf.PinnedMap] = {}
    try:
        for name, pin in pins.items():
            maps[name] = libbpf.PinnedMap(pin)
            LAYOUTS[name].check_pinned(maps[name])
    except (LayoutMismatch, libbpf.LibbpfError, OSError) as exc:
        for m in maps.values():
            m.close()
        raise NextHopError(f"VTEP {paths.name}: its maps cannot be read ({exc}): deploy it again") from exc
    return maps
