"""xdp_probe against the real kernel: a namespace with a 2-queue veth pair, the probe run inside it.

The probe logic runs in a subprocess under `ip netns exec` (simple, and the probe sees exactly the namespace a
module would). An XDP program "held" on an interface is a subprocess that attached it through a bpf_link and
waits on stdin: closing its stdin ends it, and the link with it.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection"
BIN = Path(sys.executable).parent  # the venv's ansible sits next to its python

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, BPF)"),
    pytest.mark.skipif(shutil.which("ip") is None, reason="needs iproute2"),
]

NS = f"xp-probe-{os.getpid()}"
A, B = "xpa0", "xpb0"  # A is probed, B is its peer

PRELUDE = f"""
import json, sys
sys.path.insert(0, {str(COLLECTION)!r})
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf as L
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import probe as P
"""

PROBE = (
    PRELUDE
    + """
kwargs = json.loads(sys.argv[1])
print(json.dumps(P.probe(**kwargs)))
"""
)

HOLDER = (
    PRELUDE
    + """
import socket
fd = L.prog_load(L.BPF_PROG_TYPE_XDP, P.xdp_return_program(P.XDP_PASS), "xp_holder", expected_attach_type=L.BPF_XDP)
link = L.xdp_link_create(fd, socket.if_nametoindex(sys.argv[1]), sys.argv[2])
print(json.dumps({"prog_id": L.prog_info(fd).id}), flush=True)
sys.stdin.read()
"""
)


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True)


def in_ns(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", NS, *args], capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def lab():
    sh("ip", "netns", "del", NS, check=False)  # a stale one from an interrupted run of this pid
    try:
        sh("ip", "netns", "add", NS)
        queues = "numtxqueues 2 numrxqueues 2"
        sh(*f"ip -n {NS} link add {A} {queues} type veth peer {B} {queues}".split())
        for dev in (A, B):
            # No IPv6 autoconfiguration chatter: the live-frames test reads these counters.
            in_ns("sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1", check=True)
            sh("ip", "-n", NS, "link", "set", dev, "up")
        yield NS
    finally:
        sh("ip", "netns", "del", NS, check=False)


def probe(**kwargs) -> dict:
    out = in_ns(sys.executable, "-c", PROBE, json.dumps(kwargs), check=True, timeout=60)
    return json.loads(out.stdout)


@contextlib.contextmanager
def holding(dev: str, mode: str = "native"):
    """An XDP PASS program on dev for the duration; yields its program id."""
    proc = subprocess.Popen(
        ["ip", "netns", "exec", NS, sys.executable, "-c", HOLDER, dev, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"holder failed: {proc.stderr.read()}")
        yield json.loads(line)["prog_id"]
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()  # our own child, by its pid
            proc.wait()


def test_host_and_interface_facts(lab):
    facts = probe(interfaces=[A])
    assert facts["kernel"]["release"] == os.uname().release
    assert facts["kernel_btf"] == os.path.exists("/sys/kernel/btf/vmlinux")
    assert facts["libbpf_version"].startswith("1.")
    assert facts["possible_cpus"] >= 1
    assert facts["live_frames"] == {"supported": True, "kernel_ok": True, "ok": True, "error": None}
    # `ip netns exec` gives a fresh mount namespace with sysfs remounted: no bpffs there, and the probe says so
    assert facts["bpffs"]["mounted"] is False
    assert any("bpffs not mounted at /sys/fs/bpf" in p for p in facts["problems"])
    a = facts["interfaces"][A]
    assert a["driver"] == "veth"
    assert a["queues"] == {"rx": 2, "tx": 2}
    assert a["channels"]["rx"] == 2 and a["channels"]["tx"] == 2 and a["channels"]["max_rx"] == 2
    assert a["mtu"] == 1500 and a["operstate"] == "up"
    assert a["mac"] == in_ns("cat", f"/sys/class/net/{A}/address", check=True).stdout.strip()
    assert a["peer"]["name"] == B
    assert a["xdp"]["mode"] == "none" and a["xdp"]["programs"] == []
    assert "basic" in a["xdp_features"]["flags"]
    assert "ndo-xmit" not in a["xdp_features"]["flags"]  # nothing on the peer yet
    assert a["attach_test"] is None and a["live_frames_test"] is None


def test_default_is_every_non_loopback_interface(lab):
    facts = probe()
    assert sorted(facts["interfaces"]) == sorted([A, B])


def test_attach_works_in_both_modes_and_leaves_nothing(lab):
    facts = probe(interfaces=[A], attach_test=True)
    att = facts["interfaces"][A]["attach_test"]
    assert att["native"] == {"ok": True, "error": None, "skipped": False}
    assert att["generic"] == {"ok": True, "error": None, "skipped": False}
    assert probe(interfaces=[A])["interfaces"][A]["xdp"]["mode"] == "none"


def test_live_frames_with_program_on_peer(lab):
    with holding(B):
        facts = probe(interfaces=[A], live_frames_test=True)
    a = facts["interfaces"][A]
    assert "ndo-xmit" in a["xdp_features"]["flags"]
    lf = a["live_frames_test"]
    assert lf["ok"] is True, lf
    assert lf["error"] is None
    # what moves on this kernel: the sender's per-queue XDP transmit counter, by exactly one frame
    xmit = {k: v for k, v in lf["counters"].items() if k.endswith("_xdp_xmit")}
    assert sum(xmit.values()) == 1, lf
    assert not any("veth peer" in p for p in facts["problems"])
    assert probe(interfaces=[A])["interfaces"][A]["xdp"]["mode"] == "none"  # the helper program is gone


def test_live_frames_without_program_on_peer_is_a_problem(lab):
    facts = probe(interfaces=[A], live_frames_test=True, timeout=0.5)
    lf = facts["interfaces"][A]["live_frames_test"]
    assert lf["ok"] is False
    assert lf["error"] == "no XDP program on the veth peer: frames are dropped"
    assert any(
        "veth peer needs an XDP program or GRO to receive XDP_TX frames" in p and B in p for p in facts["problems"]
    )


def test_generic_program_on_peer_does_not_receive(lab):
    # Only a native program (or GRO) gives the peer the NAPI that XDP frames need; generic mode does not.
    with holding(B, "generic"):
        facts = probe(interfaces=[A], live_frames_test=True, timeout=0.5)
    assert facts["interfaces"][A]["live_frames_test"]["ok"] is False


def test_busy_interface_is_skipped_and_not_disturbed(lab):
    with holding(A) as prog_id:
        facts = probe(interfaces=[A], attach_test=True)
        a = facts["interfaces"][A]
        assert a["xdp"]["mode"] == "native"
        assert a["xdp"]["prog_id"] == prog_id
        assert a["xdp"]["programs"][0]["name"] == "xp_holder"
        assert len(a["xdp"]["programs"][0]["tag"]) == 16
        for mode in ("native", "generic"):
            assert a["attach_test"][mode] == {
                "ok": None,
                "error": None,
                "skipped": True,
                "reason": f"busy: program {prog_id} attached",
            }
        assert any(f"busy: program {prog_id} attached" in p for p in facts["problems"])
        again = probe(interfaces=[A])["interfaces"][A]["xdp"]
        assert again["prog_id"] == prog_id  # still the holder's program


def test_check_mode_skips_tests(lab):
    facts = probe(interfaces=[A], attach_test=True, live_frames_test=True, check_mode=True)
    assert facts["tests_skipped"] == "check mode: attach and live-frames tests not run"
    assert facts["interfaces"][A]["attach_test"] is None
    assert facts["interfaces"][A]["live_frames_test"] is None


# ---- the real module through ansible ----------------------------------------------------------------------


def ansible(args: dict, *extra: str) -> tuple[int, dict]:
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
    )
    cmd = [str(BIN / "ansible"), "localhost", "-c", "local", "-m", "xdpfleet.fabric.xdp_probe"]
    cmd += ["-a", json.dumps(args), "-e", f"ansible_python_interpreter={sys.executable}", *extra]
    proc = in_ns(*cmd, env=env, cwd=str(REPO), timeout=120)
    marker = "localhost | "
    start = proc.stdout.find(marker)
    assert start >= 0, proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout[proc.stdout.index("=>", start) + 2 :])


def test_module_ad_hoc(lab):
    rc, res = ansible({"interfaces": [A], "attach_test": True})
    assert rc == 0, res
    assert res["changed"] is False
    facts = res["ansible_facts"]["xdpfleet_probe"]
    a = facts["interfaces"][A]
    assert a["driver"] == "veth" and a["queues"] == {"rx": 2, "tx": 2}
    assert a["attach_test"]["native"]["ok"] is True and a["attach_test"]["generic"]["ok"] is True


def test_module_check_mode(lab):
    rc, res = ansible({"attach_test": True, "live_frames_test": True}, "--check")
    assert rc == 0, res
    facts = res["ansible_facts"]["xdpfleet_probe"]
    assert res["changed"] is False
    assert facts["tests_skipped"].startswith("check mode")
    assert all(i["attach_test"] is None for i in facts["interfaces"].values())


def test_module_unknown_interface_fails_naming_it(lab):
    rc, res = ansible({"interfaces": [A, "xpnope0"], "attach_test": True})
    assert rc != 0
    assert "'xpnope0'" in res["msg"] and res["msg"].startswith("interfaces:")
