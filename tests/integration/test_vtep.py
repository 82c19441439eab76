"""The XDP VTEP on the lab's fabric (inventories/lab), set up by playbooks/vtep.yml from the inventory alone, over SSH.

a is the hub (a100, a200, alocal), b and c have 100 and 200 endpoints, d a trunk (VID 10 = VNI 100, VID 20 = VNI
200), and l runs the Linux kernel's own VXLAN (bridge + vxlan device) as an interop peer in VNI 100. See
inventories/lab/group_vars/all/vtep.yml.

Every VTEP learns where MACs are (the XDP ones in their FDB maps, l in its bridge and vxlan device): the learning
tests send frames from stations no VTEP has seen yet (MACs of their own, from the endpoints) and look at every
endpoint for where each frame arrives. d's trunk runs vlan_mode translate (the default) unless a test says
preserve.
"""

import contextlib
import copy
import json
import re
import secrets
import subprocess
import time

import pytest
import yaml
from l2lib import BROADCAST, Capture, Port, Vlan, build_frame, bum_probe, mac, new_marker, ports, probe, send
from lablib import printed_diff, split_promisc

PLAYBOOK = "playbooks/vtep.yml"
VNI100 = ["a100", "alocal", "b100", "c100", "l100"]
VNI200 = ["a200", "b200", "c200"]
ADDRESS = {
    "a100": "198.51.100.161", "alocal": "198.51.100.162", "b100": "198.51.100.163", "c100": "198.51.100.164",
    "l100": "198.51.100.165", "a200": "198.51.100.177", "b200": "198.51.100.178", "c200": "198.51.100.179",
}  # fmt: skip
VNI100_ALL = [*VNI100, "dtrunk"]  # d's trunk is in VNI 100 with VID 10
L_TUNNEL_IP = "198.51.100.110"
AGING = 2  # seconds, for the aging test
XDP_TASK = "xdpfleet.fabric.vtep : Configure the XDP VTEP"
# A port of c, a TC VTEP (host_vars/c.yml), as --diff names them: its XDP program and its program at tc ingress.
TC_BACKEND_PROGRAMS = (r"vtep_ingress_tc tag [0-9a-f]{16} native", r"vtep_replicate tag [0-9a-f]{16} tc")
LINUX_TASK = "xdpfleet.fabric.vtep : Configure the Linux kernel VTEP"
CONFIG_MAPS = ("port_config", "vlan_bindings", "tunnel_peers", "port_vnis", "flood_settings", "peer_admission")


# The hosts test_teardown_leaves_nothing took down, so that the fabric fixture does not run the same removal again.
TORN_DOWN: set[str] = set()


@pytest.fixture(scope="module")
def fabric(lab):
    first = lab.run_playbook(PLAYBOOK)
    assert first.rc == 0, first
    endpoints = ports(lab.prefix, VNI100 + VNI200 + ["dtrunk"])
    try:
        yield lab, first, endpoints
    finally:
        if not TORN_DOWN:
            gone = lab.run_playbook(PLAYBOOK, extra_vars={"vtep_state": "absent"})
            assert gone.rc == 0, gone


def counters(lab, host):
    """The VTEP's counters on a host, as vtep_info reads them from the pinned maps."""
    result = lab.run_tasks([{"name": "read", "xdpfleet.fabric.vtep_info": {}}], hosts=host)
    assert result.rc == 0, result
    return result.result(task="read", host=host)["ansible_facts"]["xdpfleet_vtep"]


@contextlib.contextmanager
def reconfigured(fabric, host, change):
    """The XDP VTEP of `host` runs its inventory document as change(document) leaves it, and gives its counters as
    the module reported them; put back afterwards. The module alone configures it (no health check: the test's own
    frames are what it checks)."""
    lab, first, _ = fabric
    document = first.result(task=XDP_TASK, host=host)["invocation"]["module_args"]["config"]
    changed = copy.deepcopy(document)
    change(changed)

    def configure(config):
        result = lab.run_tasks([{"name": "configure", "xdpfleet.fabric.vtep": {"config": config}}], hosts=host)
        assert result.rc == 0, result
        return result.result(task="configure", host=host)["ansible_facts"]["xdpfleet_vtep"]

    counted = configure(changed)
    try:
        yield counted
    finally:
        configure(document)


def fdb_events(vtep_counters, vni=100) -> dict[str, int]:
    return vtep_counters["vnis"][str(vni)]["fdb_events"]


def station() -> str:
    """A unicast MAC no VTEP has seen yet: frames from it teach the fabric a new station."""
    return "02:5b:" + ":".join(f"{b:02x}" for b in secrets.token_bytes(4))


