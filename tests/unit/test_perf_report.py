"""The perf_report action: its rendering on a realistic sender result, its input checks, and a playbook run of it
on the controller (no host is contacted, no root needed)."""

import json
import re

import matplotlib.image
import pytest
from lablib import run_playbook

from ansible_collections.xdpfleet.fabric.plugins.action import perf_report
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.rfc2544 import Trial

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def e810_environment(host_cpu: str) -> dict:
    return {
        "kernel": "6.8.0-41-generic",
        "cmdline": "BOOT_IMAGE=/vmlinuz-6.8.0-41-generic root=/dev/mapper/vg0-root ro iommu=pt mitigations=off",
        "driver": "ice",
        "driver_version": "6.8.0-41-generic",
        "firmware_version": "4.40 0x8001c967 1.3534.0",
        "bus_info": "0000:8a:00.0",
        "speed_mbps": 100000,
        "numa_node": 0,
        "queues": {"rx": 64, "tx": 64},
        "channels": {"combined": 64, "max_combined": 64},
        "cpus": 64,
        "cpu_model": host_cpu,
        "mac": "b4:96:91:00:00:01",
    }


def sender_result() -> dict:
    """Two frame sizes, the large one first: 64 B needs a search, 1518 B passes at line rate unpaced."""
    max_64 = Trial(None, 10.0, 1_163_000_000, 1_158_000_000)
    paced_64 = [
        Trial(58_150_000.0, 10.0, 581_500_000, 581_500_000),
        Trial(87_225_000.0, 10.0, 872_250_000, 872_250_000),
        Trial(101_762_500.0, 10.0, 1_017_625_000, 1_017_625_000),
        Trial(109_031_250.0, 10.0, 1_090_312_500, 1_090_312_500),
        Trial(112_665_625.0, 10.0, 1_126_656_250, 1_126_656_250),
        Trial(115_781_250.0, 10.0, 1_157_812_500, 1_157_812_500),
    ]
    max_1518 = Trial(None, 10.0, 81_274_380, 81_274_380)
    return {
        "host": "gen1",
        "interface": "ens1f0np0",
        "environment": e810_environment("Intel(R) Xeon(R) Platinum 8362 CPU @ 2.80GHz"),
        "template": {"name": "udp4-64flows", "flows": 64, "bases": 1, "description": "IPv4 UDP, 64 source ports"},
        "threads": 8,
        "cpus": [0, 1, 2, 3, 4, 5, 6, 7],
        "results": [
            {
                "frame_size": 1518,
                "line_rate_pps": 8127438,
                "max": max_1518.as_dict(),
                "zero_loss": max_1518.as_dict(),
                "trials": [max_1518.as_dict()],
            },
            {
                "frame_size": 64,
                "line_rate_pps": 148809524,
                "max": max_64.as_dict(),
                "zero_loss": paced_64[-1].as_dict(),
                "trials": [trial.as_dict() for trial in [max_64, *paced_64]],
            },
        ],
    }


def echo_result() -> dict:
    return {
        "host": "gen2",
        "interface": "ens1f0np0",
        "environment": e810_environment("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"),
        "counters": {"packets": 7_654_321_000, "bytes": 489_876_544_000},
    }


def pairs() -> list[dict]:
    return [{"name": "e810-b2b", "sender": sender_result(), "echo": echo_result()}]


def build(pairs_input=None, generated_at="2026-11-30T02:00:00+00:00") -> dict[str, bytes]:
    return perf_report.build_report("E810 b2b", pairs() if pairs_input is None else pairs_input, generated_at)


def test_json_round_trips_the_input():
    document = json.loads(build()["perf.json"])
    assert document == {"title": "E810 b2b", "generated_at": "2026-11-30T02:00:00+00:00", "pairs": pairs()}


