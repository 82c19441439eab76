"""xdpfleet.fabric.xdp_program on lab hosts over real SSH: attach, idempotence, atomic replace under traffic,
check mode and diff, mode change, foreign programs, bad input, teardown.

In-host state is asserted out of band (nsenter into the host) by pin path and by interface, never by global BPF
object ids or names: every lab host shares one kernel.
"""

import json
import os
import subprocess
import tempfile
import threading
import time

import pytest
from lablib import BIN, REPO

PLAYBOOK = "tests/integration/playbooks/xdp_program.yml"
LINK_PIN = "/sys/fs/bpf/xdpfleet/{instance}/links/{ifname}"
E2_V4 = "198.51.100.70"
INSTANCES = ("counter", "other")


def xdp_on(lab, host, ifname):
    """(prog id, mode) of the XDP program on an interface, from `ip -d -j link` inside the host."""
    link = json.loads(lab.host_exec(host, ["ip", "-d", "-j", "link", "show", ifname]).stdout)[0]
    xdp = link.get("xdp")
    if not xdp:
        return None, "none"
    mode = {1: "native", 2: "generic"}.get(xdp.get("mode"), str(xdp.get("mode")))
    return xdp["prog"]["id"], mode


def pinned_link_prog(lab, host, instance, ifname):
    out = lab.host_exec(
        host, ["bpftool", "-j", "link", "show", "pinned", LINK_PIN.format(instance=instance, ifname=ifname)]
    )
    return json.loads(out.stdout)["prog_id"]


def run(lab, check=False, diff=False, **extra):
    return lab.run_playbook(PLAYBOOK, extra_vars={"prepare": False, **extra}, check=check, diff=diff)


def apply_result(result, host="a"):
    return result.result(task="Apply the program instance", host=host)


def remove_instances(lab):
    removal = [
        {"name": f"Remove {i}", "xdpfleet.fabric.xdp_program": {"name": i, "state": "absent"}} for i in INSTANCES
    ]
    result = lab.run_tasks(removal, hosts="a")
    assert result.rc == 0, result


@pytest.fixture(scope="module")
def prepared(lab):
    """Host a gets the collection's sources once (the xdp_host role); the tests then compile from them."""
    result = lab.run_playbook(PLAYBOOK, extra_vars={"prepare": True, "state": "absent"})
    assert result.rc == 0, result
    return lab


def instances_left(lab) -> bool:
    """Whether a has any trace of the test instances: a state file or a pin directory (read out of band)."""
    paths = [f"/var/lib/xdpfleet/programs/{i}.json" for i in INSTANCES]
    paths += [f"/sys/fs/bpf/xdpfleet/{i}" for i in INSTANCES]
    found = lab.host_exec("a", ["sh", "-c", 'for p; do [ -e "$p" ] && exit 0; done; exit 1', "-", *paths], check=False)
    return found.returncode == 0


def remove_instances_left(lab):
    # The module removes what is there; when a test already removed everything, there is no playbook run to wait for.
    if instances_left(lab):
        remove_instances(lab)
    assert not instances_left(lab)


@pytest.fixture
def clean(prepared):
    """Every test starts and ends with no instance on a."""
    remove_instances_left(prepared)
    yield prepared
    remove_instances_left(prepared)


def test_attach_is_idempotent_and_recorded(clean):
    lab = clean
    first = run(lab)
    assert first.rc == 0, first
    assert apply_result(first)["changed"] is True
    assert apply_result(first)["interfaces"]["p1"]["action"] == "attach"

    prog_id, mode = xdp_on(lab, "a", "p1")
    assert mode == "native"
    assert pinned_link_prog(lab, "a", "counter", "p1") == prog_id
    state = json.loads(lab.host_exec("a", ["cat", "/var/lib/xdpfleet/programs/counter.json"]).stdout)
    assert state["interfaces"]["p1"]["link_pin"] == LINK_PIN.format(instance="counter", ifname="p1")
    assert state["mode"] == "native" and state["tag"] == apply_result(first)["program"]["tag"]
    # The pins and the state file are the host's own: b has none, and neither has the machine.
    assert lab.host_exec("b", ["test", "-e", "/sys/fs/bpf/xdpfleet"], check=False).returncode != 0
    assert lab.host_exec("b", ["test", "-e", "/var/lib/xdpfleet/programs/counter.json"], check=False).returncode != 0

    second = run(lab)
    assert second.rc == 0, second
    assert second.changed() == 0, second
    assert apply_result(second)["interfaces"]["p1"]["action"] == "unchanged"
    assert apply_result(second)["program"]["id"] == prog_id
    assert xdp_on(lab, "a", "p1") == (prog_id, "native")


