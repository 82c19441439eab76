"""A VTEP update killed (SIGKILL) at any step leaves a host that a re-run, or the restore at boot, brings to the old
configuration or the new one, never to something in between.

Every step of an update that outlives the process (a map entry written or removed, a pin, a link, an interface's
promiscuous flag, the record) passes a kill point (plugins/module_utils/common/kill_points.py): the deploy runs in a
child process, as the module does (real module code, the real VTEP object, real maps, native XDP on veths of a
namespace of its own, pins on a bpffs of the test's own), with XDPFLEET_TEST_KILL_AT=n, and dies at the n-th step.
For each n, from the old configuration:
  (a) the same update is run again: the host must hold the new configuration;
  (b) from the killed state again, a reboot is emulated (the pins and the links they held are gone, the promiscuous
      flags are off, the records stay) and the restore runs: the host must hold the old configuration or the new one.
"Holds a configuration" is checked from the host alone, for each of the two configurations: the record names its
document; every map is pinned, the learned FDB has its fdb_size, and what the maps hold (writer.read) is what the
configuration compiles to (plan.diff is empty: a re-run would write nothing); each of its ports runs the VTEP's
ingress program through our pinned link, on exactly the pinned maps, and no other port runs an XDP program; its
access ports and trunks are promiscuous, the other ports not.

The two configurations change every kind of write: VNIs added and removed, peers added and removed, a group moving
between size classes, an access port leaving one VNI for another, a new port (attach, promiscuous flag), a trunk's
VID, a static FDB entry moving from a port to a peer, and the learned FDB's size (a new map: every link updated, the
pin replaced).

make test runs KILL_POINTS_SAMPLE kill points spread over the update (the first and the last among them);
XDPFLEET_TEST_KILL_POINTS=all (make fuzz) runs every one. The test prints how many kill points there were and how
many hosts ended between the configurations."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import LAB_PREFIX

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "collection"
PORTS = ("ul", "a1", "a2", "a3", "a4", "tr")
KILL_POINTS_SAMPLE = 5

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
    import json, os, shutil, sys
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf, program as xp
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, kill_points
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import promisc, records as hr
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vd, layouts, plan, writer
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import InterfaceFacts, validate
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.promiscuous_ports import served_ports
    args = json.loads(sys.argv[2])
    host = hr.HostPaths(args["state_dir"], args["pin_root"], args["cache_dir"])
    paths = host.instance("vtep")

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
        for port in ports:
            if port not in args["ports"]:
                continue
            running = xp.read_running(paths, port)
            attached = libbpf.xdp_query(ports[port].ifindex).prog_id
            if port not in used:
                if attached:
                    problems.append(f"{port} runs XDP program {attached}")
            elif running is None or running.mode != "native" or attached != running.prog_id:
                problems.append(f"{port} does not run the VTEP through its pinned link")
            else:
                names = {}
                for map_id in libbpf.prog_info(running.prog_fd).map_ids:
                    fd = libbpf.map_fd_by_id(map_id)
                    names[libbpf.map_info(fd).name] = map_id
                    os.close(fd)
                for map_id, name in pinned.items():
                    if names.get(name[:15], map_id) != map_id:
                        problems.append(f"{port} runs on another {name} than the pinned one")
            if promisc.promiscuous(port) != (port in served_ports(config)):
                problems.append(f"{port}: promiscuous flag {promisc.promiscuous(port)}")
        return problems

    def reboot():
        shutil.rmtree(args["pin_root"], ignore_errors=True)
        for port in args["ports"]:
            promisc.set_promiscuous(port, False)

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
            include = [os.path.join(args["repo"], "bpf", "include")]
            document = args[action.split()[1]]
            before = kill_points.passed
            vd.deploy(paths, document, "native", host.cache_dir, source, include)
            out.append({"steps": kill_points.passed - before})
    print(json.dumps(out))
    """
)


class Host:
    def __init__(self, netns: str, tmp_path: Path, bpffs: Path):
        self.netns = netns
        self.args = {
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
        env = {k: v for k, v in os.environ.items() if k != "XDPFLEET_TEST_KILL_AT"}
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


@pytest.fixture
def host(tmp_path):
    netns = f"{LAB_PREFIX}-cc-{os.getpid()}"
    bpffs = tmp_path / "bpffs"
    bpffs.mkdir()
    subprocess.run(["ip", "netns", "add", netns], check=True)
    subprocess.run(["mount", "-t", "bpf", "bpf", str(bpffs)], check=True)
    try:
        for port in PORTS:
            subprocess.run(["ip", "-n", netns, "link", "add", port, "mtu", "1600" if port == "ul" else "1500",
                            "type", "veth", "peer", "name", f"{port}p"], check=True)  # fmt: skip
            for end in (port, f"{port}p"):
                subprocess.run(["ip", "-n", netns, "link", "set", end, "up"], check=True)
        yield Host(netns, tmp_path, bpffs)
    finally:
        subprocess.run(["umount", str(bpffs)], check=False)
        subprocess.run(["ip", "netns", "del", netns], check=False)


def kill_points(steps: int) -> list[int]:
    if os.environ.get("XDPFLEET_TEST_KILL_POINTS") == "all":
        return list(range(1, steps + 1))
    return sorted({1 + round(i * (steps - 1) / (KILL_POINTS_SAMPLE - 1)) for i in range(KILL_POINTS_SAMPLE)})


def test_an_update_killed_at_any_step_ends_in_the_old_or_the_new_configuration(host):
    # The update's steps, counted by a run that no kill point stops.
    _, counted, held = host.run("wipe", "deploy old", "deploy new", "state", kill_at=10**9)
    steps = counted["steps"]
    assert held == "new" and steps > 40, (steps, held)
    between, killed_between = [], 0
    points = kill_points(steps)
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
    print(f"\nVTEP update: {steps} kill points, {len(points)} tried; hosts between the configurations right after "
          f"the kill: {killed_between}; after the re-run or the restore: {len(between)}")  # fmt: skip
    assert not between, "\n".join(between)
