"""xdpfleet.fabric.linux_vtep on the real kernel: the Linux bridge + vxlan VTEP between two hosts in namespaces.

Topology (the namespaces named <lab prefix>g-*, so that two runs side by side do not meet; nothing in the root
namespace):

    xg-e1 --xgeth0/xgacc100-- xg-h1 ==xgup0 (veth, MTU 1600, 198.51.100.240/29)== xg-h2 --xgacc100/xgeth0-- xg-e2

Each host runs the real module (`ansible localhost -c local` under `ip netns exec`), with its own state_dir.
Endpoints sit in one overlay subnet (198.51.100.248/29 and 2001:db8:f0::/64) in VNI 100.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
from conftest import LAB_PREFIX
from l2lib import BROADCAST, Port, build_frame, bum_probe, mac, new_marker, probe, send
from lablib import printed_diff

ANSIBLE = str(Path(sys.executable).parent / "ansible")
CALLBACK_DIR = REPO / "tests" / "callback_plugins"

H1, H2, E1, E2 = (f"{LAB_PREFIX}g-{name}" for name in ("h1", "h2", "e1", "e2"))
NAMESPACES = (H1, H2, E1, E2)
UNDERLAY = {H1: "198.51.100.241", H2: "198.51.100.242"}  # 198.51.100.240/29 on xgup0
NO_VTEP = "198.51.100.243"  # in the underlay subnet, nobody there: a peer that only exists as an FDB entry
OVERLAY_V4 = {E1: "198.51.100.249", E2: "198.51.100.250"}  # 198.51.100.248/29
OVERLAY_V6 = {E1: "2001:db8:f0::1", E2: "2001:db8:f0::2"}
UPLINK, ACCESS, TRUNK = "xgup0", "xgacc100", "xgtrk0"
OTHER = {H1: H2, H2: H1}
# What the module's filters against frames for the host's own stack do (its changes name them).
BRIDGE_FILTER = "drops every frame the bridge hands up to this host"
PORT_FILTER = "drops 01:80:c2:00:00:01-0f, which the bridge hands up to this host instead of forwarding"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, veth, vxlan)")


def sh(*argv, check=True, ns=None):
    cmd = ["ip", "netns", "exec", ns, *argv] if ns else list(argv)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"$ {' '.join(cmd)}\nrc={proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def remove_topology():
    existing = sh("ip", "netns", "list").stdout.split()
    for ns in NAMESPACES:
        if ns in existing:
            sh("ip", "netns", "del", ns)


def build_topology():
    for ns in NAMESPACES:
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    # Every link is made inside the namespaces: the root namespace is never touched.
    sh("ip", "-n", H1, "link", "add", UPLINK, "mtu", "1600", "type", "veth", "peer", "name", UPLINK, "netns", H2)
    for host, endpoint in ((H1, E1), (H2, E2)):
        sh("ip", "-n", host, "link", "set", UPLINK, "mtu", "1600", "up")
        sh("ip", "-n", host, "addr", "add", f"{UNDERLAY[host]}/29", "dev", UPLINK)
        sh("ip", "-n", host, "link", "add", ACCESS, "type", "veth", "peer", "name", "xgeth0", "netns", endpoint)
        sh("ip", "-n", endpoint, "addr", "add", f"{OVERLAY_V4[endpoint]}/29", "dev", "xgeth0")
        sh("ip", "-n", endpoint, "addr", "add", f"{OVERLAY_V6[endpoint]}/64", "dev", "xgeth0", "nodad")
        sh("ip", "-n", endpoint, "link", "set", "xgeth0", "up")
    # A port for trunk bindings (validate wants it to exist; the Linux baseline refuses trunks).
    sh("ip", "-n", H1, "link", "add", TRUNK, "type", "veth", "peer", "name", "xgtrk1")


@pytest.fixture(scope="module")
def topo(tmp_path_factory):
    remove_topology()  # a leftover of an interrupted run
    try:
        build_topology()
        yield {H1: tmp_path_factory.mktemp("h1"), H2: tmp_path_factory.mktemp("h2")}
    finally:
        remove_topology()
        assert not set(NAMESPACES) & set(sh("ip", "netns", "list").stdout.split())


def document(host, extra_peers=(), extra_vnis=(), local_ip=None, trunk_vni=False, fdb=(), **top):
    vnis = [
        {
            "vni": 100,
            "access_ports": [ACCESS],
            "peers": [{"ip": ip, "via": UPLINK} for ip in (UNDERLAY[OTHER[host]], *extra_peers)],
            "fdb": list(fdb),
        },
        *extra_vnis,
    ]
    if trunk_vni:  # listed second, numbered first: the message must use the document's order
        vnis.append({"vni": 50, "trunks": [{"port": TRUNK, "vid": 10}]})
    return {"tunnel_ports": [{"port": UPLINK, "local_ip": local_ip or UNDERLAY[host]}], "vnis": vnis, **top}


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, tasks: list[dict]):
        self.proc = proc
        assert len(tasks) == 1, f"no result:\n{proc.stdout}\n{proc.stderr}"
        self.status = tasks[0]["status"]
        self.result = tasks[0]["result"]

    @property
    def changes(self) -> list[str]:
        return self.result.get("changes", [])

    def __str__(self) -> str:
        return f"{self.status}\n{json.dumps(self.result, indent=1)}\n{self.proc.stdout[-3000:]}\n{self.proc.stderr}"


def run_module(topo, host, check=False, diff=False, **params) -> Run:
    """The real module, as an ad-hoc task on localhost, inside the host's network namespace."""
    params.setdefault("state_dir", str(topo[host]))
    out = topo[host] / "result.json"
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_CALLBACK_PLUGINS=str(CALLBACK_DIR),
        ANSIBLE_CALLBACKS_ENABLED="xdpfleet_json",
        ANSIBLE_STDOUT_CALLBACK="default",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        XDPFLEET_JSON_RESULTS=str(out),
        ANSIBLE_NOCOLOR="1",
    )
    argv = ["ip", "netns", "exec", host, ANSIBLE, "localhost", "-i", "localhost,", "-c", "local"]
    argv += ["-m", "xdpfleet.fabric.linux_vtep", "-a", json.dumps(params)]
    argv += ["-e", f"ansible_python_interpreter={sys.executable}"]
    argv += ["--check"] * check + ["--diff"] * diff
    if out.exists():
        out.unlink()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=180, check=False)
    tasks = json.loads(out.read_text())["tasks"] if out.exists() else []
    return Run(proc, tasks)


