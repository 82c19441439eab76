"""The VTEP's forwarding against the real kernel, with real frames through veths: MAC learning (local ports and
remote VTEPs), known unicast to exactly one place, aging, static entries, moves, the bounded table, VLAN
translation, and that a port never carries another VNI's frame, not even while it moves between VNIs.

Every check looks at every port of the VTEP: "exactly one place" means all the others saw nothing. Both backends are
held to the same assertions (one namespace and one loaded object; the backend is which programs are attached)."""

import os
import time

import pytest
from conftest import LAB_PREFIX
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw
from vtep_netns import ATTACHMENT_IDS, ATTACHMENTS, VtepNetns, access, peer_mac, peers

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    FdbEntry,
    TrunkBinding,
    TunnelPort,
    Vni,
    VtepConfig,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

LOCAL_IP = "198.51.100.1"
PEERS = [f"198.51.100.{10 + i}" for i in range(3)]
BROADCAST = "ff:ff:ff:ff:ff:ff"
STATIONS = ("one", "two", "three", "far", "pinned", "pinned_far", "tagged")
STATION = {name: f"02:00:00:00:5a:{n:02x}" for n, name in enumerate(STATIONS, start=1)}
UNDERLAY_MAC = "02:00:00:00:bb:01"  # ul's: VXLAN to another MAC is not decapsulated
PORTS = {"a1": 1500, "a2": 1500, "a3": 1500, "tr": 1500, "tr2": 1500, "ul": 1600}
FDB_SIZE = 64
TC_ACT_UNSPEC = -1  # linux/pkt_cls.h; tcx: go on to the next program


def config(aging: int = 300, vni100_access=("a1", "a2")) -> VtepConfig:
    remote = peers(PEERS)
    return VtepConfig(
        tunnel_ports=(TunnelPort("ul", LOCAL_IP),),
        vnis=(
            # translate (the default): access ports and two trunks on different VIDs in one VNI
            Vni(
                100,
                access(*vni100_access),
                (TrunkBinding("tr", 10), TrunkBinding("tr2", 30)),
                remote,
                fdb=(
                    FdbEntry(STATION["pinned"], "a2", None),
                    FdbEntry(STATION["pinned_far"], None, PEERS[2]),
                ),
            ),
            Vni(200, access("a3"), (), remote[:1]),
        ),
        fdb_aging=aging,
    )


@pytest.fixture(scope="module")
def lab(bpf_cache):
    name = f"{LAB_PREFIX}vf-{os.getpid()}"
    with VtepNetns.loaded(name, PORTS, bpf_cache, config(), {"ul": UNDERLAY_MAC}, fdb_size=FDB_SIZE) as lab:
        yield lab


def attached(lab, backend: str, tc_attach: str | None = None):
    if (lab.backend, lab.tc_attach) != (backend, tc_attach):
        lab.attach("native", backend, tc_attach)
    return lab


@pytest.fixture(params=ATTACHMENTS, ids=ATTACHMENT_IDS)
def vtep(lab, request):
    """The VTEP with the programs of each backend attached (native XDP; the tc one each way it can be)."""
    return attached(lab, *request.param)


@pytest.fixture
def fresh(vtep):
    return forgetting(vtep)


@pytest.fixture
def fresh_xdp(lab):
    """The XDP backend, for what only it has (its stamps) or what ingress alone does (shared by both backends)."""
    return forgetting(attached(lab, "xdp"))


def forgetting(vtep):
    """A VTEP that has learned nothing (and is configured as config() says)."""
    vtep.configure(config())
    learned = vtep.maps[layouts.LEARNED_FDB]
    for key in list(learned.keys()):
        learned.delete(key)
    generation = vtep.maps[layouts.FDB_GENERATION]  # what the CPUs looked up recently is stale
    now = int.from_bytes(generation.lookup(bytes(4)), "little")
    generation.update(bytes(4), (now + layouts.USER_FDB_GENERATION_STEP).to_bytes(8, "little"))
    vtep.drain_all()
    return vtep


