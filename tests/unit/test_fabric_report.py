"""The fabric report (plugins/module_utils/reports/fabric.py): fabric.md and the picture's DOT source from the
lab's fabric (a hand-made xdpfleet_fabric fact, tests/unit/fixtures/fabric/), with and without counters, with a linux
VTEP, drops and gaps in a VNI's mesh; the SVG graphviz draws; the report without `dot`; bad input; and a playbook run
of the fabric_report action on the controller that takes its input from the hosts' facts (no host is contacted, no
root needed)."""

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from fabric_cases import lab_fleet
from lablib import run_playbook

from ansible_collections.xdpfleet.fabric.plugins.module_utils.fabric import fleet
from ansible_collections.xdpfleet.fabric.plugins.module_utils.reports import fabric as fabric_report

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fabric"
SVG = "{http://www.w3.org/2000/svg}"
LAB_VTEPS = ("a", "b", "c", "d", "l")


def fabric_fact() -> dict:
    return yaml.safe_load((FIXTURES / "xdpfleet_fabric.yml").read_text())


def vtep_facts() -> dict:
    return yaml.safe_load((FIXTURES / "xdpfleet_vtep.yml").read_text())


def markdown(fabric=None, counters=None) -> str:
    files = fabric_report.build_report("lab fabric", fabric or fabric_fact(), counters)
    return files["fabric.md"].decode()


def dot(fabric=None, counters=None) -> str:
    parsed = fabric_report.parse_fabric(fabric or fabric_fact())
    return fabric_report.build_dot("lab fabric", parsed, fabric_report.parse_counters(counters, parsed))


def section(text: str, heading: str) -> str:
    """The lines under a heading, up to the next heading of any level."""
    lines = text.split(heading + "\n", 1)[1].splitlines()
    return "\n".join(line for line in _until_heading(lines))


def _until_heading(lines):
    for line in lines:
        if line.startswith("#"):
            return
        yield line