def apply(topo, host, **kw) -> Run:
    run = run_module(topo, host, config=document(host, **kw))
    assert run.status == "ok", run
    return run


def link(host, name) -> dict | None:
    proc = sh("ip", "-d", "-j", "link", "show", name, ns=host, check=False)
    return json.loads(proc.stdout)[0] if proc.returncode == 0 else None


def fdb_peers(host, vxlan="xvx100") -> list[tuple[str, str]]:
    entries = json.loads(sh("bridge", "-j", "fdb", "show", "dev", vxlan, ns=host).stdout)
    return sorted((e["dst"], e.get("viaIf", "")) for e in entries if e["mac"] == "00:00:00:00:00:00")


def fdb_entries(host, mac) -> list[str]:
    """Every FDB entry of a MAC in a host, in words: port, destination, flags, master, state (learned: none)."""
    out = []
    for e in json.loads(sh("bridge", "-j", "fdb", "show", ns=host).stdout):
        if e["mac"] == mac:
            words = [e["ifname"], e.get("dst") and f"dst {e['dst']}", *e["flags"], e.get("master"), e.get("state")]
            out.append(" ".join(w for w in words if w))
    return sorted(out)


def _no_timers(value):
    if isinstance(value, dict):
        return {k: _no_timers(v) for k, v in value.items() if not k.endswith("timer")}
    return value


def snapshot(host) -> tuple:
    """Every link with its attributes (without running timers) and master, and every configured FDB entry with a dst
    or on a bridge (learned ones come and go with the traffic): what a refusal must not touch."""
    links = [_no_timers(lk) for lk in json.loads(sh("ip", "-d", "-j", "link", "show", ns=host).stdout)]
    fdb = json.loads(sh("bridge", "-j", "fdb", "show", ns=host).stdout)
    keep = ("ifname", "ifindex", "mtu", "master", "operstate", "linkinfo")
    return (
        sorted(json.dumps({k: lk.get(k) for k in keep}, sort_keys=True) for lk in links),
        sorted(json.dumps(e, sort_keys=True) for e in fdb if e.get("state") and ("dst" in e or "master" in e)),
    )


