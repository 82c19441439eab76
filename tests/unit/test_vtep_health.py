"""The vtep role's health check (roles/vtep/tasks/health.yml) planned and judged by
plugins/module_utils/reports/health.py: the probes derived from a document's peers or given, the reads an XDP and a
linux VTEP need, and verdicts on counters that did not grow, a peer sent to a wrong MAC, a port not promiscuous and
a probe unanswered; and the filters that take the role's registered results apart (plugins/filter/vtep_health.py)."""

from ansible_collections.xdpfleet.fabric.plugins.filter.vtep_health import vtep_health_plan, vtep_health_verdict
from ansible_collections.xdpfleet.fabric.plugins.module_utils.reports import health

# A spoke of the lab: VNI 100 on an access port and VNI 200 on a trunk, both with the hub (98) as a peer.
DOCUMENT = {
    "tunnel_ports": [{"port": "ul-a", "local_ip": "198.51.100.102"}, {"port": "ul-b", "local_ip": "198.51.100.114"}],
    "vnis": [
        {
            "vni": 100,
            "access_ports": ["acc100"],
            "peers": [{"ip": "198.51.100.98", "via": "ul-a"}, {"ip": "198.51.100.106", "via": "ul-a"}],
        },
        {"vni": 200, "trunks": [{"port": "trunk0", "vid": 20}], "peers": [{"ip": "198.51.100.98", "via": "ul-b"}]},
    ],
}
COUNTERS = ["rx_packets", "tx_packets"]
PING = ["ping", "-q", "-n", "-c", "3", "-i", "0.2", "-W", "2"]
GOOD_HOP = {
    "remote": "198.51.100.98",
    "vni": 100,
    "port": "ul-a",
    "mac": "02:00:00:00:61:01",
    "next_hop": "198.51.100.98",
    "next_hop_mac": "02:00:00:00:61:01",
    "stale": False,
}


def derived(backend="xdp") -> dict:
    return health.plan("c", DOCUMENT, backend, [], COUNTERS)


def ports(ul_a: int, ul_b: int) -> dict:
    return {"ports": {"ul-a": {"rx_packets": ul_a}, "ul-b": {"rx_packets": ul_b}}, "vnis": {}}


def vnis(rx_100: int, tx_100: int, rx_200: int, tx_200: int) -> dict:
    return {
        "ports": {},
        "vnis": {
            "100": {"rx_packets": rx_100, "tx_packets": tx_100},
            "200": {"rx_packets": rx_200, "tx_packets": tx_200},
        },
    }


def test_probes_derived_from_the_peers_each_address_once():
    check = derived()
    assert check["derived"]
    assert check["probes"] == [
        {"to": "198.51.100.98", "name": "c -> peer 198.51.100.98", "from": "c", "label": "c -> peer 198.51.100.98",
         "argv": [*PING, "198.51.100.98"]},
        {"to": "198.51.100.106", "name": "c -> peer 198.51.100.106", "from": "c", "label": "c -> peer 198.51.100.106",
         "argv": [*PING, "198.51.100.106"]},
    ]
    assert check["tunnel_ports"] == ["ul-a", "ul-b"]
    assert check["promiscuous_ports"] == ["acc100", "trunk0"]
    assert check["flags_argv"] == ["cat", "/sys/class/net/acc100/flags", "/sys/class/net/trunk0/flags"]
    assert check["read_counters_before"] and check["read_counters_after"]


def test_given_probes_run_where_they_say_and_replace_the_derived_ones():
    given = [
        {"to": "198.51.100.161", "from": "localhost", "netns": "xf-c100", "count": 5},
        {"to": "ff02::1", "interface": "br100", "name": "all nodes"},
    ]
    check = health.plan("c", DOCUMENT, "tc", given, COUNTERS)
    assert not check["derived"]
    first, second = check["probes"]
    assert first["argv"] == ["ip", "netns", "exec", "xf-c100", *PING[:4], "5", *PING[5:], "198.51.100.161"]
    assert (first["from"], first["label"]) == ("localhost", "xf-c100 -> 198.51.100.161")
    assert second["argv"] == [*PING, "-I", "br100", "ff02::1"]
    assert (second["from"], second["label"]) == ("c", "all nodes")
    assert check["read_counters_before"]
    assert not health.plan("c", DOCUMENT, "tc", given, [])["read_counters_before"], "no counters to compare"


def test_a_linux_vtep_reads_no_counters_and_no_flags():
    check = derived("linux")
    assert check["promiscuous_ports"] == [] and check["flags_argv"] == ["cat"]
    assert not check["read_counters_before"] and not check["read_counters_after"]
    assert len(check["probes"]) == 2


def test_healthy_with_derived_probes():
    verdict = health.verdict(derived(), [0, 0], ports(10, 5), ports(13, 6), [GOOD_HOP], ["0x1103", "0x1103"])
    assert verdict["healthy"]
    assert verdict["msg"] == (
        "VTEP c healthy: 2 derived probe(s) (no vtep_health_probes given: the peers' tunnel addresses on the "
        "underlay) answered, counters grew, next hops match"
    )


