"""The Prometheus text files of the metrics exporter (module_utils/metrics), read back by prometheus_client's parser
of the format: escaping, HELP/TYPE, one family per name, the families of a VTEP's, filter's, router's and counter's
counters (in the shape their readers return), the perf results of a perf.json written by perf_report, and what
`changed` means for a file whose numbers move on every read. No root, no kernel."""

import json
import math
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from prometheus_client.parser import text_string_to_metric_families
from test_perf_report import build, veth_pair

from ansible_collections.xdpfleet.fabric.plugins.filter.systemd_escape import systemd_escape
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics import host as metrics_host
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics import perf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.metrics.exposition import (
    Family,
    MetricError,
    render,
    shape,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import DROP_REASONS, FDB_EVENTS


def parsed(text: str) -> dict:
    """{family name as the parser names it: (type, help, {(sample name, sorted labels): value})}"""
    out = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in out, f"{family.name} twice"
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}
        out[family.name] = (family.type, family.documentation, samples)
    return out


def test_label_values_and_help_are_escaped_and_read_back_as_written():
    odd = 'a "quoted" back\\slash\nand a newline, spaces, {braces} = 1'
    family = Family("xdpfleet_test_total", "counter", "Help with a back\\slash\nand a second line.")
    family.add(3, rule=odd, vni=100)
    text = render([family])
    assert text.splitlines()[:2] == [
        "# HELP xdpfleet_test_total Help with a back\\\\slash\\nand a second line.",
        "# TYPE xdpfleet_test_total counter",
    ]
    assert 'rule="a \\"quoted\\" back\\\\slash\\nand a newline' in text
    kind, text_help, samples = parsed(text)["xdpfleet_test"]  # the parser names a counter without _total
    assert (kind, text_help) == ("counter", "Help with a back\\slash\nand a second line.")
    assert samples == {("xdpfleet_test_total", (("rule", odd), ("vni", "100"))): 3.0}


def test_families_sorted_each_once_samples_in_order_and_values_exact():
    b = Family("xdpfleet_b", "gauge", "B.")
    for n in (3, 1, 2):
        b.add(n, slot=n)
    a = Family("xdpfleet_a_bytes_total", "counter", "A.")
    a.add(2**64 - 1)  # a u64 counter at its end: written exactly, every digit kept
    empty = Family("xdpfleet_c", "gauge", "No samples: not written.")
    special = Family("xdpfleet_d", "gauge", "Special values.")
    special.add(float("nan"), kind="nan")
    special.add(float("inf"), kind="inf")
    special.add(0.25, kind="quarter")
    lines = render([b, empty, special, a]).splitlines()
    assert [line.split()[2] for line in lines if line.startswith("# TYPE")] == [
        "xdpfleet_a_bytes_total", "xdpfleet_b", "xdpfleet_d"
    ]  # fmt: skip
    assert 'xdpfleet_b{slot="3"} 3' in lines and lines.index('xdpfleet_b{slot="3"} 3') < lines.index(
        'xdpfleet_b{slot="1"} 1'
    )
    assert "xdpfleet_a_bytes_total 18446744073709551615" in lines
    families = parsed("\n".join(lines) + "\n")
    assert families["xdpfleet_a_bytes"][2] == {("xdpfleet_a_bytes_total", ()): 2**64 - 1}
    values = {labels[0][1]: v for (_name, labels), v in families["xdpfleet_d"][2].items()}
    assert math.isnan(values["nan"]) and values["inf"] == math.inf and values["quarter"] == 0.25


@pytest.mark.parametrize(
    ("family", "rule"),
    [
        (Family("xdpfleet_packets", "counter", "."), "a counter's name ends in _total"),
        (Family("9xdpfleet", "gauge", "."), "a name is letters, digits, '_' and ':'"),
        (Family("xdpfleet-x", "gauge", "."), "a name is letters, digits, '_' and ':'"),
        (Family("xdpfleet_x", "histogram", "."), "type 'histogram' is not one of counter, gauge"),
        (Family("xdpfleet_x", "gauge", ".", [({"__name": "a"}, 1)]), "label '__name'"),
        (Family("xdpfleet_x", "gauge", ".", [({"port-name": "a"}, 1)]), "label 'port-name'"),
        (Family("xdpfleet_x", "gauge", ".", [({"a": "1"}, 1), ({"a": "1"}, 2)]), "two samples with the labels"),
    ],
)
def test_what_prometheus_would_refuse_is_refused_naming_the_metric(family, rule):
    with pytest.raises(MetricError, match=f"metric '{family.name}': .*{rule}".replace("(", r"\(").replace(")", r"\)")):
        render([family])


