"""tc programs as cls_bpf filters (the attach where a kernel has no tcx, forced here through XDPFLEET_TC_ATTACH)
against the real kernel: the order of the filters on a hook kept across a reboot and restore, among themselves and
among filters of others; an upgrade replaced in place; a filter of another at an instance's place refused, never
replaced; teardown removing exactly ours; a move between tcx and cls_bpf; and the VTEP's tc backend deployed as the
vtep module deploys it, flooding a frame through its cls_bpf filter.

Everything runs in a child in a namespace of its own, with a bpffs of its own, and reports what it saw."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import LAB_PREFIX

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import cls_bpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp

REPO = Path(__file__).resolve().parents[2]
FIXTURE_C = Path(__file__).parent / "bpf" / "hooks_fixture.c"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")

CHILD = textwrap.dedent(
    """
    import json, os, socket, struct, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import cls_bpf, libbpf, program as xp
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records as hr
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vd
    subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)
    obj, obj_v2, state_dir, repo = sys.argv[2:6]
    host = hr.HostPaths(state_dir, "/sys/fs/bpf/xdpfleet", state_dir + "/cache")
    v0 = socket.if_nametoindex("v0")
    out = {}
    # A program of someone else's: TC_ACT_UNSPEC, the filters after it run too.
    unspec = struct.pack("<BBhi", 0xB7, 0, 0, -1) + struct.pack("<BBhi", 0x95, 0, 0, 0)  # r0 = -1; exit
    foreign = libbpf.prog_load(libbpf.BPF_PROG_TYPE_SCHED_CLS, unspec, "other")

    def converge(name, path=obj):
        try:
            done = xp.converge(host.instance(name), path, "hooks_tc", "tc", {}, ["v0"], None)
        except xp.XdpProgramError as exc:
            return {"error": str(exc)}
        return {"changed": done.changed, "steps": done.changes(name).steps, "id": done.program["id"]}

    def hook():
        return [[f.name, f.priority, f.handle, f.prog_id] for f in cls_bpf.filters(v0)]

    def seen(name):
        with libbpf.PinnedMap(host.instance(name).map_pin("seen")) as m:
            return int.from_bytes(m.lookup((1).to_bytes(4, "little")), "little")

    def frames(n):
        sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
        sender.bind(("v1", 0))
        dst = bytes.fromhex(open("/sys/class/net/v0/address").read().strip().replace(":", ""))
        for _ in range(n):
            sender.send(dst + bytes.fromhex("020000000001") + b"\\x88\\xb5" + bytes(46))
        time.sleep(0.5)
        sender.close()

    # tcx runs a hook's programs in the order they were attached: after a reboot (the links gone) the restore
    # attaches in the order of deployment. zz-first, deployed first, sorts last by name.
    os.environ[xp.TC_ATTACH_ENV] = xp.TC_ATTACH_TCX
    tcx_pair = ("zz-first", "aa-then")
    for name in tcx_pair:
        converge(name)
    frames(3)
    out["tcx_seen"] = {name: seen(name) for name in tcx_pair}
    link_ids = []
    for name in tcx_pair:
        link_fd = libbpf.obj_get(host.instance(name).link_pin("v0", "tc"))
        link_ids.append(libbpf.link_info(link_fd).id)
        os.close(link_fd)
        libbpf.unpin(host.instance(name).link_pin("v0", "tc"))
    deadline = time.monotonic() + 30  # the kernel frees an unpinned link after an RCU grace period
    while [i for i in link_ids if (fd := libbpf.lib().bpf_link_get_fd_by_id(i)) >= 0 and not os.close(fd)]:
        assert time.monotonic() < deadline, "links still there 30 s after their pins went"
        time.sleep(0.05)
    out["tcx_restored"] = [r.name for r in hr.restore(host, check_mode=False) if r.changed and not r.error]
    frames(3)
    out["tcx_seen_restored"] = {name: seen(name) for name in tcx_pair}
    for name in tcx_pair:
        xp.remove(host.instance(name), check_mode=False)

    # Someone's filter first, then two instances (the first attached sorts last by name), then someone's again.
    os.environ[xp.TC_ATTACH_ENV] = xp.TC_ATTACH_CLS_BPF
    cls_bpf.add_clsact(v0)
    cls_bpf.attach(v0, foreign, cls_bpf.FIRST_PRIORITY, "theirs-first")
    out["early"] = converge("zz-early")
    out["late"] = converge("aa-late")
    cls_bpf.attach(v0, foreign, cls_bpf.priority_after(cls_bpf.filters(v0)), "theirs-last")
    out["before_reboot"] = hook()
    out["early_record"] = xp.load_state(host.instance("zz-early"))["interfaces"]["v0"]

    # A reboot takes the qdisc and every filter; the others put theirs back, then the restore (in name order) ours.
    cls_bpf.delete_clsact(v0)
    cls_bpf.add_clsact(v0)
    for name, priority in (("theirs-last", out["before_reboot"][3][1]), ("theirs-first", cls_bpf.FIRST_PRIORITY)):
        cls_bpf.attach(v0, foreign, priority, name)
    out["restored"] = {r.name: r.report() for r in hr.restore(host, check_mode=False)}
    out["after_restore"] = hook()
    frames(3)
    out["seen"] = {name: seen(name) for name in ("zz-early", "aa-late")}

    # An upgrade: the filter at its place gets the new program.
    out["upgrade"] = converge("zz-early", obj_v2)
    out["after_upgrade"] = hook()
    frames(3)
    out["seen_upgraded"] = seen("zz-early")

    # Someone's filter where aa-late's was (removed behind its back): refused, theirs stays.
    cls_bpf.detach(v0, out["after_restore"][2][1])
    cls_bpf.attach(v0, foreign, out["after_restore"][2][1], "intruder")
    out["intruded"] = converge("aa-late")
    out["after_intrusion"] = hook()

    # Teardown: ours go, theirs and the clsact qdisc they made stay.
    out["teardown"] = sorted(hr.teardown(host, check_mode=False).instances)
    out["after_teardown"] = hook()
    out["clsact_after_teardown"] = cls_bpf.has_clsact(v0)
    cls_bpf.delete_clsact(v0)

    # tcx <-> cls_bpf: the new attachment first, then the old one goes.
    os.environ[xp.TC_ATTACH_ENV] = xp.TC_ATTACH_TCX
    converge("mover")
    os.environ[xp.TC_ATTACH_ENV] = xp.TC_ATTACH_CLS_BPF
    out["to_cls_bpf"] = converge("mover")
    out["to_cls_bpf_hook"] = [hook(), os.path.exists(host.instance("mover").link_pin("v0", "tc"))]
    os.environ[xp.TC_ATTACH_ENV] = xp.TC_ATTACH_TCX
    out["to_tcx"] = converge("mover")
    out["to_tcx_hook"] = [hook(), cls_bpf.has_clsact(v0), os.path.exists(host.instance("mover").link_pin("v0", "tc"))]
    xp.remove(host.instance("mover"), check_mode=False)

    # A failure half-way: v2 has the legacy ingress qdisc, so no clsact can go there. The upgrade of v0, done first,
    # is rolled back to the program that ran, and the record stays as it was.
    os.environ[xp.TC_ATTACH_ENV] = xp.TC_ATTACH_CLS_BPF
    subprocess.run(["tc", "qdisc", "add", "dev", "v2", "ingress"], check=True)
    def converge_on(interfaces, path):
        try:
            xp.converge(host.instance("halfway"), path, "hooks_tc", "tc", {}, interfaces, None)
        except xp.XdpProgramError as exc:
            return str(exc)
    converge_on(["v0"], obj)
    before = [hook(), xp.load_state(host.instance("halfway"))]
    out["halfway_error"] = converge_on(["v0", "v2"], obj_v2)
    out["halfway_kept"] = [hook(), xp.load_state(host.instance("halfway"))] == before
    out["halfway_v2_filters"] = [f.kind for f in cls_bpf.filters(socket.if_nametoindex("v2"))]
    xp.remove(host.instance("halfway"), check_mode=False)

    # The VTEP's tc backend as the vtep module deploys it: a broadcast from the access port is flooded to the peer
    # by vtep_replicate in its cls_bpf filter.
    os.environ[xp.TC_ATTACH_ENV] = xp.TC_ATTACH_CLS_BPF
    document = {
        "tunnel_ports": [{"port": "ul", "local_ip": "198.51.100.193"}],
        "vnis": [{"vni": 100, "access_ports": ["acc"],
                  "peers": [{"ip": "198.51.100.194", "via": "ul", "mac": "02:00:00:00:00:c2"}]}],
    }
    vtep = host.instance("vtep")
    tap = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    tap.bind(("ulp", 0))
    tap.settimeout(2)
    def deploy_vtep():
        return vd.Vtep(vtep, host.cache_dir, document=document, source=repo + "/bpf/vtep/vtep_xdp.c",
                       include_dirs=[repo + "/bpf/include"], backend="tc",
                       tc_source=repo + "/bpf/vtep/vtep_tc.c").deploy()
    result = deploy_vtep()
    out["vtep"] = result["program"]
    out["vtep_filters"] = {p: [f.name for f in cls_bpf.filters(socket.if_nametoindex(p))] for p in ("acc", "ul")}
    out["vtep_record"] = {k: v for k, v in xp.load_state(vtep).items() if k in ("tc_program", "tc_object", "tc_source")}
    sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sender.bind(("accp", 0))
    sender.send(b"\\xff" * 6 + bytes.fromhex("020000000a01") + b"\\x88\\xb5" + b"flooded".ljust(46, b"."))
    flooded = []
    try:
        while True:
            data, address = tap.recvfrom(2048)
            if address[2] != socket.PACKET_OUTGOING and b"flooded" in data:
                flooded.append(data)
    except socket.timeout:
        pass
    out["vtep_flooded"] = [[d[30:34].hex(), struct.unpack("!H", d[36:38])[0]] for d in flooded]
    out["vtep_again"] = deploy_vtep()["changed"]
    xp.remove(vtep, check_mode=False)
    out["vtep_removed"] = [cls_bpf.has_clsact(socket.if_nametoindex(p)) for p in ("acc", "ul")]
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cache = tmp_path_factory.mktemp("tc_attach")
    obj, _ = bpf_build.compile_object(str(FIXTURE_C), str(cache / "cache"))
    obj_v2, _ = bpf_build.compile_object(str(FIXTURE_C), str(cache / "cache"), defines={"HOOKS_TC_TWICE": None})
    name = f"{LAB_PREFIX}-tca-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
                       check=True)  # fmt: skip
        for a, b, mtu in (("v0", "v1", "1500"), ("v2", "v3", "1500"), ("acc", "accp", "1500"), ("ul", "ulp", "1600")):
            pair = [a, "mtu", mtu, "type", "veth", "peer", "name", b, "mtu", mtu]
            subprocess.run(["ip", "-n", name, "link", "add", *pair], check=True)
            for end in (a, b):
                subprocess.run(["ip", "-n", name, "link", "set", end, "up"], check=True)
        state_dir = cache / "state"
        state_dir.mkdir(mode=0o700)
        child = subprocess.run(
            ["ip", "netns", "exec", name, "unshare", "-m", "--propagation", "private", sys.executable, "-c", CHILD,
             str(REPO / "collection"), obj, obj_v2, str(state_dir), str(REPO)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert child.returncode == 0, child.stderr
        return json.loads(child.stdout)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


FIRST = cls_bpf.FIRST_PRIORITY


def names(hook: list) -> list[tuple[str, int]]:
    return [(name, priority) for name, priority, _handle, _prog in hook]


def test_a_restore_attaches_tcx_programs_in_the_order_they_were_deployed(run):
    """zz-first was deployed before aa-then and returns TC_ACT_OK, so aa-then never sees a frame; after the links
    went (a reboot) the restore must attach zz-first first again, though it sorts last by name."""
    assert run["tcx_seen"] == {"zz-first": 3, "aa-then": 0}
    assert run["tcx_restored"] == ["zz-first", "aa-then"]
    assert run["tcx_seen_restored"] == {"zz-first": 6, "aa-then": 0}


def test_each_instance_goes_after_every_filter_there_and_records_its_place(run):
    assert run["early"]["changed"] and run["early"]["steps"][0].endswith(f"tc (cls_bpf priority {FIRST + 1})")
    assert names(run["before_reboot"]) == [
        ("theirs-first", FIRST),
        ("xdpfleet:zz-early", FIRST + 1),
        ("xdpfleet:aa-late", FIRST + 2),
        ("theirs-last", FIRST + 3),
    ]
    assert run["early_record"]["tc_filter"] == {"priority": FIRST + 1, "handle": 1, "clsact_created": False}


def test_a_restore_puts_the_filters_back_in_their_order(run):
    """aa-late is restored first (restore goes by name), yet runs after zz-early, as before the reboot: frames show
    it (zz-early's program returns TC_ACT_OK, so nothing after it sees them)."""
    assert {name: report["changed"] for name, report in run["restored"].items()} == {"aa-late": True, "zz-early": True}
    assert names(run["after_restore"]) == names(run["before_reboot"])
    assert run["seen"] == {"zz-early": 3, "aa-late": 0}


def test_an_upgrade_replaces_the_program_in_its_filter(run):
    assert [s.split(" tag ")[0] for s in run["upgrade"]["steps"]] == ["v0 (tc): replace hooks_tc"]
    before, after = run["after_restore"], run["after_upgrade"]
    assert names(after) == names(before)
    assert [f[3] for f in after] == [before[0][3], run["upgrade"]["id"], before[2][3], before[3][3]]
    assert run["upgrade"]["id"] != before[1][3]
    assert run["seen_upgraded"] == 3 + 2 * 3  # the new version counts each frame twice


def test_a_filter_of_another_at_an_instances_place_is_refused_and_kept(run):
    assert "holds a bpf filter 'intruder'" in run["intruded"]["error"]
    assert "that it did not attach" in run["intruded"]["error"]
    assert ("intruder", FIRST + 2) in names(run["after_intrusion"])


def test_teardown_removes_exactly_ours(run):
    assert run["teardown"] == ["aa-late", "zz-early"]
    assert names(run["after_teardown"]) == [
        ("theirs-first", FIRST),
        ("intruder", FIRST + 2),
        ("theirs-last", FIRST + 3),
    ]
    assert run["clsact_after_teardown"] is True  # theirs: it was there before our first filter


def test_a_move_between_tcx_and_cls_bpf_attaches_the_new_way_before_the_old_goes(run):
    assert [s.split(" tag ")[0] for s in run["to_cls_bpf"]["steps"]] == ["v0 (tc): reattach hooks_tc"]
    assert [names(run["to_cls_bpf_hook"][0]), run["to_cls_bpf_hook"][1]] == [[("xdpfleet:mover", FIRST)], False]
    assert [s.split(" tag ")[0] for s in run["to_tcx"]["steps"]] == ["v0 (tc): reattach hooks_tc"]
    assert run["to_tcx_hook"] == [[], False, True]  # no filter, and the clsact qdisc it made is gone


def test_a_failure_half_way_puts_back_what_ran(run):
    assert run["halfway_error"].startswith("attaching hooks_tc failed, previous state restored on v0 (tc): ")
    assert "clsact" in run["halfway_error"]
    assert run["halfway_kept"] is True  # v0's filter runs the old program again, and the record is the old one
    assert run["halfway_v2_filters"] == []


def test_the_vtep_tc_backend_floods_through_its_cls_bpf_filters(run):
    assert run["vtep"] == {"acc (tc)": "attach", "ul (tc)": "attach", "acc": "attach", "ul": "attach"}
    assert run["vtep_filters"] == {"acc": ["xdpfleet:vtep"], "ul": ["xdpfleet:vtep"]}
    assert run["vtep_record"]["tc_program"] == "vtep_replicate"
    assert run["vtep_record"]["tc_source"].endswith("/bpf/vtep/vtep_tc.c")
    assert run["vtep_record"]["tc_object"] != ""
    # One copy to the peer: VXLAN to 198.51.100.194 (c6 33 64 c2), UDP port 4789.
    assert run["vtep_flooded"] == [["c63364c2", 4789]]
    assert run["vtep_again"] is False
    assert run["vtep_removed"] == [False, False]


def test_the_attach_kind_follows_the_kernel_unless_forced(monkeypatch):
    monkeypatch.delenv(xp.TC_ATTACH_ENV, raising=False)
    assert xp.tc_attach_kind() == xp.TC_ATTACH_TCX  # this machine's kernel has tcx
    monkeypatch.setenv(xp.TC_ATTACH_ENV, "netfilter")
    with pytest.raises(xp.XdpProgramError, match="XDPFLEET_TC_ATTACH: 'netfilter' is not one of tcx, cls_bpf"):
        xp.tc_attach_kind()