def frame(marker: str, src: str, dst: str = BROADCAST, tags=()) -> bytes:
    pkt = Ether(dst=dst, src=src)
    for tag in tags:
        pkt = pkt / tag
    return bytes(pkt / IP(src="198.51.100.170", dst="198.51.100.171") / UDP(sport=1234, dport=5678) / Raw(marker))


def vxlan(vni: int, peer: str, inner: bytes) -> bytes:
    return bytes(
        Ether(dst=UNDERLAY_MAC, src=peer_mac(peer))
        / IP(src=peer, dst=LOCAL_IP)
        / UDP(sport=50000, dport=4789)
        / VXLAN(vni=vni)
        / Raw(inner)
    )


def seen(lab) -> dict[str, list[bytes]]:
    """What every port sent out, by port."""
    out = {}
    for port, tap in lab.taps.items():
        out[port] = tap.drain(settle=0.05 if out else 0.25)  # after the first wait, the rest have arrived
    return out


def only(received: dict[str, list[bytes]]) -> dict[str, int]:
    return {port: len(frames) for port, frames in received.items() if frames}


def fdb_events(lab, vni: int) -> dict[str, int]:
    return lab.counters()["vnis"][vni]["fdb_events"]


def drops(lab, port: str) -> dict:
    return lab.counters()["ports"][port]["drops"]


def test_a_learned_local_mac_gets_its_unicast_only(fresh):
    fresh.taps["a1"].send(frame("hello", STATION["one"]))
    assert only(seen(fresh)) == {"a2": 1, "tr": 1, "tr2": 1, "ul": len(PEERS)}  # unknown: flooded
    before = fdb_events(fresh, 100)
    fresh.taps["a2"].send(frame("to one", STATION["two"], dst=STATION["one"]))
    received = seen(fresh)
    assert only(received) == {"a1": 1}
    assert received["a1"] == [frame("to one", STATION["two"], dst=STATION["one"])]
    after = fdb_events(fresh, 100)
    assert after["known_unicast"] == before["known_unicast"] + 1 and after["learned"] == before["learned"] + 1


def test_a_mac_learned_from_a_peer_gets_one_encapsulated_copy(fresh):
    inner = frame("from far", STATION["far"])
    fresh.taps["ul"].send(vxlan(100, PEERS[1], inner))
    assert only(seen(fresh)) == {"a1": 1, "a2": 1, "tr": 1, "tr2": 1}  # decapsulated: local members only
    sent = frame("to far", STATION["one"], dst=STATION["far"])
    fresh.taps["a1"].send(sent)
    received = seen(fresh)
    assert only(received) == {"ul": 1}
    pkt = Ether(received["ul"][0])
    assert pkt[IP].dst == PEERS[1] and pkt[IP].src == LOCAL_IP and pkt[Ether].dst == peer_mac(PEERS[1])
    assert pkt[VXLAN].vni == 100 and bytes(pkt[VXLAN].payload) == sent
    recomputed = IP(bytes(pkt[IP]))
    del recomputed.chksum
    assert IP(bytes(recomputed)).chksum == pkt[IP].chksum


def test_known_unicast_never_goes_back_where_it_came_from(fresh):
    fresh.taps["ul"].send(vxlan(100, PEERS[1], frame("far", STATION["far"])))
    fresh.taps["a1"].send(frame("one", STATION["one"]))
    seen(fresh)
    # from another peer to a MAC behind a peer: never back into the tunnel (split horizon)
    fresh.taps["ul"].send(vxlan(100, PEERS[0], frame("via us", STATION["two"], dst=STATION["far"])))
    # from a1 to a MAC learned on a1: not sent back out of a1
    fresh.taps["a1"].send(frame("hairpin", STATION["three"], dst=STATION["one"]))
    assert only(seen(fresh)) == {}
    assert drops(fresh, "ul")["split_horizon"] >= 1 and drops(fresh, "a1")["hairpin"] >= 1