def test_check_mode_and_diff_change_nothing(clean):
    lab = clean
    assert run(lab).rc == 0
    before = xdp_on(lab, "a", "p1")
    checked = run(lab, check=True, diff=True, defines={"COUNTER_SLOT": 1})
    assert checked.rc == 0, checked
    result = apply_result(checked)
    assert result["changed"] is True and result["interfaces"]["p1"]["action"] == "replace"
    assert result["diff"]["before"].startswith("p1: xdp_count tag ")
    assert result["diff"]["after"].startswith("p1: xdp_count tag ")
    assert result["diff"]["before"] != result["diff"]["after"]
    assert "--- before: xdp_program counter" in checked.stdout  # shown to the user with --diff
    assert xdp_on(lab, "a", "p1") == before


def test_constants_are_part_of_idempotence(clean):
    lab = clean
    assert run(lab, constants={"count_only_proto": 17}).rc == 0
    again = run(lab, constants={"count_only_proto": 17})
    assert again.changed() == 0, again
    # Same code, so the same tag: only the .rodata contents differ, and that is a change.
    changed = run(lab, constants={"count_only_proto": 6})
    assert apply_result(changed)["interfaces"]["p1"]["action"] == "replace"
    bad = run(lab, constants={"count_only_proto": 2**40})
    assert bad.rc != 0
    assert "constants.count_only_proto: 1099511627776 does not fit a 4-byte unsigned integer" in bad.messages()


def udp_sender(lab, count, rate):
    """Send `count` UDP datagrams from e1 to e2 (through a:p1) at about `rate` per second; returns sent."""
    script = (
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"n, gap, sent = {count}, 1.0 / {rate}, 0\n"
        "start = time.monotonic()\n"
        "for i in range(n):\n"
        "    delay = start + i * gap - time.monotonic()\n"
        "    if delay > 0:\n"
        "        time.sleep(delay)\n"
        f"    sent += s.sendto(b'x' * 64, ('{E2_V4}', 9)) == 64\n"
        "print(sent)\n"
    )
    import sys

    return lab.endpoint_exec("e1", [sys.executable, "-c", script], timeout=120)


def test_replace_under_traffic_counts_every_packet(clean):
    """v1 counts into slot 0, v2 into slot 1; swapped through the pinned link mid-stream: 0 + 1 == sent."""
    lab = clean
    assert run(lab, constants={"count_only_proto": 17}).rc == 0
    lab.endpoint_exec("e1", ["ping", "-c", "1", "-W", "2", E2_V4])  # resolve neighbours before counting
    out = {}
    sender = threading.Thread(target=lambda: out.update(proc=udp_sender(lab, count=30000, rate=3000)))
    sender.start()
    time.sleep(2)
    replaced = run(lab, constants={"count_only_proto": 17}, defines={"COUNTER_SLOT": 1})
    sender.join()
    assert replaced.rc == 0, replaced
    assert apply_result(replaced)["interfaces"]["p1"]["action"] == "replace"
    sent = int(out["proc"].stdout)
    assert sent == 30000
    read = run(lab, read_counters=True, constants={"count_only_proto": 17}, defines={"COUNTER_SLOT": 1})
    entries = {e["key"]: e["value"]["packets"] for e in read.result(task="Read the counters", host="a")["entries"]}
    assert entries[0] > 0, "the old program counted nothing: the replace came before the traffic"
    assert entries[1] > 0, "the new program counted nothing: the replace came after the traffic"
    assert entries[0] + entries[1] == sent, entries