def test_one_family_per_name():
    with pytest.raises(MetricError, match="'xdpfleet_x': a second family of that name"):
        render([Family("xdpfleet_x", "gauge", "."), Family("xdpfleet_x", "gauge", ".")])


def vtep_counters(rx: int) -> dict:
    """Vtep.read_counters()'s shape (the vtep_info module's facts)."""
    vni = {
        "rx_packets": rx, "rx_bytes": rx * 98, "tx_packets": 3 * rx, "tx_bytes": 344 * rx,
        "drops": {"not_peer": 2}, "fdb_events": dict.fromkeys(FDB_EVENTS, 0) | {"flooded": 4},
        "fdb": {"02:00:00:00:64:01": {"type": "static", "port": "acc100"},
                "02:00:00:00:64:05": {"type": "learned", "port": "trunk0", "vid": 10, "age": 12}},
    }  # fmt: skip
    port = {"rx_packets": 1, "rx_bytes": 60, "tx_packets": 2, "tx_bytes": 120, "drops": {}}
    return {"vnis": {100: vni, 200: {**vni, "fdb": {}}}, "ports": {"acc100": port, "ul-a": port}}


def test_every_kind_of_instance_in_one_file_read_back_by_the_parser():
    out = metrics_host.Families()
    metrics_host.add_vtep(out, "vtep", vtep_counters(10))
    rules = [{"name": "vxlan", "action": "count", "packets": 5, "bytes": 700}]
    unmatched = {"no_rule": {"packets": 1, "bytes": 2}, "not_ip": {"packets": 3, "bytes": 4}}
    metrics_host.add_filter(out, "edge", {"rules": rules, "unmatched": unmatched})
    metrics_host.add_router(out, "router", {"forwarded_v4": {"packets": 38, "bytes": 3724}})
    slots = [{"key": 0, "value": {"packets": 0, "bytes": 0}}, {"key": 1, "value": {"packets": 7, "bytes": 448}},
             {"key": 2, "value": {"packets": 0, "bytes": 0}}]  # fmt: skip
    metrics_host.add_counter(out, "counter", slots)
    families = parsed(render(out.families()))

    kind, _help, rx = families["xdpfleet_vtep_vni_rx_packets"]
    assert kind == "counter"
    assert rx == {
        ("xdpfleet_vtep_vni_rx_packets_total", (("vni", "100"), ("vtep", "vtep"))): 10.0,
        ("xdpfleet_vtep_vni_rx_packets_total", (("vni", "200"), ("vtep", "vtep"))): 10.0,
    }
    drops = families["xdpfleet_vtep_vni_dropped_packets"][2]
    assert len(drops) == 2 * len(DROP_REASONS), "every reason, zeros too"
    assert drops[("xdpfleet_vtep_vni_dropped_packets_total", (("reason", "not_peer"), ("vni", "100"),
                                                              ("vtep", "vtep")))] == 2  # fmt: skip
    port_tx = families["xdpfleet_vtep_port_tx_bytes"][2]
    assert port_tx[("xdpfleet_vtep_port_tx_bytes_total", (("port", "ul-a"), ("vtep", "vtep")))] == 120
    events = families["xdpfleet_vtep_vni_fdb_events"][2]
    assert events[("xdpfleet_vtep_vni_fdb_events_total", (("event", "flooded"), ("vni", "100"), ("vtep", "vtep")))] == 4
    kind, _help, entries = families["xdpfleet_vtep_vni_fdb_entries"]
    assert kind == "gauge"
    assert {(labels, v) for (_n, labels), v in entries.items() if ("vni", "100") in labels} == {
        ((("type", "learned"), ("vni", "100"), ("vtep", "vtep")), 1.0),
        ((("type", "static"), ("vni", "100"), ("vtep", "vtep")), 1.0),
    }
    assert families["xdpfleet_filter_rule_bytes"][2] == {
        ("xdpfleet_filter_rule_bytes_total", (("action", "count"), ("filter", "edge"), ("rule", "vxlan"))): 700
    }
    assert len(families["xdpfleet_filter_unmatched_packets"][2]) == 2
    assert families["xdpfleet_router_packets"][2] == {
        ("xdpfleet_router_packets_total", (("router", "router"), ("verdict", "forwarded_v4"))): 38
    }
    # slot 0 (the one the shipped counter counts into) always, other slots only once they counted
    assert families["xdpfleet_xdp_counter_packets"][2] == {
        ("xdpfleet_xdp_counter_packets_total", (("program", "counter"), ("slot", "0"))): 0,
        ("xdpfleet_xdp_counter_packets_total", (("program", "counter"), ("slot", "1"))): 7,
    }