def deliveries(endpoints, src, frame, marker, expected=(), wait=2.0, settle=0.3) -> dict:
    """Send `frame` from endpoint `src` while capturing at every other endpoint of the lab; {endpoint: the frames
    with the marker it got}. Waits for the expected endpoints (up to `wait`), then `settle` for the others."""
    with contextlib.ExitStack() as stack:
        captures = {name: stack.enter_context(Capture(*port)) for name, port in endpoints.items() if name != src}
        send(*endpoints[src], [frame])
        deadline = time.monotonic() + wait
        for name in expected:
            captures[name].wait_for(marker, timeout=max(0.0, deadline - time.monotonic()))
        time.sleep(settle)
    return {name: found for name, cap in captures.items() if (found := cap.with_marker(marker))}


def reach(endpoints, src, src_mac, dst_mac, expected=(), vlan=None) -> set[str]:
    """The endpoints where one frame from `src` (src_mac -> dst_mac, tagged `vlan`) arrives."""
    marker = new_marker()
    frame = build_frame(dst_mac, src_mac, marker=marker, vlan=vlan)
    return set(deliveries(endpoints, src, frame, marker, expected))


def everyone_but(name) -> set[str]:
    """Every endpoint of VNI 100 except `name`: where a flooded frame from `name` arrives."""
    return set(VNI100_ALL) - {name}


def tags(frame: bytes) -> list[int]:
    """The VIDs of a frame's 802.1Q tags, outermost first."""
    vids, offset = [], 12
    while frame[offset : offset + 2] == b"\x81\x00":
        vids.append(int.from_bytes(frame[offset + 2 : offset + 4], "big") & 0xFFF)
        offset += 4
    return vids


def dump_config_maps(lab, host):
    maps = {}
    for name in CONFIG_MAPS:
        out = lab.host_exec(host, ["bpftool", "-j", "map", "dump", "pinned", f"/sys/fs/bpf/xdpfleet/vtep/maps/{name}"])
        maps[name] = sorted(json.dumps(e, sort_keys=True) for e in json.loads(out.stdout))
    return maps


def test_first_run_configures_every_vtep_and_second_changes_nothing(fabric):
    lab, first, _ = fabric
    for host in ("a", "b", "c", "d"):
        result = first.result(task=XDP_TASK, host=host)
        assert result["changed"] is True
        assert set(result["program"].values()) == {"attach"}
    assert first.result(task=LINUX_TASK, host="l")["changed"] is True
    a = first.result(task=XDP_TASK, host="a")["changes"]
    assert "VNI 100: + access port acc100" in a and "VNI 200: + access port acc200" in a
    assert any(line.startswith("VNI 100: + peer 198.51.100.110 via ul-l") for line in a)
    d = first.result(task=XDP_TASK, host="d")["changes"]
    assert "VNI 100: + trunk trunk0 VID 10" in d and "VNI 200: + trunk trunk0 VID 20" in d
    for host in ("a", "b", "c", "d"):
        link = json.loads(lab.host_exec(host, ["ip", "-j", "link", "show", "ul-a" if host != "a" else "ul-b"]).stdout)
        assert link[0]["xdp"]["mode"] == 1  # native
    second = lab.run_playbook(PLAYBOOK)
    assert second.rc == 0 and second.changed() == 0, second


def test_bum_stays_in_its_vni_and_crosses_to_every_vtep(fabric):
    _, _, endpoints = fabric
    everyone = {name: endpoints[name] for name in VNI100 + VNI200 if name != "a100"}
    # Untagged frames of VNI 100 reach every access endpoint, the Linux VTEP's included (d's trunk takes them
    # tagged with VID 10: test_translate_mode_takes_the_trunks_tag_off_and_puts_it_on).
    assert bum_probe(endpoints["a100"], everyone, timeout=2) == {"alocal", "b100", "c100", "l100"}
    others = {name: endpoints[name] for name in VNI100 + VNI200 if name != "b200"}
    assert bum_probe(endpoints["b200"], others, timeout=2) == {"a200", "c200"}
    from_linux = {name: endpoints[name] for name in VNI100 + VNI200 if name != "l100"}
    assert bum_probe(endpoints["l100"], from_linux, timeout=2) == {"a100", "alocal", "b100", "c100"}


def test_each_remote_gets_exactly_one_copy(fabric):
    """c100 hears b100's broadcast once: b sends one copy per peer, and a never re-floods a tunnel's frame."""
    _, _, endpoints = fabric
    got = probe(endpoints["b100"], {"c100": endpoints["c100"], "a100": endpoints["a100"]}, timeout=2)
    assert len(got["c100"]) == 1 and len(got["a100"]) == 1


