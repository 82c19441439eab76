"""A VTEP update killed (SIGKILL) at any step leaves a host that a re-run, or the restore at boot, brings to the old
configuration or the new one, never to something in between; for each way a VTEP runs (VARIANTS): the XDP backend
in native and in generic XDP, and the tc backend with its tc program attached through tcx or, as on kernels before
6.6, as a cls_bpf filter.

Every step of an update that outlives the process (a map entry written or removed, a pin, a link, a clsact qdisc
or cls_bpf filter, an interface's promiscuous flag, the record) passes a kill point
(plugins/module_utils/common/kill_points.py): the deploy runs in a child process, as the module does (real module
code, the real VTEP objects, real maps, XDP and tc on veths of a namespace of its own, pins on a bpffs of the
test's own), with XDPFLEET_TEST_KILL_AT=n, and dies at the n-th step. For each n, from the old configuration:
  (a) the same update is run again: the host must hold the new configuration;
  (b) from the killed state again, a reboot is emulated (the pins and the links they held are gone, so are the
      clsact qdiscs with their filters, the promiscuous flags are off, the records stay) and the restore runs: the
      host must hold the old configuration or the new one.
"Holds a configuration" is checked from the host alone, for each of the two configurations: the record names its
document; every map is pinned, the learned FDB has its fdb_size, and what the maps hold (writer.read) is what the
configuration compiles to (plan.diff is empty: a re-run would write nothing); each of its ports runs the VTEP's
ingress program for the variant through our pinned link in the variant's XDP mode, on exactly the pinned maps; with
the tc backend the port's tc ingress runs our tc program alone (the kernel's list of tcx programs and of cls_bpf
filters), through our tcx link or our filter at its recorded place, on the pinned maps, with a clsact qdisc only
for cls_bpf; other ports run no XDP program, nothing at tc ingress and have no clsact qdisc; its access ports and
trunks are promiscuous, the other ports not.

The two configurations change every kind of write: VNIs added and removed, peers added and removed, a group moving
between size classes, an access port leaving one VNI for another, a new port (attach, promiscuous flag), a port
let go (detach), a trunk's VID, a static FDB entry moving from a port to a peer, and the learned FDB's size (a new
map: every link and filter updated, the pin replaced).

make test runs each variant's sample of kill points spread over the update (the first and the last among them);
XDPFLEET_TEST_KILL_POINTS=all (make fuzz) runs every one, =n,m,... the ones listed (to replay a failure). The test
prints how many kill points there were, how many hosts ended between the configurations, and how long it took."""

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import LAB_PREFIX

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection"
PORTS = ("ul", "a1", "a2", "a3", "a4", "tr")

@dataclass(frozen=True)
class Variant:
    """How the VTEP runs: backend, XDP mode, for the tc backend how its tc program is attached (tcx, or cls_bpf as
    on kernels before 6.6); sample: how many kill points make test tries."""

    backend: str
    mode: str
    tc_attach: str | None
    sample: int


VARIANTS = {
    "xdp-native": Variant("xdp", "native", None, 4),
    "xdp-generic": Variant("xdp", "generic", None, 2),
    "tc-tcx": Variant("tc", "native", xp.TC_ATTACH_TCX, 2),
    "tc-cls_bpf": Variant("tc", "native", xp.TC_ATTACH_CLS_BPF, 2),
}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces, bpffs and XDP need root")


def peer(last: int) -> dict:
    return {"ip": f"198.51.100.{last}", "via": "ul", "mac": f"02:00:00:00:01:{last:02x}"}


OLD = {
    "fdb_size": 1024,
    "tunnel_ports": [{"port": "ul", "local_ip": "198.51.100.1"}],
    "vnis": [
        {"vni": 100, "access_ports": ["a1", "a2"], "peers": [peer(10 + i) for i in range(16)]},  # a large group
        {"vni": 200, "access_ports": ["a3"], "peers": [peer(40)]},
        {
            "vni": 300,
            "trunks": [{"port": "tr", "vid": 30}],
            "peers": [peer(50), peer(51)],
            "fdb": [{"mac": "02:00:00:00:64:01", "port": "tr"}],
        },
    ],
}
NEW = {
    "fdb_size": 2048,
    "tunnel_ports": [{"port": "ul", "local_ip": "198.51.100.1"}],
    "vnis": [
        {"vni": 100, "access_ports": ["a1"], "peers": [peer(10), peer(60)]},  # to the small groups; a2 leaves
        # VNI 200 goes
        {
            "vni": 300,
            "trunks": [{"port": "tr", "vid": 31}],
            "peers": [peer(51)],
            "fdb": [{"mac": "02:00:00:00:64:01", "remote": "198.51.100.51"}],
        },
        {"vni": 500, "access_ports": ["a2", "a4"], "peers": [peer(70)]},  # new; a4 a new port, a3 unused
    ],
}