def test_markdown_table_has_the_numbers_by_frame_size():
    markdown = build()["perf.md"].decode()
    lines = markdown.splitlines()
    assert lines[0] == "# E810 b2b"
    assert "## e810-b2b: sender gen1:ens1f0np0 -> echo gen2:ens1f0np0" in lines
    # 115.78125 Mpps of 148.809524 is 77.8 %; on the wire (64 + 20) * 8 bits each: 77.81 Gbit/s.
    # Unpaced: 116.3 Mpps offered, 115.8 back, 5 M of 1163 M lost (0.430 %), then six paced trials.
    row_64 = "| 64 | 148.810 | 115.781 | 77.8 % | 77.81 | 116.300 | 115.800 | 0.430 % | 7 |"
    row_1518 = "| 1518 | 8.127 | 8.127 | 100.0 % | 100.00 | 8.127 | 8.127 | 0.000 % | 1 |"
    assert row_64 in lines and row_1518 in lines
    assert lines.index(row_64) < lines.index(row_1518), "rows go by frame size"
    assert "| driver | ice | ice |" in lines
    assert "| speed | 100 Gbit/s | 100 Gbit/s |" in lines
    assert "| queues | rx 64, tx 64 | rx 64, tx 64 |" in lines
    assert any(line.startswith("| kernel cmdline | `BOOT_IMAGE") and "iommu=pt" in line for line in lines)
    cpus = "Intel(R) Xeon(R) Platinum 8362 CPU @ 2.80GHz | Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz"
    assert f"| CPU model | {cpus} |" in lines
    assert "The echo end counted 7654321000 frames, 489876544000 bytes." in lines
    assert "![e810-b2b: Mpps by frame size](perf-e810-b2b.png)" in lines
    assert "generated" not in markdown, "no timestamp: the same results give the same file"


def test_plot_is_a_png_matplotlib_reads_back(tmp_path):
    files = build()
    assert sorted(files) == ["perf-e810-b2b.png", "perf.json", "perf.md"]
    png = files["perf-e810-b2b.png"]
    assert png.startswith(PNG_SIGNATURE)
    path = tmp_path / "plot.png"
    path.write_bytes(png)
    height, width, channels = matplotlib.image.imread(path).shape
    assert 300 <= height <= 2000 and 300 <= width <= 2000 and channels in (3, 4)


def test_only_the_json_changes_from_run_to_run():
    first, second = build(generated_at="2026-11-30T02:00:00+00:00"), build(generated_at="2026-11-30T03:00:00+00:00")
    assert first["perf.md"] == second["perf.md"]
    assert first["perf-e810-b2b.png"] == second["perf-e810-b2b.png"]
    assert first["perf.json"] != second["perf.json"]


def test_unknown_speed_and_silent_echo():
    pair = pairs()[0]
    pair["sender"]["environment"]["speed_mbps"] = None
    for result in pair["sender"]["results"]:
        result["line_rate_pps"] = None
    pair["sender"]["results"][1]["zero_loss"] = None  # nothing passed at 64 B
    pair["echo"] = {}
    files = build([pair])
    lines = files["perf.md"].decode().splitlines()
    assert "## e810-b2b: sender gen1:ens1f0np0 -> echo (not reported)" in lines
    assert "| driver | ice | — |" in lines
    assert "| 64 | — | — | — | — | 116.300 | 115.800 | 0.430 % | 7 |" in lines
    assert "| 1518 | — | 8.127 | — | 100.00 | 8.127 | 8.127 | 0.000 % | 1 |" in lines
    assert files["perf-e810-b2b.png"].startswith(PNG_SIGNATURE)


def veth_pair() -> dict:
    """The lab's pair, a:p3 -> b:p3: a veth, which reports a nominal 10 Gbit/s, forwarding 3.8 Mpps of 1518 B frames
    (469 % of a 10 Gbit/s line rate, which it does not have)."""
    environment = {
        **e810_environment("Intel Xeon Processor (Icelake)"),
        "driver": "veth",
        "driver_version": "1.0",
        "firmware_version": None,
        "bus_info": None,
        "speed_mbps": 10000,
        "numa_node": None,
        "queues": {"rx": 2, "tx": 2},
        "channels": None,
        "cpus": 2,
    }
    max_64, max_1518 = Trial(None, 1.0, 4_100_000, 4_100_000), Trial(None, 1.0, 3_812_600, 3_812_600)
    # line_rate_pps as the traffic generator computes it from the 10000 the veth reports
    results = [
        {
            "frame_size": size,
            "line_rate_pps": line_rate,
            "max": trial.as_dict(),
            "zero_loss": trial.as_dict(),
            "trials": [trial.as_dict()],
        }
        for size, line_rate, trial in ((64, 14880952, max_64), (1518, 812744, max_1518))
    ]
    sender = {"host": "a", "interface": "p3", "environment": environment, "threads": 1, "results": results}
    sender["template"] = {"name": "lab-udp4-64flows", "flows": 64, "bases": 1, "description": "IPv4 UDP"}
    echo = {"host": "b", "interface": "p3", "environment": environment, "counters": {"packets": 1, "bytes": 64}}
    return {"name": "lab-a-b", "sender": sender, "echo": echo}