def test_a_mac_that_moves_is_learned_again_and_counted(fresh):
    fresh.taps["a1"].send(frame("here", STATION["one"]))
    seen(fresh)
    before = fdb_events(fresh, 100)["moved"]
    fresh.taps["ul"].send(vxlan(100, PEERS[0], frame("moved away", STATION["one"])))
    seen(fresh)
    assert fdb_events(fresh, 100)["moved"] == before + 1
    fresh.taps["a2"].send(frame("follow it", STATION["two"], dst=STATION["one"]))
    received = seen(fresh)
    assert only(received) == {"ul": 1} and Ether(received["ul"][0])[IP].dst == PEERS[0]


def test_learned_macs_age_out(fresh_xdp):
    vtep = fresh_xdp
    vtep.configure(config(aging=1))
    try:
        vtep.drain_all()
        vtep.taps["a1"].send(frame("hello", STATION["one"]))
        vtep.taps["a2"].send(frame("known", STATION["two"], dst=STATION["one"]))
        assert only(seen(vtep)) == {"a1": 1, "a2": 1, "tr": 1, "tr2": 1, "ul": len(PEERS)}  # hello flooded
        before = fdb_events(vtep, 100)["aged_out"]
        time.sleep(1.5)
        vtep.taps["a2"].send(frame("forgotten", STATION["two"], dst=STATION["one"]))
        assert only(seen(vtep)) == {"a1": 1, "tr": 1, "tr2": 1, "ul": len(PEERS)}  # unknown again: flooded
        assert fdb_events(vtep, 100)["aged_out"] >= before + 1
    finally:
        vtep.configure(config())


def test_static_entries_forward_and_are_never_overridden(fresh):
    fresh.taps["a1"].send(frame("to pinned", STATION["one"], dst=STATION["pinned"]))
    assert only(seen(fresh)) == {"a2": 1}
    fresh.taps["a1"].send(frame("to pinned far", STATION["one"], dst=STATION["pinned_far"]))
    received = seen(fresh)
    assert only(received) == {"ul": 1} and Ether(received["ul"][0])[IP].dst == PEERS[2]
    before = fdb_events(fresh, 100)["static_conflict"]
    fresh.taps["a1"].send(frame("impostor", STATION["pinned"]))  # the pinned MAC seen on a1
    seen(fresh)
    assert fdb_events(fresh, 100)["static_conflict"] == before + 1
    fresh.taps["a3"].send(frame("still pinned", STATION["three"], dst=STATION["pinned"]))  # VNI 200: not its entry
    fresh.taps["tr"].send(frame("still pinned", STATION["three"], dst=STATION["pinned"], tags=[Dot1Q(vlan=10)]))
    received = seen(fresh)
    assert only(received) == {"a2": 1, "ul": 1}  # VNI 100's entry holds; VNI 200 floods to its one peer
    assert Ether(received["ul"][0])[VXLAN].vni == 200


def test_a_new_static_entry_applies_at_once(fresh):
    """A CPU remembers its last lookup (found or not); writing fdb_static makes that stale at once."""
    late = "02:00:00:00:5a:77"
    for _ in range(2):
        fresh.taps["a1"].send(frame("unknown yet", STATION["one"], dst=late))
    assert only(seen(fresh)) == {"a2": 2, "tr": 2, "tr2": 2, "ul": 2 * len(PEERS)}
    vni100, vni200 = config().vnis
    pinned = Vni(100, vni100.access_ports, vni100.trunks, vni100.peers, fdb=(*vni100.fdb, FdbEntry(late, "tr", None)))
    fresh.configure(VtepConfig(config().tunnel_ports, (pinned, vni200)))
    fresh.taps["a1"].send(frame("pinned now", STATION["one"], dst=late))
    assert only(seen(fresh)) == {"tr": 1}


