"""The fabric model (plugins/module_utils/fabric): the lab's documents derived from its inventory equal the ones
written by hand before, peers are derived through the right port to the right address, and every fleet rule
refuses what it must, naming the host and the field the user wrote."""

import copy
import ipaddress

import fabric_cases
import pytest
from fabric_cases import INVALID, invalid, lab_fleet, written

from ansible_collections.xdpfleet.fabric.plugins.module_utils.fabric import derive, fleet
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vtep_config


def check(group, hosts):
    return fleet.check(hosts, group.get("fabric_vnis"), group.get("fabric_mtu"), group.get("fabric_vteps"))


def by_address(document):
    """The document with each VNI's peers sorted by address (the order the model derives them in)."""
    out = copy.deepcopy(document)
    for entry in out["vnis"]:
        entry["peers"] = sorted(entry.get("peers", []), key=lambda p: ipaddress.IPv4Address(p["ip"]))
    return out


def test_the_labs_derived_documents_are_the_ones_written_by_hand_before():
    fabric = check(*lab_fleet())
    assert fabric.problems == [] and fabric.warnings == []
    assert sorted(fabric.documents) == ["a", "b", "c", "d", "l"]
    for host, document in fabric.documents.items():
        # Equal, key for key; the hand-written peers were in another order on c, d and l (a first), the model's
        # are by address (the VTEP's own model sorts them anyway: the hosts see no change).
        assert document == by_address(written(host)), host
        assert document["vnis"] == by_address(document)["vnis"], f"{host}: peers by address"
        assert vtep_config._model(document) == vtep_config._model(written(host))


def test_the_fact_describes_every_vtep_and_vni():
    fabric = check(*lab_fleet())
    assert fabric.vteps["a"] == {
        "backend": "xdp",
        "source": "model",
        "tunnel_ips": ["198.51.100.97", "198.51.100.101", "198.51.100.105", "198.51.100.109"],
        "vnis": [100, 200],
    }
    assert fabric.vteps["c"]["backend"] == "tc" and fabric.vteps["l"]["backend"] == "linux"
    assert [(v["vni"], v["name"], v["vlan_mode"]) for v in fabric.vnis] == [
        (100, "servers", "translate"),
        (200, "vms", "translate"),
    ]
    assert sorted(fabric.vnis[0]["members"]) == ["a", "b", "c", "d", "l"]
    assert fabric.vnis[0]["members"]["d"] == {
        "access_ports": [],
        "trunks": [{"port": "trunk0", "vid": 10}],
        "peers": ["198.51.100.98", "198.51.100.102", "198.51.100.105", "198.51.100.110"],
    }
    assert sorted(fabric.vnis[1]["members"]) == ["a", "b", "c", "d"]
    assert set(fabric.report()) == {"vteps", "vnis", "warnings"}


@pytest.mark.parametrize(("change", "problem"), INVALID, ids=[change.__name__ for change, _ in INVALID])
def test_an_invalid_fleet_is_refused_naming_host_and_field(change, problem):
    fabric = check(*invalid(change))
    assert any(found.startswith(problem) for found in fabric.problems), fabric.problems


def test_every_problem_at_once():
    group, hosts = lab_fleet()
    for change in (fabric_cases.vni_not_in_fabric, fabric_cases.tunnel_mtu_too_small, fabric_cases.unknown_key):
        change(group, hosts)
    # The schema problem of b stops b's derivation, so only the shape is reported ...
    assert [p.split(": ")[1] for p in check(group, hosts).problems] == ["fabric_vtep.vnis[0]"]
    group, hosts = lab_fleet()
    for change in (
        fabric_cases.vni_not_in_fabric,
        fabric_cases.tunnel_mtu_too_small,
        fabric_cases.preserve_access_and_trunk,
        fabric_cases.handwritten_missing_peer,
    ):
        change(group, hosts)
    # ... and with every host's part sound, every fleet rule at once.
    assert [": ".join(p.split(": ")[:2]) for p in check(group, hosts).problems] == [
        "b: fabric_vtep.vnis[1].vni",
        "l: vtep_config.vnis[0].peers",
        "l: vtep_config.vnis[0]",  # translate (the default) in l's document, preserve in fabric_vnis
        "b: fabric_vtep.tunnel_ports[0].port",
    ]