def ping(src, dst, size=56):
    argv = ["ping", "-c", "2", "-i", "0.2", "-W", "2", "-s", str(size), "-M", "do", dst]
    if ":" in dst:
        argv.insert(1, "-6")
    return sh(*argv, ns=src, check=False)


def test_overlay_ping_both_ways_and_second_run_unchanged(topo):
    for host in (H1, H2):
        first = apply(topo, host)
        assert first.result["changed"] is True
        assert first.changes[:5] == [
            "VNI 100: + bridge xbr100 (ageing 300 s)",
            f"VNI 100: + filter xdpfleet_bridge on xbr100 ({BRIDGE_FILTER})",
            f"VNI 100: + vxlan xvx100 (local {UNDERLAY[host]}, dev xgup0, dstport 4789, MTU 1550, learning on, "
            "ageing 300 s)",
            f"VNI 100: + filter xdpfleet_port on xvx100 ({PORT_FILTER})",
            "VNI 100: + vxlan xvx100 into bridge xbr100",
        ], first
        assert f"VNI 100: + access port {ACCESS}" in first.changes
        assert f"VNI 100: + filter xdpfleet_port on {ACCESS} ({PORT_FILTER})" in first.changes
        assert f"VNI 100: + peer {UNDERLAY[OTHER[host]]} via {UPLINK}" in first.changes
        assert first.result["vnis"] == {
            "100": {
                "devices": {"bridge": "xbr100", "vxlan": "xvx100"},
                "members": [ACCESS, "xvx100"],
                "peers": [{"ip": UNDERLAY[OTHER[host]], "via": UPLINK}],
                "fdb": [],
            }
        }

    vx = link(H1, "xvx100")
    data = vx["linkinfo"]["info_data"]
    assert (data["id"], data["local"], data["link"], data["port"]) == (100, UNDERLAY[H1], UPLINK, 4789)
    assert data["learning"] is True and data["ageing"] == 300 and vx["mtu"] == 1550 and vx["master"] == "xbr100"
    assert link(H1, "xbr100")["linkinfo"]["info_data"]["ageing_time"] == 300 * 100  # clock ticks
    assert link(H1, ACCESS)["master"] == "xbr100"
    # The host's own stack stays out of the VNI: no IPv6 (link-local, router solicitations) on the devices it made.
    for device in ("xbr100", "xvx100"):
        assert sh("cat", f"/proc/sys/net/ipv6/conf/{device}/disable_ipv6", ns=H1).stdout.strip() == "1", device
        assert sh("ip", "-6", "addr", "show", "dev", device, ns=H1).stdout.strip() == "", device
    assert fdb_peers(H1) == [(UNDERLAY[H2], UPLINK)]
    record = json.loads((topo[H1] / "linux_vtep.json").read_text())
    assert record["vnis"]["100"]["devices"] == {"bridge": "xbr100", "vxlan": "xvx100"}

    for src, dst in ((E1, E2), (E2, E1)):
        for address in (OVERLAY_V4[dst], OVERLAY_V6[dst]):
            assert ping(src, address).returncode == 0, ping(src, address)
    # A full 1500-byte inner packet fits: 1500 + 14 inner Ethernet + 36 outer IP/UDP/VXLAN <= 1600 on the underlay.
    assert ping(E1, OVERLAY_V4[E2], size=1472).returncode == 0
    assert ping(E1, OVERLAY_V4[E2], size=1473).returncode != 0  # DF and above the endpoint's MTU

    for host in (H1, H2):
        again = apply(topo, host)
        assert again.result["changed"] is False and again.changes == [], again
        assert "diff" not in again.result


