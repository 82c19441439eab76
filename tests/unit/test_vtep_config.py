"""Unit tests of the VTEP configuration document: schema, the rules a schema cannot express, and the model.

The valid document is VTEP A of seed 000's lab, with the seed's one-kind-per-VNI rule respected: the access ports
are in VNIs 100 and 200, and the trunk carries VID 10 -> VNI 110 and VID 20 -> VNI 210. Nothing here needs a kernel.
"""

import copy
import itertools
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collection"))

from jsonschema import Draft202012Validator

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    AccessPort,
    ConfigError,
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
        "is not a valid interface name (1..15 characters, no '/', ':' or whitespace",
    ),
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
    (
        "mixed-kinds-in-a-vni",
        _set(["vnis", 1, "trunks"], [{"port": "trunk1", "vid": 30}]),
        "vnis[1]",
        "VNI 100 mixes fixed-VNI access ports (acclocal, acc100) and VLAN-aware trunk ports (trunk1); "
        "a VNI has one kind of local port",
    ),
    (
        "different-vids-in-a-vni",
        _append(["vnis", 3, "trunks"], {"port": "trunk1", "vid": 11}),
        "vnis[3].trunks[1].vid",
        "VNI 110 uses VID 11 on trunk1 but VID 10 on trunk0 (vnis[3].trunks[0]); "
        "all trunk bindings of a VNI use the same VID (VIDs are not translated)",
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
        "mtu-trunk-vni",
        _mtu("tun-b", 1500),
        "tunnel_ports[1].port",
        "tun-b has MTU 1500, below 1554 needed for VNI 110 (inner MTU 1500 of trunk0 + 50 VXLAN + 4 VLAN tag); "
        "also too small for VNI 100, 200, 210",
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
    doc["vnis"][1]["vni"] = 200  # VNI listed twice
    doc["vnis"][3]["trunks"].append({"port": "trunk1", "vid": 11})  # two VIDs in VNI 110
    doc["vnis"][0]["peers"][0]["via"] = "tun-z"  # not a tunnel port
    doc["vnis"][2]["access_ports"] = ["acclocal"]  # access again, and mixed with the trunk
    doc["vnis"].append({"vni": 300})  # no members
    del ifs["acc100"]  # missing
    problems = problems_of(doc, ifs)
    assert [p.split(": ", 1)[0] for p in problems] == [
        "vnis[0].peers[0].via",
        "vnis[1].vni",
        "vnis[2].access_ports[0]",
        "vnis[2]",
        "vnis[3].trunks[1].vid",
        "vnis[4]",
        "vnis[1].access_ports[1]",
    ]
    assert "acclocal is already an access port of VNI 200 (vnis[1].access_ports[0])" in problems[2]
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