@pytest.mark.parametrize(("src", "dst"), [("a100", "c100"), ("b100", "l100"), ("l100", "alocal"), ("c200", "a200")])
def test_ping_across_the_overlay(fabric, src, dst):
    lab, _, _ = fabric
    result = lab.endpoint_exec(src, ["ping", "-c", "3", "-i", "0.2", "-W", "2", ADDRESS[dst]], check=False)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("left", "right"), [("a100", "l100"), ("b100", "c100")], ids=["xdp-linux", "xdp-xdp"])
def test_after_one_exchange_unicast_reaches_only_its_destination(fabric, left, right):
    """Two stations no VTEP knows: the first frame is flooded to the whole VNI; the answer is known unicast where
    it is sent (learned from the flood), and so is the next frame (learned from the answer). Each time every
    endpoint of both VNIs is listened to: an XDP VTEP and the Linux one learn each other's MACs, and so do two XDP
    VTEPs."""
    _, _, endpoints = fabric
    here, there = station(), station()
    assert reach(endpoints, left, here, there, everyone_but(left)) == everyone_but(left)  # nobody knows `there`
    assert reach(endpoints, right, there, here, [left]) == {left}
    assert reach(endpoints, left, here, there, [right]) == {right}


def test_a_learned_mac_ages_out_and_unicast_to_it_floods_again(fabric):
    lab, _, endpoints = fabric
    with reconfigured(fabric, "a", lambda document: document.update(fdb_aging=AGING)) as before:
        quiet, talker = station(), station()
        assert reach(endpoints, "alocal", talker, BROADCAST, everyone_but("alocal")) == everyone_but("alocal")
        # quiet sends one frame, known unicast to talker: only a learns where quiet is
        assert reach(endpoints, "a100", quiet, talker, ["alocal"]) == {"alocal"}
        assert reach(endpoints, "alocal", talker, quiet, ["a100"]) == {"a100"}
        time.sleep(AGING + 0.5)
        assert reach(endpoints, "alocal", talker, quiet, everyone_but("alocal")) == everyone_but("alocal")
        assert fdb_events(counters(lab, "a"))["aged_out"] >= fdb_events(before)["aged_out"] + 1


def test_a_new_fdb_size_replaces_the_learned_table_and_the_vtep_moves_onto_it(fabric):
    """fdb_size sizes the learned table when the program loads: a new size is a new table, the ports' program is
    replaced to use it (make-before-break), and the overlay keeps working; the same size again changes nothing."""
    lab, first, _ = fabric
    document = first.result(task=XDP_TASK, host="b")["invocation"]["module_args"]["config"]

    def configure(config):
        result = lab.run_tasks([{"name": "configure", "xdpfleet.fabric.vtep": {"config": config}}], hosts="b")
        assert result.rc == 0, result
        return result.result(task="configure", host="b")

    def table_size():
        out = lab.host_exec("b", ["bpftool", "-j", "map", "show", "pinned", "/sys/fs/bpf/xdpfleet/vtep/maps/fdb"])
        return json.loads(out.stdout)["max_entries"]

    assert table_size() == 65536  # FDB_SIZE_DEFAULT
    try:
        resized = configure({**document, "fdb_size": 1024})
        assert resized["changed"] is True and set(resized["program"].values()) == {"replace"}
        assert table_size() == 1024
        assert configure({**document, "fdb_size": 1024})["changed"] is False
        ping = lab.endpoint_exec("b100", ["ping", "-c", "3", "-i", "0.2", "-W", "2", ADDRESS["a100"]], check=False)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    finally:
        configure(document)
    assert table_size() == 65536