def test_adding_a_peer_changes_only_that_fdb_entry(topo):
    apply(topo, H1)
    before = snapshot(H1)
    ifindex = link(H1, "xvx100")["ifindex"]

    checked = run_module(topo, H1, check=True, diff=True, config=document(H1, extra_peers=[NO_VTEP]))
    assert checked.status == "ok" and checked.result["changed"] is True, checked
    assert checked.changes == [f"VNI 100: + peer {NO_VTEP} via {UPLINK}"]
    assert printed_diff(checked.proc.stdout, "linux_vtep") == [f"+VNI 100: peer {NO_VTEP} via {UPLINK}"]  # --diff
    assert snapshot(H1) == before

    added = run_module(topo, H1, diff=True, config=document(H1, extra_peers=[NO_VTEP]))
    assert added.status == "ok" and added.changes == [f"VNI 100: + peer {NO_VTEP} via {UPLINK}"], added
    assert fdb_peers(H1) == [(UNDERLAY[H2], UPLINK), (NO_VTEP, UPLINK)]
    after = snapshot(H1)
    assert after[0] == before[0], "no link changed"
    assert set(after[1]) - set(before[1]) and set(before[1]) <= set(after[1])
    assert link(H1, "xvx100")["ifindex"] == ifindex
    assert ping(E1, OVERLAY_V4[E2]).returncode == 0

    removed = run_module(topo, H1, diff=True, config=document(H1))
    assert removed.status == "ok" and removed.changes == [f"VNI 100: - peer {NO_VTEP} via {UPLINK}"], removed
    assert printed_diff(removed.proc.stdout, "linux_vtep") == [f"-VNI 100: peer {NO_VTEP} via {UPLINK}"]
    assert snapshot(H1) == before


def test_drift_is_repaired_in_place(topo):
    apply(topo, H1)
    ifindex = link(H1, "xvx100")["ifindex"]
    sh("ip", "link", "set", "xvx100", "mtu", "1400", ns=H1)
    sh("ip", "link", "set", "xvx100", "type", "vxlan", "nolearning", "ageing", "60", ns=H1)
    sh("ip", "link", "set", "xbr100", "type", "bridge", "ageing_time", "1000", ns=H1)
    sh("bridge", "link", "set", "dev", "xvx100", "learning", "off", ns=H1)
    sh("ip", "link", "set", ACCESS, "nomaster", ns=H1)
    sh("tc", "filter", "del", "dev", "xbr100", "ingress", ns=H1)
    repaired = apply(topo, H1)
    assert repaired.changes == [
        "VNI 100: ~ bridge xbr100 ageing 10 s -> 300 s",
        f"VNI 100: + filter xdpfleet_bridge on xbr100 ({BRIDGE_FILTER})",
        "VNI 100: ~ vxlan xvx100 learning off -> on",
        "VNI 100: ~ vxlan xvx100 ageing 60 s -> 300 s",
        "VNI 100: ~ vxlan xvx100 MTU 1400 -> 1550",
        "VNI 100: ~ bridge port xvx100 learning off -> on",
        f"VNI 100: + access port {ACCESS}",
    ], repaired
    vx = link(H1, "xvx100")
    assert vx["ifindex"] == ifindex and vx["mtu"] == 1550 and vx["linkinfo"]["info_data"]["learning"] is True
    assert vx["linkinfo"]["info_data"]["ageing"] == 300 and vx["linkinfo"]["info_slave_data"]["learning"] is True
    assert link(H1, "xbr100")["linkinfo"]["info_data"]["ageing_time"] == 300 * 100
    assert fdb_peers(H1) == [(UNDERLAY[H2], UPLINK)]
    assert apply(topo, H1).changes == []
    assert ping(E1, OVERLAY_V4[E2]).returncode == 0


def test_a_vni_dropped_from_the_document_is_removed(topo):
    apply(topo, H1)
    extra = [{"vni": 16777215, "peers": [{"ip": UNDERLAY[H2], "via": UPLINK}]}]
    grown = apply(topo, H1, extra_vnis=extra)
    assert grown.changes == [
        "VNI 16777215: + bridge xbr16777215 (ageing 300 s)",
        f"VNI 16777215: + filter xdpfleet_bridge on xbr16777215 ({BRIDGE_FILTER})",
        "VNI 16777215: + vxlan xvx16777215 (local 198.51.100.241, dev xgup0, dstport 4789, MTU 1550, learning on, "
        "ageing 300 s)",
        f"VNI 16777215: + filter xdpfleet_port on xvx16777215 ({PORT_FILTER})",
        "VNI 16777215: + vxlan xvx16777215 into bridge xbr16777215",
        f"VNI 16777215: + peer {UNDERLAY[H2]} via {UPLINK}",
    ], grown
    assert link(H1, "xvx16777215")["linkinfo"]["info_data"]["id"] == 16777215
    shrunk = apply(topo, H1)
    assert shrunk.changes == [
        f"VNI 16777215: - peer {UNDERLAY[H2]} via {UPLINK}",
        "VNI 16777215: - vxlan xvx16777215",
        "VNI 16777215: - bridge xbr16777215",
    ], shrunk
    assert link(H1, "xbr16777215") is None and link(H1, "xvx16777215") is None
    assert link(H1, "xbr100") is not None