# One child process: the actions in order. deploy (with XDPFLEET_TEST_KILL_AT in its environment: killed at that
# step), wipe (no VTEP at all), reboot (what a reboot does to it), restore (the boot restore), state (which of the
# two configurations the host holds, with what differs from each).
CHILD = textwrap.dedent(
    """
    import ctypes, json, os, shutil, socket, sys
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import cls_bpf, libbpf, program as xp
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, kill_points
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import promisc
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records as hr
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vd, layouts, plan, writer
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import InterfaceFacts, validate
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.promiscuous_ports import served_ports
    args = json.loads(sys.argv[2])
    host = hr.HostPaths(args["state_dir"], args["pin_root"], args["cache_dir"])
    paths = host.instance("vtep")

    class TcxQuery(ctypes.Structure):  # libbpf's struct bpf_prog_query_opts, as far as libbpf 1.1 has it
        _fields_ = [("sz", ctypes.c_size_t), ("query_flags", ctypes.c_uint32), ("attach_flags", ctypes.c_uint32),
                    ("prog_ids", ctypes.POINTER(ctypes.c_uint32)), ("prog_cnt", ctypes.c_uint32),
                    ("prog_attach_flags", ctypes.POINTER(ctypes.c_uint32))]

    def tc_programs(ifindex):
        # Every program at the port's tc ingress, as the kernel lists them: tcx's, then each cls_bpf filter's.
        ids = (ctypes.c_uint32 * 16)()
        query = TcxQuery(sz=ctypes.sizeof(TcxQuery), prog_ids=ids, prog_cnt=16)
        ret = libbpf.lib().so.bpf_prog_query_opts(ifindex, libbpf.BPF_TCX_INGRESS, ctypes.byref(query))
        assert ret == 0, f"tcx query of ifindex {ifindex}: {ret}"
        tcx = [("tcx", ids[i]) for i in range(query.prog_cnt)]
        return tcx + [(f"cls_bpf {f.name} {f.kind}", f.prog_id) for f in cls_bpf.filters(ifindex)]

    def runs_on_pinned_maps(port, what, prog_fd, pinned):
        names = {}
        for map_id in libbpf.prog_info(prog_fd).map_ids:
            fd = libbpf.map_fd_by_id(map_id)
            names[libbpf.map_info(fd).name] = map_id
            os.close(fd)
        return [f"{port}: {what} runs on another {name} than the pinned one"
                for map_id, name in pinned.items() if names.get(name[:15], map_id) != map_id]

    def tc_problems(port, at_tc, clsact, pinned):
        # The tc backend's program on a port of the VTEP: ours alone at tc ingress, through its tcx link or its
        # cls_bpf filter (on a clsact qdisc only then), on the pinned maps.
        cls_bpf_attach = args["tc_attach"] == xp.TC_ATTACH_CLS_BPF
        tc = xp.read_running(paths, port, xp.HOOK_TC)
        if tc is None:
            return [f"{port} does not run the tc program through its {args['tc_attach']} attachment"]
        ours = f"cls_bpf {cls_bpf.owner_name(paths.name)} bpf" if cls_bpf_attach else "tcx"
        if at_tc != [(ours, tc.prog_id)] or clsact != cls_bpf_attach:
            return [f"{port}: tc ingress runs {at_tc}, clsact qdisc {clsact}, not ours alone"]
        if tc.prog_name != layouts.TC_PROGRAM[:15]:
            return [f"{port} runs {tc.prog_name} at tc"]
        return runs_on_pinned_maps(port, "tc", tc.prog_fd, pinned)

    def holds(document):
        problems = []
        ports = vd.host_ports()
        config = validate(document, {n: InterfaceFacts(p.ifindex, p.mtu, p.mac) for n, p in ports.items()})
        if xp.load_state(paths).get("vtep") != document:
            problems.append("the record names another document")
        missing = [n for n in layouts.MAP_NAMES if not os.path.exists(paths.map_pin(n))]
        if missing:
            return problems + [f"maps not pinned: {missing}"]
        maps = {n: libbpf.PinnedMap(paths.map_pin(n)) for n in layouts.MAP_NAMES}
        pinned = {libbpf.map_info(m.fd).id: n for n, m in maps.items()}
        if maps[layouts.LEARNED_FDB].max_entries != config.fdb_size:
            problems.append(f"learned FDB of {maps[layouts.LEARNED_FDB].max_entries} entries")
        held = writer.read(maps)
        if len(held.egress_tags) > 1:
            problems.append(f"members on several egress programs: {sorted(held.egress_tags)}")
        desired = plan.compile_desired(config, ports, {}, held, next(iter(held.egress_tags), ""))
        difference = plan.diff(held, desired)
        if not difference.empty:
            written = {n: len(e) for n, e in difference.upserts.items() if e}
            removed = {n: len(k) for n, k in difference.deletes.items() if k}
            groups = sorted({(g.kind, g.vni) for g in difference.groups})
            problems.append(f"maps differ: to write {written}, to remove {removed}, groups {groups}")
        used = set(config.ports())
        ingress = layouts.ingress_program(args["backend"], args["mode"])
        for port in args["ports"]:
            ifindex = ports[port].ifindex
            attached = libbpf.xdp_query(ifindex).prog_id
            at_tc = tc_programs(ifindex)
            clsact = cls_bpf.has_clsact(ifindex)
            if port not in used:
                if attached:
                    problems.append(f"{port} runs XDP program {attached}")
                if at_tc or clsact:
                    problems.append(f"{port}: tc ingress runs {at_tc}, clsact qdisc {clsact}")
            else:
                running = xp.read_running(paths, port)
                if running is None or running.mode != args["mode"] or attached != running.prog_id:
                    problems.append(f"{port} does not run the VTEP in {args['mode']} XDP through its pinned link")
                elif running.prog_name != ingress[:15]:
                    problems.append(f"{port} runs {running.prog_name} at XDP")
                else:
                    problems += runs_on_pinned_maps(port, "XDP", running.prog_fd, pinned)
                if args["backend"] == "tc":
                    problems += tc_problems(port, at_tc, clsact, pinned)
                elif at_tc or clsact:
                    problems.append(f"{port}: tc ingress runs {at_tc}, clsact qdisc {clsact}")
            if promisc.promiscuous(port) != (port in served_ports(config)):
                problems.append(f"{port}: promiscuous flag {promisc.promiscuous(port)}")
        return problems

    def reboot():
        # What a reboot takes: the pins (and the links they held), the qdiscs and their filters, the flags.
        shutil.rmtree(args["pin_root"], ignore_errors=True)
        for port in args["ports"]:
            promisc.set_promiscuous(port, False)
            if cls_bpf.has_clsact(socket.if_nametoindex(port)):
                cls_bpf.delete_clsact(socket.if_nametoindex(port))

    out = []
    for action in args["do"]:
        if action == "wipe":
            reboot()
            if os.path.exists(paths.state_file):
                files.remove_durably(paths.state_file)
        elif action == "reboot":
            reboot()
        elif action == "restore":
            out.append({r.name: r.report() for r in hr.restore(host, check_mode=False)})
        elif action == "state":
            problems = {name: holds(args[name]) for name in ("old", "new")}
            out.append(next((name for name, found in problems.items() if not found), problems))
        else:
            source = os.path.join(args["repo"], "bpf", "vtep", "vtep_xdp.c")
            tc_source = os.path.join(args["repo"], "bpf", "vtep", "vtep_tc.c")
            include = [os.path.join(args["repo"], "bpf", "include")]
            document = args[action.split()[1]]
            before = kill_points.passed
            vd.Vtep(paths, host.cache_dir, document=document, mode=args["mode"], source=source, include_dirs=include,
                    backend=args["backend"], tc_source=tc_source).deploy()
            out.append({"steps": kill_points.passed - before})
    print(json.dumps(out))
    """
)


