"""Names that become paths or pins on a host: the rules (common/names.py), and the modules refusing a bad one before
they touch anything (each module run as Ansible runs it: its file with an arguments file)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names


@pytest.mark.parametrize("name", ["vtep", "tg-echo-eth0", "a", "A0_.-", "x" * 64])
def test_instance_names(name):
    assert names.instance_name_problem(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", ".hidden", "-x", "x\n", "x y", "x" * 65, "é"])
def test_not_instance_names(name):
    assert names.instance_name_problem(name).startswith(f"{name!r} must be 1-64 letters")


@pytest.mark.parametrize("name", ["eth0", "ul-b", "a" * 15, "é" * 7, "br0.100", "...", "vétép"])
def test_interface_names(name):
    assert names.ifname_problem(name) is None


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a" * 16, "é" * 8, "eth0\n", "eth 0", "eth0\t", "a/b", "a:b", "a\u00a0b", "\u2003"]
)
def test_not_interface_names(name):
    """IFNAMSIZ counts bytes: eight 2-byte characters do not fit 15; whitespace of any kind is refused."""
    assert "1..15 bytes (UTF-8)" in names.ifname_problem(name)


def run_module(module: str, args: dict, tmp_path) -> dict:
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"_ansible_tmpdir": str(tmp_path), **args}}))
    env = {**os.environ, "PYTHONPATH": str(REPO / "collection")}
    done = subprocess.run(
        [sys.executable, str(REPO / "plugins" / "modules" / f"{module}.py"), str(args_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("module", "args", "field"),
    [
        ("vtep", {"name": "../escape", "config": {"vnis": [{"vni": 1, "access_ports": ["lo"]}]}}, "name"),
        ("vtep", {"name": "../escape", "state": "absent"}, "name"),
        ("vtep_info", {"name": "../../escape"}, "name"),
        ("xdp_program", {"name": "x\n", "state": "absent"}, "name"),
        ("xdp_program", {"name": "ok", "object": "/nonexistent.o", "interfaces": ["../../x"]}, "interfaces[0]"),
        ("bpf_map_info", {"instance": "..", "map": "flows"}, "instance"),
        ("bpf_map_info", {"instance": "ok", "map": "../../../etc"}, "map"),
        ("trafficgen", {"mode": "echo", "interface": "../x", "state": "absent"}, "interface"),
        ("xdp_restore", {"names": ["ok", "x\n"]}, "names[1]"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_modules_refuse_a_name_that_leaves_its_directory_before_any_change(module, args, field, tmp_path):
    paths = {"pin_root": str(tmp_path / "pins")}
    if module not in ("vtep_info", "bpf_map_info"):
        paths |= {"state_dir": str(tmp_path / "state"), "cache_dir": str(tmp_path / "cache")}
    result = run_module(module, {**args, **paths}, tmp_path)
    assert result.get("failed"), result
    assert result["msg"].startswith(f"{field}: "), result["msg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args.json"]  # no pin, state or cache directory
