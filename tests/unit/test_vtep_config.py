"""Unit tests of the VTEP configuration document: schema, the rules a schema cannot express, and the model.

The valid document is a VTEP of the lab's shape (access ports, a trunk, peers), written so that it is valid in both
VLAN modes (vlan_mode preserve's one-kind-per-VNI rule respected): the access ports are in VNIs 100 and 200, and the
trunk carries VID 10 -> VNI 110 and VID 20 -> VNI 210. Nothing here needs a kernel.
"""

import copy
import itertools
import re

import pytest
from jsonschema import Draft202012Validator

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    AccessPort,
    ConfigError,
    FdbEntry,
    InterfaceFacts,
    Peer,
    TrunkBinding,
    TunnelPort,
    Vni,
    VtepConfig,
)


def facts(**mtus: int) -> dict[str, InterfaceFacts]:
    return {
        name: InterfaceFacts(ifindex=i + 1, mtu=mtu, mac=f"02:00:00:00:00:{i + 1:02x}")
        for i, (name, mtu) in enumerate(mtus.items())
    }


def host() -> dict[str, InterfaceFacts]:
    ifs = facts(lo=65536, acc100=1500, acc200=1500, acclocal=1500, trunk0=1500, trunk1=1500)
    ifs.update(facts(**{"tun-b": 1600, "tun-c": 1600}))
    return ifs


def document() -> dict:
    """VTEP A, deliberately not in sorted order (the model sorts)."""
    return {
        "tunnel_ports": [
            {"port": "tun-c", "local_ip": "198.51.100.5"},
            {"port": "tun-b", "local_ip": "198.51.100.1"},
        ],
        "vnis": [
            {
                "vni": 200,
                "access_ports": ["acc200"],
                "peers": [{"ip": "198.51.100.6", "via": "tun-c"}, {"ip": "198.51.100.2", "via": "tun-b"}],
            },
            {
                "vni": 100,
                "access_ports": ["acclocal", "acc100"],
                "peers": [
                    {"ip": "198.51.100.6", "via": "tun-c"},
                    {"ip": "198.51.100.2", "via": "tun-b", "mac": "02:AA:bb:CC:00:02"},
                ],
            },
            {"vni": 210, "trunks": [{"port": "trunk0", "vid": 20}], "peers": [{"ip": "198.51.100.2", "via": "tun-b"}]},
            {"vni": 110, "trunks": [{"port": "trunk0", "vid": 10}], "peers": [{"ip": "198.51.100.2", "via": "tun-b"}]},
        ],
    }


EXPECTED = VtepConfig(
    tunnel_ports=(TunnelPort("tun-b", "198.51.100.1"), TunnelPort("tun-c", "198.51.100.5")),
    vnis=(
        Vni(
            100,
            access_ports=(AccessPort("acc100"), AccessPort("acclocal")),
            trunks=(),
            peers=(Peer("198.51.100.2", "tun-b", "02:aa:bb:cc:00:02"), Peer("198.51.100.6", "tun-c", None)),
        ),
        Vni(110, access_ports=(), trunks=(TrunkBinding("trunk0", 10),), peers=(Peer("198.51.100.2", "tun-b", None),)),
        Vni(
            200,
            access_ports=(AccessPort("acc200"),),
            trunks=(),
            peers=(Peer("198.51.100.2", "tun-b", None), Peer("198.51.100.6", "tun-c", None)),
        ),
        Vni(210, access_ports=(), trunks=(TrunkBinding("trunk0", 20),), peers=(Peer("198.51.100.2", "tun-b", None),)),
    ),
)


