"""Flooding in a VNI whose members' MTUs differ, against the real kernel with real frames through veths: a devmap
sends no copy longer than its device's MTU + 18 (xdp_ok_fwd_dev), and drops it before any egress program runs. Each
such copy must still be counted, once (mtu, on the member's port and on the VNI), and never a copy that arrived.

The tunnel port ul (MTU 1500) is smaller than the configuration checks allow beside local ports of MTU 3000 (a
tunnel port's MTU is at least the inner MTU + 50): it stands for a device that refuses tunnel copies, one per peer.

Native XDP sends the copies the devices take. Generic XDP ends a broadcast at the first copy its device refuses
(kernel/bpf/devmap.c dev_map_redirect_multi), so the VTEP does not flood such a frame there: every copy is counted."""

import os

import pytest
from conftest import LAB_PREFIX
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw
from vtep_netns import VtepNetns, peer_mac

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    AccessPort,
    Peer,
    TunnelPort,
    Vni,
    VtepConfig,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

PORTS = {"a1": 3000, "a2": 1500, "a3": 3000, "ul": 1500, "ul2": 3000}  # native XDP on a veth: at most ~3500
LOCAL_IPS = {"ul": "198.51.100.1", "ul2": "198.51.100.2"}
TUNNEL_MACS = {"ul": "02:00:00:00:bb:01", "ul2": "02:00:00:00:bb:02"}
PEERS = {"198.51.100.10": "ul", "198.51.100.11": "ul", "198.51.100.20": "ul2"}  # two copies into ul, one into ul2
SOURCE = "02:00:00:00:5c:01"


def config() -> VtepConfig:
    return VtepConfig(
        tunnel_ports=tuple(TunnelPort(port, ip) for port, ip in LOCAL_IPS.items()),
        vnis=(
            Vni(
                100,
                tuple(AccessPort(p) for p in ("a1", "a2", "a3")),
                (),
                tuple(Peer(ip, via, peer_mac(ip)) for ip, via in sorted(PEERS.items(), key=lambda p: (p[1], p[0]))),
            ),
        ),
    )


@pytest.fixture(scope="module")
def lab(bpf_cache):
    with VtepNetns.loaded(f"{LAB_PREFIX}mm-{os.getpid()}", PORTS, bpf_cache, config(), TUNNEL_MACS) as lab:
        yield lab


def broadcast(size: int) -> bytes:
    raw = bytes(Ether(dst="ff:ff:ff:ff:ff:ff", src=SOURCE) / IP(src="198.51.100.170", dst="198.51.100.171") / UDP())
    return raw + bytes(size - len(raw))


def vxlan(peer: str, inner: bytes) -> bytes:
    via = PEERS[peer]
    return bytes(
        Ether(dst=TUNNEL_MACS[via], src=peer_mac(peer))
        / IP(src=peer, dst=LOCAL_IPS[via])
        / UDP(sport=50000, dport=4789)
        / VXLAN(vni=100)
        / Raw(inner)
    )


def mtu_drops(counters: dict) -> dict:
    return {
        **{port: stats["drops"].get("mtu", 0) for port, stats in counters["ports"].items()},
        "vni": counters["vnis"][100]["drops"].get("mtu", 0),
    }


CASES = {
    # (port it comes in on, frame, inner length): copies to a2 (1518 at most) and into ul (1518 at most) too long
    "local-2500": ("a1", broadcast(2500), 2500),
    "local-1518": ("a1", broadcast(1518), 1518),  # every device takes it; into ul too long once encapsulated
    "local-1519": ("a3", broadcast(1519), 1519),
    # decapsulated: to the local members only
    "tunnel-2500": ("ul2", vxlan("198.51.100.20", broadcast(2500)), 2500),
}


@pytest.mark.parametrize("mode", ["native", "generic"])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_every_copy_a_members_device_refuses_is_counted_once(lab, mode, case):
    in_port, sent, length = CASES[case]
    decapsulated = in_port in LOCAL_IPS
    copies = {p: 1 for p in ("a1", "a2", "a3") if p != in_port}  # what the VNI's group sends each port
    if not decapsulated:
        copies.update({"ul": 2, "ul2": 1})
    refused = {p for p in copies if length > PORTS[p] + 18}  # by the devmap, before any egress program
    # and by the egress program: a tunnel copy longer than its port's MTU once encapsulated
    too_long = refused | {p for p in copies if p in LOCAL_IPS and length + 36 > PORTS[p]}
    lab.attach(mode)
    try:
        lab.drain_all()
        before = mtu_drops(lab.counters())
        lab.taps[in_port].send(sent)
        arrived = {port: len(tap.drain(settle=0.3 if port == "a1" else 0.05)) for port, tap in lab.taps.items()}
        after = mtu_drops(lab.counters())
    finally:
        lab.attach("native")
    counted = {port: after[port] - before[port] for port in PORTS}
    # every copy arrived or was counted, and only one of the two
    assert {p: arrived[p] + counted[p] for p in PORTS} == {p: copies.get(p, 0) for p in PORTS}
    assert after["vni"] - before["vni"] == sum(counted.values())
    if mode == "native" or not refused:
        assert {p for p in PORTS if arrived[p]} == set(copies) - too_long
    else:  # generic: not flooded at all
        assert not any(arrived.values())