def test_a_static_entry_forwards_without_learning_and_learning_never_overrides_it(fabric):
    lab, _, endpoints = fabric
    pinned, far, talker = station(), station(), station()

    def pin(document):
        vni100 = next(vni for vni in document["vnis"] if vni["vni"] == 100)
        vni100["fdb"] = [{"mac": pinned, "port": "acc100"}, {"mac": far, "remote": L_TUNNEL_IP}]

    with reconfigured(fabric, "a", pin) as before:
        # No frame from them ever: each goes to its one place, nowhere else.
        assert reach(endpoints, "alocal", talker, pinned, ["a100"]) == {"a100"}
        assert reach(endpoints, "alocal", talker, far, ["l100"]) == {"l100"}
        # pinned sends from behind c, then from behind alocal: a keeps it at acc100 (a static_conflict each).
        assert reach(endpoints, "c100", pinned, BROADCAST, everyone_but("c100")) == everyone_but("c100")
        assert reach(endpoints, "alocal", pinned, BROADCAST, everyone_but("alocal")) == everyone_but("alocal")
        assert reach(endpoints, "alocal", talker, pinned, ["a100"]) == {"a100"}
        # far sends from behind alocal: a still sends frames to far through the tunnel to l, and only there. (l's
        # bridge has just learned far behind its own vxlan device, so it does not pass them on: they are counted
        # on l's underlay port.)
        assert reach(endpoints, "alocal", far, BROADCAST, everyone_but("alocal")) == everyone_but("alocal")
        marker = new_marker()
        with Capture(f"{lab.prefix}-l", "ul-a") as to_l:
            got = deliveries(endpoints, "alocal", build_frame(far, talker, marker=marker), marker, settle=0.5)
        assert set(got) <= {"l100"} and len(to_l.with_marker(marker)) == 1
        events = fdb_events(counters(lab, "a"))
    assert events["static_conflict"] == fdb_events(before)["static_conflict"] + 3  # pinned twice, far once


def test_a_mac_that_moves_is_learned_again_and_unicast_follows_it(fabric):
    lab, _, endpoints = fabric
    roamer = station()
    assert reach(endpoints, "a100", roamer, BROADCAST, everyone_but("a100")) == everyone_but("a100")
    assert reach(endpoints, "alocal", station(), roamer, ["a100"]) == {"a100"}
    before = fdb_events(counters(lab, "a"))["moved"]
    assert reach(endpoints, "c100", roamer, BROADCAST, everyone_but("c100")) == everyone_but("c100")  # it moved
    assert fdb_events(counters(lab, "a"))["moved"] == before + 1
    for src in ("alocal", "b100", "l100"):  # from behind the XDP VTEP it left, another XDP VTEP, the Linux VTEP
        assert reach(endpoints, src, station(), roamer, ["c100"]) == {"c100"}, src


def test_translate_mode_takes_the_trunks_tag_off_and_puts_it_on(fabric):
    """d's trunk VID 10 and a's access port acc100 (VNI 100) reach each other both ways, flooded and known
    unicast: frames leave trunk0 tagged with VID 10 and arrive at the access endpoints untagged."""
    _, _, endpoints = fabric
    on_trunk, on_access = station(), station()

    def sent(src, dst_mac, src_mac, expected, vlan=None):
        """(the frame as sent, untagged and unpadded; {endpoint: what arrived there, without padding})"""
        marker = new_marker()
        frame = build_frame(dst_mac, src_mac, marker=marker, vlan=vlan)
        got = deliveries(endpoints, src, frame, marker, expected)
        arrived = {name: [f.data.rstrip(b"\0") for f in frames] for name, frames in got.items()}
        return build_frame(dst_mac, src_mac, marker=marker, pad=False), arrived

    untagged, got = sent("dtrunk", BROADCAST, on_trunk, VNI100, vlan=Vlan(10, pcp=5, dei=1))
    assert got == {name: [untagged] for name in VNI100}
    untagged, got = sent("dtrunk", BROADCAST, on_trunk, VNI200, vlan=Vlan(20))
    assert got == {name: [untagged] for name in VNI200}
    _, got = sent("a100", on_trunk, on_access, ["dtrunk"])  # known unicast: learned from the first frame
    assert got.keys() == {"dtrunk"} and [tags(f) for f in got["dtrunk"]] == [[10]]
    untagged, got = sent("dtrunk", on_access, on_trunk, ["a100"], vlan=Vlan(10))
    assert got == {"a100": [untagged]}


def test_an_access_port_carries_tags_as_payload(fabric):
    """A frame tagged 10 then 20 from a100 (an access port) arrives as it was at the other access endpoints, and
    leaves d's trunk0 with the trunk's VID 10 outside its own tags (config.py: tags from an access port are
    payload)."""
    _, _, endpoints = fabric
    marker = new_marker()
    double = build_frame(BROADCAST, station(), marker=marker, vlan=[Vlan(10), Vlan(20)])
    got = deliveries(endpoints, "a100", double, marker, everyone_but("a100"))
    assert set(got) == everyone_but("a100")
    assert [tags(f.data) for f in got["dtrunk"]] == [[10, 10, 20]]
    assert all(f.data == double for name in ("alocal", "b100", "c100", "l100") for f in got[name])


@pytest.fixture(scope="class")
def preserving(fabric):
    """d in vlan_mode preserve (the tag stays inside the tunnelled frame; RFC 7348 section 6.1)."""
    with reconfigured(fabric, "d", lambda document: document.update(vlan_mode="preserve")):
        yield fabric