def problems_of(doc, interfaces=None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        vc.validate(doc, host() if interfaces is None else interfaces)
    return caught.value.problems


def test_valid_document_gives_the_expected_model():
    assert vc.validate(document(), host()) == EXPECTED


def test_schema_is_a_valid_draft_2020_12_schema():
    Draft202012Validator.check_schema(vc.SCHEMA)
    assert vc.SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert "IPv6 underlay is not supported yet" in vc.SCHEMA["$defs"]["ipv4"]["description"]


def test_optional_lists_default_to_empty():
    doc = {"vnis": [{"vni": 7, "access_ports": ["acc100", "acc200"]}]}
    assert vc.validate(doc, host()) == VtepConfig((), (Vni(7, (AccessPort("acc100"), AccessPort("acc200")), (), ()),))


def test_mac_is_normalised_to_lowercase_and_kept_when_given():
    doc = document()
    doc["vnis"][0]["peers"][0]["mac"] = "0A:BC:DE:F0:12:34"
    config = vc.validate(doc, host())
    vni200 = next(v for v in config.vnis if v.vni == 200)
    assert [p.mac for p in vni200.peers] == [None, "0a:bc:de:f0:12:34"]


def test_ordering_is_deterministic_whatever_the_input_order():
    results = set()
    base = document()
    for vni_order in itertools.permutations(range(4)):
        doc = copy.deepcopy(base)
        doc["vnis"] = [doc["vnis"][i] for i in vni_order]
        doc["tunnel_ports"].reverse()
        for entry in doc["vnis"]:
            entry.get("access_ports", []).reverse()
            entry.get("peers", []).reverse()
        results.add(vc.validate(doc, host()))
    assert results == {EXPECTED}


def test_peers_sort_by_via_then_numeric_ip():
    doc = {
        "tunnel_ports": [{"port": "tun-b", "local_ip": "198.51.100.1"}, {"port": "tun-c", "local_ip": "198.51.100.5"}],
        "vnis": [
            {
                "vni": 5,
                "access_ports": ["acc100"],
                "peers": [
                    {"ip": "198.51.100.10", "via": "tun-b"},
                    {"ip": "198.51.100.3", "via": "tun-c"},
                    {"ip": "198.51.100.9", "via": "tun-b"},
                ],
            }
        ],
    }
    (vni,) = vc.validate(doc, host()).vnis
    assert [(p.via, p.ip) for p in vni.peers] == [
        ("tun-b", "198.51.100.9"),
        ("tun-b", "198.51.100.10"),
        ("tun-c", "198.51.100.3"),
    ]


def test_model_is_frozen_and_made_of_tuples():
    config = vc.validate(document(), host())
    assert isinstance(config.vnis, tuple) and all(isinstance(v.peers, tuple) for v in config.vnis)
    with pytest.raises(AttributeError):
        config.vnis[0].vni = 1  # type: ignore[misc]


def test_every_item_of_the_sorted_model_keeps_its_path_in_the_document():
    config = vc.validate(document(), host())
    assert [(t.port, t.path) for t in config.tunnel_ports] == [
        ("tun-b", "tunnel_ports[1]"),
        ("tun-c", "tunnel_ports[0]"),
    ]
    by_vni = {v.vni: v for v in config.vnis}
    assert [v.path for v in config.vnis] == ["vnis[1]", "vnis[3]", "vnis[0]", "vnis[2]"]  # VNI 100, 110, 200, 210
    assert [(a.port, a.path) for a in by_vni[100].access_ports] == [
        ("acc100", "vnis[1].access_ports[1]"),
        ("acclocal", "vnis[1].access_ports[0]"),
    ]
    assert [(p.ip, p.path) for p in by_vni[100].peers] == [
        ("198.51.100.2", "vnis[1].peers[1]"),
        ("198.51.100.6", "vnis[1].peers[0]"),
    ]
    assert by_vni[100].first_peer().ip == "198.51.100.6"
    assert [(t.vid, t.path) for t in by_vni[210].trunks] == [(20, "vnis[2].trunks[0]")]


# --- Invalid documents: one problem each, at an exact path, naming the rule ------------------------------------


def _set(path, value):
    """A mutation that sets doc[...path...] = value (a path of keys and indices)."""

    def mutate(doc, _ifs):
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _append(path, value):
    def mutate(doc, _ifs):
        target = doc
        for key in path:
            target = target[key]
        target.append(value)

    return mutate


def _delete(path):
    def mutate(doc, _ifs):
        target = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


def _mtu(name, mtu):
    def mutate(_doc, ifs):
        ifs[name] = InterfaceFacts(ifindex=ifs[name].ifindex, mtu=mtu, mac=ifs[name].mac)

    return mutate


def _ifindex(name, ifindex):
    def mutate(_doc, ifs):
        ifs[name] = InterfaceFacts(ifindex=ifindex, mtu=ifs[name].mtu, mac=ifs[name].mac)

    return mutate


def _both(*mutations):
    def mutate(doc, ifs):
        for m in mutations:
            m(doc, ifs)

    return mutate


def _many_peers(doc, _ifs):
    doc["vnis"][1]["peers"] = [{"ip": f"198.51.{101 + n // 200}.{1 + n % 200}", "via": "tun-b"} for n in range(255)]


INVALID = [
    # The schema.
    ("vni-zero", _set(["vnis", 0, "vni"], 0), "vnis[0].vni", "0 is below the minimum 1 (VNI 1..16777215)"),
    (
        "vni-too-big",
        _set(["vnis", 0, "vni"], 16777216),
        "vnis[0].vni",
        "16777216 is above the maximum 16777215 (VNI 1..16777215)",
    ),
    (
        "vni-string",
        _set(["vnis", 0, "vni"], "200"),
        "vnis[0].vni",
        'must be an integer (VNI 1..16777215), got the string "200"',
    ),
    (
        "vid-4095",
        _set(["vnis", 2, "trunks", 0, "vid"], 4095),
        "vnis[2].trunks[0].vid",
        "4095 is above the maximum 4094 (VID 1..4094)",
    ),
    (
        "vid-zero",
        _set(["vnis", 2, "trunks", 0, "vid"], 0),
        "vnis[2].trunks[0].vid",
        "0 is below the minimum 1 (VID 1..4094)",
    ),
    (
        "typo-in-vni-key",
        _set(["vnis", 1, "acess_ports"], ["acc100"]),
        "vnis[1]",
        "unknown key 'acess_ports' (did you mean 'access_ports'?)",
    ),
    ("typo-at-top", _set(["tunnel_port"], []), "document", "unknown key 'tunnel_port' (did you mean 'tunnel_ports'?)"),
    (
        "unknown-peer-key",
        _set(["vnis", 0, "peers", 0, "nexthop"], "x"),
        "vnis[0].peers[0]",
        "unknown key 'nexthop' (allowed: ip, via, mac)",
    ),
    ("missing-vid", _delete(["vnis", 2, "trunks", 0, "vid"]), "vnis[2].trunks[0]", "missing required key 'vid'"),
    ("missing-vnis", _delete(["vnis"]), "document", "missing required key 'vnis'"),
    (
        "missing-local-ip",
        _delete(["tunnel_ports", 0, "local_ip"]),
        "tunnel_ports[0]",
        "missing required key 'local_ip'",
    ),
    (
        "no-vnis",
        _set(["vnis"], []),
        "vnis",
        "must list at least 1, lists 0 (1 to 4096 VNIs, the data plane's VTEP_MAX_VNIS)",
    ),
    ("access-not-list", _set(["vnis", 0, "access_ports"], "acc200"), "vnis[0].access_ports", "must be a list"),
    (
        "ifname-too-long",
        _set(["vnis", 0, "access_ports", 0], "a" * 16),
        "vnis[0].access_ports[0]",
        "is not a valid interface name (1..15 bytes (UTF-8), no '/', ':' or whitespace",
    ),
    (  # a pattern's $ matches before a trailing newline
        "ifname-trailing-newline",
        _set(["vnis", 0, "access_ports", 0], "acc100\n"),
        "vnis[0].access_ports[0]",
        '"acc100\\n" is not a valid interface name',
    ),
    (  # 8 characters, 16 bytes: IFNAMSIZ counts bytes
        "ifname-multibyte",
        _set(["vnis", 0, "access_ports", 0], "\u00e9" * 8),
        "vnis[0].access_ports[0]",
        "is not a valid interface name (1..15 bytes (UTF-8)",
    ),
    ("ifname-dotdot", _set(["tunnel_ports", 0, "port"], ".."), "tunnel_ports[0].port", '".." is not a valid'),
    ("ifname-colon", _set(["vnis", 0, "peers", 0, "via"], "tun:b"), "vnis[0].peers[0].via", '"tun:b" is not a valid'),
    (
        "ifname-slash",
        _set(["vnis", 2, "trunks", 0, "port"], "eth0/1"),
        "vnis[2].trunks[0].port",
        '"eth0/1" is not a valid interface name',
    ),
    (
        "ifname-space",
        _set(["tunnel_ports", 0, "port"], "tun c"),
        "tunnel_ports[0].port",
        '"tun c" is not a valid interface name',
    ),
    (
        "ifname-empty",
        _set(["vnis", 0, "peers", 0, "via"], ""),
        "vnis[0].peers[0].via",
        '"" is not a valid interface name',
    ),
    (
        "ipv6-underlay",
        _set(["tunnel_ports", 0, "local_ip"], "2001:db8::1"),
        "tunnel_ports[0].local_ip",
        '"2001:db8::1" is an IPv6 address; IPv6 underlay is not supported yet',
    ),
    (
        "bad-ipv4",
        _set(["vnis", 0, "peers", 1, "ip"], "198.51.100.300"),
        "vnis[0].peers[1].ip",
        '"198.51.100.300" is not a valid IPv4 address',
    ),
    (
        "bad-mac",
        _set(["vnis", 0, "peers", 0, "mac"], "02:00:00:00:01"),
        "vnis[0].peers[0].mac",
        '"02:00:00:00:01" is not a valid MAC address',
    ),
    # The rules a schema cannot express.
    ("vni-twice", _set(["vnis", 1, "vni"], 200), "vnis[1].vni", "VNI 200 is listed twice (also vnis[0])"),
    (
        "vid-bound-twice-on-a-trunk",
        _set(["vnis", 3, "trunks", 0, "vid"], 20),
        "vnis[3].trunks[0].vid",
        "VID 20 on trunk0 is already bound to VNI 210 (vnis[2].trunks[0]), cannot also select VNI 110; "
        "a VID is bound once per trunk",
    ),
    (
        "trunk-binding-listed-twice",
        _append(["vnis", 2, "trunks"], {"port": "trunk0", "vid": 20}),
        "vnis[2].trunks[1]",
        "trunk0 VID 20 is listed twice in VNI 210 (also vnis[2].trunks[0])",
    ),
    (
        "access-port-in-two-vnis",
        _append(["vnis", 0, "access_ports"], "acc100"),
        "vnis[1].access_ports[1]",
        "acc100 is already an access port of VNI 200 (vnis[0].access_ports[1]); an access port belongs to one VNI",
    ),
    (
        "access-port-twice-in-a-vni",
        _append(["vnis", 0, "access_ports"], "acc200"),
        "vnis[0].access_ports[1]",
        "acc200 is listed twice in VNI 200 (also vnis[0].access_ports[0])",
    ),
    (
        "access-and-trunk",
        _append(["vnis", 2, "trunks"], {"port": "acc200", "vid": 20}),
        "vnis[2].trunks[1].port",
        "acc200 is an access port of VNI 200 (vnis[0].access_ports[0]) and cannot also be a trunk; "
        "a port is either fixed-VNI (access) or VLAN-aware (trunk)",
    ),
    (
        "tunnel-and-access",
        _append(["vnis", 1, "access_ports"], "tun-b"),
        "vnis[1].access_ports[2]",
        "tun-b is a tunnel port (tunnel_ports[1].port) and cannot also be an access port; "
        "a tunnel port carries VXLAN only",
    ),
    # vlan_mode preserve's own rules (the tag travels inside the tunnelled frame), set for the VTEP or for the VNI.
    (
        "preserve-mixed-kinds-in-a-vni",
        _both(_set(["vlan_mode"], "preserve"), _set(["vnis", 1, "trunks"], [{"port": "trunk1", "vid": 30}])),
        "vnis[1]",
        "VNI 100 mixes fixed-VNI access ports (acclocal, acc100) and VLAN-aware trunk ports (trunk1); "
        "in vlan_mode preserve a VNI has one kind of local port",
    ),
    (
        "preserve-vni-mixed-kinds",
        _both(_set(["vnis", 1, "vlan_mode"], "preserve"), _set(["vnis", 1, "trunks"], [{"port": "trunk1", "vid": 30}])),
        "vnis[1]",
        "in vlan_mode preserve a VNI has one kind of local port",
    ),
    (
        "preserve-different-vids-in-a-vni",
        _both(_set(["vlan_mode"], "preserve"), _append(["vnis", 3, "trunks"], {"port": "trunk1", "vid": 11})),
        "vnis[3].trunks[1].vid",
        "VNI 110 uses VID 11 on trunk1 but VID 10 on trunk0 (vnis[3].trunks[0]); "
        "in vlan_mode preserve all trunk bindings of a VNI use the same VID",
    ),
    (
        "preserve-vni-different-vids",
        _both(
            _set(["vnis", 3, "vlan_mode"], "preserve"), _append(["vnis", 3, "trunks"], {"port": "trunk1", "vid": 11})
        ),
        "vnis[3].trunks[1].vid",
        "in vlan_mode preserve all trunk bindings of a VNI use the same VID",
    ),
    (
        "trunk-in-a-vni-with-two-vids",
        _append(["vnis", 3, "trunks"], {"port": "trunk0", "vid": 11}),
        "vnis[3].trunks[1].vid",
        "trunk0 is bound to VNI 110 twice, with VID 10 (vnis[3].trunks[0]) and VID 11; "
        "a trunk joins a VNI with one VID",
    ),
    (
        "via-not-a-tunnel-port",
        _set(["vnis", 0, "peers", 0, "via"], "acc100"),
        "vnis[0].peers[0].via",
        "acc100 is not a declared tunnel port (declared: tun-b, tun-c)",
    ),
    (
        "duplicate-peer",
        _append(["vnis", 0, "peers"], {"ip": "198.51.100.6", "via": "tun-b"}),
        "vnis[0].peers[2].ip",
        "peer 198.51.100.6 is listed twice in VNI 200 (also vnis[0].peers[0])",
    ),
    (
        "peer-is-local",
        _set(["vnis", 0, "peers", 0, "ip"], "198.51.100.1"),
        "vnis[0].peers[0].ip",
        "198.51.100.1 is this host's own tunnel address on tun-b (tunnel_ports[1].local_ip); a peer is a remote VTEP",
    ),
    (
        "peer-multicast",
        _set(["vnis", 0, "peers", 0, "ip"], "239.1.1.1"),
        "vnis[0].peers[0].ip",
        "239.1.1.1 is a multicast address",
    ),
    (
        "peer-mac-multicast",
        _set(["vnis", 0, "peers", 0, "mac"], "01:00:5E:00:00:01"),
        "vnis[0].peers[0].mac",
        "01:00:5e:00:00:01 is a multicast MAC address; a next-hop MAC must be a unicast address",
    ),
    (
        "tunnel-port-twice",
        _append(["tunnel_ports"], {"port": "tun-b", "local_ip": "198.51.100.9"}),
        "tunnel_ports[2].port",
        "tunnel port tun-b is declared twice (also tunnel_ports[1])",
    ),
    (
        "local-ip-twice",
        _set(["tunnel_ports", 0, "local_ip"], "198.51.100.1"),
        "tunnel_ports[1].local_ip",
        "198.51.100.1 is already the local IP of tun-c (tunnel_ports[0].local_ip); "
        "each tunnel port has its own local IP",
    ),
    (
        "local-ip-unspecified",
        _set(["tunnel_ports", 0, "local_ip"], "0.0.0.0"),
        "tunnel_ports[0].local_ip",
        "0.0.0.0 is the unspecified address; a tunnel's local IP must be a unicast address",
    ),
    (
        "interface-missing",
        _set(["vnis", 1, "access_ports", 1], "acc10"),
        "vnis[1].access_ports[1]",
        "interface acc10 does not exist on this host (did you mean acc100",
    ),
    (
        "tunnel-interface-missing",
        _both(
            _set(["tunnel_ports", 0, "port"], "tun-x"),
            _set(["vnis", 0, "peers", 0, "via"], "tun-x"),
            _set(["vnis", 1, "peers", 0, "via"], "tun-x"),
        ),
        "tunnel_ports[0].port",
        "interface tun-x does not exist on this host (did you mean tun-c or tun-b? "
        "it has: acc100, acc200, acclocal, lo, trunk0, trunk1, tun-b, tun-c)",
    ),
    (
        "ifindex-too-large",
        _ifindex("acc200", 16384),
        "vnis[0].access_ports[0]",
        "interface acc200 has ifindex 16384, above the data plane's limit of 16383 (VTEP_MAX_IFINDEX)",
    ),
    (
        "mtu-preserve-trunk-vni",
        _both(_set(["vlan_mode"], "preserve"), _mtu("tun-b", 1500)),
        "tunnel_ports[1].port",
        "tun-b has MTU 1500, below 1554 needed for VNI 110 (inner MTU 1500 of trunk0 + 50 VXLAN + 4 VLAN tag); "
        "also too small for VNI 100, 200, 210",
    ),
    (
        "mtu-preserve-vni-tag",
        _both(_mtu("tun-b", 1553), _set(["vnis", 3, "vlan_mode"], "preserve")),
        "tunnel_ports[1].port",
        "tun-b has MTU 1553, below 1554 needed for VNI 110 (inner MTU 1500 of trunk0 + 50 VXLAN + 4 VLAN tag)",
    ),
    (
        "mtu-access-vni",
        _both(_mtu("acc200", 1560), _delete(["vnis", 0, "peers", 1])),
        "tunnel_ports[0].port",
        "tun-c has MTU 1600, below 1610 needed for VNI 200 (inner MTU 1560 of acc200 + 50 VXLAN)",
    ),
    (
        "too-many-members",
        _many_peers,
        "vnis[1]",
        "VNI 100 has 257 members (2 local ports + 255 peers), above the data plane's limit of 256 (VTEP_MAX_MEMBERS)",
    ),
    (
        "vni-without-members",
        _append(["vnis"], {"vni": 300}),
        "vnis[4]",
        "VNI 300 has no members (no access ports, trunks or peers)",
    ),
    # VLAN mode and the FDB's settings: the schema.
    ("vlan-mode-unknown", _set(["vlan_mode"], "strip"), "vlan_mode", '"strip" is not one of translate, preserve'),
    (
        "vni-vlan-mode-unknown",
        _set(["vnis", 2, "vlan_mode"], "Preserve"),
        "vnis[2].vlan_mode",
        '"Preserve" is not one of translate, preserve',
    ),
    ("fdb-aging-zero", _set(["fdb_aging"], 0), "fdb_aging", "0 is below the minimum 1 (seconds a learned MAC stays"),
    ("fdb-aging-too-long", _set(["fdb_aging"], 1000001), "fdb_aging", "1000001 is above the maximum 1000000"),
    ("fdb-aging-float", _set(["fdb_aging"], 2.5), "fdb_aging", "must be an integer (FDB aging time"),
    (
        "fdb-size-too-small",
        _set(["fdb_size"], 15),
        "fdb_size",
        "15 is below the minimum 16 (learned MACs of all VNIs together, 16..1048576; "
        "the least recently seen make room)",
    ),
    ("fdb-size-too-big", _set(["fdb_size"], 1048577), "fdb_size", "1048577 is above the maximum 1048576"),
    (
        "fdb-entry-unknown-key",
        _set(["vnis", 0, "fdb"], [{"mac": "02:00:00:00:64:01", "port": "acc200", "vid": 3}]),
        "vnis[0].fdb[0]",
        "unknown key 'vid' (allowed: mac, port, remote)",
    ),
    (
        "fdb-entry-without-mac",
        _set(["vnis", 0, "fdb"], [{"port": "acc200"}]),
        "vnis[0].fdb[0]",
        "missing required key 'mac'",
    ),
    (
        "fdb-entry-bad-mac",
        _set(["vnis", 0, "fdb"], [{"mac": "02:00:00:00:64", "port": "acc200"}]),
        "vnis[0].fdb[0].mac",
        '"02:00:00:00:64" is not a valid MAC address',
    ),
    # Static FDB entries: the rules a schema cannot express.
    (
        "fdb-multicast-mac",
        _set(["vnis", 0, "fdb"], [{"mac": "01:00:5E:00:00:01", "port": "acc200"}]),
        "vnis[0].fdb[0].mac",
        "01:00:5e:00:00:01 is a multicast MAC address; a static FDB entry is for a unicast MAC",
    ),
    (
        "fdb-broadcast-mac",
        _set(["vnis", 0, "fdb"], [{"mac": "ff:ff:ff:ff:ff:ff", "remote": "198.51.100.2"}]),
        "vnis[0].fdb[0].mac",
        "ff:ff:ff:ff:ff:ff is a multicast MAC address",
    ),
    (
        "fdb-zero-mac",
        _set(["vnis", 0, "fdb"], [{"mac": "00:00:00:00:00:00", "port": "acc200"}]),
        "vnis[0].fdb[0].mac",
        "00:00:00:00:00:00 is the all-zero MAC address; a static FDB entry is for a unicast MAC",
    ),
    (
        "fdb-mac-twice",
        _set(
            ["vnis", 0, "fdb"],
            [{"mac": "02:00:00:00:64:01", "port": "acc200"}, {"mac": "02:00:00:00:64:01", "remote": "198.51.100.2"}],
        ),
        "vnis[0].fdb[1].mac",
        "02:00:00:00:64:01 is listed twice in VNI 200 (also vnis[0].fdb[0]); a MAC is at one place",
    ),
    (
        "fdb-mac-twice-in-other-case",
        _set(
            ["vnis", 0, "fdb"],
            [{"mac": "02:00:00:00:64:0a", "port": "acc200"}, {"mac": "02:00:00:00:64:0A", "port": "acc200"}],
        ),
        "vnis[0].fdb[1].mac",
        "02:00:00:00:64:0a is listed twice in VNI 200 (also vnis[0].fdb[0])",
    ),
    (
        "fdb-port-of-another-vni",
        _set(["vnis", 0, "fdb"], [{"mac": "02:00:00:00:64:01", "port": "acc100"}]),
        "vnis[0].fdb[0].port",
        "acc100 is not a local port of VNI 200 (its access ports and trunks: acc200)",
    ),
    (
        "fdb-port-is-a-tunnel",
        _set(["vnis", 2, "fdb"], [{"mac": "02:00:00:00:64:01", "port": "tun-b"}]),
        "vnis[2].fdb[0].port",
        "tun-b is not a local port of VNI 210 (its access ports and trunks: trunk0)",
    ),
    (
        "fdb-remote-not-a-peer",
        _set(["vnis", 2, "fdb"], [{"mac": "02:00:00:00:64:01", "remote": "198.51.100.6"}]),
        "vnis[2].fdb[0].remote",
        "198.51.100.6 is not a peer of VNI 210 (its peers: 198.51.100.2)",
    ),
    (
        "fdb-neither-port-nor-remote",
        _set(["vnis", 0, "fdb"], [{"mac": "02:00:00:00:64:01"}]),
        "vnis[0].fdb[0]",
        "give either port (a local port of the VNI) or remote (a peer of the VNI)",
    ),
    (
        "fdb-both-port-and-remote",
        _set(["vnis", 0, "fdb"], [{"mac": "02:00:00:00:64:01", "port": "acc200", "remote": "198.51.100.2"}]),
        "vnis[0].fdb[0]",
        "give either port (a local port of the VNI) or remote (a peer of the VNI)",
    ),
]


@pytest.mark.parametrize(("mutate", "path", "words"), [case[1:] for case in INVALID], ids=[case[0] for case in INVALID])
def test_invalid_document_names_the_field_and_the_rule(mutate, path, words):
    doc, ifs = document(), host()
    mutate(doc, ifs)
    problems = problems_of(doc, ifs)
    assert len(problems) == 1, problems
    (problem,) = problems
    assert problem.startswith(f"{path}: "), problem
    assert words in problem, problem


# --- VLAN modes: what translate (the default) accepts that preserve refuses -------------------------------------


def _mixed_and_two_vids(doc: dict) -> None:
    """VNI 100 gets a trunk beside its access ports, and VNI 110 a second trunk with another VID."""
    doc["vnis"][1]["trunks"] = [{"port": "trunk1", "vid": 30}]
    doc["vnis"][3]["trunks"].append({"port": "trunk1", "vid": 11})


@pytest.mark.parametrize("mode", [None, "translate"])
def test_translate_mode_mixes_access_ports_and_trunks_and_maps_each_trunks_vid(mode):
    doc = document()
    if mode:
        doc["vlan_mode"] = mode
    _mixed_and_two_vids(doc)
    by_vni = {v.vni: v for v in vc.validate(doc, host()).vnis}
    assert {v.vlan_mode for v in by_vni.values()} == {"translate"}
    assert [t.port for t in by_vni[100].trunks] == ["trunk1"] and len(by_vni[100].access_ports) == 2
    assert [(t.port, t.vid) for t in by_vni[110].trunks] == [("trunk0", 10), ("trunk1", 11)]


def test_a_vnis_vlan_mode_overrides_the_vteps():
    doc = document()
    doc["vlan_mode"] = "preserve"
    _mixed_and_two_vids(doc)
    doc["vnis"][1]["vlan_mode"] = doc["vnis"][3]["vlan_mode"] = "translate"  # the two VNIs that need it
    by_vni = {v.vni: v.vlan_mode for v in vc.validate(doc, host()).vnis}
    assert by_vni == {100: "translate", 110: "translate", 200: "preserve", 210: "preserve"}
    # and the other way round: a preserve VNI in a translate VTEP keeps preserve's rules
    doc = document()
    _mixed_and_two_vids(doc)
    doc["vnis"][3]["vlan_mode"] = "preserve"
    assert [p.split(": ", 1)[0] for p in problems_of(doc)] == ["vnis[3].trunks[1].vid"]


def test_only_preserve_mode_needs_room_for_the_tag_in_the_tunnel():
    ifs = host()
    ifs["tun-b"] = InterfaceFacts(ifs["tun-b"].ifindex, 1550, ifs["tun-b"].mac)  # 1500 + 50: no room for a tag
    assert vc.validate(document(), ifs).vnis  # translate: the trunks' VNIs carry no tag through the tunnel
    doc = document()
    doc["vnis"][2]["vlan_mode"] = "preserve"
    (problem,) = problems_of(doc, ifs)
    assert problem == (
        "tunnel_ports[1].port: tun-b has MTU 1550, below 1554 needed for VNI 210 "
        "(inner MTU 1500 of trunk0 + 50 VXLAN + 4 VLAN tag)"
    )


# --- The FDB: static entries and the learned table's settings ----------------------------------------------------


def test_fdb_settings_default_and_are_kept():
    config = vc.validate(document(), host())
    assert (config.fdb_aging, config.fdb_size) == (300, 65536)  # FDB_AGING_DEFAULT, FDB_SIZE_DEFAULT
    doc = document()
    doc.update(fdb_aging=5, fdb_size=16)
    config = vc.validate(doc, host())
    assert (config.fdb_aging, config.fdb_size) == (5, 16)
    doc.update(fdb_aging=1000000, fdb_size=1048576)  # the largest
    config = vc.validate(doc, host())
    assert (config.fdb_aging, config.fdb_size) == (1000000, 1048576)


def test_static_fdb_entries_in_the_model():
    doc = document()
    doc["vnis"][2]["fdb"] = [
        {"mac": "02:00:00:00:D2:02", "remote": "198.51.100.2"},
        {"mac": "02:00:00:00:d2:01", "port": "trunk0"},
    ]
    doc["vnis"][0]["fdb"] = [{"mac": "02:00:00:00:d2:01", "port": "acc200"}]  # the same MAC in another VNI
    by_vni = {v.vni: v for v in vc.validate(doc, host()).vnis}
    assert by_vni[210].fdb == (
        FdbEntry("02:00:00:00:d2:01", "trunk0", None),
        FdbEntry("02:00:00:00:d2:02", None, "198.51.100.2"),
    )  # by MAC, lowercase
    assert [(f.path, f.where) for f in by_vni[210].fdb] == [
        ("vnis[2].fdb[1]", "trunk0"),
        ("vnis[2].fdb[0]", "remote 198.51.100.2"),
    ]
    assert by_vni[200].fdb == (FdbEntry("02:00:00:00:d2:01", "acc200", None),)
    assert by_vni[100].fdb == ()


def _static_entries(doc: dict, count: int) -> None:
    """count static entries, split over VNI 200 and VNI 100 (the limit is for all VNIs together)."""

    def entries(n: int, port: str) -> list[dict]:
        return [{"mac": f"02:00:00:{i >> 16:02x}:{i >> 8 & 255:02x}:{i & 255:02x}", "port": port} for i in range(n)]

    doc["vnis"][0]["fdb"] = entries(count // 2, "acc200")
    doc["vnis"][1]["fdb"] = entries(count - count // 2, "acc100")


def test_static_fdb_entries_up_to_the_data_planes_limit():
    doc = document()
    _static_entries(doc, vc.VTEP_MAX_STATIC_FDB)
    assert sum(len(v.fdb) for v in vc.validate(doc, host()).vnis) == vc.VTEP_MAX_STATIC_FDB
    _static_entries(doc, vc.VTEP_MAX_STATIC_FDB + 1)
    assert problems_of(doc) == [
        "document: has 16385 static FDB entries, above the data plane's limit of 16384 (VTEP_MAX_STATIC_FDB)"
    ]


def test_more_peers_than_tunnel_peers_holds_are_refused_before_the_host():
    """257 VNIs of 256 peers each: every VNI is within VTEP_MAX_MEMBERS, the document is not (65,792 entries); the
    plan refused it only on the host, after the object was loaded."""
    doc = document()
    peers = [{"ip": f"198.18.{i >> 8}.{i & 255}", "via": "tun-b"} for i in range(1, vc.VTEP_MAX_MEMBERS + 1)]
    doc["vnis"] = [{"vni": 1000 + n, "peers": peers} for n in range(257)]
    assert problems_of(doc) == [
        "document: has 65792 peers over all VNIs, above the data plane's limit of 65536 (VTEP_MAX_PEERS: one "
        "tunnel_peers entry per peer of each VNI)"
    ]


def test_more_port_vnis_than_the_map_holds_are_refused_before_the_host():
    """4 trunks in 4,094 VNIs fill vlan_bindings and port_vnis to 16,376 of their 16,384 entries; a tunnel port in 9
    of the VNIs adds 9 port_vnis rows, one too many. The plan refused it only on the host, after the object was
    loaded."""
    doc = document()
    trunks = [f"tr{t}" for t in range(4)]
    doc["vnis"] = [{"vni": 1000 + v, "trunks": [{"port": p, "vid": v + 1} for p in trunks]} for v in range(4094)]
    interfaces = {**host(), **facts(**{name: 1500 for name in trunks})}
    assert len(vc.validate(doc, interfaces).vnis) == 4094
    for entry in doc["vnis"][:9]:
        entry["peers"] = [{"ip": "198.51.100.2", "via": "tun-b"}]
    assert problems_of(doc, interfaces) == [
        "vnis[4093].trunks[3]: the document needs 16385 entries of port_vnis (one per (VNI, port) pair: access "
        "ports, trunks and the tunnel ports of peers), above the data plane's limit of 16384 (VTEP_MAX_PORT_VNIS); "
        "this is the first that does not fit"
    ]


def test_more_trunk_bindings_than_vlan_bindings_holds_are_refused_before_the_host():
    """5 trunks in 3,300 VNIs: 16,500 (trunk, VID) pairs for vlan_bindings' 16,384 entries."""
    doc = document()
    trunks = [f"tr{t}" for t in range(5)]
    doc["vnis"] = [{"vni": 1000 + v, "trunks": [{"port": p, "vid": v + 1} for p in trunks]} for v in range(3300)]
    interfaces = {**host(), **facts(**{name: 1500 for name in trunks})}
    assert problems_of(doc, interfaces)[0] == (
        "vnis[3276].trunks[4]: the document needs 16500 entries of vlan_bindings (one per (trunk, VID) pair), above "
        "the data plane's limit of 16384 (VTEP_MAX_VLAN_BINDINGS); this is the first that does not fit"
    )


def test_there_are_enough_invalid_cases():
    assert len(INVALID) >= 24


def test_not_a_mapping():
    assert problems_of(["vnis"]) == ["document: must be a mapping, got a list of 1 item"]


def test_every_schema_problem_is_reported():
    doc = document()
    doc["vnis"][0]["vni"] = 0
    doc["vnis"][1]["acess_ports"] = doc["vnis"][1].pop("access_ports")
    doc["vnis"][2]["trunks"][0]["vid"] = 5000
    doc["tunnel_ports"][1]["local_ip"] = "2001:db8::1"
    doc["vnis"][3]["peers"][0]["mac"] = "nope"
    problems = problems_of(doc)
    assert [p.split(": ", 1)[0] for p in problems] == [
        "tunnel_ports[1].local_ip",
        "vnis[0].vni",
        "vnis[1]",
        "vnis[2].trunks[0].vid",
        "vnis[3].peers[0].mac",
    ]


def test_every_semantic_problem_is_reported():
    doc = document()
    ifs = host()
    doc["vlan_mode"] = "preserve"  # its rules: one kind of local port and one VID per VNI
    doc["vnis"][1]["vni"] = 200  # VNI listed twice
    doc["vnis"][1]["fdb"] = [{"mac": "02:00:00:00:64:01", "remote": "198.51.100.9"}]  # not a peer
    doc["vnis"][3]["trunks"].append({"port": "trunk1", "vid": 11})  # two VIDs in VNI 110
    doc["vnis"][0]["peers"][0]["via"] = "tun-z"  # not a tunnel port
    doc["vnis"][2]["access_ports"] = ["acclocal"]  # access again, and mixed with the trunk
    doc["vnis"].append({"vni": 300})  # no members
    del ifs["acc100"]  # missing
    problems = problems_of(doc, ifs)
    assert [p.split(": ", 1)[0] for p in problems] == [
        "vnis[0].peers[0].via",
        "vnis[1].vni",
        "vnis[1].fdb[0].remote",
        "vnis[2].access_ports[0]",
        "vnis[2]",
        "vnis[3].trunks[1].vid",
        "vnis[4]",
        "vnis[1].access_ports[1]",
    ]
    assert "acclocal is already an access port of VNI 200 (vnis[1].access_ports[0])" in problems[3]
    assert "interface acc100 does not exist" in problems[-1]


def test_semantic_rules_wait_for_the_schema():
    doc = document()
    doc["vnis"][0]["vni"] = -1
    doc["vnis"][1]["vni"] = 110  # would be a duplicate, but the shape comes first
    assert problems_of(doc, {}) == ["vnis[0].vni: -1 is below the minimum 1 (VNI 1..16777215)"]


def test_messages_carry_no_python_reprs():
    doc = {"vnis": [{"vni": None, "access_ports": [{"a": 1}], "peers": [{"ip": ["x"], "via": True}]}], 7: "x"}
    problems = problems_of(doc)
    assert problems
    for problem in problems:
        assert re.match(r"^[\w\[\].]+: ", problem), problem
        for fragment in ("{'", "['", "None", "True", "Traceback", "<class"):
            assert fragment not in problem, problem


def test_config_error_lists_every_problem():
    error = ConfigError(["a: one", "b: two"])
    assert str(error) == "invalid VTEP configuration:\n- a: one\n- b: two"
    assert isinstance(error, ValueError)


def test_long_interface_lists_are_summarised():
    ifs = host()
    ifs.update(facts(**{f"eth{n}": 1500 for n in range(20)}))
    doc = document()
    doc["vnis"][0]["access_ports"] = ["acc2000"]
    (problem,) = problems_of(doc, ifs)
    assert problem.endswith("(did you mean acc200 or acc100? it has 28 interfaces)"), problem


def test_integral_floats_become_integers():
    # JSON Schema's "integer" admits 100.0; the model holds ints for the map compiler.
    doc = {"vnis": [{"vni": 110.0, "trunks": [{"port": "trunk0", "vid": 10.0}]}]}
    (vni,) = vc.validate(doc, host()).vnis
    assert type(vni.vni) is int and type(vni.trunks[0].vid) is int
