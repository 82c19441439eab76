"""Every module's DOCUMENTATION, EXAMPLES and RETURN are YAML that parses, read as ansible-doc reads them (the
string assigned in the module's source). A plain scalar with ": " in it parses as a mapping and ansible-doc then
renders no documentation at all; tests/integration/test_docs.py sees that too, but only minutes into make test."""

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[2] / "plugins" / "modules").glob("*.py"))
PARTS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def parts(path: Path) -> dict[str, str]:
    tree = ast.parse(path.read_text())
    return {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in PARTS
        and isinstance(node.value, ast.Constant)
    }


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_documentation_examples_and_return_parse_as_yaml(path):
    found = parts(path)
    assert set(found) == set(PARTS), f"{path.name}: {sorted(set(PARTS) - set(found))} missing"
    for name, text in found.items():
        try:
            yaml.safe_load(text)
        except yaml.YAMLError as error:
            pytest.fail(f"{path.name} {name}: {error}")
    assert isinstance(yaml.safe_load(found["DOCUMENTATION"]), dict), f"{path.name}: DOCUMENTATION is no mapping"