def test_a_tunnel_port_whose_counter_did_not_grow_fails():
    verdict = health.verdict(derived(), [0, 0], ports(10, 5), ports(13, 5), [GOOD_HOP], ["0x1103", "0x1103"])
    assert not verdict["healthy"]
    assert verdict["stuck"] == ["port ul-b rx_packets 5 -> 5"]
    assert verdict["msg"] == (
        "VTEP c is not healthy: counters did not grow during the probes: port ul-b rx_packets 5 -> 5;"
    )


def test_given_counters_are_summed_over_the_vnis():
    check = health.plan("c", DOCUMENT, "xdp", [{"to": "198.51.100.161"}], COUNTERS)
    # rx grew in VNI 100 (7 + 1 > 5 + 1); tx is 4 before and after, though VNI 200 sent one more and VNI 100 one less.
    verdict = health.verdict(check, [0], vnis(5, 3, 1, 1), vnis(7, 2, 1, 2), [GOOD_HOP], ["0x1103", "0x1103"])
    assert verdict["stuck"] == ["tx_packets 4 -> 4"]
    assert not verdict["healthy"]


def test_a_peer_sent_to_a_wrong_mac_and_a_next_hop_not_known():
    stale = {**GOOD_HOP, "mac": "02:00:00:00:de:ad", "stale": True}
    unknown = {**GOOD_HOP, "remote": "198.51.100.106", "next_hop_mac": None, "problem": "no neighbour entry"}
    verdict = health.verdict(derived(), [0, 0], ports(1, 1), ports(2, 2), [stale, unknown], ["0x1103", "0x1103"])
    assert verdict["wrong_next_hops"] == [
        "probe c -> peer 198.51.100.98 (VNI 100 via ul-a): tunnel_peers sends to 02:00:00:00:de:ad, but next hop "
        "198.51.100.98 is at 02:00:00:00:61:01",
        "probe c -> peer 198.51.100.106 (VNI 100 via ul-a): no neighbour entry",
    ]
    # With probes given the host did not resolve every peer's next hop: one not known is no problem then.
    given = health.plan("c", DOCUMENT, "xdp", [{"to": "198.51.100.161"}], [])
    assert health.verdict(given, [0], None, {}, [unknown], ["0x1103", "0x1103"])["healthy"]


def test_ports_not_promiscuous_and_a_probe_unanswered_in_one_message():
    verdict = health.verdict(derived(), [0, 1], ports(1, 1), ports(2, 2), [GOOD_HOP], ["0x1003", "0x1002"])
    assert verdict["unanswered"] == ["198.51.100.106"]
    assert verdict["not_promiscuous"] == ["acc100", "trunk0"]
    assert verdict["msg"] == (
        "VTEP c is not healthy: no reply from 198.51.100.106. not in promiscuous mode (frames for the MACs behind "
        "other VTEPs are dropped before XDP): acc100, trunk0"
    )


def test_nothing_to_check_says_so():
    check = health.plan("c", {"vnis": [{"vni": 100, "access_ports": ["acc100"]}]}, "xdp", [], COUNTERS)
    assert check["probes"] == [] and not check["read_counters_before"] and not check["read_counters_after"]
    verdict = health.verdict(check, [], None, None, None, ["0x1103"])
    assert verdict["healthy"]
    assert verdict["msg"] == "VTEP c: NOTHING WAS CHECKED (no vtep_health_probes, and no peers to derive them from)"
    assert not health.verdict(check, [], None, None, None, ["0x1003"])["healthy"], "its port still must be promiscuous"


def test_the_filters_take_registered_results_apart():
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    check = vtep_health_plan(DOCUMENT, "c", "linux", [{"to": "198.51.100.161"}], COUNTERS)
    pings = {"changed": False, "results": [{"rc": 0, "item": check["probes"][0]}]}
    verdict = vtep_health_verdict(check, pings, skipped, skipped, skipped)
    assert verdict["healthy"] and verdict["msg"] == "VTEP c healthy: 1 probe(s) answered"

    check = vtep_health_plan(DOCUMENT, "c", "xdp", [], COUNTERS)
    pings = {"changed": False, "results": [{"rc": 0}, {"unreachable": True}]}  # no rc: no reply either
    before = {"changed": False, "ansible_facts": {"xdpfleet_vtep": ports(10, 5)}}
    after = {"changed": False, "ansible_facts": {"xdpfleet_vtep": ports(11, 5)}, "next_hops": [GOOD_HOP]}
    flags = {"changed": False, "stdout_lines": ["0x1103", "0x1103"]}
    verdict = vtep_health_verdict(check, pings, before, after, flags)
    assert verdict["unanswered"] == ["198.51.100.106"] and verdict["stuck"] == ["port ul-b rx_packets 5 -> 5"]
