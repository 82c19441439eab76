"""The Linux baseline's checks and plan on a host described as plain data (what read_host() gives): problems name
the document's own paths, and the steps come with the items before and after that --diff shows. No kernel here;
tests/integration/test_linux_vtep.py runs the module on real devices."""

import copy

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import linux_desired as ld
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import linux_guards as lg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import linux_host as lh
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import linux_plan as lp

FOREIGN_BRIDGE = 7  # br0 in host(): a bridge this module did not make


def link(name, index, kind=None, mtu=1500, master=0, up=True, **extra) -> lh.Link:
    if master:
        extra.setdefault("port_learning", True)
    if kind == "bridge":
        extra.setdefault("ageing_time", 300.0)
    # The module's bridges and their ports carry their guards, as apply() leaves them, unless a test says otherwise.
    if kind == "bridge" and lh.own_device(name, kind):
        extra.setdefault("guards", [lg.Guard(lg.BRIDGE_GUARD)])
    elif kind == "vxlan" or master not in (0, FOREIGN_BRIDGE):
        extra.setdefault("guards", [lg.Guard(lg.PORT_GUARD)])
    return lh.Link(name, index, kind, mtu, f"02:00:00:00:00:{index:02x}", up, master, **extra)


def vxlan_data(vni, **changed) -> dict:
    """A vxlan device's attributes as read_host() gives them: as DOCUMENT wants them unless changed."""
    return {"id": vni, "port": 4789, "local": "198.51.100.241", "link": 2, "learning": 1, "ageing": 300, **changed}


def host(*extra: lh.Link, remotes=None, bridge_statics=None, vxlan_statics=None) -> lh.HostState:
    links = [
        link("up0", 2, "veth", mtu=1600),
        link("up1", 3, "veth", mtu=1600),
        link("acc100", 4, "veth"),
        link("acc200", 5, "veth"),
        link("trk0", 6, "veth"),
        link("br0", FOREIGN_BRIDGE, "bridge"),
        link("acc300", 8, "veth", master=FOREIGN_BRIDGE),
        *extra,
    ]
    addresses = {2: {"198.51.100.241"}, 3: {"198.51.100.245"}}
    return lh.HostState(
        {lk.name: lk for lk in links}, addresses, remotes or {}, bridge_statics or {}, vxlan_statics or {}
    )


def desired(document: dict, state: lh.HostState) -> list[ld.DesiredVni]:
    return ld.check(vc.validate(document, state.interface_facts()), state)


def test_problems_name_the_items_where_the_document_has_them():
    document = {
        "fdb_size": 1024,
        "tunnel_ports": [
            {"port": "up1", "local_ip": "198.51.100.250"},
            {"port": "up0", "local_ip": "198.51.100.241"},
        ],
        "vnis": [
            {
                "vni": 200,
                "access_ports": ["acc200", "acc300"],
                "peers": [
                    {"ip": "198.51.100.246", "via": "up1"},
                    {"ip": "198.51.100.243", "via": "up0"},
                    {"ip": "198.51.100.242", "via": "up0"},
                ],
            },
            {"vni": 50, "trunks": [{"port": "trk0", "vid": 10}]},
        ],
    }
    with pytest.raises(lh.LinuxVtepError) as refused:
        desired(document, host())
    assert refused.value.problems == [
        "tunnel_ports[0].local_ip: 198.51.100.250 is not an address of up1 (this module does not add underlay "
        "addresses: configure them first)",
        "fdb_size: the Linux baseline cannot bound its learned MACs to 1024 (each VNI's bridge and vxlan device learn "
        "into tables of their own, without a shared limit); leave fdb_size out",
        "vnis[1].trunks: the Linux baseline needs bridge VLAN filtering (and 802.1Q) for trunk bindings, which it "
        "does not configure and this lab's kernel lacks; use access_ports",
        "vnis[0].peers[2].via: up0, but peers[0] is via up1: the Linux baseline has one vxlan device per VNI with one "
        "local address, so all peers of a VNI go via one tunnel port",
        "vnis[0].peers[1].via: up0, but peers[0] is via up1: the Linux baseline has one vxlan device per VNI with one "
        "local address, so all peers of a VNI go via one tunnel port",
        "vnis[0].access_ports[1]: acc300 is already a port of br0 (bridge), which this module did not make",
    ]
    assert refused.value.result() == {"changed": False, "problems": refused.value.problems}
    assert str(refused.value).startswith("invalid VTEP configuration for the Linux baseline:\n- tunnel_ports[0]")


