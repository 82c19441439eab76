"""The lab's fabric model as plain data, and invalid fleets made from it: each a change to the lab's inventory and a
problem the fleet check must name (host, field and rule). Shared by test_fabric.py (fleet.check) and
test_fabric_refused.py (the same fleets refused by a real ansible-playbook run, no host changed)."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

LAB = Path(__file__).resolve().parents[2] / "inventories" / "lab"
VTEPS = ("a", "b", "c", "d", "l")
HOST_VARIABLES = ("fabric_vtep", "vtep_config", "vtep_backend", "host_tuning_nics")


def lab_fleet() -> tuple[dict, dict]:
    """(group vars of the fabric, host -> its variables), as the inventory files have them (no Jinja2 in them)."""
    group = yaml.safe_load((LAB / "group_vars" / "all" / "vtep.yml").read_text())
    hosts = {}
    for host in VTEPS:
        variables = yaml.safe_load((LAB / "host_vars" / f"{host}.yml").read_text())
        hosts[host] = {name: variables.get(name) for name in HOST_VARIABLES}
        hosts[host]["vtep_backend"] = hosts[host]["vtep_backend"] or group["vtep_backend"]
    return group, hosts


def written(host: str) -> dict:
    """The host's lab document as it was written by hand (tests/unit/fixtures/lab_vtep_documents.yml)."""
    documents = yaml.safe_load((Path(__file__).parent / "fixtures" / "lab_vtep_documents.yml").read_text())
    return documents[host]


def handwritten(hosts, host, document):
    """The host keeps a hand-written document instead of its model (and tells the model its underlay MTU the way
    a hand-written host does: host_tuning_nics)."""
    hosts[host].update(fabric_vtep=None, vtep_config=document, host_tuning_nics=[{"name": "ul-a", "mtu": 1600}])


def _vnis(hosts, host):
    return hosts[host]["fabric_vtep"]["vnis"]


def duplicate_address(group, hosts):
    hosts["c"]["fabric_vtep"]["tunnel_ports"][0]["local_ip"] = "198.51.100.98/30"


def vni_not_in_fabric(group, hosts):
    _vnis(hosts, "b")[1]["vni"] = 300


def handwritten_missing_peer(group, hosts):
    document = written("l")
    document["vnis"][0]["peers"] = [p for p in document["vnis"][0]["peers"] if p["ip"] != "198.51.100.98"]
    handwritten(hosts, "l", document)


def handwritten_peer_outside_the_vni(group, hosts):
    _vnis(hosts, "b")[1]["peers"] = [
        {"ip": ip, "via": "ul-a"} for ip in ("198.51.100.97", "198.51.100.102", "198.51.100.106", "198.51.100.110")
    ]


def handwritten_peer_of_no_vtep(group, hosts):
    document = written("l")
    document["vnis"][0]["peers"].append({"ip": "198.51.100.120", "via": "ul-a"})
    handwritten(hosts, "l", document)


def asymmetric_handwritten_pair(group, hosts):
    _vnis(hosts, "b")[0]["peers"] = [
        {"ip": ip, "via": "ul-a"} for ip in ("198.51.100.97", "198.51.100.102", "198.51.100.106", "198.51.100.110")
    ]
    _vnis(hosts, "c")[0]["peers"] = [
        {"ip": ip, "via": "ul-a"} for ip in ("198.51.100.101", "198.51.100.106", "198.51.100.110")
    ]


def vlan_modes_disagree(group, hosts):
    document = written("d")
    document["vnis"][0]["vlan_mode"] = "preserve"
    handwritten(hosts, "d", document)


def preserve_access_and_trunk(group, hosts):
    group["fabric_vnis"][0]["vlan_mode"] = "preserve"


def preserve_different_vids(group, hosts):
    group["fabric_vnis"].append({"vni": 300, "vlan_mode": "preserve"})
    _vnis(hosts, "b").append({"vni": 300, "trunks": [{"port": "trunk1", "vid": 31}]})
    _vnis(hosts, "d").append({"vni": 300, "trunks": [{"port": "trunk0", "vid": 30}]})