def test_mode_change_and_interface_set_change(clean):
    lab = clean
    assert run(lab, interfaces=["p1", "p2"]).rc == 0
    assert xdp_on(lab, "a", "p2")[1] == "native"
    moved = run(lab, interfaces=["p1"], mode="generic")
    assert moved.rc == 0, moved
    actions = {k: v["action"] for k, v in apply_result(moved)["interfaces"].items()}
    assert actions == {"p1": "reattach", "p2": "detach"}
    assert xdp_on(lab, "a", "p1")[1] == "generic"
    assert xdp_on(lab, "a", "p2") == (None, "none")
    assert lab.host_exec("a", ["test", "-e", LINK_PIN.format(instance="counter", ifname="p2")], check=False).returncode
    assert run(lab, interfaces=["p1"], mode="generic").changed() == 0


def test_foreign_program_needs_an_explicit_decision(clean):
    lab = clean
    prepared = run(lab, instance="other", interfaces=["p2"])  # compiles the counter on the host
    assert prepared.rc == 0
    obj = apply_result(prepared)["object"]
    run(lab, instance="other", state="absent")
    lab.host_exec("a", ["ip", "link", "set", "dev", "p2", "xdpgeneric", "obj", obj, "sec", "xdp"])
    try:
        foreign_id, _ = xdp_on(lab, "a", "p2")
        refused = run(lab, interfaces=["p2"])
        assert refused.rc != 0
        assert "interfaces: p2 already runs XDP program xdp_count" in refused.messages()
        assert "replace_foreign: true" in refused.messages()
        assert xdp_on(lab, "a", "p2") == (foreign_id, "generic")
        taken = run(lab, interfaces=["p2"], replace_foreign=True)
        assert taken.rc == 0, taken
        assert apply_result(taken)["interfaces"]["p2"]["action"] == "takeover"
        assert pinned_link_prog(lab, "a", "counter", "p2") == xdp_on(lab, "a", "p2")[0]
    finally:
        lab.host_exec("a", ["ip", "link", "set", "dev", "p2", "xdpgeneric", "off"], check=False)


BROKEN_C = "int nonsense(void) { return not_declared; }\n"
UNVERIFIABLE_C = (
    "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n"
    'SEC("xdp") int xdp_oob(struct xdp_md *ctx) { return ((unsigned char *)(long)ctx->data)[40]; }\n'
    'char LICENSE[] SEC("license") = "GPL";\n'
)


@pytest.fixture(scope="module")
def attached(prepared):
    """The counter attached to a:p1 and the bad sources on a, once for every bad input: each must leave them as
    they were, so the next one starts from the same state."""
    lab = prepared
    remove_instances_left(lab)
    assert run(lab).rc == 0
    lab.host_exec("a", ["tee", "/var/lib/xdpfleet/src/broken.c"], input=BROKEN_C)
    lab.host_exec("a", ["tee", "/var/lib/xdpfleet/src/unverifiable.c"], input=UNVERIFIABLE_C)
    yield lab
    remove_instances_left(lab)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"interfaces": ["p1", "nope0"]}, "interfaces: no such interface on this host: nope0"),
        ({"source": "/var/lib/xdpfleet/src/broken.c"}, "use of undeclared identifier 'not_declared'"),
        ({"source": "/var/lib/xdpfleet/src/unverifiable.c"}, "invalid access to packet"),
        ({"source": "/var/lib/xdpfleet/src/missing.c"}, "source /var/lib/xdpfleet/src/missing.c: no such file"),
        ({"instance": "bad/name"}, "name: 'bad/name' must be 1-64 letters"),
        ({"constants": {"no_such_knob": 1}}, "constants.no_such_knob: the object has no .rodata variable"),
    ],
)
def test_bad_input_fails_and_leaves_the_interface_as_it_was(attached, extra, message):
    lab = attached
    before = xdp_on(lab, "a", "p1")
    pins_before = lab.host_exec("a", ["find", "/sys/fs/bpf/xdpfleet"]).stdout
    failed = run(lab, **extra)
    assert failed.rc != 0
    assert message in failed.messages(), failed.messages()
    assert xdp_on(lab, "a", "p1") == before
    assert lab.host_exec("a", ["find", "/sys/fs/bpf/xdpfleet"]).stdout == pins_before