def svg_nodes(svg: bytes) -> dict[str, str]:
    """Each node of the drawn picture by its name (the <title> graphviz gives its group), with all its text."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    nodes = {}
    for group in root.iter(f"{SVG}g"):
        if group.get("class") == "node":
            texts = " ".join(text.text or "" for text in group.iter(f"{SVG}text"))
            nodes[group.find(f"{SVG}title").text] = texts
    return nodes


def test_markdown_lists_every_vtep_its_addresses_and_vnis():
    text = markdown(counters=vtep_facts())
    assert text.startswith("# lab fabric\n\n5 VTEPs, 2 VNIs.\n\n![")
    vteps = section(text, "## VTEPs")
    hub = "198.51.100.97, 198.51.100.101, 198.51.100.105, 198.51.100.109"
    assert f"| a | xdp | derived from the model | {hub} | 100, 200 |" in vteps
    assert "| c | tc | derived from the model | 198.51.100.102 | 100, 200 |" in vteps
    assert "| l | linux | hand-written (vtep_config) | 198.51.100.110 | 100 |" in vteps


def test_the_view_the_fleet_check_keeps_for_the_lab_is_what_the_report_reads():
    group, hosts = lab_fleet()
    fact = fleet.check(hosts, group["fabric_vnis"], group.get("fabric_mtu"), group["fabric_vteps"]).report()
    text = markdown(fact)
    assert text.startswith("# lab fabric\n\n5 VTEPs, 2 VNIs.\n\n")
    # l is derived from the model in the inventory (the fixture's l has a hand-written document).
    assert "| l | linux | derived from the model | 198.51.100.110 | 100 |" in section(text, "## VTEPs")
    assert text.replace("derived from the model | 198.51.100.110", "hand-written (vtep_config) | 198.51.100.110") == (
        markdown()
    )


def test_markdown_shows_where_each_vni_is_served_and_its_full_mesh():
    text = markdown()
    vni100 = section(text, "### VNI 100 (servers), vlan_mode translate: 5 VTEPs")
    assert (
        "| a | acc100, acclocal | — | b 198.51.100.98, c 198.51.100.102, d 198.51.100.106, l 198.51.100.110 |" in vni100
    )
    assert "| d | — | trunk0 VID 10 | " in vni100
    assert "Peers: a full mesh (each VTEP lists the 4 others)." in vni100
    vni200 = section(text, "### VNI 200 (vms), vlan_mode translate: 4 VTEPs")
    assert "| l |" not in vni200 and "Peers: a full mesh (each VTEP lists the 3 others)." in vni200


def test_markdown_counters_drops_and_the_linux_vtep():
    text = markdown(counters=vtep_facts())
    counters = section(text, "## Counters after the run (summed over CPUs)")
    assert "| a | 100 | 40 | 3920 | 52 | 6800 | 0 |" in counters
    assert "| d | 100 | 5 | 490 | 3 | 306 | mtu 2 |" in counters
    assert "| l |" not in counters
    assert "- l: the linux backend is the kernel's VXLAN (bridge + vxlan device): it has no XDP counters." in counters
    drops = section(text, "## Drops by reason, per VTEP and port")
    assert drops.strip().splitlines()[2:] == ["| d | trunk0 | mtu | 2 |", "| d | trunk0 | untagged | 3 |"]


def test_markdown_without_counters_says_none_were_read():
    text = markdown()
    assert "No counters were read in this run" in text
    assert "| VTEP | VNI | rx packets" not in text and "## Drops by reason" not in text
    # Still: the linux VTEP would have none anyway.
    assert "- l: the linux backend is the kernel's VXLAN" in text and "not read in this run" not in text


def test_markdown_a_vtep_not_read_or_without_a_vtep_and_no_drops():
    counters = vtep_facts()
    for facts in counters.values():
        for table in facts.values():
            for entry in table.values():
                entry["drops"] = {}
    del counters["b"]
    counters["c"] = {"vnis": {}, "ports": {}}  # vtep_info on a host without that VTEP
    text = markdown(counters=counters)
    assert "- b: not read in this run." in text and "- c: no VTEP deployed on the host." in text
    assert section(text, "## Drops by reason, per VTEP and port").strip() == "No drops."


def test_markdown_names_every_gap_in_a_mesh():
    fabric = fabric_fact()
    members = fabric["vnis"][1]["members"]  # VNI 200
    members["a"]["peers"].remove("198.51.100.98")  # a forgets b, b lists a: one-sided
    members["c"]["peers"].remove("198.51.100.106")  # c and d forget each other
    members["d"]["peers"].remove("198.51.100.102")
    members["b"]["peers"].append("198.51.100.110")  # l does not serve VNI 200
    members["b"]["peers"].append("198.51.100.120")  # no VTEP's address
    vni200 = section(markdown(fabric), "### VNI 200 (vms), vlan_mode translate: 4 VTEPs")
    problems = [line for line in vni200.splitlines() if line.startswith("- ")]
    assert problems == [
        "- b lists l (198.51.100.110), which does not serve VNI 200",
        "- b lists 198.51.100.120, which is no VTEP's tunnel address",
        "- a does not list b, which lists a: one-sided",
        "- c does not list d",
        "- d does not list c",
    ]
    assert "Peers, not a full mesh:" in vni200 and "full mesh (each" not in vni200


def test_markdown_shows_the_fabric_checks_warnings_and_vnis_without_a_mesh():
    fabric = fabric_fact()
    fabric["warnings"] = [
        "b: fabric_vtep.vnis[2]: VNI 300 is served by b only",
        "fabric_vnis[3]: VNI 400 is served by no VTEP",
    ]
    fabric["vnis"] += [
        {"vni": 300, "name": None, "vlan_mode": "translate", "members": {"b": {"access_ports": ["acc300"]}}},
        {"vni": 400, "name": "spare", "vlan_mode": "translate", "members": {}},
    ]
    text = markdown(fabric)
    assert "## Warnings from the fabric check\n\n- b: fabric_vtep.vnis[2]: VNI 300 is served by b only\n" in text
    assert "Peers: none (one VTEP serves this VNI)." in section(text, "### VNI 300, vlan_mode translate: 1 VTEP")
    assert "Peers: none (no VTEP serves this VNI)." in section(
        text, "### VNI 400 (spare), vlan_mode translate: 0 VTEPs"
    )
    assert svg_nodes(fabric_report.build_report("x", fabric, None)["fabric.svg"]).keys() >= {"VNI 300", "VNI 400"}


def test_dot_has_a_node_per_vtep_and_vni_and_an_edge_per_membership():
    source = dot(counters=vtep_facts())
    for address in ("198.51.100.97", "198.51.100.109", "198.51.100.110"):
        assert f'<TD COLSPAN="2">{address}</TD>' in source
    assert "xdp VTEP" in source and "tc VTEP" in source and "linux VTEP" in source
    memberships = [line.strip() for line in source.splitlines() if line.strip().startswith('"VNI ')]
    assert sorted(memberships, key=str)[:2] == ['"VNI 100" -> a:v100:w', '"VNI 100" -> b:v100:w']
    assert len([m for m in memberships if "->" in m]) == 9  # 5 VTEPs in VNI 100, 4 in VNI 200
    assert "style=dashed" in next(line for line in source.splitlines() if line.strip().startswith("l [label"))
    assert "not listed" not in source  # a full mesh: no gap drawn


def test_dot_highlights_drops():
    source = dot(counters=vtep_facts())
    lines = source.splitlines()
    d_node = next(line for line in lines if line.strip().startswith("d [label"))
    assert fabric_report.ALERT_COLOR in d_node and "5 drops on its ports" in d_node and "drops mtu 2" in d_node
    a_node = next(line for line in lines if line.strip().startswith("a [label"))
    assert fabric_report.ALERT_COLOR not in a_node and "rx 40 tx 52" in a_node
    assert fabric_report.ALERT_COLOR in next(line for line in lines if "-> d:v100" in line)
    assert fabric_report.ALERT_COLOR not in next(line for line in lines if "-> d:v200" in line)
    assert fabric_report.ALERT_COLOR not in dot()  # no counters, nothing to highlight


def test_dot_draws_a_gap_in_the_mesh():
    fabric = fabric_fact()
    fabric["vnis"][1]["members"]["a"]["peers"].remove("198.51.100.98")
    gap = [line for line in dot(fabric).splitlines() if "not listed" in line]
    assert len(gap) == 1 and gap[0].strip().startswith("a -> b [")
    assert "VNI 200" in gap[0] and "style=dashed" in gap[0] and "constraint=false" in gap[0]


def test_the_picture_is_svg_with_a_node_per_vtep(tmp_path):
    files = fabric_report.build_report("lab fabric", fabric_fact(), vtep_facts())
    nodes = svg_nodes(files["fabric.svg"])
    assert set(nodes) == {*LAB_VTEPS, "VNI 100", "VNI 200"}
    assert "198.51.100.105" in nodes["a"] and "xdp VTEP" in nodes["a"]
    assert "VNI 100: trunk0 VID 10" in nodes["d"] and "drops mtu 2" in nodes["d"]
    assert "![The fabric" in files["fabric.md"].decode()


def test_without_dot_the_markdown_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no `dot` on it
    files = fabric_report.build_report("lab fabric", fabric_fact(), vtep_facts())
    assert set(files) == {"fabric.md"}
    text = files["fabric.md"].decode()
    assert "No picture (fabric.svg): graphviz's `dot` is not installed on the controller" in text
    assert "![" not in text
    assert "| d | 100 | 5 | 490 | 3 | 306 | mtu 2 |" in text  # the rest of the report is there


def test_no_picture_of_a_fabric_too_large_to_read(monkeypatch):
    monkeypatch.setattr(fabric_report, "MAX_PICTURE_MEMBERSHIPS", 8)  # the lab has 9: 5 in VNI 100, 4 in VNI 200
    files = fabric_report.build_report("lab fabric", fabric_fact(), None)
    assert set(files) == {"fabric.md"}
    assert "No picture (fabric.svg): the fabric has 9 VNI memberships" in files["fabric.md"].decode()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda f: f.pop("vteps"), "fabric.vteps: required"),
        (lambda f: f["vteps"]["b"].pop("vnis"), "fabric.vteps.b.vnis: required"),
        (lambda f: f["vteps"]["b"].update(tunnel_ips="198.51.100.98"), "fabric.vteps.b.tunnel_ips: must be list"),
        (lambda f: f["vnis"][0]["members"].update(x={}), "fabric.vnis[0].members.x: not a VTEP of fabric.vteps"),
        (lambda f: f["vnis"][1].update(vni="two hundred"), "fabric.vnis[1].vni: must be a VNI number"),
        (lambda f: f["vnis"][0]["members"]["d"]["trunks"][0].pop("vid"), "fabric.vnis[0].members.d.trunks[0].vid"),
    ],
)
def test_bad_fabric_fails_naming_the_field(edit, message):
    fabric = fabric_fact()
    edit(fabric)
    with pytest.raises(fabric_report.ReportInputError, match=re.escape(message)):
        fabric_report.build_report("x", fabric, None)


def test_bad_counters_fail_naming_the_field():
    counters = vtep_facts()
    del counters["d"]["vnis"]["100"]["tx_bytes"]
    with pytest.raises(fabric_report.ReportInputError, match=re.escape("counters.d.vnis.100.tx_bytes: required")):
        fabric_report.build_report("x", fabric_fact(), counters)
    with pytest.raises(fabric_report.ReportInputError, match=re.escape("counters.z: not a VTEP")):
        fabric_report.build_report("x", fabric_fact(), {"z": {}})


# The fabric check of the run (on the controller), and the counters vtep_info sets on the VTEP hosts (set_fact
# cacheable: into ansible_facts, with no connection); the report on localhost finds both, as site.yml's Report play
# does.
FACTS_PLAY = """
- name: The facts of a run
  hosts: vteps
  gather_facts: false
  tasks:
    - name: Check the fabric
      xdpfleet.fabric.vtep_fabric:
      run_once: true
    - name: Set the counters
      ansible.builtin.set_fact:
        xdpfleet_vtep: "{{ vtep_input[inventory_hostname] }}"
        cacheable: true
      when: inventory_hostname in vtep_input
