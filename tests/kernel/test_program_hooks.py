"""program.py's hooks against the real kernel: an instance at tc ingress (mode "tc"), an XDP instance that also runs a
tc program on the same interfaces (tc_program, the VTEP's tc backend), moves between them, the record the restore
replays, and removal. Frames sent into the veth show which hook ran. Every test runs with the tc program attached
each way program.py attaches one: a tcx link, and a cls_bpf filter (where a kernel has no tcx)."""

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

FIXTURE_C = Path(__file__).parent / "bpf" / "hooks_fixture.c"
COLLECTION = Path(__file__).resolve().parents[2] / "collection"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")

# Runs in the namespace with a private bpffs; each step's outcome goes into `out`.
CHILD = textwrap.dedent(
    """
    import json, os, socket, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import cls_bpf, libbpf, program as xp
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records as hr
    subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)
    obj_path, state_dir = sys.argv[2], sys.argv[3]
    host = hr.HostPaths(state_dir, "/sys/fs/bpf/xdpfleet", state_dir + "/cache")
    paths = host.instance("hooks")
    sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sender.bind(("v1", 0))
    dst = open("/sys/class/net/v0/address").read().strip()
    frame = bytes.fromhex(dst.replace(":", "")) + bytes.fromhex("020000000001") + b"\\x88\\xb5" + bytes(46)
    out = {}

    def converge(program, mode, tc_program=None):
        try:
            done = xp.converge(paths, obj_path, program, mode, {}, ["v0"], None, tc_program=tc_program)
        except xp.XdpProgramError as exc:
            return {"error": str(exc)}
        return {"changed": done.changed, "steps": done.changes("hooks").steps}

    def seen_after(frames):
        # The veth delivers the frames on its receive path after send() returns: read until the counts settle.
        for _ in range(frames):
            sender.send(frame)
        counts, deadline = None, time.monotonic() + 3
        with libbpf.PinnedMap(paths.map_pin("seen")) as seen:
            while time.monotonic() < deadline:
                time.sleep(0.1)
                now = [int.from_bytes(seen.lookup(i.to_bytes(4, "little")), "little") for i in range(2)]
                if now == counts:
                    break
                counts = now
        return counts

    def running():
        found = {}
        for hook in ("xdp", "tc"):
            r = xp.read_running(paths, "v0", hook)
            found[hook] = r and [r.prog_name, r.mode]
            if r:
                libbpf.close_fd(r.link_fd); os.close(r.prog_fd)
        return found

    def filters():
        return [[f.name, f.priority, f.direct_action] for f in cls_bpf.filters(socket.if_nametoindex("v0"))]

    out["tc"] = converge("hooks_tc", "tc")
    out["tc_record"] = {k: xp.load_state(paths).get(k) for k in ("mode", "program", "tc_program")}
    out["tc_where"] = xp.load_state(paths)["interfaces"]["v0"]
    out["tc_filters"] = filters()
    out["tc_seen"] = seen_after(5)
    out["tc_again"] = converge("hooks_tc", "tc")
    out["wrong_type"] = converge("hooks_xdp", "tc")
    out["both"] = converge("hooks_xdp", "native", tc_program="hooks_tc")
    out["both_running"] = running()
    out["both_seen"] = seen_after(5)
    out["both_again"] = converge("hooks_xdp", "native", tc_program="hooks_tc")
    # A reboot takes every link and filter: unpinning the links (and deleting the clsact qdisc, with its filters)
    # detaches both programs; the restore brings both back from the record. The kernel frees an unpinned link only
    # after an RCU grace period (longer on a loaded machine): wait until the links are gone, as they are after a
    # reboot, or the restore would meet them still attached.
    link_ids = []
    for hook in ("xdp", "tc"):
        if os.path.exists(paths.link_pin("v0", hook)):
            link_fd = libbpf.obj_get(paths.link_pin("v0", hook))
            link_ids.append(libbpf.link_info(link_fd).id)
            os.close(link_fd)
            libbpf.unpin(paths.link_pin("v0", hook))
    if cls_bpf.has_clsact(socket.if_nametoindex("v0")):
        cls_bpf.delete_clsact(socket.if_nametoindex("v0"))
    deadline = time.monotonic() + 30
    while (alive := [i for i in link_ids if (fd := libbpf.lib().bpf_link_get_fd_by_id(i)) >= 0 and not os.close(fd)]):
        assert time.monotonic() < deadline, f"links {alive} still exist 30 s after their pins were removed"
        time.sleep(0.05)
    out["after_reboot"] = running()
    out["restored"] = {r.name: r.report() for r in hr.restore(host, check_mode=False)}
    out["restored_running"] = running()
    out["restored_filters"] = filters()
    out["xdp_only"] = converge("hooks_xdp", "native")
    out["tc_links_dir_left"] = os.path.exists(paths.tc_links_dir)
    out["xdp_only_seen"] = seen_after(5)
    out["removed"] = xp.remove(paths, check_mode=False).steps
    out["pin_dir_left"] = os.path.exists(paths.pin_dir)
    out["clsact_left"] = cls_bpf.has_clsact(socket.if_nametoindex("v0"))
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module", params=xp.TC_ATTACH_KINDS)
def run(tmp_path_factory, request):
    """The child's whole sequence, run once per tc attach kind in a namespace of its own with a veth v0 <-> v1."""
    cache = tmp_path_factory.mktemp("hooks")
    obj_path, _ = bpf_build.compile_object(str(FIXTURE_C), str(cache / "cache"))
    name = f"{LAB_PREFIX}-hooks-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        # No IPv6 on the veth: its neighbour discovery would be counted with the test's frames.
        subprocess.run(["ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
                       check=True)
        for argv in (
            ["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
            ["link", "set", "v0", "up"],
            ["link", "set", "v1", "up"],
        ):
            subprocess.run(["ip", "-n", name, *argv], check=True)
        state_dir = cache / "state"
        state_dir.mkdir(mode=0o700)
        child = subprocess.run(
            ["ip", "netns", "exec", name, "unshare", "-m", "--propagation", "private", sys.executable, "-c", CHILD,
             str(COLLECTION), obj_path, str(state_dir)],
            capture_output=True, text=True, timeout=120, env={**os.environ, xp.TC_ATTACH_ENV: request.param},
        )
        assert child.returncode == 0, child.stderr
        return {"attach": request.param, **json.loads(child.stdout)}
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def test_an_instance_at_tc_ingress_runs_there_and_is_recorded_as_such(run):
    assert run["tc"]["changed"] is True
    assert run["tc"]["steps"][0].startswith("v0 (tc): attach hooks_tc tag ")
    assert run["tc_record"] == {"mode": "tc", "program": "hooks_tc", "tc_program": None}
    if run["attach"] == xp.TC_ATTACH_TCX:
        assert run["tc_where"]["link_pin"].endswith("/hooks/tc-links/v0")
        assert run["tc_filters"] == []
    else:  # no pin: the record says where the filter is, and that the instance made the clsact qdisc
        assert run["tc_where"]["tc_filter"] == {
            "priority": cls_bpf.FIRST_PRIORITY, "handle": cls_bpf.HANDLE, "clsact_created": True
        }
        assert "link_pin" not in run["tc_where"]
        assert run["tc_filters"] == [["xdpfleet:hooks", cls_bpf.FIRST_PRIORITY, True]]
    assert run["tc_seen"] == [0, 5]  # tc counted every frame, XDP ran on none
    assert run["tc_again"] == {"changed": False, "steps": []}


def test_a_program_of_the_wrong_type_for_the_hook_is_refused(run):
    assert "hooks_xdp is not a tc" in run["wrong_type"]["error"]
    assert "nothing was changed" in run["wrong_type"]["error"]


def test_an_xdp_instance_with_a_tc_program_runs_both_and_keeps_the_running_tc_link(run):
    # Moving from tc alone to XDP + tc attaches XDP and leaves the tc attachment as it is (same program, same maps).
    assert [s.split(" tag ")[0] for s in run["both"]["steps"]] == ["v0: attach hooks_xdp"]
    assert run["both_running"] == {"xdp": ["hooks_xdp", "native"], "tc": ["hooks_tc", "tc"]}
    assert run["both_seen"] == [5, 10]  # both hooks saw the 5 new frames; the counters kept the earlier 5
    assert run["both_again"] == {"changed": False, "steps": []}


def test_the_restore_brings_back_both_hooks(run):
    assert run["after_reboot"] == {"xdp": None, "tc": None}
    assert run["restored"]["hooks"]["changed"] is True and "error" not in run["restored"]["hooks"]
    # tc first: an XDP program that hands frames on to a tc one never runs without it
    assert [s.split(" tag ")[0] for s in run["restored"]["hooks"]["changes"]] == [
        "v0 (tc): attach hooks_tc",
        "v0: attach hooks_xdp",
    ]
    assert run["restored_running"] == {"xdp": ["hooks_xdp", "native"], "tc": ["hooks_tc", "tc"]}
    if run["attach"] == xp.TC_ATTACH_CLS_BPF:
        assert run["restored_filters"] == [["xdpfleet:hooks", cls_bpf.FIRST_PRIORITY, True]]


def test_dropping_the_tc_program_detaches_it_and_removal_leaves_nothing(run):
    assert [s.split(" tag ")[0] for s in run["xdp_only"]["steps"]] == ["v0 (tc): detach hooks_tc"]
    assert run["tc_links_dir_left"] is False
    assert run["xdp_only_seen"] == [10, 10]
    assert [s.split(" tag ")[0] for s in run["removed"][:1]] == ["v0: detach hooks_xdp"]
    assert "remove map seen" in run["removed"]
    assert run["pin_dir_left"] is False
    assert run["clsact_left"] is False