def test_the_learned_table_is_bounded(fresh_xdp):
    fresh = fresh_xdp
    for n in range(4 * FDB_SIZE):
        fresh.test_run("a1", frame("many", f"02:00:00:01:{n >> 8:02x}:{n & 0xff:02x}"))
    assert len(list(fresh.maps[layouts.LEARNED_FDB].keys())) <= FDB_SIZE
    last = f"02:00:00:01:{(4 * FDB_SIZE - 1) >> 8:02x}:{(4 * FDB_SIZE - 1) & 0xff:02x}"
    fresh.drain_all()
    fresh.taps["a2"].send(frame("to the newest", STATION["two"], dst=last))
    assert only(seen(fresh)) == {"a1": 1}


def test_translate_mode_takes_a_trunks_tag_off_and_puts_each_trunks_own_on(fresh):
    fresh.taps["tr"].send(frame("up", STATION["tagged"], tags=[Dot1Q(vlan=10, prio=3)]))
    received = seen(fresh)
    assert only(received) == {"a1": 1, "a2": 1, "tr2": 1, "ul": len(PEERS)}
    assert received["a1"] == [frame("up", STATION["tagged"])]  # untagged on the access port
    assert Ether(received["tr2"][0])[Dot1Q].vlan == 30 and Ether(received["tr2"][0])[Dot1Q].payload.name != "802.1Q"
    assert bytes(Ether(received["ul"][0])[VXLAN].payload) == frame("up", STATION["tagged"])  # no tag in the tunnel
    # from the tunnel and from an access port: each trunk adds its VID
    fresh.taps["ul"].send(vxlan(100, PEERS[0], frame("down", STATION["far"])))
    received = seen(fresh)
    assert [Ether(f)[Dot1Q].vlan for f in received["tr"]] == [10]
    assert [Ether(f)[Dot1Q].vlan for f in received["tr2"]] == [30]
    # known unicast to a MAC learned on a trunk: that trunk only, with its VID
    fresh.taps["a1"].send(frame("to tagged", STATION["one"], dst=STATION["tagged"]))
    received = seen(fresh)
    assert received == {**received, "tr": [frame("to tagged", STATION["one"], STATION["tagged"], [Dot1Q(vlan=10)])]}
    assert only(received) == {"tr": 1}


def test_an_access_port_carries_tags_as_payload(fresh):
    """A frame with tags 10 then 20 from an access port keeps them; a trunk puts its own VID outside."""
    sent = frame("double", STATION["one"], tags=[Dot1Q(vlan=10), Dot1Q(vlan=20)])
    fresh.taps["a1"].send(sent)
    received = seen(fresh)
    assert received["a2"] == [sent]
    tags = []
    layer = Ether(received["tr"][0])
    while layer.haslayer(Dot1Q):
        layer = layer[Dot1Q]
        tags.append(layer.vlan)
        layer = layer.payload
    assert tags == [10, 10, 20]
    assert bytes(Ether(received["ul"][0])[VXLAN].payload) == sent


def test_a_port_never_carries_another_vnis_frame_while_it_moves(fresh):
    """The moment of a move from VNI 100 to VNI 200 when a2 is already VNI 200's port but still in VNI 100's flood
    group (the writer adds before it removes): VNI 100's copies to a2 are dropped, not delivered."""
    key = fresh.ports["a2"].ifindex.to_bytes(4, "little")
    saved = fresh.maps["port_config"].lookup(key)
    moved = layouts.PortConfig.from_buffer_copy(saved)
    moved.vni, moved.vni_slot = 200, fresh.current.vni_slots()[200]
    fresh.maps["port_config"].update(key, bytes(moved))
    try:
        before = drops(fresh, "a2").get("not_member", 0)
        fresh.taps["a1"].send(frame("vni 100", STATION["one"]))
        assert "a2" not in only(seen(fresh))
        assert drops(fresh, "a2")["not_member"] == before + 1
    finally:
        fresh.maps["port_config"].update(key, saved)
    # and the real move, through the writer: afterwards a2 carries VNI 200's frames and none of VNI 100's
    vni100, vni200 = config(vni100_access=("a1",)).vnis
    fresh.configure(VtepConfig(config().tunnel_ports, (vni100, Vni(200, access("a2", "a3"), (), vni200.peers))))
    fresh.drain_all()
    fresh.taps["a1"].send(frame("after the move", STATION["one"]))
    fresh.taps["a3"].send(frame("vni 200", STATION["three"]))
    assert [Ether(f)[Raw].load for f in seen(fresh)["a2"]] == [b"vni 200"]


