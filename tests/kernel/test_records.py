"""A program instance's state record against faults between the data plane and the record (bpf/program.py): the
process killed by SIGKILL around the change, and a state directory on a full file system (a small tmpfs, a real
ENOSPC). After each, a re-run converges and says whether it changed anything, and the restore at boot
(instances/records.py) brings back the configuration last applied, never an older one.

Each step runs in its own process in a network namespace with a veth (as a module run would), so a step can be
killed for real; the instance's pins live on a bpffs of the test's own."""

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
COUNTER = REPO / "bpf" / "counter" / "counter.c"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")

# One step: converge the counter on v0 with count_only_proto = PROTO (optionally killed just before or just after
# the data plane changes), restore from the records, or report what v0 runs.
STEP = textwrap.dedent(
    """
    import json, os, signal, sys
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build, program as xp
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records as hr
    args = json.loads(sys.argv[2])
    host = hr.HostPaths(args["state_dir"], args["pin_root"], args["cache_dir"])
    paths = host.instance("counter")
    apply = xp.Instance.apply
    def killed_around_apply(self, plan):
        if args.get("kill") == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        apply(self, plan)
        if args.get("kill") == "after":
            os.kill(os.getpid(), signal.SIGKILL)
    xp.Instance.apply = killed_around_apply
    out = {}
    if args["do"] == "converge":
        include = [os.path.join(os.path.dirname(os.path.dirname(args["source"])), "include")]
        try:
            obj, _ = build.compile_object(args["source"], host.cache_dir, include)
            done = xp.converge(paths, obj, None, "native", {"count_only_proto": args["proto"]}, ["v0"],
                               args["source"], build={"include_dirs": include, "defines": {}})
            out = {"changed": done.changed, "steps": done.changes("counter").steps}
        except (build.CompileError, xp.XdpProgramError) as exc:
            out = {"error": str(exc)}
    elif args["do"] == "restore":
        out = {r.name: r.report() for r in hr.restore(host, check_mode=False)}
    running = xp.read_running(paths, "v0")
    out["running_proto"] = int.from_bytes(running.rodata[:4], "little") if running and running.mode != "none" else None
    print(json.dumps(out))
    """
)


@pytest.fixture
def host(tmp_path, bpffs):
    """A network namespace with a veth, a bpffs for the pins, and the state, cache and pin paths of one host."""
    netns = f"{LAB_PREFIX}-rec-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "add", "v0", "type", "veth", "peer", "name", "v1"], check=True)
        for dev in ("v0", "v1"):
            subprocess.run(["ip", "-n", netns, "link", "set", dev, "up"], check=True)
        yield Host(netns, tmp_path / "state", bpffs / "xdpfleet", tmp_path / "cache")
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)


class Host:
    def __init__(self, netns: str, state_dir: Path, pin_root: Path, cache_dir: Path):
        self.netns, self.state_dir, self.pin_root, self.cache_dir = netns, state_dir, pin_root, cache_dir

    @property
    def record(self) -> Path:
        return self.state_dir / "programs" / "counter.json"

    def recorded_proto(self) -> int | None:
        return json.loads(self.record.read_text())["constants"]["count_only_proto"] if self.record.exists() else None

    def step(self, do: str, proto: int | None = None, kill: str | None = None, source: Path = COUNTER) -> dict | None:
        """Run one step; None when it was killed (as planned)."""
        args = {"do": do, "proto": proto, "kill": kill, "source": str(source)}
        args.update(state_dir=str(self.state_dir), pin_root=str(self.pin_root), cache_dir=str(self.cache_dir))
        run = subprocess.run(
            ["ip", "netns", "exec", self.netns, sys.executable, "-c", STEP, str(COLLECTION), json.dumps(args)],
            capture_output=True,
            text=True,
            check=False,
        )
        if kill:
            assert run.returncode == -9, run
            return None
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)

    def reboot(self) -> None:
        """What a reboot does to the instance: its pins, and the links they held, are gone; the records stay."""
        subprocess.run(["rm", "-rf", str(self.pin_root)], check=True)
        assert self.step("running")["running_proto"] is None


