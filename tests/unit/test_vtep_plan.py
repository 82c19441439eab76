"""The VTEP's map plan without a kernel: desired contents compiled from a validated document, and the one diff
between what the maps hold and what they should hold, with the words --diff shows.

"What the maps hold" is plain data here: the contents a previous plan compiled, as writer.read() returns them
after the writer wrote them (each group in the map of its size, every member on the egress program it was given).
"""

import copy
import ctypes
import dataclasses

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts, plan, words
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import (
    NS_PER_S,
    PORT_ACCESS,
    PORT_TRUNK,
    PORT_TUNNEL,
    VNI_PRESERVE_VLAN,
    peer_member_key,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import (
    FdbEntry,
    FdbKey,
    FloodSettings,
    PeerAddrKey,
    PeerValue,
    PortConfig,
    PortVni,
    PortVniKey,
    VlanKey,
    VniMembers,
    VniRef,
    VtepSettings,
    ip_be,
    ip_str,
    mac_bytes,
    mac_str,
)

EGRESS = "0123456789abcdef"  # the loaded egress program's tag
PORTS = {
    name: plan.Port(name, ifindex, mtu, f"02:00:00:00:00:{ifindex:02x}")
    for name, ifindex, mtu in (
        ("acc100", 2, 1500),
        ("acc101", 3, 1500),
        ("acc200", 4, 1500),
        ("trunk0", 5, 1500),
        ("tun-b", 10, 1600),
        ("tun-c", 11, 1600),
    )
}
NAMES = {port.ifindex: name for name, port in PORTS.items()}
FACTS = {name: vc.InterfaceFacts(p.ifindex, p.mtu, p.mac) for name, p in PORTS.items()}
NEXT_HOPS = {f"198.51.100.{n}": f"02:aa:00:00:00:{n:02x}" for n in (2, 3, 6)}  # what the neighbour table says


def document() -> dict:
    """Not in sorted order: VNI 200 first, peers not by address."""
    return {
        "tunnel_ports": [
            {"port": "tun-c", "local_ip": "198.51.100.5"},
            {"port": "tun-b", "local_ip": "198.51.100.1"},
        ],
        "vnis": [
            {"vni": 200, "access_ports": ["acc200"], "peers": [{"ip": "198.51.100.2", "via": "tun-b"}]},
            {
                "vni": 100,
                "access_ports": ["acc100"],
                "peers": [
                    {"ip": "198.51.100.6", "via": "tun-c"},
                    {"ip": "198.51.100.3", "via": "tun-b"},
                    {"ip": "198.51.100.2", "via": "tun-b"},
                ],
            },
            {"vni": 110, "trunks": [{"port": "trunk0", "vid": 10}], "peers": [{"ip": "198.51.100.2", "via": "tun-b"}]},
        ],
    }


def compiled(doc: dict, current: plan.MapContents | None = None, egress: str = EGRESS) -> plan.MapContents:
    config = vc.validate(doc, FACTS)
    resolved = {(v.vni, p.ip): NEXT_HOPS[p.ip] for v in config.vnis for p in v.peers if not p.mac}  # as the host would
    return plan.compile_desired(config, PORTS, resolved, current or plan.MapContents(), egress)


def held(contents: plan.MapContents) -> plan.MapContents:
    """What the maps hold once `contents` is written (as writer.read() gives it back): no origins, each group in
    the map of its size, members on the egress programs the contents name."""
    return plan.MapContents(
        entries=copy.deepcopy(contents.entries),
        groups=copy.deepcopy(contents.groups),
        where={
            (kind, vni): layouts.group_class(members)
            for kind, vnis in contents.groups.items()
            for vni, members in vnis.items()
        },
        egress_tags=set(contents.egress_tags),
    )


def u32(value: int) -> bytes:
    return bytes(ctypes.c_uint32(value))


def by_index(contents: plan.MapContents, name: str, value_type) -> dict:
    """An array (or u32-keyed) map's entries: index -> value."""
    return {int.from_bytes(k, "little"): value_type.from_buffer_copy(v) for k, v in contents.entries[name].items()}


def port_vnis(contents: plan.MapContents) -> dict[tuple[int, int], PortVni]:
    """port_vnis' entries: (vni, ifindex) -> value."""
    rows = {}
    for k, v in contents.entries["port_vnis"].items():
        key = PortVniKey.from_buffer_copy(k)
        rows[(key.vni, key.ifindex)] = PortVni.from_buffer_copy(v)
    return rows


def test_desired_contents_of_a_document():
    desired = compiled(document())
    ports = by_index(desired, "port_config", PortConfig)
    assert {ifindex: p.kind for ifindex, p in ports.items()} == {
        2: PORT_ACCESS, 4: PORT_ACCESS, 5: PORT_TRUNK, 10: PORT_TUNNEL, 11: PORT_TUNNEL
    }  # fmt: skip
    assert ip_str(ports[10].local_ip) == "198.51.100.1" and mac_str(ports[10].mac) == "02:00:00:00:00:0a"
    assert ports[2].vni == 100 and ports[10].mtu == 1600
    assert sorted(p.slot for p in ports.values()) == [0, 1, 2, 3, 4]  # one counter slot per port

    (binding,) = desired.entries["vlan_bindings"].items()
    assert VlanKey.from_buffer_copy(binding[0]).vid == 10 and VniRef.from_buffer_copy(binding[1]).vni == 110

    memberships = port_vnis(desired)
    assert set(memberships) == {(100, 2), (100, 10), (100, 11), (110, 5), (110, 10), (200, 4), (200, 10)}
    assert memberships[(110, 5)].vid == 10
    # VNI 100's peers behind tun-b are one row of tunnel_peers, by address: .2 then .3 (copy 0 and copy 1).
    row = memberships[(100, 10)]
    peers = by_index(desired, "tunnel_peers", PeerValue)
    assert row.peers == 2
    assert [ip_str(peers[row.first_peer + i].remote_ip) for i in range(2)] == ["198.51.100.2", "198.51.100.3"]
    assert mac_str(peers[row.first_peer + 1].mac) == NEXT_HOPS["198.51.100.3"]
    assert sorted(peers) == list(range(5))  # rows one after another from index 0

    # Per VNI: its first tunnel port's row of peers, the longest flooded frame its local ports take from a devmap
    # with the Outer in front (their MTU 1500 + 18), and, for frames from that port itself (each VNI has one local
    # port here, and a copy never goes back to its sender), what its tunnel ports send (their MTU 1600 + 14).
    flooding = by_index(desired, "flood_settings", FloodSettings)
    limits = {f.vni: (f.tunnel_ifindex, f.peers, f.frame_limit, f.tightest_port, f.others_limit) for f in
              flooding.values()}  # fmt: skip
    assert limits == {100: (10, 2, 1518, 2, 1614), 110: (10, 1, 1518, 5, 1614), 200: (10, 1, 1518, 4, 1614)}
    assert len(desired.entries["peer_admission"]) == 5  # (VNI, peer address): 3 in VNI 100, 1 in 110, 1 in 200

    assert desired.groups["flood"][100] == {
        2: 2, peer_member_key(10, 0): 10, peer_member_key(10, 1): 10, peer_member_key(11, 0): 11
    }  # fmt: skip
    assert desired.groups["local"] == {100: {2: 2}, 110: {5: 5}, 200: {4: 4}}
    assert desired.egress_tags == {EGRESS}

    # The TC backend's walk of the same group: local ports first, then each peer by its tunnel_peers index.
    listed = {
        row.vni: (row.locals, [(m.ifindex, m.peer) for m in row.members[: row.count]])
        for row in by_index(desired, "vni_members", VniMembers).values()
    }
    first = {(vni, ifindex): r.first_peer for (vni, ifindex), r in port_vnis(desired).items() if r.peers}
    assert listed == {
        100: (1, [(2, 0), (10, first[(100, 10)]), (10, first[(100, 10)] + 1), (11, first[(100, 11)])]),
        110: (1, [(5, 0), (10, first[(110, 10)])]),
        200: (1, [(4, 0), (10, first[(200, 10)])]),
    }
    assert set(by_index(desired, "vni_members", VniMembers)) == set(by_index(desired, "flood_settings", FloodSettings))


def test_the_second_tightest_port_limits_the_frames_of_the_tightest():
    doc = document()
    doc["vnis"][1]["access_ports"].append("acc101")
    ports = {**PORTS, "acc101": plan.Port("acc101", 3, 1540, "02:00:00:00:00:03")}  # the tunnels hold 1540 + 50
    config = vc.validate(doc, {name: vc.InterfaceFacts(p.ifindex, p.mtu, p.mac) for name, p in ports.items()})
    desired = plan.compile_desired(config, ports, {(v.vni, p.ip): NEXT_HOPS[p.ip] for v in config.vnis for p in
                                                   v.peers}, plan.MapContents(), EGRESS)  # fmt: skip
    (vni100,) = [f for f in by_index(desired, "flood_settings", FloodSettings).values() if f.vni == 100]
    assert (vni100.frame_limit, vni100.tightest_port, vni100.others_limit) == (1518, 2, 1558)


def test_the_copy_limit_is_the_smallest_members_mtu_plus_18():
    """flood_settings.copy_limit: the longest copy every member's device takes from a devmap (MTU + 18; a tunnel
    port's counts too, its MTU at least the inner MTU + 50); ingress counts the copies of a longer flooded frame that
    a device refuses."""
    doc = document()
    doc["vnis"][1]["access_ports"].append("acc101")
    ports = {**PORTS, "acc101": dataclasses.replace(PORTS["acc101"], mtu=1450)}
    config = vc.validate(doc, {name: vc.InterfaceFacts(p.ifindex, p.mtu, p.mac) for name, p in ports.items()})
    peer_macs = {(v.vni, p.ip): NEXT_HOPS[p.ip] for v in config.vnis for p in v.peers}
    desired = plan.compile_desired(config, ports, peer_macs, plan.MapContents(), EGRESS)
    flooding = by_index(desired, "flood_settings", FloodSettings)
    assert {f.vni: f.copy_limit for f in flooding.values()} == {100: 1468, 110: 1518, 200: 1518}


def test_the_same_configuration_in_another_order_compiles_to_the_same_contents():
    doc = document()
    doc["vnis"].reverse()
    for entry in doc["vnis"]:
        entry["peers"].reverse()
    assert compiled(doc).entries == compiled(document()).entries


def test_a_first_deploy_writes_everything_and_a_second_run_nothing():
    desired = compiled(document())
    first = plan.diff(plan.MapContents(), desired)
    assert first.upserts == desired.entries and not any(first.deletes.values())
    assert {(g.kind, g.vni, g.size) for g in first.groups} == {
        ("flood", 100, "small"), ("flood", 110, "small"), ("flood", 200, "small"),
        ("local", 100, "small"), ("local", 110, "small"), ("local", 200, "small"),
    }  # fmt: skip
    assert all(g.adds == desired.groups[g.kind][g.vni] and g.moved_from is None for g in first.groups)
    assert first.fresh_port_slots == [0, 1, 2, 3, 4] and first.fresh_vni_slots == [0, 1, 2]

    now = held(desired)
    again = plan.diff(now, compiled(document(), now))
    assert again.empty


def test_one_peer_less_changes_only_what_it_needs():
    now = held(compiled(document()))
    doc = document()
    del doc["vnis"][1]["peers"][2]  # 198.51.100.2 leaves VNI 100: .3 becomes tun-b's copy 0
    d = plan.diff(now, compiled(doc, now))
    assert {name: len(keys) for name, keys in d.deletes.items() if keys} == {"tunnel_peers": 1, "peer_admission": 1}
    # peer_admission holds the peer's tunnel_peers index: .3's moves to the row's first index with it.
    assert {name: len(v) for name, v in d.upserts.items() if v} == {
        "tunnel_peers": 1, "port_vnis": 1, "flood_settings": 1, "peer_admission": 1, "vni_members": 1
    }  # fmt: skip
    row = PortVni.from_buffer_copy(now.entries["port_vnis"][bytes(PortVniKey(100, 10))])
    admitted = d.upserts["peer_admission"][bytes(PeerAddrKey(100, ip_be("198.51.100.3")))]
    assert int.from_bytes(admitted, "little") == row.first_peer
    (group,) = d.groups
    assert (group.kind, group.vni, group.adds, group.removes) == ("flood", 100, {}, [peer_member_key(10, 1)])
    assert not d.groups_removed and not d.fresh_port_slots and not d.fresh_vni_slots


def test_slots_freed_by_an_update_are_taken_by_a_later_one_and_start_from_zero():
    now = held(compiled(document()))
    doc = document()
    doc["vnis"][0] = {"vni": 300, "access_ports": ["acc101"]}  # VNI 200 goes, 300 comes
    desired = compiled(doc, now)
    d = plan.diff(now, desired)
    slot_200 = now.vni_slots()[200]
    assert sorted(d.groups_removed) == [("flood", 200, "small", slot_200), ("local", 200, "small", slot_200)]
    assert {(g.kind, g.vni) for g in d.groups} == {("flood", 300), ("local", 300)}
    kept = {vni: slot for vni, slot in now.vni_slots().items() if vni != 200}
    assert {vni: desired.vni_slots()[vni] for vni in kept} == kept
    # VNI 300 and acc101 do not take the slots VNI 200 and acc200 leave in the same update (their state is in
    # place until the update removes it), but slots no one had, where they start from zero.
    assert desired.vni_slots()[300] == 3 and d.fresh_vni_slots == [3]
    assert desired.port_slots()[3] == 5 and d.fresh_port_slots == [5]
    # The next update's newcomers take the freed slots, and start from zero there too.
    later = held(desired)
    doc["vnis"].append({"vni": 400, "access_ports": ["acc200"]})
    again = compiled(doc, later)
    d = plan.diff(later, again)
    assert again.vni_slots()[400] == slot_200 and d.fresh_vni_slots == [slot_200]
    assert again.port_slots()[4] == now.port_slots()[4] and d.fresh_port_slots == [now.port_slots()[4]]


def test_a_slot_left_in_the_same_update_is_taken_only_when_no_other_is_free():
    current = {10: 0, 20: 1}  # key -> slot; 20 leaves
    assert plan.assign_slots({10, 30}, current, 3) == {10: 0, 30: 2}
    assert plan.assign_slots({10, 30}, current, 2) == {10: 0, 30: 1}  # full: 20's slot
    assert plan.assign_slots({10, 30, 40}, {10: 0, 20: 2}, 4) == {10: 0, 30: 1, 40: 3}  # smallest free first


def fdb_document() -> dict:
    """document() with static entries on an access port, on a trunk and at two remote VTEPs, and 30 s aging."""
    doc = document()
    doc["fdb_aging"] = 30
    doc["vnis"][1]["fdb"] = [
        {"mac": "02:00:00:00:64:03", "remote": "198.51.100.3"},  # tun-b's copy 1 of VNI 100
        {"mac": "02:00:00:00:64:06", "remote": "198.51.100.6"},  # tun-c's only one
        {"mac": "02:00:00:00:64:01", "port": "acc100"},
    ]
    doc["vnis"][2]["fdb"] = [{"mac": "02:00:00:00:6e:01", "port": "trunk0"}]
    return doc


def fdb_static(contents: plan.MapContents) -> dict[tuple[int, str], FdbEntry]:
    return {
        (FdbKey.from_buffer_copy(k).vni, mac_str(FdbKey.from_buffer_copy(k).mac)): FdbEntry.from_buffer_copy(v)
        for k, v in contents.entries["fdb_static"].items()
    }


def test_static_fdb_entries_compile_to_where_the_data_plane_sends():
    desired = compiled(fdb_document())
    static = fdb_static(desired)
    assert set(static) == {(100, "02:00:00:00:64:01"), (100, "02:00:00:00:64:03"), (100, "02:00:00:00:64:06"),
                           (110, "02:00:00:00:6e:01")}  # fmt: skip
    rows = port_vnis(desired)
    peers = by_index(desired, "tunnel_peers", PeerValue)

    def fields(e: FdbEntry) -> tuple:
        return (e.ifindex, ip_str(e.remote_ip) if e.remote_ip else None, e.peer, e.vid, e.seen_ns)

    assert fields(static[(100, "02:00:00:00:64:01")]) == (2, None, 0, 0, 0)  # acc100: no VID
    assert fields(static[(110, "02:00:00:00:6e:01")]) == (5, None, 0, 10, 0)  # trunk0: leaves with VNI 110's VID
    # A remote entry names the peer's tunnel port and its index in tunnel_peers, as learning would.
    remote = static[(100, "02:00:00:00:64:03")]
    assert fields(remote) == (10, "198.51.100.3", rows[(100, 10)].first_peer + 1, 0, 0)
    assert ip_str(peers[remote.peer].remote_ip) == "198.51.100.3" and peers[remote.peer].vni == 100
    remote = static[(100, "02:00:00:00:64:06")]
    assert fields(remote) == (11, "198.51.100.6", rows[(100, 11)].first_peer, 0, 0)
    assert ip_str(peers[remote.peer].remote_ip) == "198.51.100.6"
    assert desired.origins[("fdb_static", bytes(FdbKey(110, mac_array("02:00:00:00:6e:01"))))] == "vnis[2].fdb[0]"


def mac_array(mac: str):
    return (ctypes.c_uint8 * 6)(*mac_bytes(mac))


def settings(contents: plan.MapContents) -> VtepSettings:
    return VtepSettings.from_buffer_copy(contents.entries["settings"][u32(0)])


def test_settings_carry_the_aging_time_and_whether_there_are_static_entries():
    plain = settings(compiled(document()))
    assert (plain.aging_ns, plain.static_entries) == (300 * NS_PER_S, 0)  # the default aging; no static lookups
    with_fdb = compiled(fdb_document())
    assert (settings(with_fdb).aging_ns, settings(with_fdb).static_entries) == (30 * NS_PER_S, 4)
    assert with_fdb.origins[("settings", u32(0))] == "fdb_aging"
    # A static entry more: written before settings counts it (CONFIG_MAPS' order), nothing else changes.
    now = held(with_fdb)
    doc = fdb_document()
    doc["vnis"][0]["fdb"] = [{"mac": "02:00:00:00:c8:01", "remote": "198.51.100.2"}]
    d = plan.diff(now, compiled(doc, now))
    assert {name: len(v) for name, v in d.upserts.items() if v} == {"fdb_static": 1, "settings": 1}
    assert layouts.CONFIG_MAPS.index("fdb_static") < layouts.CONFIG_MAPS.index("settings")
    assert not any(d.deletes.values()) and not d.groups


def test_a_preserve_vni_is_flagged_on_every_port_and_binding():
    doc = document()
    doc["vnis"][2]["vlan_mode"] = "preserve"  # VNI 110
    desired = compiled(doc)
    flags = {row: value.flags for row, value in port_vnis(desired).items()}
    assert {row for row, f in flags.items() if f == VNI_PRESERVE_VLAN} == {(110, 5), (110, 10)}  # trunk0, tun-b
    assert {f for row, f in flags.items() if row[0] != 110} == {0}
    (binding,) = desired.entries["vlan_bindings"].values()
    assert VniRef.from_buffer_copy(binding).flags == VNI_PRESERVE_VLAN
    # Changing the mode rewrites that VNI's rows only.
    now = held(compiled(document()))
    d = plan.diff(now, compiled(doc, now))
    assert {name: len(v) for name, v in d.upserts.items() if v} == {"vlan_bindings": 1, "port_vnis": 2}
    assert not any(d.deletes.values()) and not d.groups


def test_members_on_another_egress_program_all_move_to_the_loaded_one():
    """Every entry that sends to one device must run the same egress program, so a new program rewrites every
    member of every group, also of a group that changes anyway."""
    now = held(compiled(document(), egress="old program tag"))
    doc = document()
    doc["vnis"][1]["access_ports"].append("acc101")  # VNI 100's groups change anyway
    desired = compiled(doc, now)
    d = plan.diff(now, desired)
    assert not d.empty
    changed = {(g.kind, g.vni): g for g in d.groups}
    assert set(changed) == {(kind, vni) for kind in ("flood", "local") for vni in (100, 110, 200)}
    assert all(g.adds == desired.groups[g.kind][g.vni] and g.removes == [] for g in changed.values())
    # The same program: only the new member.
    same = plan.diff(held(compiled(document())), compiled(doc, held(compiled(document()))))
    assert {(g.kind, g.vni): g.adds for g in same.groups} == {("flood", 100): {3: 3}, ("local", 100): {3: 3}}


def test_a_group_that_outgrows_the_small_maps_moves_whole():
    now = held(compiled(document()))
    doc = document()
    extra = [{"ip": f"198.51.100.{i}", "via": "tun-c", "mac": "02:aa:00:00:01:00"} for i in range(40, 53)]
    doc["vnis"][1]["peers"] += extra  # 4 + 13 = 17 members, one more than the small maps take
    d = plan.diff(now, compiled(doc, now))
    flood = next(g for g in d.groups if (g.kind, g.vni) == ("flood", 100))
    assert (flood.size, flood.moved_from, len(flood.adds)) == ("large", "small", 17)
    assert all((g.kind, g.vni) != ("local", 100) for g in d.groups)  # its local group stays


def test_every_entry_and_member_names_the_item_of_the_document_it_comes_from():
    desired = compiled(document())
    origin = desired.origins
    rows = port_vnis(desired)
    in_vni_100 = [u32(rows[row].first_peer + i) for row in ((100, 10), (100, 11)) for i in range(rows[row].peers)]
    assert [origin[("tunnel_peers", index)] for index in in_vni_100] == [
        "vnis[1].peers[2]",  # 198.51.100.2 via tun-b, copy 0
        "vnis[1].peers[1]",  # 198.51.100.3 via tun-b, copy 1
        "vnis[1].peers[0]",  # 198.51.100.6 via tun-c
    ]
    assert origin[("flood", 100, peer_member_key(10, 0))] == "vnis[1].peers[2]"
    assert origin[("flood", 100, 2)] == origin[("local", 100, 2)] == "vnis[1].access_ports[0]"
    assert origin[("port_config", u32(10))] == "tunnel_ports[1]"
    assert origin[("vlan_bindings", bytes(VlanKey(5, 10)))] == "vnis[2].trunks[0]"
    assert origin[("port_vnis", bytes(PortVniKey(100, 10)))] == "vnis[1].peers"
    assert origin[("flood", 200)] == "vnis[0]"


def test_rows_of_peers_stay_in_place_or_move_to_free_indexes():
    current = {(100, 5): (0, 4), (200, 5): (4, 2)}
    paths = {(100, 5): "vnis[0].peers", (200, 5): "vnis[1].peers", (300, 5): "vnis[2].peers"}
    # Unchanged and shrinking rows stay; a new row goes after the used indexes.
    assert plan.place_rows({(100, 5): 3, (200, 5): 2, (300, 5): 2}, current, 64, paths) == {
        (100, 5): 0,
        (200, 5): 4,
        (300, 5): 6,
    }
    # A row that cannot grow where it is moves to indexes no current row uses (make before break).
    assert plan.place_rows({(100, 5): 5, (200, 5): 2}, current, 64, paths) == {(100, 5): 6, (200, 5): 4}
    # The last row grows in place into free indexes.
    assert plan.place_rows({(100, 5): 4, (200, 5): 3}, current, 64, paths) == {(100, 5): 0, (200, 5): 4}
    with pytest.raises(
        plan.DoesNotFit,
        match=r"^vnis\[2\]\.peers: no room for 60 more peers of VNI 300 .* limit of 64 \(VTEP_MAX_PEERS\)",
    ):
        plan.place_rows({(100, 5): 4, (200, 5): 2, (300, 5): 60}, current, 64, paths)


def test_the_diff_lists_what_goes_before_and_what_comes_after():
    now = held(compiled(document()))
    doc = document()
    doc["vnis"][1]["access_ports"] = ["acc101"]
    doc["vnis"][1]["peers"][0]["mac"] = "02:bb:00:00:00:06"
    report = words.changes(now, compiled(doc, now), NAMES, "vtep vtep")
    assert report.steps == [
        "VNI 100: - access port acc100",
        "VNI 100: - peer 198.51.100.6 via tun-c (02:aa:00:00:00:06)",
        "VNI 100: + access port acc101",
        "VNI 100: + peer 198.51.100.6 via tun-c (02:bb:00:00:00:06)",
    ]
    assert report.diff() == {
        "before_header": "vtep vtep",
        "after_header": "vtep vtep",
        "before": "VNI 100: access port acc100\nVNI 100: peer 198.51.100.6 via tun-c (02:aa:00:00:00:06)\n",
        "after": "VNI 100: access port acc101\nVNI 100: peer 198.51.100.6 via tun-c (02:bb:00:00:00:06)\n",
    }
    first = words.changes(plan.MapContents(), now, NAMES, "vtep vtep")
    assert first.steps[:3] == [
        "VTEP: + fdb_aging 300 s",
        "VTEP: + tunnel port tun-b local 198.51.100.1 MTU 1600",
        "VTEP: + tunnel port tun-c local 198.51.100.5 MTU 1600",
    ]
    assert first.diff()["before"] == "" and "VNI 110: trunk trunk0 VID 10\n" in first.diff()["after"]


def test_the_diff_says_static_macs_the_vlan_mode_and_the_aging_time():
    now = held(compiled(document()))
    doc = fdb_document()  # 30 s aging and four static entries
    doc["vnis"][2]["vlan_mode"] = "preserve"
    report = words.changes(now, compiled(doc, now), NAMES, "vtep vtep")
    assert report.steps == [
        "VTEP: - fdb_aging 300 s",
        "VTEP: + fdb_aging 30 s",
        "VNI 100: + static MAC 02:00:00:00:64:01 on acc100",
        "VNI 100: + static MAC 02:00:00:00:64:03 at remote 198.51.100.3",
        "VNI 100: + static MAC 02:00:00:00:64:06 at remote 198.51.100.6",
        "VNI 110: + static MAC 02:00:00:00:6e:01 on trunk0",
        "VNI 110: + vlan_mode preserve",
    ]
    assert report.diff()["before"] == "VTEP: fdb_aging 300 s\n"
    # A static MAC that moves is one line out and one in; translate, the default, goes unsaid.
    now = held(compiled(doc))
    doc["vnis"][1]["fdb"][2]["port"] = "acc101"
    doc["vnis"][1]["access_ports"].append("acc101")
    del doc["vnis"][2]["vlan_mode"]
    assert words.changes(now, compiled(doc, now), NAMES, "vtep vtep").steps == [
        "VNI 100: - static MAC 02:00:00:00:64:01 on acc100",
        "VNI 100: + access port acc101",
        "VNI 100: + static MAC 02:00:00:00:64:01 on acc101",
        "VNI 110: - vlan_mode preserve",
    ]