def test_a_virtual_link_has_no_line_rate():
    pair = veth_pair()
    markdown = build([pair])["perf.md"].decode()
    lines = markdown.splitlines()
    assert "line rate" not in markdown.replace("has no line rate", ""), markdown
    assert "469" not in markdown
    link = "- 1 sender threads, link virtual (veth): a virtual link has no line rate (its 10 Gbit/s is nominal)"
    assert link in lines
    assert "| speed | 10 Gbit/s (nominal: a virtual link) | 10 Gbit/s (nominal: a virtual link) |" in lines
    header = "| frame size | zero-loss Mpps | zero-loss Gbit/s (L1) | max offered Mpps | max received Mpps |"
    assert f"{header} loss at max | trials |" in lines
    # 3.8126 Mpps of 1518 B frames, (1518 + 20) * 8 bits each on a wire: 46.91 Gbit/s.
    assert "| 1518 | 3.813 | 46.91 | 3.813 | 3.813 | 0.000 % | 1 |" in lines
    assert set(perf_report.plot_lines(perf_report.parse_pairs([pair])[0])) == {"zero_loss", "received"}
    assert build([pair])["perf-lab-a-b.png"].startswith(PNG_SIGNATURE)


def test_a_physical_link_has_its_line_rate():
    (pair,) = perf_report.parse_pairs(pairs())
    assert pair.line_rate_mbps == 100000 and not pair.virtual_link
    label, sizes, rates = perf_report.plot_lines(pair)["line_rate"]
    assert label == "line rate, 100 Gbit/s"
    assert (sizes[0], sizes[-1]) == (64, 1518) and rates[0] == pytest.approx(148.81, rel=1e-4)
    assert "- 8 sender threads, link 100 Gbit/s" in build()["perf.md"].decode().splitlines()


def test_an_empty_environment_is_shown_as_unknown():
    # What the echo end returns in check mode.
    pair = pairs()[0]
    pair["echo"]["environment"] = {}
    assert "| driver | ice | — |" in build([pair])["perf.md"].decode().splitlines()


DELETE = object()


def _replace(document: dict, field: str, value) -> None:
    """Set (or DELETE) the field named as the errors name it: pairs[0].sender.results[1].frame_size."""
    keys = [int(key[1:-1]) if key.startswith("[") else key for key in re.findall(r"\[\d+\]|\w+", field)]
    *parents, last = keys
    for key in parents:
        document = document[key]
    if value is DELETE:
        del document[last]
    else:
        document[last] = value


@pytest.mark.parametrize(
    ("field", "value", "rule"),
    [
        ("pairs[0].sender.results[1].frame_size", DELETE, "required"),
        ("pairs[0].sender.results[0].frame_size", "64", "must be an integer"),
        ("pairs[0].sender.results[1].max", [], "must be a mapping"),
        ("pairs[0].sender.results[1].zero_loss.sent", -1, "must be >= 0"),
        ("pairs[0].sender.results[1].trials[2].seconds", 0, "must be > 0"),
        ("pairs[0].sender.results[1].max.received", True, "must be an integer"),
        ("pairs[0].sender.results", [], "must not be empty"),
        ("pairs[0].sender.environment.speed_mbps", "100G", "must be an integer or null"),
        ("pairs[0].sender.environment.kernel", DELETE, "required"),
        ("pairs[0].sender.template.flows", DELETE, "required"),
        ("pairs[0].sender.threads", 0, "must be > 0"),
        ("pairs[0].sender.interface", DELETE, "required"),
        ("pairs[0].sender", DELETE, "required"),
        ("pairs[0].echo.counters", DELETE, "required"),
        ("pairs[0].echo.environment.queues.tx", DELETE, "required"),
        ("pairs[0].name", "e810 b2b", "must be letters"),
    ],
)
def test_bad_input_fails_naming_the_field(field, value, rule):
    document = {"pairs": pairs()}
    _replace(document, field, value)
    with pytest.raises(perf_report.ReportInputError) as failure:
        build(document["pairs"])
    assert str(failure.value).startswith(f"{field}: {rule}")