DOCUMENT = {
    "tunnel_ports": [{"port": "up0", "local_ip": "198.51.100.241"}],
    "vnis": [
        {
            "vni": 100,
            "access_ports": ["acc100"],
            "peers": [{"ip": "198.51.100.243", "via": "up0"}, {"ip": "198.51.100.242", "via": "up0"}],
        }
    ],
}


def test_drift_is_planned_as_changes_with_the_items_before_and_after():
    state = host(
        link("xbr100", 20, "bridge", mcast_snooping=1, ageing_time=2.5),
        link("xvx100", 21, "vxlan", mtu=1400, master=20, port_learning=False, vxlan=vxlan_data(100, learning=0)),
        link("acc100", 4, "veth", master=20, port_learning=False),
        link("acc200", 5, "veth", master=20),
        remotes={21: {lh.Remote("198.51.100.242", 2), lh.Remote("198.51.100.249", 2)}},
    )
    steps = lp.plan(desired(DOCUMENT, state), state)
    result = lp.changes(steps).result()
    assert result["changes"] == [
        "VNI 100: ~ bridge xbr100 multicast snooping on -> off",
        "VNI 100: ~ bridge xbr100 ageing 2.5 s -> 300 s",
        "VNI 100: ~ vxlan xvx100 learning off -> on",
        "VNI 100: ~ vxlan xvx100 MTU 1400 -> 1550",
        "VNI 100: ~ bridge port xvx100 learning off -> on",
        "VNI 100: ~ bridge port acc100 learning off -> on",
        "VNI 100: + peer 198.51.100.243 via up0",
        "VNI 100: - access port acc200",
        "VNI 100: - peer 198.51.100.249 via up0",
        "VNI 100: - filter xdpfleet_port on acc200",  # released: it takes its frames up to the host again
    ]
    # one netlink change each for the bridge and the vxlan device sets every attribute that drifted
    assert [s.op for s in steps[:4]] == ["bridge_set", "noop", "vxlan_set", "noop"]
    assert steps[0].args == {"name": "xbr100", "ageing": 300}
    assert result["diff"] == {
        "before_header": "linux_vtep",
        "after_header": "linux_vtep",
        "before": "VNI 100: bridge xbr100 multicast snooping on\n"
        "VNI 100: bridge xbr100 ageing 2.5 s\n"
        "VNI 100: vxlan xvx100 learning off\n"
        "VNI 100: vxlan xvx100 MTU 1400\n"
        "VNI 100: bridge port xvx100 learning off\n"
        "VNI 100: bridge port acc100 learning off\n"
        "VNI 100: access port acc200\n"
        "VNI 100: peer 198.51.100.249 via up0\n"
        "VNI 100: filter xdpfleet_port on acc200\n",
        "after": "VNI 100: bridge xbr100 multicast snooping off\n"
        "VNI 100: bridge xbr100 ageing 300 s\n"
        "VNI 100: vxlan xvx100 learning on\n"
        "VNI 100: vxlan xvx100 MTU 1550\n"
        "VNI 100: bridge port xvx100 learning on\n"
        "VNI 100: bridge port acc100 learning on\n"
        "VNI 100: peer 198.51.100.243 via up0\n",
    }


def test_the_documents_fdb_aging_is_the_bridges_and_the_vxlan_devices():
    state = host(
        link("xbr100", 20, "bridge"),
        link("xvx100", 21, "vxlan", mtu=1550, master=20, vxlan=vxlan_data(100)),
        link("acc100", 4, "veth", master=20),
        remotes={21: {lh.Remote("198.51.100.242", 2), lh.Remote("198.51.100.243", 2)}},
    )
    assert lp.plan(desired(DOCUMENT, state), state) == []
    short = {**DOCUMENT, "fdb_aging": 2}
    steps = lp.plan(desired(short, state), state)
    assert [s.line for s in steps] == [
        "VNI 100: ~ bridge xbr100 ageing 300 s -> 2 s",
        "VNI 100: ~ vxlan xvx100 ageing 300 s -> 2 s",
    ]
    assert steps[0].args["ageing"] == 2 and steps[1].op == "vxlan_set" and steps[1].args["ageing"] == 2


