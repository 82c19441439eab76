"""The metrics exporter against real data planes: a VTEP, a packet filter and the counting program deployed in a
network namespace through the same module_utils as their modules (state records and pins as on a host), a few
frames through them, then the host-side entry point the systemd timer runs (roles/prometheus_textfile/files/
xdpfleet-metrics) writes the file, which prometheus_client's parser reads back: the counts are the frames sent and
what the instances' own readers (vtep_info's, xdp_filter's, bpf_map_info's) read from the maps."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import l2lib
import pytest
from conftest import LAB_PREFIX
from prometheus_client.parser import text_string_to_metric_families
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw
from vtep_netns import sh

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection"
ENTRY_POINT = REPO / "roles" / "prometheus_textfile" / "files" / "xdpfleet-metrics"
OTHER_COUNTERS_C = Path(__file__).parent / "bpf" / "other_counters.c"
LOCAL_IP, PEER, STRANGER = "198.51.100.201", "198.51.100.202", "198.51.100.209"
PEER_MAC = "02:00:00:00:02:02"
FRAMES = 7

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

# Runs in the namespace (ip netns exec: its own /sys, so the modules' code sees the namespace's interfaces):
# deploy the three instances as their modules do, or read them as their modules do.
STEP = textwrap.dedent(
    """
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import btf_layout, build, program as xp
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import deploy as filter_deploy
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vtep_deploy
    args = json.loads(sys.argv[2])
    host = records.HostPaths(args["state_dir"], args["pin_root"], args["cache_dir"])
    src, include = args["src"], [os.path.join(args["src"], "include")]
    if args["do"] == "deploy":
        vtep_deploy.Vtep(host.instance("vtep"), host.cache_dir, document=args["vtep"],
                         source=os.path.join(src, "vtep", "vtep_xdp.c"), include_dirs=include).deploy()
        counter = os.path.join(src, "counter", "counter.c")
        obj, _ = build.compile_object(counter, host.cache_dir, include)
        xp.converge(host.instance("counter"), obj, None, "native", {"count_only_proto": 17}, ["ulp"], counter,
                    build={"include_dirs": include, "defines": {}})
        filter_deploy.Filter(host.instance("edge"), host.cache_dir, rules=args["rules"], interfaces=["ulp"], hook="tc",
                             source=os.path.join(src, "filter", "filter.c"), include_dirs=include).deploy()
        print("{}")
    elif args["do"] == "deploy_other":
        obj, _ = build.compile_object(args["other"], host.cache_dir)
        xp.converge(host.instance("other"), obj, None, "native", {}, ["acc100p"], args["other"])
        print("{}")
    else:
        counter = btf_layout.read_pinned_map(host.instance("counter").map_pin("xdp_counters"), False, False)
        print(json.dumps({
            "vtep": vtep_deploy.Vtep.read_counters(host.instance("vtep")),
            "edge": filter_deploy.Filter.read_counters(host.instance("edge")),
            "counter": counter["entries"],
        }))
    """
)

DOCUMENT = {
    "tunnel_ports": [{"port": "ul", "local_ip": LOCAL_IP}],
    "vnis": [{"vni": 100, "access_ports": ["acc100"], "peers": [{"ip": PEER, "via": "ul", "mac": PEER_MAC}]}],
}
RULES = [{"name": "vxlan", "action": "count", "protocol": "udp", "dst_port": 4789}]


class Host:
    def __init__(self, name: str, tmp: Path, bpffs: Path):
        self.netns, self.tmp = name, tmp
        self.paths = {"state_dir": tmp / "state", "pin_root": bpffs / "xdpfleet", "cache_dir": tmp / "cache"}
        self.directory = tmp / "node-exporter"

    def step(self, do: str) -> dict:
        args = {key: str(path) for key, path in self.paths.items()}
        args.update(do=do, src=str(REPO / "bpf"), vtep=DOCUMENT, rules=RULES, other=str(OTHER_COUNTERS_C))
        run = self.run([sys.executable, "-c", STEP, str(COLLECTION), json.dumps(args)])
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    def export(self) -> subprocess.CompletedProcess:
        """What xdpfleet-metrics.service runs."""
        return self.run([
            sys.executable, str(ENTRY_POINT), "--lib-dir", str(COLLECTION), "--state-dir", str(self.paths["state_dir"]),
            "--pin-root", str(self.paths["pin_root"]), "--directory", str(self.directory),
        ])  # fmt: skip

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.netns, *argv], capture_output=True, text=True, check=False)

    def send(self, ifname: str, frames: list[bytes]) -> None:
        l2lib.send(self.netns, ifname, frames)


@pytest.fixture
def host(tmp_path, bpffs):
    """A namespace with two veth pairs: acc100 and ul are the VTEP's ports, acc100p and ulp their far ends (ulp also
    runs the counter and the filter); a bpffs of the test's own for the pins."""
    name = f"{LAB_PREFIX}-met-{os.getpid()}"
    sh("ip", "netns", "add", name)
    try:
        sh("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        for port, mtu in (("acc100", "1500"), ("ul", "1600")):
            sh("ip", "-n", name, "link", "add", port, "mtu", mtu, "type", "veth", "peer", "name", f"{port}p",
               "mtu", mtu)  # fmt: skip
            for end in (port, f"{port}p"):
                sh("ip", "-n", name, "link", "set", end, "up")
        yield Host(name, tmp_path, bpffs)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def read_file(path: Path) -> dict:
    """{sample name: {frozenset of labels: value}}, after checking each family is typed and described once."""
    seen, samples = set(), {}
    for family in text_string_to_metric_families(path.read_text()):
        assert family.name not in seen and family.type in ("counter", "gauge") and family.documentation
        seen.add(family.name)
        for s in family.samples:
            samples.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return samples


def labels(**items) -> frozenset:
    return frozenset((key, str(value)) for key, value in items.items())


def test_the_timer_entry_point_exports_what_the_data_planes_counted(host):
    host.step("deploy")
    broadcast = Ether(dst="ff:ff:ff:ff:ff:ff", src="02:00:00:00:64:01") / IP(src="198.51.100.161", dst="198.51.100.162")
    host.send("acc100p", [bytes(broadcast / UDP(sport=1000 + n, dport=7) / Raw(b"x" * 40)) for n in range(FRAMES)])
    inner = bytes(Ether(dst="ff:ff:ff:ff:ff:ff", src="02:00:00:00:64:09") / Raw(b"y" * 46))
    stranger = Ether(src="02:00:00:00:09:09", dst="ff:ff:ff:ff:ff:ff") / IP(src=STRANGER, dst=LOCAL_IP)
    host.send("ulp", [bytes(stranger / UDP(sport=50000, dport=4789) / VXLAN(vni=100) / Raw(inner))])

    exported = host.export()
    assert exported.returncode == 0 and not exported.stderr, exported
    samples = read_file(host.directory / "xdpfleet.prom")
    maps = host.step("read")

    vni, ul = labels(vtep="vtep", vni=100), labels(vtep="vtep", port="ul")
    # each broadcast from the access port: into VNI 100 once, one copy to the peer through ul, which the counter and
    # the filter on its far end see
    assert samples["xdpfleet_vtep_vni_rx_packets_total"][vni] == FRAMES
    assert samples["xdpfleet_vtep_port_tx_packets_total"][ul] == FRAMES
    assert samples["xdpfleet_vtep_vni_fdb_events_total"][labels(vtep="vtep", vni=100, event="flooded")] == FRAMES
    assert samples["xdpfleet_vtep_vni_fdb_entries"][labels(vtep="vtep", vni=100, type="learned")] == 1
    rule = labels(filter="edge", rule="vxlan", action="count")
    assert samples["xdpfleet_filter_rule_packets_total"][rule] == FRAMES
    assert samples["xdpfleet_xdp_counter_packets_total"][labels(program="counter", slot=0)] == FRAMES
    # the VXLAN frame from a VTEP that is not a peer: dropped, by that reason, counted for the VNI and for the port
    assert samples["xdpfleet_vtep_vni_dropped_packets_total"][labels(vtep="vtep", vni=100, reason="not_peer")] == 1
    assert samples["xdpfleet_vtep_port_dropped_packets_total"][labels(vtep="vtep", port="ul", reason="not_peer")] == 1

    # every number is what the instance's own reader reads from its maps
    for number, entry in maps["vtep"]["vnis"].items():
        for field in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes"):
            assert samples[f"xdpfleet_vtep_vni_{field}_total"][labels(vtep="vtep", vni=number)] == entry[field]
    for port, entry in maps["vtep"]["ports"].items():
        for field in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes"):
            assert samples[f"xdpfleet_vtep_port_{field}_total"][labels(vtep="vtep", port=port)] == entry[field]
        for reason, count in entry["drops"].items():
            assert samples["xdpfleet_vtep_port_dropped_packets_total"][labels(vtep="vtep", port=port,
                                                                              reason=reason)] == count  # fmt: skip
    assert samples["xdpfleet_filter_rule_bytes_total"][rule] == maps["edge"]["rules"][0]["bytes"]
    for reason, counted in maps["edge"]["unmatched"].items():
        assert samples["xdpfleet_filter_unmatched_packets_total"][labels(filter="edge", reason=reason)] == counted[
            "packets"
        ]
    slot0 = next(e["value"] for e in maps["counter"] if e["key"] == 0)
    assert samples["xdpfleet_xdp_counter_bytes_total"][labels(program="counter", slot=0)] == slot0["bytes"]
    assert samples["xdpfleet_instance_read_success"] == {
        labels(kind="vtep", name="vtep"): 1, labels(kind="filter", name="edge"): 1,
        labels(kind="counter", name="counter"): 1,
    }  # fmt: skip

    # A VTEP with a map gone: it is named, its families left out, the others exported all the same.
    os.unlink(host.paths["pin_root"] / "vtep" / "maps" / "vni_stats")
    exported = host.export()
    assert exported.returncode == 0 and "vtep: VTEP vtep is incomplete, maps vni_stats" in exported.stderr, exported
    samples = read_file(host.directory / "xdpfleet.prom")
    assert samples["xdpfleet_instance_read_success"][labels(kind="vtep", name="vtep")] == 0
    assert not any(name.startswith("xdpfleet_vtep_") for name in samples)
    assert samples["xdpfleet_filter_rule_packets_total"][rule] == FRAMES
    assert sorted(os.listdir(host.directory)) == ["xdpfleet.prom"]

    # A program of someone else's with a map named xdp_counters of another layout: not read as a counter (that
    # read's TypeError ended the whole export), named, the others exported all the same.
    host.step("deploy_other")
    exported = host.export()
    assert exported.returncode == 0, exported
    assert "other: map xdp_counters: layout differs from the BPF object" in exported.stderr, exported
    samples = read_file(host.directory / "xdpfleet.prom")
    assert samples["xdpfleet_instance_read_success"][labels(kind="counter", name="other")] == 0
    assert samples["xdpfleet_instance_read_success"][labels(kind="counter", name="counter")] == 1
    assert set(samples["xdpfleet_xdp_counter_packets_total"]) == {labels(program="counter", slot=0)}
    assert samples["xdpfleet_filter_rule_packets_total"][rule] == FRAMES