def tunnel_mtu_too_small(group, hosts):
    hosts["b"]["fabric_vtep"]["mtu"]["ul-a"] = 1500


def tunnel_mtu_unknown(group, hosts):
    del hosts["c"]["fabric_vtep"]["mtu"]


def jumbo_access_port(group, hosts):
    hosts["b"]["host_tuning_nics"].append({"name": "acc100", "mtu": 9000})


def too_many_members(group, hosts):
    _vnis(hosts, "b")[0]["access_ports"] = [f"m{i}" for i in range(260)]


def too_many_vnis(group, hosts):
    group["fabric_vnis"] = [{"vni": vni} for vni in range(1, 4099)]
    _vnis(hosts, "b")[:] = [{"vni": vni, "access_ports": [f"a{vni}"]} for vni in range(1, 4098)]


def trunks_beyond_vlan_bindings(group, hosts):
    """5 trunks in 3,300 more VNIs: 16,500 (trunk, VID) pairs for vlan_bindings' 16,384 entries (it passed the
    controller and was refused on the host, after compile and load, in the middle of a rollout)."""
    vnis = range(1000, 4300)
    group["fabric_vnis"] += [{"vni": vni} for vni in vnis]
    _vnis(hosts, "b").extend(
        {"vni": vni, "trunks": [{"port": f"tk{t}", "vid": vni - 999} for t in range(5)]} for vni in vnis
    )


def no_port_between(group, hosts):
    hosts["e"] = {
        "fabric_vtep": {
            "tunnel_ports": [{"port": "ul-a", "local_ip": "198.51.100.122/30"}],
            "vnis": [{"vni": 100, "access_ports": ["acc100"]}],
        },
        "vtep_config": None,
        "vtep_backend": "xdp",
        "host_tuning_nics": None,
    }
    hosts["e"]["fabric_vtep"]["mtu"] = {"ul-a": 1600}
    group["fabric_vteps"].append("e")


def overlapping_subnets(group, hosts):
    hosts["a"]["fabric_vtep"]["tunnel_ports"][1]["local_ip"] = "198.51.100.101/24"


def unknown_key(group, hosts):
    _vnis(hosts, "b")[0]["acess_ports"] = _vnis(hosts, "b")[0].pop("access_ports")


def bad_prefix_length(group, hosts):
    hosts["b"]["fabric_vtep"]["tunnel_ports"][0]["local_ip"] = "198.51.100.98/33"


def route_via_no_tunnel_port(group, hosts):
    hosts["a"]["fabric_vtep"]["routes"] = [{"to": "198.51.100.96/27", "via": "ul-x"}]


def vni_twice_in_fabric(group, hosts):
    group["fabric_vnis"].append({"vni": 100, "name": "again"})


def access_port_in_two_vnis(group, hosts):
    _vnis(hosts, "b")[1]["access_ports"] = ["acc100"]


def vtep_not_listed(group, hosts):
    group["fabric_vteps"].remove("c")


def vteps_not_listed_at_all(group, hosts):
    del group["fabric_vteps"]


def listed_vtep_not_in_the_inventory(group, hosts):
    del hosts["d"]  # as a sliced job or a partial inventory sees the fleet