def vtep_file(rx: int, vnis=(100, 200)) -> str:
    out = metrics_host.Families()
    counters = vtep_counters(rx)
    counters["vnis"] = {vni: counters["vnis"][vni] for vni in vnis}
    metrics_host.add_vtep(out, "vtep", counters)
    return render(out.families())


def test_changed_means_a_series_came_or_went_not_that_a_counter_moved(tmp_path):
    path = str(tmp_path / "textfile" / "xdpfleet.prom")
    assert shape(vtep_file(10)) == shape(vtep_file(11)) != shape(vtep_file(10, vnis=(100,)))

    planned = metrics_host.write_textfile(path, vtep_file(10), check_mode=True)
    assert planned.changed and not os.path.exists(path), "check mode writes nothing"
    first = metrics_host.write_textfile(path, vtep_file(10), check_mode=False)
    assert first.changed and first.diff["before_header"].endswith("(absent)")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644, "node_exporter reads it as its own user"
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o755

    moved = metrics_host.write_textfile(path, vtep_file(11), check_mode=False)
    assert not moved.changed and Path(path).read_text() == vtep_file(11), "rewritten with the new numbers"
    gone = metrics_host.write_textfile(path, vtep_file(12, vnis=(100,)), check_mode=False)
    assert gone.changed
    removed = set(gone.diff["before"].splitlines()) - set(gone.diff["after"].splitlines())
    assert removed and all('vni="200"' in line for line in removed), removed
    assert os.listdir(os.path.dirname(path)) == ["xdpfleet.prom"], "no temporary file left behind"


@pytest.fixture
def textfile_dir(tmp_path):
    directory = tmp_path / "textfile"
    directory.mkdir()
    directory.chmod(0o755)
    return directory


def test_a_link_in_place_of_a_file_is_refused_never_followed(tmp_path, textfile_dir):
    """The exporter runs as root: a link to a secret would put its lines into the diff, and a link to /dev/zero
    would be read without end. Refused (nothing read, nothing written) in check mode, when writing and when
    removing."""
    path = textfile_dir / "xdpfleet.prom"
    secret = tmp_path / "secret"
    secret.write_text('xdpfleet_secret{token="hunter2"} 1\n')
    for target in (secret, Path("/dev/zero")):
        path.symlink_to(target)
        for write in (
            lambda: metrics_host.write_textfile(str(path), vtep_file(1), check_mode=True),
            lambda: metrics_host.write_textfile(str(path), vtep_file(1), check_mode=False),
            lambda: metrics_host.remove_textfile(str(path), check_mode=False),
        ):
            with pytest.raises(metrics_host.UnsafeTextfile, match=r"^directory: .*/xdpfleet.prom is a symbolic link"):
                write()
        assert path.is_symlink() and sorted(os.listdir(textfile_dir)) == ["xdpfleet.prom"]
        path.unlink()
    assert secret.read_text() == 'xdpfleet_secret{token="hunter2"} 1\n'


def test_a_fifo_in_place_of_a_file_is_refused_at_once(textfile_dir):
    """Reading a FIFO waits for a writer that never comes: the timer's run would never end."""
    path = textfile_dir / "xdpfleet.prom"
    os.mkfifo(path)

    def timed_out(_signum, _frame):
        raise TimeoutError("still waiting on the FIFO after 5 s")

    previous = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(5)
    try:
        with pytest.raises(metrics_host.UnsafeTextfile, match=r"^directory: .*/xdpfleet.prom is not a regular file"):
            metrics_host.write_textfile(str(path), vtep_file(1), check_mode=False)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