def test_a_handwritten_document_takes_part_and_the_others_derive_their_peers_to_it():
    group, hosts = lab_fleet()
    fabric_cases.handwritten(hosts, "l", written("l"))
    fabric = check(group, hosts)
    assert fabric.problems == [] and fabric.warnings == []
    assert fabric.documents["l"] == written("l")  # as written, peers in its own order
    assert fabric.vteps["l"]["source"] == "vtep_config"
    assert {"ip": "198.51.100.110", "via": "ul-l"} in fabric.documents["a"]["vnis"][0]["peers"]


def test_vtep_config_wins_over_fabric_vtep_with_a_warning():
    group, hosts = lab_fleet()
    hosts["l"]["vtep_config"] = written("l")
    hosts["l"]["host_tuning_nics"] = [{"name": "ul-a", "mtu": 1600}]
    fabric = check(group, hosts)
    assert fabric.problems == []
    assert fabric.warnings == ["l: fabric_vtep: the host also has a vtep_config, which wins: fabric_vtep is not used"]
    assert fabric.documents["l"] == written("l")


def test_a_vni_of_one_vtep_is_a_warning_not_an_error():
    group, hosts = lab_fleet()
    group["fabric_vnis"] += [{"vni": 300}, {"vni": 400, "name": "spare"}]
    hosts["b"]["fabric_vtep"]["vnis"].append({"vni": 300, "access_ports": ["acc300"]})
    fabric = check(group, hosts)
    assert fabric.problems == []
    assert fabric.warnings == [
        "b: fabric_vtep.vnis[2]: VNI 300 is served by b only: it reaches no other VTEP",
        "fabric_vnis[3]: VNI 400 is served by no VTEP",
    ]
    assert fabric.documents["b"]["vnis"][2] == {"vni": 300, "access_ports": ["acc300"]}  # no peers
    assert [v["vni"] for v in fabric.vnis] == [100, 200, 300, 400] and fabric.vnis[3]["members"] == {}


def two_port_pair(y_routes):
    """x and y with two tunnel ports each, on /30s of their own (no shared subnet): routes say which port reaches
    which of the other's addresses."""

    def vtep(first, second, routes):
        return {
            "fabric_vtep": {
                "tunnel_ports": [{"port": "ul0", "local_ip": first}, {"port": "ul1", "local_ip": second}],
                "routes": [{"to": to, "via": via} for to, via in routes],
                "mtu": {"ul0": 1600, "ul1": 1600},
                "vnis": [{"vni": 100, "access_ports": ["acc100"]}],
            }
        }

    hosts = {
        "x": vtep("198.51.100.1/30", "198.51.100.5/30", [("198.51.100.8/30", "ul0"), ("198.51.100.12/30", "ul1")]),
        "y": vtep("198.51.100.9/30", "198.51.100.13/30", y_routes),
    }
    return fleet.check(hosts, [{"vni": 100}], None, list(hosts))


def test_routes_pick_the_port_and_each_side_lists_the_address_the_other_sends_from():
    fabric = two_port_pair([("198.51.100.0/30", "ul0"), ("198.51.100.4/30", "ul1")])
    assert fabric.problems == []
    # Both address pairs fit (.1 <-> .9 through ul0, .5 <-> .13 through ul1): the lowest of y's addresses.
    assert fabric.documents["x"]["vnis"][0]["peers"] == [{"ip": "198.51.100.9", "via": "ul0"}]
    assert fabric.documents["y"]["vnis"][0]["peers"] == [{"ip": "198.51.100.1", "via": "ul0"}]
    assert fabric.documents["x"]["tunnel_ports"] == [
        {"port": "ul0", "local_ip": "198.51.100.1"},
        {"port": "ul1", "local_ip": "198.51.100.5"},
    ]


def test_routes_that_disagree_leave_no_port_between_the_two():
    fabric = two_port_pair([("198.51.100.0/30", "ul1"), ("198.51.100.4/30", "ul0")])
    assert fabric.problems == [
        "x: fabric_vtep.tunnel_ports: no port towards y: no address pair fits: x sends to y from an address y does "
        "not send back to (or knows no port for), given their tunnel ports' subnets and routes: make the routes of x "
        "and y agree"
    ]