def test_an_access_port_moves_to_another_vni(topo):
    apply(topo, H1)
    moved_doc = document(H1)
    moved_doc["vnis"][0]["vni"] = 101
    moved = run_module(topo, H1, config=moved_doc)
    assert moved.status == "ok", moved
    assert moved.changes == [
        "VNI 101: + bridge xbr101 (ageing 300 s)",
        f"VNI 101: + filter xdpfleet_bridge on xbr101 ({BRIDGE_FILTER})",
        "VNI 101: + vxlan xvx101 (local 198.51.100.241, dev xgup0, dstport 4789, MTU 1550, learning on, ageing 300 s)",
        f"VNI 101: + filter xdpfleet_port on xvx101 ({PORT_FILTER})",
        "VNI 101: + vxlan xvx101 into bridge xbr101",
        f"VNI 101: + access port {ACCESS}",
        f"VNI 101: + peer {UNDERLAY[H2]} via {UPLINK}",
        f"VNI 100: - peer {UNDERLAY[H2]} via {UPLINK}",
        f"VNI 100: - access port {ACCESS} (moved to VNI 101)",
        "VNI 100: - vxlan xvx100",
        "VNI 100: - bridge xbr100",
    ], moved
    assert link(H1, ACCESS)["master"] == "xbr101" and link(H1, "xbr100") is None
    back = apply(topo, H1)
    assert f"VNI 100: + access port {ACCESS}" in back.changes and "VNI 101: - bridge xbr101" in back.changes
    assert link(H1, ACCESS)["master"] == "xbr100"
    # The host's own stack stays out of the VNI: no IPv6 (link-local, router solicitations) on the devices it made.
    for device in ("xbr100", "xvx100"):
        assert sh("cat", f"/proc/sys/net/ipv6/conf/{device}/disable_ipv6", ns=H1).stdout.strip() == "1", device
        assert sh("ip", "-6", "addr", "show", "dev", device, ns=H1).stdout.strip() == "", device
    assert ping(E1, OVERLAY_V4[E2]).returncode == 0


def test_a_trunk_is_refused_naming_the_field(topo):
    apply(topo, H1)
    before = snapshot(H1)
    refused = run_module(topo, H1, config=document(H1, trunk_vni=True))
    assert refused.status == "failed", refused
    assert refused.result["problems"] == [
        "vnis[1].trunks: the Linux baseline needs bridge VLAN filtering (and 802.1Q) for trunk bindings, which it "
        "does not configure and this lab's kernel lacks; use access_ports"
    ]
    assert snapshot(H1) == before


def test_a_missing_tunnel_address_is_refused(topo):
    apply(topo, H1)
    before = snapshot(H1)
    refused = run_module(topo, H1, config=document(H1, local_ip="198.51.100.244"))
    assert refused.status == "failed", refused
    assert refused.result["problems"] == [
        "tunnel_ports[0].local_ip: 198.51.100.244 is not an address of xgup0 "
        "(this module does not add underlay addresses: configure them first)"
    ]
    assert snapshot(H1) == before


def test_a_document_error_from_validation_names_the_field(topo):
    bad = document(H1)
    bad["vnis"][0]["access_ports"] = ["xgnothere"]
    refused = run_module(topo, H1, config=bad)
    assert refused.status == "failed", refused
    assert any(p.startswith("vnis[0].access_ports[0]: ") for p in refused.result["problems"]), refused


