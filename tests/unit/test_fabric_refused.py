"""Invalid fleets refused by a real `ansible-playbook playbooks/vtep.yml` run before any host is touched: the check
play (playbooks/fabric_check.yml) fails on the controller, naming the host and the field, and no other task runs on
any host. The inventories' hosts point at an address nothing answers on, with a one-second SSH timeout: a host that
was contacted would show up unreachable. The runs go in parallel (each is a few seconds of controller work).

Every fleet of fabric_cases.INVALID is refused by the model itself in test_fabric.py; here, one fleet per place a
problem comes from (VIA_PLAYBOOK) goes through the playbook, which is what this file tests: that the model's verdict
stops the play and reaches the user. (All of INVALID through the playbook took about 77 s of the unit tier.)
"""

import importlib.util
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fabric_cases
import pytest
import yaml
from fabric_cases import INVALID, LAB, invalid
from lablib import BIN, REPO, run_playbook

CHECK_TASK = "Derive every VTEP's document and check the fleet"
LAB_CHECK = "Check that each lab host of this run is running"
NOBODY = "198.51.100.254"  # no lab host has it; nothing is ever sent there (the check play fails first)


# A fleet-wide clash, a hand-written document, a host's own numbers, the schema, and the group's fabric_vnis.
VIA_PLAYBOOK = (
    fabric_cases.duplicate_address,
    fabric_cases.handwritten_missing_peer,
    fabric_cases.tunnel_mtu_too_small,
    fabric_cases.unknown_key,
    fabric_cases.vni_twice_in_fabric,
)
CASES = [(change, problem) for change, problem in INVALID if change in VIA_PLAYBOOK]


def write_inventory(root: Path, group: dict, hosts: dict) -> Path:
    (root / "group_vars" / "all").mkdir(parents=True)
    (root / "host_vars").mkdir()
    connection = {"ansible_host": NOBODY, "ansible_ssh_common_args": "-o ConnectTimeout=1"}
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": connection, "hosts": {h: {} for h in hosts}}}))
    (root / "group_vars" / "all" / "vtep.yml").write_text(yaml.safe_dump(group, sort_keys=False))
    for host, variables in hosts.items():
        kept = {name: value for name, value in variables.items() if value is not None}
        (root / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(kept, sort_keys=False))
    return root


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """change name -> (the run, the problem expected), every fleet's run in parallel."""

    inventories = [write_inventory(tmp_path_factory.mktemp(change.__name__), *invalid(change)) for change, _ in CASES]
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda inventory: run_playbook(REPO / "playbooks" / "vtep.yml", inventory), inventories))
    return {change.__name__: (result, problem) for (change, problem), result in zip(CASES, runs, strict=True)}


def test_at_least_fifteen_fleets_and_each_playbook_case_is_one_of_them():
    assert len(INVALID) >= 15 and len(CASES) == len(VIA_PLAYBOOK)


@pytest.mark.parametrize("name", [change.__name__ for change, _ in CASES])
def test_an_invalid_fleet_is_refused_before_any_host_is_touched(refused, name):
    result, problem = refused[name]
    assert result.rc != 0, result
    assert f"- {problem}" in result.messages(), result
    assert "no host was changed" in result.messages()
    # The lab check (nothing to check: no lab host here) and the fabric check ran, once each, on the controller;
    # nothing else ran anywhere (no xdp_host, no vtep role).
    assert [(t["task"], t["status"]) for t in result.tasks] == [(LAB_CHECK, "skipped"), (CHECK_TASK, "failed")], result
    assert all(stats["changed"] == 0 and stats["unreachable"] == 0 for stats in result.stats.values()), result


def test_a_vtep_that_sees_another_fabric_vnis_is_refused(tmp_path):
    """fabric_vnis is read once, from the first VTEP of the model (a): c, whose host vars give VNI 100 another
    vlan_mode, would be configured as if it had a's. Refused, naming c and the variable."""
    group, hosts = invalid(lambda group, hosts: None)
    hosts["c"]["fabric_vnis"] = [{"vni": 100, "vlan_mode": "preserve"}, {"vni": 200}]
    result = run_playbook(REPO / "playbooks" / "vtep.yml", write_inventory(tmp_path / "inventory", group, hosts))
    assert result.rc != 0, result
    assert "- c: fabric_vnis: differs from the fabric_vnis of a; a fabric has one fabric_vnis" in result.messages()
    assert "fabric_mtu" not in result.messages()
    assert [(t["task"], t["status"]) for t in result.tasks] == [(LAB_CHECK, "skipped"), (CHECK_TASK, "failed")], result