def test_of_a_file_too_long_to_be_ours_nothing_is_read(textfile_dir):
    path = textfile_dir / "xdpfleet.prom"
    with open(path, "wb") as f:
        f.truncate(metrics_host.MAX_READ_BYTES + 1)  # sparse: no disk
    written = metrics_host.write_textfile(str(path), vtep_file(1), check_mode=False)
    assert written.changed and written.diff["before"] == ""
    assert written.diff["before_header"] == f"{path} (over {metrics_host.MAX_READ_BYTES} bytes: not read)"
    assert path.read_text() == vtep_file(1)


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o1777])
def test_a_directory_others_can_write_to_is_refused_before_anything_is_written(textfile_dir, mode):
    textfile_dir.chmod(mode)
    who = "others" if mode & 0o002 else "its group"
    for write in (
        lambda: metrics_host.write_textfile(str(textfile_dir / "xdpfleet.prom"), vtep_file(1), check_mode=True),
        lambda: metrics_host.write_textfile(str(textfile_dir / "xdpfleet.prom"), vtep_file(1), check_mode=False),
        lambda: metrics_host.remove_textfile(str(textfile_dir / "xdpfleet_perf.prom"), check_mode=False),
    ):
        with pytest.raises(metrics_host.UnsafeTextfile, match=rf"^directory: {textfile_dir} is writable by {who}"):
            write()
    assert os.listdir(textfile_dir) == []


def perf_document(pairs=None) -> dict:
    return json.loads(build(pairs)["perf.json"])


def test_perf_results_of_a_physical_link_for_each_end():
    document = perf_document()
    sender = parsed(render(perf.families(document, "gen1")))
    echo = parsed(render(perf.families(document, "gen2")))
    labels = (("end", "sender"), ("frame_size", "64"), ("pair", "e810-b2b"))
    # the 64 B search's last trial passed: 1,157,812,500 frames in 10 s
    assert sender["xdpfleet_perf_zero_loss_packets_per_second"] == (
        "gauge",
        "Zero-loss throughput: the highest offered rate received without loss (NaN: no rate passed).",
        {
            ("xdpfleet_perf_zero_loss_packets_per_second", labels): 115_781_250.0,
            ("xdpfleet_perf_zero_loss_packets_per_second", (*labels[:1], ("frame_size", "1518"), labels[2])):
                8_127_438.0,
        },
    )  # fmt: skip
    wire = sender["xdpfleet_perf_zero_loss_wire_bytes_per_second"][2]
    assert wire[("xdpfleet_perf_zero_loss_wire_bytes_per_second", labels)] == 115_781_250.0 * (64 + 20)
    loss = sender["xdpfleet_perf_max_loss_ratio"][2][("xdpfleet_perf_max_loss_ratio", labels)]
    assert loss == pytest.approx(5_000_000 / 1_163_000_000)
    assert sender["xdpfleet_perf_line_rate_packets_per_second"][2][
        ("xdpfleet_perf_line_rate_packets_per_second", labels)
    ] == 148809524.0
    stamp = sender["xdpfleet_perf_results_timestamp_seconds"][2]
    assert stamp == {("xdpfleet_perf_results_timestamp_seconds", (("end", "sender"), ("pair", "e810-b2b"))): 1796004000}
    echo_labels = {labels for (_n, labels) in echo["xdpfleet_perf_zero_loss_packets_per_second"][2]}
    assert {dict(labels)["end"] for labels in echo_labels} == {"echo"}
    assert not any(f.samples for f in perf.families(document, "elsewhere")), "a host in no pair: nothing"


def test_perf_results_of_a_virtual_link_have_no_line_rate_and_nan_where_nothing_passed():
    pair = veth_pair()
    pair["sender"]["results"][0]["zero_loss"] = None
    families = parsed(render(perf.families(perf_document([pair]), "a")))
    assert "xdpfleet_perf_line_rate_packets_per_second" not in families
    zero_loss = {dict(labels)["frame_size"]: v for (_n, labels), v in
                 families["xdpfleet_perf_zero_loss_packets_per_second"][2].items()}  # fmt: skip
    assert math.isnan(zero_loss["64"]) and zero_loss["1518"] == 3_812_600.0