@pytest.mark.usefixtures("preserving")
class TestPreserveMode:
    def test_trunk_frames_by_vid(self, fabric):
        lab, _, endpoints = fabric
        trunk = endpoints["dtrunk"]
        listeners = {name: endpoints[name] for name in VNI100 + VNI200}
        got = probe(trunk, listeners, vlan=Vlan(10, pcp=5, dei=1), timeout=2)
        assert set(got) == set(VNI100)
        assert all(f.vlan == Vlan(10, pcp=5, dei=1) for frames in got.values() for f in frames)  # tag, PCP, DEI kept
        assert set(probe(trunk, listeners, vlan=Vlan(20), timeout=2)) == set(VNI200)
        before = counters(lab, "d")["ports"]["trunk0"]["drops"]
        for vlan in (Vlan(30), Vlan(0), None):
            assert probe(trunk, listeners, vlan=vlan, timeout=1) == {}
        after = counters(lab, "d")["ports"]["trunk0"]["drops"]
        assert after.get("vid_unknown", 0) == before.get("vid_unknown", 0) + 1
        assert after.get("vid_reserved", 0) == before.get("vid_reserved", 0) + 1
        assert after.get("untagged", 0) >= before.get("untagged", 0) + 1  # endpoints' own IPv6 noise counts too

    def test_untagged_vni_100_frames_do_not_leave_the_trunk(self, fabric):
        lab, _, endpoints = fabric
        before = counters(lab, "d")["ports"]["trunk0"]["drops"].get("vid_mismatch", 0)
        assert "dtrunk" not in bum_probe(endpoints["a100"], {"dtrunk": endpoints["dtrunk"]}, timeout=1)
        assert counters(lab, "d")["ports"]["trunk0"]["drops"]["vid_mismatch"] >= before + 1


def vxlan_frame(dst_mac, src_ip, dst_ip, vni, inner, src_mac=None):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN
    from scapy.packet import Raw

    return bytes(Ether(dst=dst_mac, src=src_mac) / IP(src=src_ip, dst=dst_ip) / UDP(sport=50001, dport=4789)
                 / VXLAN(vni=vni) / Raw(inner))  # fmt: skip


@pytest.mark.parametrize(
    ("src_ip", "vni", "reason"),
    [
        ("198.51.100.150", 100, "not_peer"),
        ("198.51.100.110", 200, "not_admitted"),
        ("198.51.100.110", 300, "not_admitted"),
    ],
)
def test_tunnel_admission(fabric, src_ip, vni, reason):
    """VXLAN into a's ul-l from a source that is not a peer of the VNI, or for a VNI not served there: dropped."""
    lab, _, endpoints = fabric
    marker = new_marker()
    inner = build_frame("ff:ff:ff:ff:ff:ff", "02:00:00:00:00:99", marker=marker)
    outer = vxlan_frame(mac(f"{lab.prefix}-a", "ul-l"), src_ip, "198.51.100.109", vni, inner)
    before = counters(lab, "a")["ports"]["ul-l"]["drops"].get(reason, 0)
    got = probe(
        Port(f"{lab.prefix}-l", "ul-a"),
        {name: endpoints[name] for name in VNI100 + VNI200},
        outer,
        marker=marker,
        timeout=1,
    )
    assert got == {}
    assert counters(lab, "a")["ports"]["ul-l"]["drops"][reason] == before + 1


@pytest.fixture
def l_in_vni200(fabric):
    """l serves VNI 200 too, with an endpoint l200 behind a new access port acc200 (the lab has neither), peered
    with a, b and c; put back afterwards."""
    lab, first, endpoints = fabric
    l200 = Port(f"{lab.prefix}-l200", "eth0")
    args = first.result(task=LINUX_TASK, host="l")["invocation"]["module_args"]
    config = copy.deepcopy(args["config"])
    peers = ["198.51.100.109", "198.51.100.98", "198.51.100.102"]  # a (ul-l), b, c
    config["vnis"].append({"vni": 200, "access_ports": ["acc200"], "peers": [{"ip": p, "via": "ul-a"} for p in peers]})

    def configure(document):
        result = lab.run_tasks([{"name": "configure", "xdpfleet.fabric.linux_vtep": {"config": document}}], hosts="l")
        assert result.rc == 0, result

    def run_ip(*argv):
        subprocess.run(["ip", *argv], check=True, capture_output=True, timeout=30)

    run_ip("netns", "add", l200.ns)
    try:
        run_ip("-n", f"{lab.prefix}-l", "link", "add", "acc200", "type", "veth", "peer", "name", l200.ifname,
               "netns", l200.ns)  # fmt: skip
        run_ip("-n", l200.ns, "link", "set", "eth0", "up")
        configure(config)
        yield lab, endpoints, l200
    finally:
        configure(args["config"])
        run_ip("netns", "del", l200.ns)  # with eth0, and so with its peer acc200 on l