def test_a_group_variable_that_templates_differently_per_vtep_is_refused(tmp_path):
    """One definition in group vars, but a template in it gives c another fabric_mtu than a: compared as each VTEP
    sees it (the check skips templating again only a definition with no template in it)."""
    group, hosts = invalid(lambda group, hosts: None)
    group["fabric_mtu"] = "{{ 1600 if inventory_hostname == 'c' else 1500 }}"
    result = run_playbook(REPO / "playbooks" / "vtep.yml", write_inventory(tmp_path / "inventory", group, hosts))
    assert result.rc != 0, result
    assert "- c: fabric_mtu: differs from the fabric_mtu of a; a fabric has one fabric_mtu" in result.messages()
    assert "- b: fabric_mtu" not in result.messages()


def test_the_lab_fleet_itself_passes_the_check(tmp_path):
    """The same inventory with the lab's own fleet: the check passes, and every host gets the fact (a play that
    stops after the check, so no host is contacted)."""
    group = yaml.safe_load((LAB / "group_vars" / "all" / "vtep.yml").read_text())
    hosts = {h: yaml.safe_load((LAB / "host_vars" / f"{h}.yml").read_text()) for h in ("a", "b", "c", "d", "l")}
    inventory = write_inventory(tmp_path / "inventory", group, hosts)
    play = [
        {"name": "Check the fabric", "ansible.builtin.import_playbook": str(REPO / "playbooks" / "fabric_check.yml")},
        {
            "name": "Show the derived documents",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [{"name": "Show", "ansible.builtin.debug": {"msg": "{{ vtep_fabric_document }}"}}],
            "vars": {"vtep_fabric_document": "{{ lookup('xdpfleet.fabric.vtep_document', inventory_hostname) }}"},
        },
    ]
    playbook = tmp_path / "check.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    result = run_playbook(playbook, inventory)
    assert result.rc == 0, result
    assert result.result(task=CHECK_TASK)["msg"] == "5 VTEPs, 2 VNIs: the fabric is consistent"
    shown = {t["host"]: t["result"]["msg"] for t in result.results(task="Show")}
    assert shown["b"]["vnis"][0]["peers"][0] == {"ip": "198.51.100.97", "via": "ul-a"}
    assert sorted(shown) == ["a", "b", "c", "d", "l"]


def test_a_fabric_checked_by_an_earlier_run_is_refused(tmp_path, monkeypatch):
    """With a persistent fact cache, the fact of an earlier run's check is still there when a run skips the check:
    the vtep role refuses it before any host is contacted, instead of configuring the documents of a derivation
    this run did not check. The hosts' fact carries the digest only, nothing of the fleet's size."""
    group = yaml.safe_load((LAB / "group_vars" / "all" / "vtep.yml").read_text())
    hosts = {h: yaml.safe_load((LAB / "host_vars" / f"{h}.yml").read_text()) for h in ("a", "b", "c", "d", "l")}
    inventory = write_inventory(tmp_path / "inventory", group, hosts)
    cache = tmp_path / "facts"
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN", "jsonfile")
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(cache))
    checked = run_playbook(REPO / "playbooks" / "fabric_check.yml", inventory)
    assert checked.rc == 0, checked
    # ansible-core 2.19 prefixes the file name and wraps the facts in a serialized payload
    (cached_b,) = [path for path in cache.iterdir() if path.name.rpartition("_")[2] == "b"]
    entry = json.loads(cached_b.read_text())
    cached = json.loads(entry["__payload__"])["xdpfleet_fabric"] if "__payload__" in entry else entry["xdpfleet_fabric"]
    assert sorted(cached) == ["digest", "vnis", "vteps"] and cached["vteps"] == 5

    play = [
        {"name": "Check the fabric", "ansible.builtin.import_playbook": str(REPO / "playbooks" / "fabric_check.yml")},
        {"name": "Configure", "hosts": "all", "gather_facts": False, "roles": ["xdpfleet.fabric.vtep"]},
    ]
    playbook = tmp_path / "vtep.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    stale = run_playbook(playbook, inventory, extra_vars={"vtep_fabric_checked": True, "lab_prefix": "xt"})
    assert stale.rc != 0, stale
    refused = stale.results(task="xdpfleet.fabric.vtep : Take this host's document")
    assert sorted(t["host"] for t in refused if t["status"] == "failed") == ["a", "b", "c", "d", "l"], stale
    assert f"the fabric '{cached['digest']}' was not checked by this run" in stale.messages()
    assert all(s["unreachable"] == 0 for s in stale.stats.values()), stale


