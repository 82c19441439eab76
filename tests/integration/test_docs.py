"""Every module's documentation renders with ansible-doc, from the collection as ansible.cfg finds it."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))
ANSIBLE_DOC = str(Path(sys.executable).parent / "ansible-doc")
# Modules whose input is the inventory itself, not options of the task.
WITHOUT_OPTIONS = {"vtep_fabric"}


def ansible_doc(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    return subprocess.run([ANSIBLE_DOC, *args], cwd=REPO, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(scope="module")
def rendered() -> tuple[dict, dict[str, str]]:
    """Every module's documentation from one ansible-doc run as JSON and one as text (a run starts slowly):
    (the JSON by FQCN, the text by FQCN)."""
    names = [f"xdpfleet.fabric.{module}" for module in MODULES]
    as_json = ansible_doc("--json", *names)
    assert as_json.returncode == 0, as_json.stderr
    as_text = ansible_doc(*names)
    assert as_text.returncode == 0, as_text.stderr
    # Each module's text starts with a line "> MODULE <fqcn> (<path>)", the name possibly in bold.
    texts = {}
    for part in re.split(r"^(?=> MODULE )", as_text.stdout, flags=re.M)[1:]:
        texts[re.sub(r"\x1b\[[0-9;]*m", "", part.split("\n", 1)[0]).split()[2]] = part
    return json.loads(as_json.stdout), texts


@pytest.mark.parametrize("module", MODULES)
def test_module_doc_renders(rendered, module):
    as_json, texts = rendered
    doc = as_json[f"xdpfleet.fabric.{module}"]
    assert doc["doc"]["short_description"]
    assert bool(doc["doc"]["options"]) != (module in WITHOUT_OPTIONS), "every module but these takes options"
    assert doc["examples"].strip()
    assert doc["return"]
    for name, option in doc["doc"]["options"].items():
        assert option.get("description"), f"{module}: option {name} has no description"
    text = texts[f"xdpfleet.fabric.{module}"]
    assert "EXAMPLES" in text and ("OPTIONS" in text) != (module in WITHOUT_OPTIONS)


def test_the_collection_lists_its_modules():
    result = ansible_doc("-l", "xdpfleet.fabric")
    assert result.returncode == 0, result.stderr
    for module in ("xdp_program", "xdp_probe", "bpf_map_info", "lab"):
        assert f"xdpfleet.fabric.{module}" in result.stdout