# (change, the problem: "<host>: <field>: ..." or a part of it)
INVALID = [
    (vtep_not_listed, "c: not in fabric_vteps: every VTEP of the fabric (a host with fabric_vtep or vtep_config)"),
    (vteps_not_listed_at_all, "fabric_vteps: required: list every VTEP of the fabric (inventory host names) once"),
    (listed_vtep_not_in_the_inventory, "fabric_vteps: d: not a VTEP of this run's inventory (no such host, or neither"),
    (duplicate_address, "c: fabric_vtep.tunnel_ports[0].local_ip: 198.51.100.98 is also a tunnel address of b"),
    (vni_not_in_fabric, "b: fabric_vtep.vnis[1].vni: VNI 300 is not in fabric_vnis"),
    (handwritten_missing_peer, "l: vtep_config.vnis[0].peers: does not list b, which serves VNI 100 and lists l"),
    (
        handwritten_peer_outside_the_vni,
        "b: fabric_vtep.vnis[1].peers[3].ip: 198.51.100.110 is l's tunnel address, but l does not serve VNI 200",
    ),
    (handwritten_peer_of_no_vtep, "l: vtep_config.vnis[0].peers[4].ip: 198.51.100.120 is the tunnel address of no"),
    (
        asymmetric_handwritten_pair,
        "c: fabric_vtep.vnis[0].peers: does not list b, which serves VNI 100 and lists c (fabric_vtep.vnis[0].peers)",
    ),
    (vlan_modes_disagree, "d: vtep_config.vnis[0]: VNI 100 is in vlan_mode preserve here but translate in fabric_vnis"),
    (preserve_access_and_trunk, "d: fabric_vtep.vnis[0].trunks: VNI 100 is in vlan_mode preserve and has access_ports"),
    (preserve_different_vids, "d: fabric_vtep.vnis[2].trunks[0].vid: VNI 300 uses VID 30 here but VID 31 on b"),
    (
        tunnel_mtu_too_small,
        "b: fabric_vtep.tunnel_ports[0].port: ul-a has MTU 1500 (fabric_vtep.mtu.ul-a), below 1550 needed for VNI 100",
    ),
    (tunnel_mtu_unknown, "c: fabric_vtep.tunnel_ports[0].port: ul-a has MTU 1500 (fabric_mtu: the model is not told"),
    (
        jumbo_access_port,
        "a: fabric_vtep.tunnel_ports[0].port: ul-b has MTU 1600 (fabric_vtep.mtu.ul-b), below 9050 needed for VNI 100 "
        "(inner MTU 9000 of acc100 on b + 50 VXLAN)",
    ),
    (too_many_members, "b: fabric_vtep.vnis[0]: VNI 100 has 264 members (260 local ports + 4 peers), above the"),
    (too_many_vnis, "b: fabric_vtep.vnis: lists 4097, more than the maximum 4096"),
    (
        trunks_beyond_vlan_bindings,
        "b: fabric_vtep.vnis[3278].trunks[4]: the document needs 16500 entries of vlan_bindings (one per (trunk, VID) "
        "pair), above the data plane's limit of 16384 (VTEP_MAX_VLAN_BINDINGS)",
    ),
    (no_port_between, "a: fabric_vtep.tunnel_ports: no port towards e: a has several tunnel ports"),
    (overlapping_subnets, "a: fabric_vtep.tunnel_ports: no port towards b: the connected subnets of a's ul-b, ul-c"),
    (unknown_key, "b: fabric_vtep.vnis[0]: unknown key 'acess_ports' (did you mean 'access_ports'?)"),
    (bad_prefix_length, 'b: fabric_vtep.tunnel_ports[0].local_ip: "198.51.100.98/33" is not an IPv4 address with a'),
    (route_via_no_tunnel_port, "a: fabric_vtep.routes[0].via: ul-x is not one of fabric_vtep.tunnel_ports"),
    (vni_twice_in_fabric, "fabric_vnis[2].vni: VNI 100 is listed twice (also fabric_vnis[0])"),
    (
        access_port_in_two_vnis,
        "b: fabric_vtep.vnis[1].access_ports[0]: acc100 is already an access port of VNI 100 "
        "(fabric_vtep.vnis[0].access_ports[0])",
    ),
]


def invalid(change) -> tuple[dict, dict]:
    group, hosts = lab_fleet()
    group, hosts = copy.deepcopy(group), copy.deepcopy(hosts)
    change(group, hosts)
    return group, hosts