def test_a_frame_size_twice_fails():
    document = pairs()
    document[0]["sender"]["results"][0]["frame_size"] = 64
    with pytest.raises(perf_report.ReportInputError, match=r"^pairs\[0\]\.sender\.results\[1\]\.frame_size: 64 again"):
        build(document)


def test_pairs_and_their_names():
    with pytest.raises(perf_report.ReportInputError, match=r"^pairs: must be a non-empty list"):
        build([])
    twice = pairs() + pairs()
    with pytest.raises(perf_report.ReportInputError, match=r"^pairs\[1\]\.name: 'e810-b2b' again \(pairs\[0\]\)"):
        build(twice)
    twice[1]["name"] = "e810-b2b.2"
    assert sorted(build(twice)) == ["perf-e810-b2b.2.png", "perf-e810-b2b.png", "perf.json", "perf.md"]


def test_write_changed_writes_what_differs_and_nothing_in_check_mode(tmp_path):
    dest = tmp_path / "reports" / "perf"
    files = build()
    assert perf_report.write_changed(str(dest), files, check_mode=True) == [str(dest / name) for name in files]
    assert not dest.exists()
    assert perf_report.write_changed(str(dest), files, check_mode=False) == [str(dest / name) for name in files]
    assert {path.name: path.read_bytes() for path in dest.iterdir()} == files
    assert perf_report.write_changed(str(dest), files, check_mode=False) == []
    again = build(generated_at="2026-11-30T03:00:00+00:00")
    assert perf_report.write_changed(str(dest), again, check_mode=True) == [str(dest / "perf.json")]
    assert (dest / "perf.json").read_bytes() == files["perf.json"]


PLAYBOOK = """
- name: Report
  hosts: all
  gather_facts: false
  tasks:
    - name: Write the report
      xdpfleet.fabric.perf_report:
        dest: "{{ report_dir }}"
        title: E810 b2b
        pairs: "{{ perf_input }}"
"""


@pytest.fixture
def playbook(tmp_path):
    path = tmp_path / "report.yml"
    path.write_text(PLAYBOOK)
    # Two hosts that are never contacted: the report is written once per play, not once per host.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"r1": {}, "r2": {}}}}))
    return path, inventory


def test_playbook_run_check_mode_and_rerun(playbook, tmp_path):
    path, inventory = playbook
    extra_vars = {"report_dir": "out", "perf_input": pairs()}  # relative: to the playbook's directory
    dest = tmp_path / "out"
    files = [str(dest / name) for name in ("perf.json", "perf.md", "perf-e810-b2b.png")]

    check = run_playbook(path, inventory, extra_vars, check=True)
    assert check.rc == 0, check
    result = check.result(task="Write the report")
    assert result["changed"] and result["changed_files"] == files and not dest.exists()

    first = run_playbook(path, inventory, extra_vars)
    assert first.rc == 0, first
    result = first.result(task="Write the report")
    assert result["files"] == files and result["changed_files"] == files
    assert result["markdown"] == (dest / "perf.md").read_text()
    assert json.loads((dest / "perf.json").read_text())["pairs"] == pairs()

    second = run_playbook(path, inventory, extra_vars)
    assert second.rc == 0, second
    result = second.result(task="Write the report")
    assert result["changed"] and result["changed_files"] == [files[0]], "only generated_at changes"


def test_playbook_bad_input_fails_naming_the_field(playbook, tmp_path):
    path, inventory = playbook
    bad = pairs()
    del bad[0]["sender"]["results"][1]["frame_size"]
    failed = run_playbook(path, inventory, {"report_dir": str(tmp_path / "out"), "perf_input": bad})
    assert failed.rc != 0
    assert "pairs[0].sender.results[1].frame_size: required" in failed.messages()
    assert not (tmp_path / "out").exists()
    not_a_list = run_playbook(path, inventory, {"report_dir": str(tmp_path / "out"), "perf_input": "x"})
    assert not_a_list.rc != 0 and "pairs" in not_a_list.messages()