def load_scale_fleet():
    """tests/scale/test_scale.py as a module (its fleet's variables), without collecting its tests here."""
    spec = importlib.util.spec_from_file_location("scale_fleet", REPO / "tests" / "scale" / "test_scale.py")
    scale = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scale)
    return scale


def scale_inventory(root: Path) -> Path:
    """The scale test's fleet (tests/scale, its default size) as an inventory: its VTEPs and the hub."""
    scale = load_scale_fleet()
    group = {"fabric_vnis": scale.FABRIC_VNIS, "fabric_vteps": scale.VTEPS, "vtep_backend": "xdp"}
    hosts = {name: scale.vtep_host_vars(name) for name in scale.VTEPS}
    hosts["hub"] = {}
    return write_inventory(root, group, hosts)


def awx_slices(inventory: Path, count: int, root: Path) -> list[Path]:
    """The inventory cut as an AWX or Automation Platform sliced job cuts it: host i of n (in the inventory's order)
    goes to slice i mod n, and each slice is an inventory of its own hosts only, with their variables and groups."""
    listed = json.loads(
        subprocess.run(
            [str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"],
            capture_output=True, text=True, check=True, env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg")),
        ).stdout
    )  # fmt: skip
    hostvars = listed["_meta"]["hostvars"]
    order = list(hostvars)
    slices = []
    for number in range(count):
        members = order[number::count]
        groups = {
            name: {"hosts": {host: None for host in group.get("hosts", []) if host in members}}
            for name, group in listed.items()
            if name not in ("_meta", "all", "ungrouped")
        }
        path = root / f"slice{number + 1}of{count}.yml"
        path.write_text(
            yaml.safe_dump({"all": {"hosts": {h: hostvars[h] for h in members}, "children": groups}}, sort_keys=False)
        )
        slices.append(path)
    return slices


@pytest.mark.parametrize(("fleet", "count"), [("lab", 2), ("scale", 3)])
def test_a_sliced_run_is_refused_before_any_host_is_touched(tmp_path, fleet, count):
    """A sliced job's run sees only its slice of the inventory: the fabric check refuses it (fabric_vteps names
    VTEPs it does not see) instead of deriving a partial mesh, and no host is contacted. The whole inventory passes
    the check (test_the_lab_fleet_itself_passes_the_check; here the scale fleet's, too)."""
    if fleet == "lab":
        group = yaml.safe_load((LAB / "group_vars" / "all" / "vtep.yml").read_text())
        hosts = {h: yaml.safe_load((LAB / "host_vars" / f"{h}.yml").read_text()) for h in ("a", "b", "c", "d", "l")}
        inventory = write_inventory(tmp_path / "inventory", group, hosts)
    else:
        inventory = scale_inventory(tmp_path / "inventory")
    extra = {"lab_prefix": "xt"}
    whole = run_playbook(REPO / "playbooks" / "fabric_check.yml", inventory, extra)
    assert whole.rc == 0 and "the fabric is consistent" in whole.result(task=CHECK_TASK)["msg"], whole
    slices = awx_slices(inventory, count, tmp_path)
    with ThreadPoolExecutor(max_workers=4) as pool:
        runs = list(pool.map(lambda path: run_playbook(REPO / "playbooks" / "vtep.yml", path, extra), slices))
    for path, result in zip(slices, runs, strict=True):
        assert result.rc != 0, (path, result)
        assert "fabric_vteps: " in result.messages() and "not a VTEP of this run's inventory" in result.messages()
        assert [t["status"] for t in result.tasks if t["task"] == CHECK_TASK] == ["failed"], result
        assert all(s["unreachable"] == 0 for s in result.stats.values()), result


def test_a_removal_needs_no_fabric_check(tmp_path):
    """vtep_state=absent runs no check and reads no document: every VTEP host is contacted (here: unreachable, as
    nothing answers at its address), none is failed on the controller for a missing fabric."""
    group = yaml.safe_load((LAB / "group_vars" / "all" / "vtep.yml").read_text())
    hosts = {h: yaml.safe_load((LAB / "host_vars" / f"{h}.yml").read_text()) for h in ("a", "b", "c", "d", "l")}
    inventory = write_inventory(tmp_path / "inventory", group, hosts)
    removal = run_playbook(REPO / "playbooks" / "vtep.yml", inventory, {"vtep_state": "absent", "lab_prefix": "xt"})
    assert {host: (s["failed"], s["unreachable"]) for host, s in removal.stats.items() if host != "localhost"} == {
        host: (0, 1) for host in hosts
    }, removal