def test_absent_removes_everything_and_is_idempotent(clean):
    lab = clean
    assert run(lab, interfaces=["p1", "p2"]).rc == 0
    checked = run(lab, state="absent", check=True)
    assert apply_result(checked)["changed"] is True
    assert xdp_on(lab, "a", "p1")[1] == "native", "check mode detached"
    gone = run(lab, state="absent", diff=True)
    assert gone.rc == 0 and apply_result(gone)["changed"] is True
    # Everything removed is a line of `before` only, so --diff shows each as a removal.
    diff, tag = apply_result(gone)["diff"], apply_result(checked)["removed"][0].split(" tag ")[1]
    assert diff["before"].splitlines() == [
        f"p1: xdp_count tag {tag}",
        f"p2: xdp_count tag {tag}",
        "map xdp_counters",
        "state file /var/lib/xdpfleet/programs/counter.json",
    ]
    assert diff["after"] == ""
    assert apply_result(gone)["removed"] == apply_result(checked)["removed"] == [
        f"p1: detach xdp_count tag {tag}",
        f"p2: detach xdp_count tag {tag}",
        "remove map xdp_counters",
        "remove state file /var/lib/xdpfleet/programs/counter.json",
    ]
    assert xdp_on(lab, "a", "p1") == (None, "none") and xdp_on(lab, "a", "p2") == (None, "none")
    assert lab.host_exec("a", ["test", "-e", "/sys/fs/bpf/xdpfleet"], check=False).returncode != 0
    assert lab.host_exec("a", ["test", "-e", "/var/lib/xdpfleet/programs/counter.json"], check=False).returncode != 0
    again = run(lab, state="absent")
    assert again.rc == 0 and again.changed() == 0


def module_processes(lab, host: str) -> list[tuple[int, int]]:
    """(pid, process group) of the module processes running on a host (pids of the host's own PID namespace)."""
    ps = lab.host_exec(host, ["ps", "-eo", "pid=,pgid=,args="]).stdout.splitlines()
    found = [line.split(None, 2) for line in ps]
    return [(int(pid), int(pgid)) for pid, pgid, args in found if "python" in args.split()[0]]


def test_a_module_killed_by_sighup_mid_apply_converges_on_the_next_run(clean):
    """An SSH session that drops ends the module with SIGHUP. Killed once the new program runs, the host must still
    come to the document: the re-run converges, and the restore after a reboot brings back the new program, not the
    one before. A FIFO where the module of old wrote its record held that module exactly there (after the change,
    before the record); a module that records first passes the FIFO by."""
    lab = clean
    assert run(lab, constants={"count_only_proto": 17}).rc == 0
    before = pinned_link_prog(lab, "a", "counter", "p1")
    held = "/var/lib/xdpfleet/programs/counter.json.tmp"
    lab.host_exec("a", ["mkfifo", held])
    try:
        with tempfile.TemporaryDirectory(prefix="rc-hup-") as tmp:
            argv = [str(BIN / "ansible-playbook"), "-i", str(lab.inventory), str(REPO / PLAYBOOK)]
            argv += ["-e", json.dumps({"prepare": False, "constants": {"count_only_proto": 6}})]
            env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_SSH_CONTROL_PATH_DIR": tmp}
            playbook = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                deadline = time.monotonic() + 60
                while pinned_link_prog(lab, "a", "counter", "p1") == before and playbook.poll() is None:
                    assert time.monotonic() < deadline, "the new program never ran"
                    time.sleep(0.05)
                for _pid, pgid in module_processes(lab, "a"):  # the module's whole group, as sshd would
                    lab.host_exec("a", ["kill", "-s", "HUP", "--", f"-{pgid}"], check=False)
                playbook.wait(timeout=60)
            finally:
                if playbook.poll() is None:
                    playbook.kill()
                    playbook.wait()
    finally:
        lab.host_exec("a", ["rm", "-f", held])
    record = json.loads(lab.host_exec("a", ["cat", "/var/lib/xdpfleet/programs/counter.json"]).stdout)
    assert record["constants"] == {"count_only_proto": 6}, "the record names the program before the kill"

    rerun = run(lab, constants={"count_only_proto": 6})
    assert rerun.rc == 0 and rerun.changed() == 0, rerun
    running = pinned_link_prog(lab, "a", "counter", "p1")
    lab.restart_host("a")
    restored = lab.run_tasks([{"xdpfleet.fabric.xdp_restore": {"names": ["counter"]}}], hosts="a")
    assert restored.rc == 0, restored
    assert run(lab, constants={"count_only_proto": 6}).changed() == 0, "restored: the document's program runs"
    assert pinned_link_prog(lab, "a", "counter", "p1") != running, "a new load after the restart"