def test_vxlan_sent_inside_an_endpoints_frames_is_not_decapsulated_into_another_vni(l_in_vni200):
    """a100 (VNI 100, behind the XDP VTEP a) sends VXLAN packets of VNI 200 addressed to l's tunnel address (and to
    the broadcast address) inside its own frames, to every destination MAC for which l's bridge hands a frame up to
    l's own IP stack: broadcast, the bridge's MAC, and the 802.1 group addresses it does not forward (handed up on
    the port). l's vxlan socket listens on every address: none of it may come out at a VNI-200 endpoint, neither
    l200 nor a200, b200, c200 behind the XDP VTEPs (which get l's VNI-200 floods). The XDP VTEPs hand nothing from
    an access port to their own stack, and only l serves VXLAN from a kernel socket."""
    lab, endpoints, l200 = l_in_vni200
    bridge_mac = lab.host_exec("l", ["cat", "/sys/class/net/xbr100/address"]).stdout.strip()
    watched = {"l200": l200, **{name: endpoints[name] for name in VNI200}}
    sent, frames = {}, []
    for dst_mac in (BROADCAST, bridge_mac, "01:80:c2:00:00:0e", "01:80:c2:00:00:02"):
        for dst_ip in (L_TUNNEL_IP, "255.255.255.255"):
            marker = new_marker()
            inner = build_frame(BROADCAST, station(), marker=marker)
            src_mac = mac(*endpoints["a100"])
            frames.append(vxlan_frame(dst_mac, ADDRESS["a100"], dst_ip, 200, inner, src_mac=src_mac))
            sent[marker] = f"{dst_mac} {dst_ip}"
    with contextlib.ExitStack() as stack:
        captures = {name: stack.enter_context(Capture(*port)) for name, port in watched.items()}
        l100 = stack.enter_context(Capture(*endpoints["l100"]))
        send(*endpoints["a100"], frames)
        # The broadcast ones arrive at l100 as they were sent: they crossed the overlay to l, as all the others did.
        crossed = [m for m, what in sent.items() if what.startswith(BROADCAST) and l100.wait_for(m, timeout=2)]
        time.sleep(0.5)
    assert len(crossed) == 2
    leaked = {name: sorted(what for m, what in sent.items() if cap.with_marker(m)) for name, cap in captures.items()}
    assert leaked == {name: [] for name in watched}
    assert "4789" not in "".join(lab.host_exec(h, ["ss", "-Hlun"]).stdout for h in ("a", "b", "c", "d"))


def test_oversized_frames_after_mtu_drift_are_dropped_and_counted(fabric):
    """A larger access MTU set behind the VTEP's back: copies that no longer fit the tunnel are dropped, counted.
    (While the drift lasts the module refuses the document: the MTU rule fails, so counters are read around it.)"""
    lab, _, endpoints = fabric
    before = counters(lab, "b")["ports"]["ul-a"]["drops"].get("mtu", 0)
    lab.host_exec("b", ["ip", "link", "set", "acc100", "mtu", "1600"])
    lab.endpoint_exec("b100", ["ip", "link", "set", "eth0", "mtu", "1600"])
    try:
        marker = new_marker()
        big = build_frame("ff:ff:ff:ff:ff:ff", mac(*endpoints["b100"]), b"\0" * 1560, marker=marker)
        assert probe(endpoints["b100"], {"c100": endpoints["c100"]}, big, marker=marker, timeout=1) == {}
    finally:
        lab.endpoint_exec("b100", ["ip", "link", "set", "eth0", "mtu", "1500"])
        lab.host_exec("b", ["ip", "link", "set", "acc100", "mtu", "1500"])
    assert counters(lab, "b")["ports"]["ul-a"]["drops"]["mtu"] == before + 4  # one per peer