"""
REPORT_PLAY = """
- name: Report
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write the fabric report
      xdpfleet.fabric.fabric_report:
        dest: "{{ report_dir }}"
"""


def test_playbook_takes_the_facts_writes_nothing_in_check_mode_and_reruns(tmp_path):
    path = tmp_path / "report.yml"
    path.write_text(FACTS_PLAY + REPORT_PLAY)
    group, hosts = lab_fleet()
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"vars": group, "children": {"vteps": {"hosts": hosts}}}}))
    counters = vtep_facts()
    counters.pop("d")  # no xdpfleet_vtep on d: omitted, so d has none in the report
    extra_vars = {"report_dir": "out", "vtep_input": counters}
    dest = tmp_path / "out"
    files = [str(dest / name) for name in ("fabric.svg", "fabric.md")]

    check = run_playbook(path, inventory, extra_vars, check=True)
    assert check.rc == 0, check
    result = check.result(task="Write the fabric report")
    assert result["changed"] and result["changed_files"] == files and not dest.exists()

    first = run_playbook(path, inventory, extra_vars)
    assert first.rc == 0, first
    result = first.result(task="Write the fabric report")
    assert result["changed_files"] == files and result["picture"] == files[0]
    text = (dest / "fabric.md").read_text()
    assert result["markdown"] == text
    assert "| a | 100 | 40 | 3920 | 52 | 6800 | 0 |" in text and "- d: not read in this run." in text
    assert set(svg_nodes((dest / "fabric.svg").read_bytes())) >= set(LAB_VTEPS)

    second = run_playbook(path, inventory, extra_vars)
    assert second.rc == 0 and not second.result(task="Write the fabric report")["changed"], second


def test_playbook_without_the_fabric_fact_fails_saying_what_to_run(tmp_path):
    path = tmp_path / "report.yml"
    path.write_text(REPORT_PLAY)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": {"a": {}}}}))
    failed = run_playbook(path, inventory, {"report_dir": "out"})
    assert failed.rc != 0 and "run xdpfleet.fabric.vtep_fabric first" in failed.messages(), failed
    assert not (tmp_path / "out").exists()


def test_a_stale_picture_goes_when_none_can_be_drawn(monkeypatch, tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "fabric.svg").write_text("<svg/>")
    monkeypatch.setenv("PATH", str(tmp_path))
    files = fabric_report.build_report("lab fabric", fabric_fact(), None)
    assert "fabric.svg" not in files
    changed = fabric_report.write_report(str(dest), files, check_mode=True)
    assert str(dest / "fabric.svg") in changed and (dest / "fabric.svg").exists()
    fabric_report.write_report(str(dest), files, check_mode=False)
    assert sorted(p.name for p in dest.iterdir()) == ["fabric.md"]