def results(document: dict) -> list:
    return document["pairs"][0]["sender"]["results"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("generated_at"), "perf_results.generated_at: required"),
        (lambda d: d.update(generated_at="yesterday"), "perf_results.generated_at: 'yesterday' is not an ISO 8601"),
        (lambda d: results(d)[1].pop("max"), r"perf_results.pairs\[0\].sender.results\[1\].max: required"),
        (lambda d: results(d)[0]["max"].update(sent=-1), r"results\[0\].max: sent and received: must be >= 0"),
    ],
)
def test_perf_results_not_in_the_shape_of_perf_json_are_refused_naming_the_field(change, message):
    document = perf_document()
    change(document)
    with pytest.raises(perf.PerfResultsError, match=message):
        perf.families(document, "gen1")


ROLES = Path(__file__).resolve().parents[2] / "roles"
UNITS = {
    "prometheus_textfile": ("xdpfleet-metrics.service", "xdpfleet-metrics.timer"),
    "xdp_host": ("xdpfleet-restore.service", "xdpfleet-next-hops.service"),
}


def render_units(directory: Path, **overrides) -> list[str]:
    """The roles' unit templates rendered as Ansible renders them (the collection's filter included) with the roles'
    defaults and `overrides`, written into `directory`; their paths."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    env.filters["xdpfleet.fabric.systemd_escape"] = systemd_escape
    variables = {"ansible_managed": "Ansible managed"}
    for role in UNITS:
        variables.update(yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()))
    variables.update(overrides)
    paths = []
    for role, units in UNITS.items():
        for unit in units:
            template = env.from_string((ROLES / role / "templates" / f"{unit}.j2").read_text())
            (directory / unit).write_text(template.render(**variables))
            paths.append(str(directory / unit))
    return paths


def systemd_verify(paths: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(["systemd-analyze", "verify", *paths], capture_output=True, text=True, check=False)


def test_the_systemd_units_pass_systemd_analyze_verify(tmp_path):
    """The timer and its service as the roles write them with their defaults (every variable a template uses must
    have one), beside the xdp_host role's units they are installed with. systemd-analyze verify exits 0 even on a
    directive it ignores, so what it says counts: nothing."""
    verified = systemd_verify(render_units(tmp_path))
    assert verified.returncode == 0 and not verified.stdout + verified.stderr, verified
    timer = (tmp_path / "xdpfleet-metrics.timer").read_text()
    assert "OnUnitActiveSec=15\n" in timer and "AccuracySec=1s\n" in timer


def test_paths_with_spaces_and_specifiers_reach_systemd_as_given(tmp_path):
    """A space would split ExecStart's command into two words, and '%n' is a specifier systemd replaces with the
    unit's name: systemd-analyze verify finds the command (the Python) only where the unit carries its path whole."""
    odd = tmp_path / "odd dir %n $HOME"
    odd.mkdir()
    (odd / "python 100%").symlink_to(sys.executable)
    units = tmp_path / "units"
    units.mkdir()
    paths = render_units(units, xdp_host_restore_python=str(odd / "python 100%"), xdp_host_state_dir=str(odd / "s"))
    verified = systemd_verify(paths)
    assert verified.returncode == 0 and not verified.stdout + verified.stderr, verified
    restore = (units / "xdpfleet-restore.service").read_text()
    # the command's path: specifiers escaped; an argument's: specifiers and variables ($$ is one $)
    assert f'ExecStart="{odd}/python 100%%" '.replace("%n", "%%n") in restore
    assert f' --state-dir "{odd}/s" '.replace("%n", "%%n").replace("$HOME", "$$HOME") in restore
    assert f"ConditionDirectoryNotEmpty={odd}/s/programs".replace("%n", "%%n") in restore


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("/var/lib/x\nExecStartPost=/bin/sh -c id", "has a control character"),
        ("/var/lib/x\t", "has a control character"),
        ("/var/lib/x ", "starts or ends with whitespace"),
        ("/var/lib/x\\", "ends in a backslash"),
    ],
)
def test_a_path_no_unit_file_can_carry_is_refused_naming_the_variable(value, problem):
    with pytest.raises(AnsibleFilterError, match=rf"^xdp_host_state_dir: .* {problem}"):
        systemd_escape(value, "xdp_host_state_dir", exec_word="argument")