@pytest.mark.parametrize("size", [1468, 1469, 1500, 1514])
def test_full_size_frames_are_flooded_to_every_member(fresh, size):
    """A devmap hands a port only frames up to its MTU + 18: from 1469 bytes up a flooded frame cannot carry its
    50-byte Outer to the local ports (MTU 1500) and carries the short stamp instead. Every member still gets it, both
    from a local port and from the tunnel, and the tunnel copies have the same Outer as small frames get."""
    sent = frame("big", STATION["one"]) + bytes(size - len(frame("big", STATION["one"])))
    fresh.taps["a1"].send(sent)
    received = seen(fresh)
    assert only(received) == {"a2": 1, "tr": 1, "tr2": 1, "ul": len(PEERS)}
    assert received["a2"] == [sent]
    assert Ether(received["tr"][0])[Dot1Q].vlan == 10 and len(received["tr"][0]) == size + 4
    for raw in received["ul"]:
        pkt = Ether(raw)
        assert pkt[IP].src == LOCAL_IP and pkt[Ether].src == fresh.ports["ul"].mac
        assert pkt[Ether].dst == peer_mac(pkt[IP].dst) and pkt[VXLAN].vni == 100
        assert bytes(pkt[VXLAN].payload) == sent and pkt[IP].len == size + 36
        recomputed = IP(bytes(pkt[IP]))
        del recomputed.chksum
        assert IP(bytes(recomputed)).chksum == pkt[IP].chksum
    assert sorted(Ether(raw)[IP].dst for raw in received["ul"]) == PEERS
    fresh.taps["ul"].send(vxlan(100, PEERS[0], sent))
    received = seen(fresh)
    assert only(received) == {"a1": 1, "a2": 1, "tr": 1, "tr2": 1}
    assert received["a1"] == [sent] and received["a2"] == [sent]


