"""The VTEP's FDB as facts without a kernel: fdb.table() over compiled map contents and learned entries written as
the data plane writes them (tests/kernel/test_vtep_fdb_facts.py reads a real one)."""

from test_vtep_plan import NAMES, PORTS, compiled, document, fdb_document, mac_array, port_vnis

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import fdb
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import NS_PER_S
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import FdbEntry, FdbKey, PortVniKey, ip_be

NOW = 1_000_000 * NS_PER_S  # CLOCK_MONOTONIC when the table is read
AGING = 30 * NS_PER_S  # fdb_document()'s fdb_aging


def learned(vni: int, mac: str, seen_ago_ns: int, port: str, remote: str | None = None, peer: int = 0, vid: int = 0):
    """A learned entry as vtep_xdp.c's learn() writes it: seen seen_ago_ns before NOW."""
    key = FdbKey(vni, mac_array(mac))
    value = FdbEntry(
        seen_ns=NOW - seen_ago_ns,
        ifindex=PORTS[port].ifindex,
        remote_ip=ip_be(remote) if remote else 0,
        peer=peer,
        vid=vid,
    )
    return bytes(key), bytes(value)


def peer_index(contents, vni: int, via: str, copy: int) -> int:
    return port_vnis(contents)[(vni, PORTS[via].ifindex)].first_peer + copy


def test_static_and_learned_entries_say_where_and_how_old():
    contents = compiled(fdb_document())
    entries = [
        learned(100, "02:00:00:00:00:a1", 12 * NS_PER_S + 999, "acc100"),
        learned(110, "02:00:00:00:00:b1", 0, "trunk0", vid=10),
        learned(100, "02:00:00:00:00:c1", 3 * NS_PER_S, "tun-b", "198.51.100.2", peer_index(contents, 100, "tun-b", 0)),
    ]
    tables = fdb.table(entries, contents, NAMES, NOW)
    assert tables == {
        100: {
            "02:00:00:00:00:a1": {"type": "learned", "port": "acc100", "age": 12},
            "02:00:00:00:00:c1": {"type": "learned", "port": "tun-b", "remote": "198.51.100.2", "age": 3},
            "02:00:00:00:64:01": {"type": "static", "port": "acc100"},
            "02:00:00:00:64:03": {"type": "static", "port": "tun-b", "remote": "198.51.100.3"},
            "02:00:00:00:64:06": {"type": "static", "port": "tun-c", "remote": "198.51.100.6"},
        },
        110: {
            "02:00:00:00:00:b1": {"type": "learned", "port": "trunk0", "vid": 10, "age": 0},
            "02:00:00:00:6e:01": {"type": "static", "port": "trunk0", "vid": 10},
        },
        200: {},  # every VNI the VTEP serves has a table
    }
    assert [list(t) for t in tables.values()] == [sorted(t) for t in tables.values()]  # by MAC


def test_a_learned_entry_older_than_the_aging_time_is_gone():
    contents = compiled(fdb_document())
    entries = [
        learned(100, "02:00:00:00:00:a1", AGING, "acc100"),  # exactly the aging time: still used
        learned(100, "02:00:00:00:00:a2", AGING + 1, "acc100"),  # a nanosecond more: the data plane drops it
    ]
    assert list(fdb.table(entries, contents, NAMES, NOW)[100]) == [
        "02:00:00:00:00:a1",
        "02:00:00:00:64:01",
        "02:00:00:00:64:03",
        "02:00:00:00:64:06",
    ]
    plain = compiled(document())  # the default aging, 300 s, and no static entries
    assert fdb.table(entries, plain, NAMES, NOW)[100].keys() == {"02:00:00:00:00:a1", "02:00:00:00:00:a2"}


def test_a_static_entry_wins_over_a_learned_one_for_its_mac():
    contents = compiled(fdb_document())
    index_of_2 = peer_index(contents, 100, "tun-b", 0)
    # learned behind 198.51.100.2 before the static entry put it on acc100
    entries = [learned(100, "02:00:00:00:64:01", 0, "tun-b", "198.51.100.2", index_of_2)]
    assert fdb.table(entries, contents, NAMES, NOW)[100]["02:00:00:00:64:01"] == {"type": "static", "port": "acc100"}
    # Even a static entry the configuration does not back (acc100 out of VNI 100, as an interrupted update may
    # leave it) hides the learned one: the data plane finds the static entry, cannot use it, and floods.
    del contents.entries["port_vnis"][bytes(PortVniKey(100, PORTS["acc100"].ifindex))]
    assert "02:00:00:00:64:01" not in fdb.table(entries, contents, NAMES, NOW)[100]


def test_entries_the_configuration_no_longer_backs_are_not_shown():
    contents = compiled(document())
    index_of_2 = peer_index(contents, 100, "tun-b", 0)  # 198.51.100.2, VNI 100's copy 0 on tun-b
    entries = [
        learned(100, "02:00:00:00:00:01", 0, "acc200"),  # acc200 is VNI 200's port
        learned(100, "02:00:00:00:00:02", 0, "tun-b", "198.51.100.3", index_of_2),  # that index is .2's now
        learned(200, "02:00:00:00:00:03", 0, "tun-b", "198.51.100.2", index_of_2),  # .2's index in VNI 100
        learned(100, "02:00:00:00:00:04", 0, "tun-b"),  # a tunnel port is no local port
        learned(100, "02:00:00:00:00:05", 0, "acc100", "198.51.100.2", index_of_2),  # not a tunnel port
        learned(300, "02:00:00:00:00:06", 0, "acc101"),  # a VNI the VTEP does not serve
        learned(100, "02:00:00:00:00:07", 0, "tun-b", "198.51.100.2", index_of_2),  # the one that is used
    ]
    tables = fdb.table(entries, contents, NAMES, NOW)
    assert tables == {
        100: {"02:00:00:00:00:07": {"type": "learned", "port": "tun-b", "remote": "198.51.100.2", "age": 0}},
        110: {},
        200: {},
    }


def test_ports_the_host_does_not_name_show_their_ifindex():
    contents = compiled(fdb_document())
    tables = fdb.table([], contents, {}, NOW)
    assert tables[100]["02:00:00:00:64:01"] == {"type": "static", "port": str(PORTS["acc100"].ifindex)}