def test_vlan_mode_is_accepted_where_no_trunk_needs_it():
    """Without trunks (which the baseline refuses) both modes carry an access port's frames as they are."""
    state = host()
    for mode in ("translate", "preserve"):
        document = copy.deepcopy(DOCUMENT)
        document["vnis"][0]["vlan_mode"] = mode
        assert [d.vni for d in desired(document, state)] == [100]


def test_a_new_vni_is_all_after_and_a_dropped_one_all_before():
    state = host(
        link("xbr300", 30, "bridge"),
        link("xvx300", 31, "vxlan", mtu=1550, master=30, vxlan=vxlan_data(300)),
        link("acc100", 4, "veth", master=30),
        remotes={31: {lh.Remote("198.51.100.242", 2)}},
        bridge_statics={30: {"02:00:00:00:30:01": lh.BridgeStatic(4, sticky=True)}},
    )
    result = lp.changes(lp.plan(desired(DOCUMENT, state), state)).result()
    assert result["changes"] == [
        "VNI 100: + bridge xbr100 (ageing 300 s)",
        "VNI 100: + filter xdpfleet_bridge on xbr100 (drops every frame the bridge hands up to this host)",
        "VNI 100: + vxlan xvx100 (local 198.51.100.241, dev up0, dstport 4789, MTU 1550, learning on, ageing 300 s)",
        "VNI 100: + filter xdpfleet_port on xvx100 (drops 01:80:c2:00:00:01-0f, which the bridge hands up to this host "
        "instead of forwarding)",
        "VNI 100: + vxlan xvx100 into bridge xbr100",
        "VNI 100: + access port acc100",
        "VNI 100: + peer 198.51.100.242 via up0",
        "VNI 100: + peer 198.51.100.243 via up0",
        "VNI 300: - peer 198.51.100.242 via up0",
        "VNI 300: - static MAC 02:00:00:00:30:01 at acc100",
        "VNI 300: - access port acc100 (moved to VNI 100)",
        "VNI 300: - vxlan xvx300",
        "VNI 300: - bridge xbr300",
    ]
    assert result["diff"]["before"].splitlines() == [
        "VNI 300: peer 198.51.100.242 via up0",
        "VNI 300: static MAC 02:00:00:00:30:01 at acc100",
        "VNI 300: access port acc100",
        "VNI 300: vxlan xvx300",
        "VNI 300: bridge xbr300",
    ]
    assert result["diff"]["after"].splitlines() == [
        "VNI 100: bridge xbr100 (ageing 300 s)",
        "VNI 100: filter xdpfleet_bridge on xbr100 (drops every frame the bridge hands up to this host)",
        "VNI 100: vxlan xvx100 (local 198.51.100.241, dev up0, dstport 4789, MTU 1550, learning on, ageing 300 s)",
        "VNI 100: filter xdpfleet_port on xvx100 (drops 01:80:c2:00:00:01-0f, which the bridge hands up to this host "
        "instead of forwarding)",
        "VNI 100: vxlan xvx100 in bridge xbr100",
        "VNI 100: access port acc100",
        "VNI 100: peer 198.51.100.242 via up0",
        "VNI 100: peer 198.51.100.243 via up0",
    ]
    assert lp.changes([]).result() == {"changed": False, "changes": []}


PORTED, FAR, GONE = "02:00:00:00:64:01", "02:00:00:00:64:02", "02:00:00:00:64:03"
WITH_STATICS = copy.deepcopy(DOCUMENT)
WITH_STATICS["vnis"][0]["fdb"] = [
    {"mac": FAR.upper(), "remote": "198.51.100.243"},  # listed first, planned by MAC
    {"mac": PORTED, "port": "acc100"},
]


def vni100(bridge_statics=None, vxlan_statics=None, vxlan=None) -> lh.HostState:
    """VNI 100 as DOCUMENT wants it, with these static entries."""
    return host(
        link("xbr100", 20, "bridge"),
        link("xvx100", 21, "vxlan", mtu=1550, master=20, vxlan=vxlan or vxlan_data(100)),
        link("acc100", 4, "veth", master=20),
        remotes={21: {lh.Remote("198.51.100.242", 2), lh.Remote("198.51.100.243", 2)}},
        bridge_statics={20: bridge_statics or {}},
        vxlan_statics={21: vxlan_statics or {}},
    )