def test_a_fleet_of_one_port_vteps_derives_a_full_mesh_by_address():
    """The fast path (one tunnel port everywhere) and the general one (a VTEP with several) give the same order."""
    hosts = {
        f"v{i}": {
            "fabric_vtep": {
                "tunnel_ports": [{"port": "ul0", "local_ip": f"198.51.100.{200 - 2 * i}/31"}],
                "mtu": {"ul0": 1600},
                "vnis": [{"vni": 100 + i % 2, "access_ports": ["acc"]}],
            }
        }
        for i in range(40)
    }
    fabric = fleet.check(hosts, [{"vni": 100}, {"vni": 101}], None, list(hosts))
    assert fabric.problems == []
    peers = [p["ip"] for p in fabric.documents["v0"]["vnis"][0]["peers"]]
    assert peers == sorted(peers, key=ipaddress.IPv4Address) and len(peers) == 19
    assert fabric.documents["v0"]["vnis"][0]["peers"][0] == {"ip": "198.51.100.124", "via": "ul0"}


def test_fdb_settings_and_static_entries_pass_through():
    group, hosts = lab_fleet()
    spec = hosts["b"]["fabric_vtep"]
    spec.update(fdb_aging=60, fdb_size=1024)
    spec["vnis"][0]["fdb"] = [
        {"mac": "02:00:00:00:64:01", "port": "acc100"},
        {"mac": "02:00:00:00:64:02", "remote": "198.51.100.97"},
    ]
    fabric = check(group, hosts)
    assert fabric.problems == []
    document = fabric.documents["b"]
    assert (document["fdb_aging"], document["fdb_size"]) == (60, 1024)
    assert document["vnis"][0]["fdb"] == spec["vnis"][0]["fdb"]
    spec["vnis"][0]["fdb"][1]["remote"] = "198.51.100.101"  # a's address, but not the one b peers with
    assert check(group, hosts).problems == [
        "b: fabric_vtep.vnis[0].fdb[1].remote: 198.51.100.101 is not a peer of VNI 100 (its peers: 198.51.100.97, "
        "198.51.100.102, 198.51.100.106, 198.51.100.110)"
    ]


def test_a_handwritten_documents_problems_are_named_under_vtep_config():
    group, hosts = lab_fleet()
    document = written("l")
    document["vnis"][0]["peers"][1]["via"] = "ul-b"
    fabric_cases.handwritten(hosts, "l", document)
    assert check(group, hosts).problems == [
        "l: vtep_config.vnis[0].peers[1].via: ul-b is not a declared tunnel port (declared: ul-a)"
    ]


def test_derived_peers_count_against_the_data_planes_limits():
    group, hosts = lab_fleet()
    hosts["b"]["fabric_vtep"]["vnis"][0]["access_ports"] = [f"m{i}" for i in range(252)]
    assert check(group, hosts).problems == []  # 252 local ports + 4 derived peers: the limit, 256
    hosts["b"]["fabric_vtep"]["vnis"][0]["access_ports"].append("m252")
    assert check(group, hosts).problems == [
        "b: fabric_vtep.vnis[0]: VNI 100 has 257 members (253 local ports + 4 peers), above the data plane's limit "
        "of 256 (VTEP_MAX_MEMBERS)"
    ]


def test_a_problem_of_a_derived_peer_says_it_is_derived():
    """The model derives no peer a document rule refuses; should one ever be, its message names it as derived."""
    group, hosts = lab_fleet()
    fabric = check(group, hosts)
    vtep = derive.from_model("b", hosts["b"]["fabric_vtep"], "xdp")
    paths = fleet._Paths(vtep, fabric.documents["b"])
    assert paths.message("b", "vnis[1].peers[0].ip: a rule (also vnis[0].peers[1])") == (
        "b: fabric_vtep.vnis[1].peers[0].ip (derived peer 198.51.100.97 via ul-a): a rule (also "
        "fabric_vtep.vnis[0].peers[1] (derived peer 198.51.100.102 via ul-a))"
    )
    assert paths.message("b", "document: uses 300 ports") == "b: fabric_vtep: uses 300 ports"
