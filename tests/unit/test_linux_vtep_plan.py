"""The Linux baseline's checks and plan on a host described as plain data (what read_host() gives): problems name
the document's own paths, and the steps come with the items before and after that --diff shows. No kernel here;
tests/integration/test_linux_vtep.py runs the module on real devices."""

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import linux as lv


def link(name, index, kind=None, mtu=1500, master=0, up=True, **extra) -> lv.Link:
    return lv.Link(name, index, kind, mtu, f"02:00:00:00:00:{index:02x}", up, master, **extra)


def host(*extra: lv.Link, remotes=None) -> lv.HostState:
    links = [
        link("up0", 2, "veth", mtu=1600),
        link("up1", 3, "veth", mtu=1600),
        link("acc100", 4, "veth"),
        link("acc200", 5, "veth"),
        link("trk0", 6, "veth"),
        link("br0", 7, "bridge"),
        link("acc300", 8, "veth", master=7),
        *extra,
    ]
    addresses = {2: {"198.51.100.241"}, 3: {"198.51.100.245"}}
    return lv.HostState({lk.name: lk for lk in links}, addresses, remotes or {})


def desired(document: dict, state: lv.HostState) -> list[lv.DesiredVni]:
    return lv.check(vc.validate(document, state.interface_facts()), state)


def test_problems_name_the_items_where_the_document_has_them():
    document = {
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
    with pytest.raises(lv.LinuxVtepError) as refused:
        desired(document, host())
    assert refused.value.problems == [
        "tunnel_ports[0].local_ip: 198.51.100.250 is not an address of up1 (this module does not add underlay "
        "addresses: configure them first)",
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
    vxlan = {"id": 100, "port": 4789, "local": "198.51.100.241", "link": 2, "learning": 1}
    state = host(
        link("xbr100", 20, "bridge", mcast_snooping=1),
        link("xvx100", 21, "vxlan", mtu=1400, master=20, vxlan=vxlan),
        link("acc100", 4, "veth", master=20),
        link("acc200", 5, "veth", master=20),
        remotes={21: {lv.Remote("198.51.100.242", 2), lv.Remote("198.51.100.249", 2)}},
    )
    steps = lv.plan(desired(DOCUMENT, state), state)
    result = lv.changes(steps).result()
    assert result["changes"] == [
        "VNI 100: ~ bridge xbr100 multicast snooping on -> off",
        "VNI 100: ~ vxlan xvx100 learning on -> off",
        "VNI 100: ~ vxlan xvx100 MTU 1400 -> 1550",
        "VNI 100: + peer 198.51.100.243 via up0",
        "VNI 100: - access port acc200",
        "VNI 100: - peer 198.51.100.249 via up0",
    ]
    assert result["diff"] == {
        "before_header": "linux_vtep",
        "after_header": "linux_vtep",
        "before": "VNI 100: bridge xbr100 multicast snooping on\n"
        "VNI 100: vxlan xvx100 learning on\n"
        "VNI 100: vxlan xvx100 MTU 1400\n"
        "VNI 100: access port acc200\n"
        "VNI 100: peer 198.51.100.249 via up0\n",
        "after": "VNI 100: bridge xbr100 multicast snooping off\n"
        "VNI 100: vxlan xvx100 learning off\n"
        "VNI 100: vxlan xvx100 MTU 1550\n"
        "VNI 100: peer 198.51.100.243 via up0\n",
    }


def test_a_new_vni_is_all_after_and_a_dropped_one_all_before():
    vxlan = {"id": 300, "port": 4789, "local": "198.51.100.241", "link": 2, "learning": 0}
    state = host(
        link("xbr300", 30, "bridge"),
        link("xvx300", 31, "vxlan", mtu=1550, master=30, vxlan=vxlan),
        link("acc100", 4, "veth", master=30),
        remotes={31: {lv.Remote("198.51.100.242", 2)}},
    )
    result = lv.changes(lv.plan(desired(DOCUMENT, state), state)).result()
    assert result["changes"] == [
        "VNI 100: + bridge xbr100",
        "VNI 100: + vxlan xvx100 (local 198.51.100.241, dev up0, dstport 4789, MTU 1550, learning off)",
        "VNI 100: + vxlan xvx100 into bridge xbr100",
        "VNI 100: + access port acc100",
        "VNI 100: + peer 198.51.100.242 via up0",
        "VNI 100: + peer 198.51.100.243 via up0",
        "VNI 300: - peer 198.51.100.242 via up0",
        "VNI 300: - access port acc100 (moved to VNI 100)",
        "VNI 300: - vxlan xvx300",
        "VNI 300: - bridge xbr300",
    ]
    assert result["diff"]["before"].splitlines() == [
        "VNI 300: peer 198.51.100.242 via up0",
        "VNI 300: access port acc100",
        "VNI 300: vxlan xvx300",
        "VNI 300: bridge xbr300",
    ]
    assert result["diff"]["after"].splitlines() == [
        "VNI 100: bridge xbr100",
        "VNI 100: vxlan xvx100 (local 198.51.100.241, dev up0, dstport 4789, MTU 1550, learning off)",
        "VNI 100: vxlan xvx100 in bridge xbr100",
        "VNI 100: access port acc100",
        "VNI 100: peer 198.51.100.242 via up0",
        "VNI 100: peer 198.51.100.243 via up0",
    ]
    assert lv.changes([]).result() == {"changed": False, "changes": []}
