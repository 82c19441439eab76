"""The real-hardware example inventories parse, and their perf_pairs name hosts they define."""

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "collection"))

from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as packet_templates

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
