"""Every module's documentation renders with ansible-doc, from the collection as ansible.cfg finds it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
ANSIBLE_DOC = str(Path(sys.executable).parent / "ansible-doc")


def ansible_doc(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    return subprocess.run([ANSIBLE_DOC, *args], cwd=REPO, env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("module", MODULES)
def test_module_doc_renders(module):
    result = ansible_doc("--json", f"xdpfleet.fabric.{module}")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)[f"xdpfleet.fabric.{module}"]
    assert doc["doc"]["short_description"]
    assert doc["doc"]["options"], "every module takes options"
    assert doc["examples"].strip()
    assert doc["return"]
    for name, option in doc["doc"]["options"].items():
        assert option.get("description"), f"{module}: option {name} has no description"
    text = ansible_doc(f"xdpfleet.fabric.{module}")
    assert text.returncode == 0 and "OPTIONS" in text.stdout and "EXAMPLES" in text.stdout


def test_the_collection_lists_its_modules():
    result = ansible_doc("-l", "xdpfleet.fabric")
    assert result.returncode == 0, result.stderr
    for module in ("xdp_program", "xdp_probe", "bpf_map_info", "lab"):
        assert f"xdpfleet.fabric.{module}" in result.stdout
