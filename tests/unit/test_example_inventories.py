"""The real-hardware example inventories parse, their perf_pairs name hosts they define, and the VTEP fleet's
documents, derived from its fabric model, pass the VTEP's own validation and make a consistent fabric."""

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from lablib import run_playbook

from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as packet_templates
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vtep_config

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_INVENTORY = str(Path(sys.executable).parent / "ansible-inventory")
DOCUMENTATION_NETWORKS = [ipaddress.ip_network("198.51.100.0/24"), ipaddress.ip_network("2001:db8::/32")]


def inventory(name: str) -> dict:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    result = subprocess.run(
        [ANSIBLE_INVENTORY, "-i", str(REPO / "inventories" / "examples" / name), "--list"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "[WARNING]" not in result.stderr, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("name", ["e810-b2b", "mlx5-b2b"])
def test_example_inventory_parses_and_its_pairs_name_its_hosts(name):
    hostvars = inventory(name)["_meta"]["hostvars"]
    assert len(hostvars) == 2, "two servers back to back"
    for host, variables in hostvars.items():
        address = ipaddress.ip_address(variables["ansible_host"])
        assert any(address in network for network in DOCUMENTATION_NETWORKS), f"{host}: {address}"
        assert variables["ansible_user"] and variables["ansible_python_interpreter"]
    pairs = next(iter(hostvars.values()))["perf_pairs"]
    assert all(variables["perf_pairs"] == pairs for variables in hostvars.values()), "every host sees the pairs"
    assert pairs and len({pair["name"] for pair in pairs}) == len(pairs)
    for pair in pairs:
        assert pair["sender"]["host"] in hostvars and pair["echo"]["host"] in hostvars
        assert pair["sender"]["host"] != pair["echo"]["host"]
        assert pair["sender"]["interface"] and pair["echo"]["interface"]
        template = pair["template"]
        if isinstance(template, str):
            assert template in packet_templates.EXAMPLES, f"{template}: not a built-in template"
            template = packet_templates.EXAMPLES[template]
        for size in pair["frame_sizes"]:
            assert isinstance(size, int) and 64 <= size <= 1518
            packet_templates.validate(packet_templates.with_frame_size(template, size))
        assert isinstance(pair["threads"], int) and pair["threads"] > 0
        assert 0 <= pair["loss_tolerance"] <= 1 and pair["trial_seconds"] > 0


# ---- the VTEP fleet (inventories/examples/vtep-fleet) ----------------------------------------------------------

FLEET = REPO / "inventories" / "examples" / "vtep-fleet"
# The driver's MTU where the inventory's host tuning sets none.
DEFAULT_MTU = 1500


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> dict[str, dict]:
    """Every host's VTEP variables as the playbooks see them: the fabric checked and every document derived by the
    check play of playbooks/vtep.yml (playbooks/fabric_check.yml), then templated by Ansible itself (a play of debug
    tasks, which run on the controller and contact no host)."""
    shown = {
        "vtep_config": "{{ lookup('xdpfleet.fabric.vtep_document', inventory_hostname) or None }}",
        **{name: f"{{{{ {name} | default(None) }}}}" for name in ("vtep_health_probes", "host_tuning_nics")},
    }
    play = [
        {"name": "Check the fabric", "ansible.builtin.import_playbook": str(REPO / "playbooks" / "fabric_check.yml")},
        {
            "name": "The fleet's variables",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [{"name": "Show them", "ansible.builtin.debug": {"msg": shown}}],
        },
    ]
    playbook = tmp_path_factory.mktemp("fleet") / "show.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    result = run_playbook(playbook, FLEET)
    assert result.rc == 0, result
    warnings = result.result(task="Derive every VTEP's document and check the fleet").get("warnings", [])
    return {
        task["host"]: {**task["result"]["msg"], "fabric_warnings": warnings}
        for task in result.results(task="Show them")
    }


def vteps(fleet: dict[str, dict]) -> dict[str, dict]:
    return {host: variables for host, variables in fleet.items() if variables["vtep_config"]}


def interface_facts(variables: dict) -> dict[str, vtep_config.InterfaceFacts]:
    """The interfaces a VTEP of the example has once playbooks/tune.yml ran: every port its document names, with the
    MTU its host_tuning_nics sets (else the driver's default)."""
    document = variables["vtep_config"]
    ports = [tunnel["port"] for tunnel in document["tunnel_ports"]]
    for vni in document["vnis"]:
        ports += vni.get("access_ports", []) + [trunk["port"] for trunk in vni.get("trunks", [])]
    mtu = {nic["name"]: nic["mtu"] for nic in variables["host_tuning_nics"] or [] if "mtu" in nic}
    return {
        port: vtep_config.InterfaceFacts(
            ifindex=index, mtu=mtu.get(port, DEFAULT_MTU), mac=f"02:00:00:00:00:{index:02x}"
        )
        for index, port in enumerate(dict.fromkeys(ports), start=2)
    }


def test_vtep_fleet_parses_with_documentation_addresses():
    hostvars = inventory("vtep-fleet")["_meta"]["hostvars"]
    assert {"vtep1", "vtep2", "vtep3", "vtep4"} <= set(hostvars)
    for host, variables in hostvars.items():
        address = ipaddress.ip_address(variables["ansible_host"])
        assert any(address in network for network in DOCUMENTATION_NETWORKS), f"{host}: {address}"
        assert variables["ansible_user"] and variables["ansible_python_interpreter"]


def test_every_vtep_document_passes_the_vtep_validation(fleet):
    found = vteps(fleet)
    assert sorted(found) == ["vtep1", "vtep2", "vtep3", "vtep4"]
    assert all(variables["fabric_warnings"] == [] for variables in fleet.values())
    for host, variables in found.items():
        facts = interface_facts(variables)
        tuned = {nic["name"] for nic in variables["host_tuning_nics"]}
        assert tuned <= set(facts), f"{host}: host_tuning_nics names ports its VTEP does not use: {tuned - set(facts)}"
        try:
            vtep_config.validate(variables["vtep_config"], facts)
        except vtep_config.ConfigError as error:
            pytest.fail(f"{host}: {error}")


def test_the_fleet_is_a_full_mesh_per_vni(fleet):
    """Every VTEP of a VNI lists every other VTEP of that VNI as a peer, by its tunnel address, and nothing else
    (split horizon: a VTEP never relays between tunnels, so a missing peer is never reached); a VNI's trunks use one
    VID fleet-wide (the tag travels inside the VXLAN packet); every address is a documentation address."""
    documents = {host: variables["vtep_config"] for host, variables in vteps(fleet).items()}
    tunnel_ip = {}
    for host, document in documents.items():
        for tunnel in document["tunnel_ports"]:
            address = ipaddress.ip_address(tunnel["local_ip"])
            assert address in DOCUMENTATION_NETWORKS[0], f"{host}: {address}"
            assert address not in tunnel_ip.values(), f"{host}: tunnel address {address} used twice"
            tunnel_ip[host] = address
    members: dict[int, set[str]] = {}
    vids: dict[int, set[int]] = {}
    for host, document in documents.items():
        for vni in document["vnis"]:
            members.setdefault(vni["vni"], set()).add(host)
            vids.setdefault(vni["vni"], set()).update(trunk["vid"] for trunk in vni.get("trunks", []))
    assert len(members) >= 2 and all(len(hosts) == 4 for hosts in members.values()), members
    assert all(len(vid) <= 1 for vid in vids.values()), f"a VNI's trunks use one VID fleet-wide: {vids}"
    for host, document in documents.items():
        for vni in document["vnis"]:
            peers = {ipaddress.ip_address(peer["ip"]) for peer in vni["peers"]}
            others = {tunnel_ip[other] for other in members[vni["vni"]] - {host}}
            assert peers == others, (
                f"{host} VNI {vni['vni']}: peers {sorted(map(str, peers))}, want {sorted(map(str, others))}"
            )


def test_health_probes_start_from_inventory_hosts(fleet):
    for host, variables in vteps(fleet).items():
        probes = variables["vtep_health_probes"]
        assert probes, f"{host}: no health probe"
        for probe in probes:
            assert probe["from"] in fleet and probe["from"] not in vteps(fleet), f"{host}: {probe}"
            assert ipaddress.ip_address(probe["to"]) in DOCUMENTATION_NETWORKS[0], f"{host}: {probe}"