@pytest.mark.parametrize("kill", ["before", "after"])
def test_a_kill_around_the_change_converges_and_restores_the_last_configuration(host, kill):
    assert host.step("converge", proto=0)["changed"]
    assert host.recorded_proto() == 0
    host.step("converge", proto=17, kill=kill)
    # Killed after the change, the kernel runs 17: so must the record say. Killed before it, the record already
    # says what was being applied, and the re-run or the restore applies it.
    assert host.recorded_proto() == 17, f"killed {kill} the change: the record names the old configuration"
    rerun = host.step("converge", proto=17)
    assert rerun["running_proto"] == 17 and rerun["changed"] == (kill == "before"), rerun
    assert host.step("converge", proto=17)["changed"] is False

    host.step("converge", proto=6, kill="after")
    host.reboot()
    restored = host.step("restore")
    assert restored["counter"]["changed"] and restored["running_proto"] == 6, restored
    assert host.step("converge", proto=6)["changed"] is False


def test_a_stale_record_is_rewritten_by_the_next_run(host):
    """A record that names another configuration than the one running (left by an older version killed between
    the change and its record) is repaired by a re-run, which says so, and a restore then brings back what ran."""
    assert host.step("converge", proto=17)["changed"]
    pins = host.pin_root / "counter"
    made = [host.pin_root, pins, pins / "links", pins / "maps", host.state_dir, host.state_dir / "programs"]
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in made} == {str(p): "0o700" for p in made}
    assert oct(host.record.stat().st_mode & 0o777) == "0o600"
    stale = json.loads(host.record.read_text())
    stale["constants"]["count_only_proto"] = 0
    host.record.write_text(json.dumps(stale))
    rerun = host.step("converge", proto=17)
    assert rerun["changed"] and rerun["steps"] == [
        f"record what runs in {host.record} (it recorded something else)"
    ], rerun
    assert host.recorded_proto() == 17
    assert host.step("converge", proto=17)["changed"] is False
    host.reboot()
    assert host.step("restore")["running_proto"] == 17


def test_a_full_state_directory_changes_nothing_and_the_next_run_converges(host):
    """The state directory on a tmpfs filled to the last byte: the record cannot be written, so the data plane
    must not change either; once there is room, the re-run applies and records it."""
    host.state_dir.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(host.state_dir)], check=True)
    try:
        assert host.step("converge", proto=0)["changed"]
        filler = host.state_dir / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True, check=False)
        full = host.step("converge", proto=17)
        assert "No space left on device" in full.get("error", ""), full
        assert "nothing was changed" in full["error"], full
        assert full["running_proto"] == 0, "the data plane changed without a record of it"
        assert host.recorded_proto() == 0
        assert sorted(p.name for p in (host.state_dir / "programs").iterdir()) == ["counter.json"], "no leftovers"

        filler.unlink()
        rerun = host.step("converge", proto=17)
        assert rerun["changed"] and rerun["running_proto"] == 17 and host.recorded_proto() == 17, rerun
        host.reboot()
        assert host.step("restore")["running_proto"] == 17
    finally:
        subprocess.run(["umount", str(host.state_dir)], check=False)


def test_sources_and_records_others_can_write_are_refused_on_apply_and_on_restore(host, tmp_path):
    """A copy of the counter's sources in a directory anyone may write to: what it holds would be compiled and run as
    root, by the module and by the restore at boot. Both refuse it, naming the field and the rule, before anything
    runs."""
    shared = tmp_path / "shared"
    shared.mkdir()
    for part in ("counter", "include"):
        subprocess.run(["cp", "-r", str(REPO / "bpf" / part), str(shared / part)], check=True)
    os.chmod(shared, 0o777)
    rule = f"is refused: directory {shared} is writable by others (mode 0777) and has no sticky bit"
    refused = host.step("converge", proto=17, source=shared / "counter" / "counter.c")
    assert refused["error"].startswith(f"source: {shared}/counter/counter.c {rule}"), refused
    assert refused["running_proto"] is None and not host.record.exists()

    assert host.step("converge", proto=17)["changed"]
    tampered = json.loads(host.record.read_text())
    tampered.update(source=str(shared / "counter" / "counter.c"), object=str(tmp_path / "gone.o"))
    host.record.write_text(json.dumps(tampered))
    host.reboot()
    restored = host.step("restore")
    assert restored["counter"]["error"].startswith(f"source: {shared}/counter/counter.c {rule}"), restored
    assert restored["running_proto"] is None

    os.chmod(host.state_dir / "programs", 0o777)
    refused = host.step("restore")
    assert refused["counter"]["error"] == (
        f"record {host.record} is refused: directory {host.state_dir}/programs is writable by others (mode 0777) "
        "and has no sticky bit"
    ), refused