class Host:
    def __init__(self, netns: str, tmp_path: Path, bpffs: Path, variant: Variant):
        self.netns = netns
        self.variant = variant
        self.args = {
            "backend": variant.backend,
            "mode": variant.mode,
            "tc_attach": variant.tc_attach,
            "state_dir": str(tmp_path / "state"),
            "pin_root": str(bpffs / "xdpfleet"),
            "cache_dir": str(tmp_path / "cache"),
            "repo": str(REPO),
            "ports": PORTS,
            "old": OLD,
            "new": NEW,
        }

    def run(self, *actions: str, kill_at: int | None = None) -> list | None:
        """Run the actions in one child process in the namespace; None when it was killed at its kill point."""
        env = {k: v for k, v in os.environ.items() if k not in ("XDPFLEET_TEST_KILL_AT", xp.TC_ATTACH_ENV)}
        if self.variant.tc_attach:
            env[xp.TC_ATTACH_ENV] = self.variant.tc_attach
        if kill_at is not None:
            env["XDPFLEET_TEST_KILL_AT"] = str(kill_at)
        argv = [str(COLLECTION), json.dumps({**self.args, "do": list(actions)})]
        done = subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-c", CHILD, *argv], env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        if done.returncode == -9:
            return None
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def killed_update(self, kill_at: int) -> None:
        """The old configuration, then the update to the new one killed at step kill_at."""
        assert self.run("wipe", "deploy old", "state")[1] == "old"
        assert self.run("deploy new", kill_at=kill_at) is None, f"the update passed kill point {kill_at} alive"