def test_one_member_more_or_less_changes_only_that(fabric):
    lab, _, endpoints = fabric
    host_vars = lab.inventory / "host_vars" / "c.yml"
    original = host_vars.read_text()
    changed = yaml.safe_load(original)
    changed["fabric_vtep"]["vnis"][0]["access_ports"] = []  # c100 leaves VNI 100
    host_vars.write_text(yaml.safe_dump(changed, sort_keys=False))
    try:
        # c100 out of VNI 100 is what this test wants, so c's health probe (c100 -> a100) is not run.
        less = lab.run_playbook(PLAYBOOK, extra_vars={"vtep_hosts": "c", "vtep_health_check": False}, diff=True)
    finally:
        host_vars.write_text(original)
    assert less.rc == 0, less
    # acc100 is no longer a VTEP port: its promiscuous flag goes back to what it was before the VTEP took it
    assert less.result(task=XDP_TASK, host="c")["changes"] == [
        "VNI 100: - access port acc100", "acc100: promisc off (as before the VTEP served it)"
    ]
    # --diff: the member goes, and so do the programs on acc100 (no longer a VTEP port): c is a TC VTEP, its XDP
    # program and its tc program
    flags, (removed, *detached) = split_promisc(printed_diff(less.stdout, "vtep vtep"))
    xdp, tc = TC_BACKEND_PROGRAMS
    assert flags == ["+acc100: promisc off", "-acc100: promisc on"], flags
    assert removed == "-VNI 100: access port acc100", removed
    assert len(detached) == 2, detached
    assert re.fullmatch(f"-acc100 \\(tc\\): {tc}", min(detached)) and re.fullmatch(f"-acc100: {xdp}", max(detached))
    assert "c100" not in bum_probe(endpoints["a100"], {"c100": endpoints["c100"]}, timeout=1)
    back = lab.run_playbook(PLAYBOOK, extra_vars={"vtep_hosts": "c"}, diff=True)
    assert back.result(task=XDP_TASK, host="c")["changes"] == [
        "VNI 100: + access port acc100", "acc100: promisc on (receives frames for the MACs behind other VTEPs)"
    ]
    flags, (added, *attached) = split_promisc(printed_diff(back.stdout, "vtep vtep"))
    assert flags == ["+acc100: promisc on", "-acc100: promisc off"], flags
    assert added == "+VNI 100: access port acc100" and len(attached) == 2, attached
    assert re.fullmatch(f"\\+acc100 \\(tc\\): {tc}", min(attached))
    assert re.fullmatch(f"\\+acc100: {xdp}", max(attached))
    assert "c100" in bum_probe(endpoints["a100"], {"c100": endpoints["c100"]}, timeout=2)


# What the module refuses on the host, as Ansible reports it. Every rule, with many more documents, is in
# tests/unit/test_vtep_config.py; these are a sample of each kind: the schema, the rules between fields, and the
# host's own facts (its interfaces and their MTU).
INVALID = [
    ({"vnis": [{"vni": 0, "access_ports": ["acc100"]}]}, "vnis[0].vni: 0 is below the minimum 1"),
    ({"vnis": [{"vni": 100, "access_ports": ["acc100"]}], "extra": 1}, "document: unknown key 'extra'"),
    ({"vnis": [{"vni": 100, "access_ports": ["eth0/1"]}]}, "vnis[0].access_ports[0]: \"eth0/1\" is not a valid"),
    ({"vnis": [{"vni": 100, "access_ports": ["nope0"]}]}, "vnis[0].access_ports[0]: interface nope0 does not exist"),
    ({"tunnel_ports": [{"port": "ul-b", "local_ip": "198.51.100.97"}],
      "vnis": [{"vni": 100, "access_ports": ["acc100"], "peers": [{"ip": "198.51.100.97", "via": "ul-b"}]}]},
     "is this host's own tunnel address"),
    ({"tunnel_ports": [{"port": "acc200", "local_ip": "198.51.100.97"}],
      "vnis": [{"vni": 100, "access_ports": ["acc100"], "peers": [{"ip": "198.51.100.98", "via": "acc200"}]}]},
     "tunnel_ports[0].port: acc200 has MTU 1500, below 1550 needed for VNI 100"),
]  # fmt: skip


def test_invalid_documents_are_refused_naming_the_field_and_change_nothing(fabric):
    lab, _, _ = fabric
    before = dump_config_maps(lab, "a")
    result = lab.run_playbook(
        "tests/integration/playbooks/vtep_invalid.yml", extra_vars={"docs": [d for d, _ in INVALID]}
    )
    assert result.rc == 0, result
    items = result.result(task="Apply an invalid document", host="a")["results"]
    assert len(items) == len(INVALID)
    for item, (doc, expected) in zip(items, INVALID, strict=True):
        assert item["failed"], doc
        assert expected in item["msg"], (expected, item["msg"])
    assert dump_config_maps(lab, "a") == before