def test_static_entries_are_sticky_bridge_entries_and_a_remote_one_names_its_peer():
    state = vni100()
    steps = lp.plan(desired(WITH_STATICS, state), state)
    result = lp.changes(steps).result()
    assert result["changes"] == [
        f"VNI 100: + static MAC {PORTED} at acc100",
        f"VNI 100: + static MAC {FAR} at remote 198.51.100.243 via up0",
    ]
    assert result["diff"]["after"].splitlines() == [
        f"VNI 100: static MAC {PORTED} at acc100",
        f"VNI 100: static MAC {FAR} at remote 198.51.100.243 via up0",
    ]
    assert [(s.op, s.args) for s in steps] == [
        ("static_set", {"vni": 100, "mac": PORTED, "port": "acc100", "remote": None, "via": "up0", "stale": []}),
        (
            "static_set",
            {"vni": 100, "mac": FAR, "port": "xvx100", "remote": "198.51.100.243", "via": "up0", "stale": []},
        ),
    ]
    # what apply() leaves: nothing more to do
    done = vni100(
        {PORTED: lh.BridgeStatic(4, sticky=True), FAR: lh.BridgeStatic(21, sticky=True)},
        {FAR: {lh.Remote("198.51.100.243", 2)}},
    )
    assert lp.plan(desired(WITH_STATICS, done), done) == []
    assert desired(WITH_STATICS, done)[0].report()["fdb"] == [
        {"mac": PORTED, "port": "acc100"},
        {"mac": FAR, "remote": "198.51.100.243"},
    ]
    assert lh.report(done)["100"]["fdb"] == [
        {"mac": PORTED, "port": "acc100"},
        {"mac": FAR, "remote": "198.51.100.243"},
    ]


def test_static_entries_that_drifted_moved_or_left_the_document():
    stale_far = lh.Remote("198.51.100.242", 2)
    state = vni100(
        {
            PORTED: lh.BridgeStatic(21, sticky=True),  # the document moved it from a peer to acc100
            FAR: lh.BridgeStatic(21, sticky=False),  # someone's `bridge fdb replace ... static`
            GONE: lh.BridgeStatic(4, sticky=True),  # no longer in the document
        },
        {PORTED: {lh.Remote("198.51.100.243", 2)}, FAR: {stale_far}},
    )
    steps = lp.plan(desired(WITH_STATICS, state), state)
    result = lp.changes(steps).result()
    assert result["changes"] == [
        f"VNI 100: ~ static MAC {PORTED} at remote 198.51.100.243 via up0 -> acc100",
        f"VNI 100: ~ static MAC {FAR} at remote 198.51.100.242 via up0 (not sticky) -> remote 198.51.100.243 via up0",
        f"VNI 100: - static MAC {GONE} at acc100",
    ]
    assert [s.args["stale"] for s in steps[:2]] == [[lh.Remote("198.51.100.243", 2)], [stale_far]]
    assert steps[2].op == "static_del"
    assert steps[2].args == {"mac": GONE, "bridge": "xbr100", "port": 4, "vxlan": "xvx100", "stale": []}


def test_a_static_entry_missing_its_half_is_completed():
    state = vni100({FAR: lh.BridgeStatic(21, sticky=True)}, {PORTED: {lh.Remote("198.51.100.243", 2)}})
    assert lp.changes(lp.plan(desired(WITH_STATICS, state), state)).result()["changes"] == [
        f"VNI 100: ~ static MAC {PORTED} at remote 198.51.100.243 via up0 (no bridge entry) -> acc100",
        f"VNI 100: ~ static MAC {FAR} at xvx100 (no remote) -> remote 198.51.100.243 via up0",
    ]


def test_static_entries_are_removed_before_their_ports_leave_the_bridge():
    state = vni100({PORTED: lh.BridgeStatic(4, sticky=True)})
    gone = copy.deepcopy(DOCUMENT)
    gone["vnis"][0]["access_ports"] = []
    gone["vnis"].append({"vni": 200, "access_ports": ["acc200"]})
    lines = [s.line for s in lp.plan(desired(gone, state), state)]
    assert lines.index(f"VNI 100: - static MAC {PORTED} at acc100") < lines.index("VNI 100: - access port acc100")
    assert lines.index("VNI 200: + access port acc200") < lines.index(f"VNI 100: - static MAC {PORTED} at acc100")