def test_absent_removes_only_its_own_devices(topo):
    for host in (H1, H2):
        apply(topo, host)
    checked = run_module(topo, H1, state="absent", check=True)
    assert checked.status == "ok" and checked.result["changed"] is True, checked
    assert link(H1, "xbr100") is not None

    for host in (H1, H2):
        gone = run_module(topo, host, state="absent", diff=True)
        assert gone.status == "ok" and gone.result["changed"] is True, gone
        assert gone.changes == [
            f"VNI 100: - peer {UNDERLAY[OTHER[host]]} via {UPLINK}",
            f"VNI 100: - access port {ACCESS}",
            "VNI 100: - vxlan xvx100",
            "VNI 100: - bridge xbr100",
            f"VNI 100: - filter xdpfleet_port on {ACCESS}",  # no longer a bridge port: its frames go up again
        ], gone
        assert link(host, "xbr100") is None and link(host, "xvx100") is None
        assert not (topo[host] / "linux_vtep.json").exists()
        # The underlay and the access port are not the module's: they stay, the access port without a master.
        assert link(host, UPLINK) is not None and "master" not in link(host, ACCESS)
        again = run_module(topo, host, state="absent")
        assert again.status == "ok" and again.result["changed"] is False and again.changes == [], again
    assert link(H1, TRUNK) is not None
    assert ping(E1, OVERLAY_V4[E2]).returncode != 0


PINNED, FAR = "02:00:00:00:64:01", "02:00:00:00:64:02"
STATICS = [{"mac": PINNED, "port": ACCESS}, {"mac": FAR, "remote": NO_VTEP}]


def test_static_entries_are_shown_made_kept_and_removed(topo):
    apply(topo, H2)
    apply(topo, H1, extra_peers=[NO_VTEP])
    before = snapshot(H1)
    wanted = document(H1, extra_peers=[NO_VTEP], fdb=STATICS)
    added = [
        f"VNI 100: + static MAC {PINNED} at {ACCESS}",
        f"VNI 100: + static MAC {FAR} at remote {NO_VTEP} via {UPLINK}",
    ]
    checked = run_module(topo, H1, check=True, diff=True, config=wanted)
    assert checked.status == "ok" and checked.changes == added, checked
    assert printed_diff(checked.proc.stdout, "linux_vtep") == ["+" + line.replace("+ ", "", 1) for line in added]
    assert snapshot(H1) == before

    made = run_module(topo, H1, config=wanted)
    assert made.status == "ok" and made.changes == added, made
    assert made.result["vnis"]["100"]["fdb"] == [{"mac": PINNED, "port": ACCESS}, {"mac": FAR, "remote": NO_VTEP}]
    assert fdb_entries(H1, PINNED) == [f"{ACCESS} sticky xbr100 static"]
    assert fdb_entries(H1, FAR) == [f"xvx100 dst {NO_VTEP} self permanent", "xvx100 sticky xbr100 static"]
    again = run_module(topo, H1, config=wanted)
    assert again.status == "ok" and again.changes == [], again

    # Learning never moves them: FAR seen on the access port stays where the document puts it, and H1 drops what
    # comes from H2 with FAR as its source (the kernel's vxlan device: a static entry puts FAR at another VTEP).
    e1, e2 = Port(E1, "xgeth0"), Port(E2, "xgeth0")
    send(*e1, build_frame(BROADCAST, FAR))
    assert fdb_entries(H1, FAR) == [f"xvx100 dst {NO_VTEP} self permanent", "xvx100 sticky xbr100 static"]
    marker = new_marker()
    assert probe(e2, {"e1": e1}, build_frame(BROADCAST, FAR, marker=marker), marker=marker) == {}
    assert bum_probe(e2, {"e1": e1}) == {"e1"}  # from a MAC of its own
    assert run_module(topo, H1, config=wanted).changes == []

    gone = run_module(topo, H1, diff=True, config=document(H1, extra_peers=[NO_VTEP]))
    assert gone.status == "ok" and gone.changes == [line.replace("+", "-", 1) for line in added], gone
    assert fdb_entries(H1, PINNED) == [] and fdb_entries(H1, FAR) == []
    assert snapshot(H1)[1] == before[1]


def test_each_vtep_learns_where_a_mac_is(topo):
    for host in (H1, H2):
        apply(topo, host)
    assert ping(E1, OVERLAY_V4[E2]).returncode == 0
    e1, e2 = mac(E1, "xgeth0"), mac(E2, "xgeth0")
    # H1: E1 behind its access port; E2 behind the vxlan device, which learned H2 as E2's VTEP
    assert fdb_entries(H1, e1) == [f"{ACCESS} xbr100"]
    assert fdb_entries(H1, e2) == [f"xvx100 dst {UNDERLAY[H2]} self", "xvx100 xbr100"]
    assert fdb_entries(H2, e1) == [f"xvx100 dst {UNDERLAY[H1]} self", "xvx100 xbr100"]
