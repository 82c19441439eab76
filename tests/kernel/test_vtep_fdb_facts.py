"""The VTEP's FDB as users see it (vtep/fdb.py), read from a real data plane after real frames: a VTEP in a network
namespace learns MACs from frames sent through veths, and the table and the forwarding counters show what it
learned, where, how long ago, and its static entries."""

import os
import time

import pytest
from conftest import LAB_PREFIX
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw
from vtep_netns import VtepNetns

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import fdb
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import InterfaceFacts, validate

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

LOCAL_IP, PEER = "198.51.100.201", "198.51.100.202"
PEER_MAC = "02:00:00:00:02:02"
STATIC_LOCAL, STATIC_REMOTE = "02:00:00:00:5a:01", "02:00:00:00:5a:02"
BROADCAST = "ff:ff:ff:ff:ff:ff"
ON_ACCESS, ON_TRUNK, AT_PEER = "02:00:00:00:64:01", "02:00:00:00:64:02", "02:00:00:00:64:03"


def document(fdb_aging: int = 60) -> dict:
    return {
        "fdb_aging": fdb_aging,
        "tunnel_ports": [{"port": "ul", "local_ip": LOCAL_IP}],
        "vnis": [
            {
                "vni": 100,  # vlan_mode translate: access ports and a trunk in one VNI
                "access_ports": ["a1", "a2"],
                "trunks": [{"port": "tr", "vid": 10}],
                "peers": [{"ip": PEER, "via": "ul", "mac": PEER_MAC}],
                "fdb": [{"mac": STATIC_LOCAL, "port": "a2"}, {"mac": STATIC_REMOTE, "remote": PEER}],
            }
        ],
    }


@pytest.fixture
def vtep(bpf_cache):
    ports = {"a1": 1500, "a2": 1500, "tr": 1500, "ul": 1600}
    with VtepNetns.loaded(f"{LAB_PREFIX}ff-{os.getpid()}", ports, bpf_cache) as lab:
        configure(lab, document())
        yield lab


def configure(lab: VtepNetns, doc: dict) -> None:
    facts = {name: InterfaceFacts(p.ifindex, p.mtu, p.mac) for name, p in lab.ports.items()}
    lab.configure(validate(doc, facts))


def names(lab: VtepNetns) -> dict[int, str]:
    return {port.ifindex: name for name, port in lab.ports.items()}


def facts(lab: VtepNetns) -> dict:
    """What the vtep and vtep_info modules return as ansible_facts.xdpfleet_vtep."""
    return fdb.facts(lab.maps, lab.current, names(lab))


def frame(src: str, dst: str = BROADCAST, tags=()) -> bytes:
    pkt = Ether(dst=dst, src=src)
    for tag in tags:
        pkt = pkt / tag
    return bytes(pkt / IP(src="198.51.100.210", dst="198.51.100.211") / UDP(sport=1234, dport=5678) / Raw(b"fdb"))


def from_peer(lab: VtepNetns, inner: bytes) -> bytes:
    return bytes(
        Ether(dst=lab.ports["ul"].mac, src=PEER_MAC)
        / IP(src=PEER, dst=LOCAL_IP)
        / UDP(sport=50000, dport=4789)
        / VXLAN(vni=100)
        / Raw(inner)
    )


def send(lab: VtepNetns, port: str, raw: bytes) -> dict[str, list[bytes]]:
    """Send a frame into a VTEP port and collect what every port sent out (so the data plane is done with it):
    the first port waits for the frame's copies, the others then have theirs."""
    lab.taps[port].send(raw)
    return {name: tap.drain(settle=0.2 if n == 0 else 0.02) for n, (name, tap) in enumerate(lab.taps.items())}


STATIC = {
    STATIC_LOCAL: {"type": "static", "port": "a2"},
    STATIC_REMOTE: {"type": "static", "port": "ul", "remote": PEER},
}


def test_a_learned_mac_shows_where_and_how_old_beside_the_static_ones(vtep):
    before = facts(vtep)["vnis"][100]
    assert before["fdb"] == STATIC and not any(before["fdb_events"].values())

    send(vtep, "a1", frame(ON_ACCESS))
    vni = facts(vtep)["vnis"][100]
    assert vni["fdb"] == {ON_ACCESS: {"type": "learned", "port": "a1", "age": 0}, **STATIC}
    assert vni["fdb_events"] == {
        "learned": 1, "moved": 0, "aged_out": 0, "static_conflict": 0, "known_unicast": 0, "flooded": 1
    }  # fmt: skip

    time.sleep(1.1)
    assert facts(vtep)["vnis"][100]["fdb"][ON_ACCESS]["age"] in (1, 2)  # it ages while no frame comes from it


def test_macs_learned_on_a_trunk_and_behind_a_peer_and_forwarded_to(vtep):
    send(vtep, "tr", frame(ON_TRUNK, tags=[Dot1Q(vlan=10)]))
    send(vtep, "ul", from_peer(vtep, frame(AT_PEER)))
    table = fdb.read(vtep.maps, vtep.current, names(vtep))[100]
    assert table == {
        ON_TRUNK: {"type": "learned", "port": "tr", "vid": 10, "age": 0},
        AT_PEER: {"type": "learned", "port": "ul", "remote": PEER, "age": 0},
        **STATIC,
    }
    # Known unicast: one copy, to the one place the table says.
    sent = send(vtep, "a1", frame(ON_ACCESS, dst=ON_TRUNK))
    assert {port: len(frames) for port, frames in sent.items()} == {"a1": 0, "a2": 0, "tr": 1, "ul": 0}
    assert Ether(sent["tr"][0])[Dot1Q].vlan == 10  # translate: the trunk's VID for the VNI
    events = facts(vtep)["vnis"][100]["fdb_events"]
    assert (events["learned"], events["known_unicast"], events["flooded"]) == (3, 1, 2)


def test_a_static_entry_is_not_learned_over_and_an_aged_entry_is_not_shown(vtep):
    sent = send(vtep, "a1", frame(STATIC_LOCAL))  # the static entry puts it on a2
    assert len(sent["a2"]) == 1  # flooded all the same
    vni = facts(vtep)["vnis"][100]
    assert vni["fdb"] == STATIC
    assert (vni["fdb_events"]["static_conflict"], vni["fdb_events"]["learned"]) == (1, 0)

    send(vtep, "a1", frame(ON_ACCESS))
    configure(vtep, document(fdb_aging=1))
    time.sleep(1.2)
    assert facts(vtep)["vnis"][100]["fdb"] == STATIC  # older than the aging time: gone for the data plane
    send(vtep, "a1", frame(ON_ACCESS))  # back: counted as aged out and learned again
    vni = facts(vtep)["vnis"][100]
    assert vni["fdb"] == {ON_ACCESS: {"type": "learned", "port": "a1", "age": 0}, **STATIC}
    assert (vni["fdb_events"]["learned"], vni["fdb_events"]["aged_out"]) == (2, 1)