def test_every_frame_number_finds_its_peers(fresh_xdp):
    """Long frames are numbered in the short stamp, which wraps; no number may look like "no frame" to the copy
    numbering (it did once: every 262144th frame of the VNI in slot 0 lost all its tunnel copies, as no_peer)."""
    fresh = fresh_xdp
    assert fresh.current.vni_slots()[100] == 0
    long_frame = frame("long", STATION["one"]) + bytes(1514 - len(frame("long", STATION["one"])))
    before = drops(fresh, "ul").get("no_peer", 0)
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # every frame on one CPU: its frame numbers go through a whole wrap
    try:
        fresh.test_run("a1", long_frame, live=True, repeat=(1 << 18) + 1000)
    finally:
        os.sched_setaffinity(0, cpus)
    assert drops(fresh, "ul").get("no_peer", 0) == before
    fresh.drain_all()


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_copies_keep_their_own_frames_vni_in_one_flush(fresh_xdp, mode):
    """Bursts that interleave VNIs in one devmap flush: every copy carries its own frame's VNI (egress reads it from
    the frame's Outer; no per-CPU state can hand it another frame's)."""
    fresh = fresh_xdp
    fresh.attach(mode)
    try:
        fresh.drain_all()
        for n in range(20):
            fresh.taps["a1"].send(frame(f"100-{n}", STATION["one"]))
            fresh.taps["a3"].send(frame(f"200-{n}", STATION["three"]))
        copies = fresh.taps["ul"].drain(settle=0.5)
        vnis = {}
        for raw in copies:
            pkt = Ether(raw)
            vnis.setdefault(pkt[VXLAN].vni, set()).add(bytes(pkt[Raw].load).split(b"-")[0])
        assert vnis == {100: {b"100"}, 200: {b"200"}}
        assert len(copies) == 20 * len(PEERS) + 20
    finally:
        fresh.attach("native")


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_a_full_size_frame_reaches_every_member(fresh, mode):
    """1514 bytes from a1 (MTU 1500) are too long for an Outer to every member: flooded with the short stamp (as
    metadata where the mode keeps it, in front of the frame where it does not), every member gets it once."""
    fresh.attach(mode)
    try:
        fresh.drain_all()
        big = frame("full", STATION["one"])
        big += bytes(1514 - len(big))
        fresh.taps["a1"].send(big)
        assert fresh.taps["a2"].drain() == [big]
        for trunk, vid in (("tr", 10), ("tr2", 30)):
            copies = [Ether(raw) for raw in fresh.taps[trunk].drain()]
            assert [(c[Dot1Q].vlan, bytes(c[Dot1Q].payload)) for c in copies] == [(vid, big[14:])]
        tunnel = [Ether(raw) for raw in fresh.taps["ul"].drain(settle=0.5)]
        assert sorted(c[IP].dst for c in tunnel) == PEERS
        assert all(bytes(c[VXLAN].payload) == big for c in tunnel)
    finally:
        fresh.attach("native")


@pytest.mark.parametrize("mode", ["native", "generic"])
def test_a_full_size_tagged_flood_of_a_preserve_vni_reaches_every_member(fresh_xdp, mode):
    """A VNI that preserves the tag floods a 1518-byte tagged frame (MTU 1500 + 18: the longest a trunk of MTU 1500
    takes) to the other trunk and, encapsulated, to every peer. In generic XDP the short stamp once went in front of
    the frame: 1522 bytes, which the kernel's devmap refused for the trunk before any egress program ran, uncounted
    (and with it the rest of the broadcast)."""
    fresh = fresh_xdp
    remote = peers(PEERS)
    preserve = Vni(300, (), (TrunkBinding("tr", 40), TrunkBinding("tr2", 40)), remote, vlan_mode="preserve")
    fresh.configure(VtepConfig(config().tunnel_ports, (*config().vnis, preserve)))
    fresh.attach(mode)
    try:
        fresh.drain_all()
        sent = frame("tagged", STATION["tagged"], tags=[Dot1Q(vlan=40)])
        sent += bytes(1518 - len(sent))
        fresh.taps["tr"].send(sent)
        received = seen(fresh)
        assert only(received) == {"tr2": 1, "ul": len(PEERS)}
        assert received["tr2"] == [sent]
        tunnel = [Ether(raw) for raw in received["ul"]]
        assert sorted(c[IP].dst for c in tunnel) == PEERS
        assert all(c[VXLAN].vni == 300 and bytes(c[VXLAN].payload) == sent for c in tunnel)
    finally:
        fresh.attach("native")
        fresh.configure(config())


def test_the_tc_program_hands_a_frame_without_a_command_to_the_next_tcx_program(lab):
    """The TC backend's tc program carries out the command its XDP program leaves in the metadata; a frame without
    one is the host's and goes on to the port's next tcx program (a filter attached after the VTEP) or the stack:
    TC_ACT_UNSPEC, not TC_ACT_OK, which ends the port's tcx chain there."""
    tc_program = lab.tc_obj.program(layouts.TC_PROGRAM).fd
    result = libbpf.prog_test_run(tc_program, frame("host", "02:00:00:00:00:01"))
    assert result.retval == TC_ACT_UNSPEC & 0xFFFFFFFF