@pytest.fixture(params=VARIANTS)
def host(request, tmp_path, bpffs):
    netns = f"{LAB_PREFIX}-cc-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        for port in PORTS:
            subprocess.run(["ip", "-n", netns, "link", "add", port, "mtu", "1600" if port == "ul" else "1500",
                            "type", "veth", "peer", "name", f"{port}p"], check=True)  # fmt: skip
            for end in (port, f"{port}p"):
                subprocess.run(["ip", "-n", netns, "link", "set", end, "up"], check=True)
        yield Host(netns, tmp_path, bpffs, VARIANTS[request.param])
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)


def kill_points(steps: int, sample: int) -> list[int]:
    """XDPFLEET_TEST_KILL_POINTS: all, or some (a comma-separated list, to replay the ones a run reported)."""
    chosen = os.environ.get("XDPFLEET_TEST_KILL_POINTS", "")
    if chosen == "all":
        return list(range(1, steps + 1))
    if chosen:
        return [int(n) for n in chosen.split(",")]
    return sorted({1 + round(i * (steps - 1) / (sample - 1)) for i in range(sample)})


def test_an_update_killed_at_any_step_ends_in_the_old_or_the_new_configuration(host):
    started = time.monotonic()
    # The update's steps, counted by a run that no kill point stops.
    _, counted, held = host.run("wipe", "deploy old", "deploy new", "state", kill_at=10**9)
    steps = counted["steps"]
    assert held == "new" and steps > 40, (steps, held)
    between, killed_between = [], 0
    points = kill_points(steps, host.variant.sample)
    for n in points:
        host.killed_update(n)
        killed, _, after_rerun = host.run("state", "deploy new", "state")
        killed_between += killed not in ("old", "new")
        if after_rerun != "new":
            between.append(f"kill point {n}, then the re-run: {after_rerun}")
        host.killed_update(n)
        restored, after_restore = host.run("reboot", "restore", "state")
        if after_restore not in ("old", "new"):
            between.append(f"kill point {n}, then the restore ({restored}): {after_restore}")
        print(f"kill point {n}: killed {killed if killed in ('old', 'new') else 'between'}, re-run {after_rerun}, "
              f"restore {after_restore if after_restore in ('old', 'new') else 'between'}", flush=True)  # fmt: skip
    print(f"\nVTEP update ({host.variant}): {steps} kill points, {len(points)} tried; hosts between the "
          f"configurations right after the kill: {killed_between}; after the re-run or the restore: {len(between)}; "
          f"{time.monotonic() - started:.0f} s")  # fmt: skip
    assert not between, "\n".join(between)