# Not in sorted order: VNI 200 first, and VNI 100's peers not by address. The third peer of VNI 100 has no `mac` and
# cannot be resolved through ul-b: the route to c's address leaves a through ul-c.
UNRESOLVABLE = {
    "tunnel_ports": [{"port": "ul-b", "local_ip": "198.51.100.97"}],
    "vnis": [
        {"vni": 200, "access_ports": ["acc200"],
         "peers": [{"ip": "198.51.100.98", "via": "ul-b", "mac": "02:00:00:00:00:98"}]},
        {"vni": 100, "access_ports": ["acc100"],
         "peers": [{"ip": "198.51.100.150", "via": "ul-b", "mac": "02:00:00:00:01:50"},
                   {"ip": "198.51.100.98", "via": "ul-b", "mac": "02:00:00:00:00:98"},
                   {"ip": "198.51.100.102", "via": "ul-b"}]},
    ],
}  # fmt: skip


def test_a_peer_that_cannot_be_resolved_is_named_where_the_document_has_it(fabric):
    lab, _, _ = fabric
    before = dump_config_maps(lab, "a")
    result = lab.run_tasks(
        [{"name": "unresolvable", "xdpfleet.fabric.vtep": {"config": UNRESOLVABLE}, "ignore_errors": True}], hosts="a"
    )
    (refused,) = result.results(task="unresolvable", host="a")
    assert refused["status"] == "ignored", refused  # failed, with ignore_errors
    assert refused["result"]["msg"] == (
        "vnis[1].peers[2].ip: the route to 198.51.100.102 leaves through ul-c, not through this tunnel port; "
        "give its next-hop mac explicitly"
    )
    assert dump_config_maps(lab, "a") == before


def test_vtep_info_reads_what_the_module_reports_and_refuses_an_incomplete_instance(fabric):
    lab, _, _ = fabric
    module_run = lab.run_playbook(PLAYBOOK, extra_vars={"vtep_hosts": "a"}, check=True)
    reported = module_run.result(task=XDP_TASK, host="a")["ansible_facts"]["xdpfleet_vtep"]
    read = counters(lab, "a")  # afterwards: every counter is the same or has grown
    for kind in ("vnis", "ports"):
        assert read[kind].keys() == reported[kind].keys() and read[kind]
        for name, values in reported[kind].items():
            for counter in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes"):
                assert read[kind][name][counter] >= values[counter], (kind, name, counter)
    assert sum(v["tx_packets"] for v in read["vnis"].values()) > 0  # the tests before sent traffic through a

    broken = "/sys/fs/bpf/xdpfleet/broken/maps"
    lab.host_exec("a", ["mkdir", "-p", broken])
    try:
        create = f"bpftool map create {broken}/port_config type array key 4 value 4 entries 1 name port_config"
        lab.host_exec("a", create.split())
        result = lab.run_tasks(
            [
                {"name": "none", "xdpfleet.fabric.vtep_info": {"name": "nothing"}},
                {"name": "broken", "xdpfleet.fabric.vtep_info": {"name": "broken"}, "ignore_errors": True},
            ],
            hosts="a",
        )
    finally:
        lab.host_exec("a", ["rm", "-rf", "/sys/fs/bpf/xdpfleet/broken"])
    none = result.result(task="none", host="a")
    assert none["present"] is False and none["ansible_facts"]["xdpfleet_vtep"] == {"vnis": {}, "ports": {}}
    (broken_read,) = result.results(task="broken", host="a")
    assert broken_read["status"] == "ignored"  # failed, with ignore_errors
    assert "VTEP broken is incomplete" in broken_read["result"]["msg"] and "vni_stats" in broken_read["result"]["msg"]


def test_teardown_leaves_nothing(fabric):
    """Runs last in this module: vtep_state=absent takes every VTEP of the fabric down, whatever its backend, and a
    second run has nothing left to do."""
    lab, _, _ = fabric
    gone = lab.run_playbook(PLAYBOOK, extra_vars={"vtep_state": "absent"})
    assert gone.rc == 0, gone
    TORN_DOWN.update(gone.stats)
    for host in ("a", "b", "c", "d"):
        assert gone.result(task=XDP_TASK, host=host)["changed"] is True, host
        assert lab.host_exec(host, ["test", "-e", "/sys/fs/bpf/xdpfleet/vtep"], check=False).returncode != 0, host
        assert lab.xdp_interfaces(host) == set(), host
    assert gone.result(task=LINUX_TASK, host="l")["changed"] is True
    assert json.loads(lab.host_exec("l", ["ip", "-j", "link", "show", "type", "vxlan"]).stdout) == []
    for host in ("a", "b", "c", "d", "l"):
        assert [f for f in lab.state_files(host) if "vtep" in f] == [], host
    again = lab.run_playbook(PLAYBOOK, extra_vars={"vtep_state": "absent"})
    assert again.rc == 0 and again.changed() == 0, again