def test_the_roles_refuse_such_a_path_before_they_change_anything(tmp_path):
    """A real ansible-playbook run of each role on this machine (connection local) with a newline in a path: the
    first task fails naming the variable, and the directories the roles would write to are never made."""
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n"
        "  roles:\n    - role: xdpfleet.fabric.{{ role }}\n"
    )
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    roles = {"xdp_host": "xdp_host_restore_lib_dir", "prometheus_textfile": "prometheus_textfile_dir"}
    for role, variable in roles.items():
        extra = {
            "role": role,
            variable: str(tmp_path / "lib\nExecStartPost=/bin/sh -c id"),
            "xdp_host_install_packages": False,
            "xdp_host_state_dir": str(tmp_path / "state"),
            "prometheus_textfile_perf_results": "",
        }
        run = subprocess.run(
            [playbook, "-i", "localhost,", str(play), "-e", json.dumps(extra)],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "ANSIBLE_CONFIG": str(ROLES.parent / "ansible.cfg")},
        )  # fmt: skip
        assert run.returncode == 2, run.stdout + run.stderr
        assert f"{variable}: " in run.stdout and "has a control character" in run.stdout, run.stdout
        assert sorted(p.name for p in tmp_path.iterdir()) == ["play.yml"], role


def test_a_new_library_restarts_xdpfleet_next_hops_only_where_its_unit_is(tmp_path):
    """prometheus_textfile copies the xdp_host role's library (host_library.yml), which notifies the restart of
    xdpfleet-next-hops.service, also on hosts where xdp_host installed no such unit: a real ansible-playbook run of
    the xdp_host role's handlers, notified as that copy notifies them (the role's defaults as host_library.yml makes
    them public), on this machine, which has no such unit."""
    assert not Path("/etc/systemd/system/xdpfleet-next-hops.service").exists()
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump([{
            "hosts": "localhost", "connection": "local", "gather_facts": False,
            "vars": yaml.safe_load((ROLES / "xdp_host" / "defaults" / "main.yml").read_text()),
            "tasks": [{"name": "A new copy of the library", "ansible.builtin.debug": {"msg": "copied"},
                       "changed_when": True, "notify": "Restart xdpfleet-next-hops"}],
            "handlers": [{"name": "xdp_host's handlers",
                          "ansible.builtin.import_tasks": str(ROLES / "xdp_host" / "handlers" / "main.yml")}],
        }])
    )  # fmt: skip
    run = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROLES.parent / "ansible.cfg")},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "skipping: [localhost]" in run.stdout.split("RUNNING HANDLER [Restart xdpfleet-next-hops.service]")[1]


def test_state_absent_removes_every_file_it_wrote_from_its_record(tmp_path):
    """The module as Ansible runs it (its file with an arguments file): files written into two directories (the
    inventory's changed between runs) are recorded, and state=absent, given neither directory, removes them all
    (and only them), then the record; a second run changes nothing."""
    state_dir, first, second = tmp_path / "state", tmp_path / "textfile-1", tmp_path / "textfile-2"
    for directory in (first, second):
        assert run_module({"directory": str(directory), "state_dir": str(state_dir)}, tmp_path)["changed"]
    (second / "theirs.prom").write_text("# another exporter's\n")
    assert sorted(os.listdir(first)) == ["xdpfleet.prom"] and (second / "xdpfleet.prom").exists()
    record = state_dir / metrics_host.RECORD
    assert json.loads(record.read_text()) == {"files": [str(first / "xdpfleet.prom"), str(second / "xdpfleet.prom")]}

    absent = {"state": "absent", "directory": str(tmp_path / "default"), "state_dir": str(state_dir)}
    checked = run_module({**absent, "_ansible_check_mode": True}, tmp_path)
    assert checked["changed"] and (first / "xdpfleet.prom").exists() and record.exists(), "check mode"
    removed = run_module(absent, tmp_path)
    assert removed["changed"] and removed["files"][str(first / "xdpfleet.prom")]["changed"]
    assert os.listdir(first) == [] and os.listdir(second) == ["theirs.prom"] and not record.exists()
    assert not run_module(absent, tmp_path)["changed"]


def run_module(args: dict, tmp_path: Path) -> dict:
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"_ansible_tmpdir": str(tmp_path), **args}}))
    done = subprocess.run(
        [sys.executable, str(ROLES.parent / "plugins" / "modules" / "metrics_textfile.py"), str(args_file)],
        env={**os.environ, "PYTHONPATH": str(ROLES.parent / "collection")},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    result = json.loads(done.stdout)
    assert not result.get("failed"), result
    return result