def test_a_re_created_vxlan_device_gets_its_static_entries_again():
    state = vni100(
        {PORTED: lh.BridgeStatic(4, sticky=True), FAR: lh.BridgeStatic(21, sticky=True)},
        {FAR: {lh.Remote("198.51.100.243", 2)}},
        vxlan=vxlan_data(100, port=8472),
    )
    lines = [s.line for s in lp.plan(desired(WITH_STATICS, state), state)]
    assert lines[0].startswith("VNI 100: ~ vxlan xvx100 re-created (VNI 100 -> 100, dstport 8472 -> 4789;")
    # the entry at acc100 stays; the one at the vxlan device goes with it and comes back
    assert lines[-1] == f"VNI 100: + static MAC {FAR} at remote 198.51.100.243 via up0"
    assert not any(PORTED in line for line in lines)


def test_guards_that_are_missing_wrong_or_left_behind_are_repaired():
    """Every bridge and bridge port of the module's keeps frames from the host's own stack (a VXLAN packet sent
    inside an endpoint's frames would otherwise be decapsulated into another VNI): each drift is planned."""
    not_direct = lg.Guard(lg.PORT_GUARD, direct_action=False)  # its program's verdicts would be ignored
    misplaced = lg.Guard(lg.BRIDGE_GUARD, prio=5)
    state = host(
        link("xbr100", 20, "bridge", guards=[]),  # someone removed it
        link("xvx100", 21, "vxlan", mtu=1550, master=20, vxlan=vxlan_data(100), guards=[not_direct]),
        link("acc100", 4, "veth", master=20, guards=[lg.Guard(lg.PORT_GUARD), misplaced]),
        link("acc200", 5, "veth", guards=[lg.Guard(lg.PORT_GUARD)]),  # once a port, now in no VNI
        remotes={21: {lh.Remote("198.51.100.242", 2), lh.Remote("198.51.100.243", 2)}},
    )
    steps = lp.plan(desired(DOCUMENT, state), state)
    assert [s.line for s in steps] == [
        "VNI 100: + filter xdpfleet_bridge on xbr100 (drops every frame the bridge hands up to this host)",
        "VNI 100: - filter xdpfleet_port on xvx100",
        "VNI 100: + filter xdpfleet_port on xvx100 (drops 01:80:c2:00:00:01-0f, which the bridge hands up to this host "
        "instead of forwarding)",
        "VNI 100: - filter xdpfleet_bridge on acc100",
        "host: - filter xdpfleet_port on acc200",
    ]
    assert [(s.op, s.args) for s in steps[1:3]] == [
        ("guard_del", {"name": "xvx100", "guard": not_direct}),
        ("guard_set", {"name": "xvx100", "guard": lg.PORT_GUARD}),
    ]
    assert lp.changes(steps).result()["diff"]["before"].splitlines()[-1] == "host: filter xdpfleet_port on acc200"


def test_the_guard_programs_are_the_instructions_the_kernel_runs():
    """Hand-assembled (bpf/insn.py): one struct bpf_insn of 8 bytes each, as the tc filter loads them."""
    assert lg.guard_program(lg.BRIDGE_GUARD).hex() == "b7000000020000009500000000000000"  # r0 = TC_ACT_SHOT; exit
    port = lg.guard_program(lg.PORT_GUARD)
    assert [port[i : i + 8].hex() for i in range(0, len(port), 8)] == [
        "bf16000000000000",  # r6 = r1 (the context, which LD_ABS reads)
        "2000000000000000",  # r0 = the destination MAC's first 4 bytes
        "5500050000c28001",  # if r0 != 0x0180c200 goto pass
        "2800000004000000",  # r0 = its last 2 bytes
        "1500030000000000",  # if r0 == 0 goto pass (the bridge group address is forwarded)
        "250002000f000000",  # if r0 > 0x0f goto pass
        "b700000002000000",  # r0 = TC_ACT_SHOT
        "9500000000000000",  # exit
        "b7000000ffffffff",  # pass: r0 = TC_ACT_UNSPEC
        "9500000000000000",  # exit
    ]
