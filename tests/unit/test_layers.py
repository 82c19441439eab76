"""plugins/module_utils is in layers (docs/architecture.md, "Layers"): a package imports only from packages below
it, data planes (and the other packages of one tier) never import each other, and there is no import cycle, neither
between packages nor between the modules of one package.

Every import is read from the source (ast), wherever it is: at the top, under TYPE_CHECKING, inside a function;
absolute (ansible_collections.xdpfleet.fabric.plugins.module_utils.<package>...) and relative (from . import x,
from ..bpf import y). Why the order matters: a module carries every module_util it imports to the managed host, and
a reader of a low layer should not need to know the ones above it.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

MODULE_UTILS = Path(__file__).resolve().parents[2] / "plugins" / "module_utils"
ROOT = "ansible_collections.xdpfleet.fabric.plugins.module_utils"
TIERS = (
    ("common",),
    ("bpf",),
    ("host",),
    ("dataplane",),
    ("vtep", "filter", "router", "trafficgen", "tuning"),
    ("instances",),  # the records and the registry of every data plane, which the exporter reads instances through
    ("metrics", "fabric", "reports"),
)
# Imports against the layers that another branch is taking out, each allowed here until then as (importer,
# imported); a stale entry fails the test, so that it goes with its import. Empty: the two there were (bpf.abi and
# bpf.btf_layout importing each other, vtep.linux taking BPF instructions from host.probe) are gone from main.
PENDING: frozenset[tuple[str, str]] = frozenset()


def module_name(root: Path, path: Path) -> str:
    """The dotted name of a file under `root` ("vtep.deploy"; a package's __init__ is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_of(root: Path) -> dict[str, Path]:
    return {module_name(root, path): path for path in sorted(root.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules under the root that `name` (at `path`) imports anywhere in its source, by their dotted names: a
    `from package import x` names the module x when there is one, else the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                targets = [".".join([*base, *([node.module] if node.module else [])])]
                targets = [f"{ROOT}.{targets[0]}" if targets[0] else ROOT]
            else:
                targets = [node.module or ""]
            names = [alias.name for alias in node.names]
        else:
            continue
        for target in targets:
            if target != ROOT and not target.startswith(ROOT + "."):
                continue
            inner = target[len(ROOT) + 1 :]
            submodules = [f"{inner}.{n}" if inner else n for n in names if (f"{inner}.{n}" if inner else n) in known]
            if submodules:
                found.update(submodules)
            elif inner:
                found.add(inner)
    return found - {name}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules under root it imports (edges in PENDING left out)."""
    modules = modules_of(root)
    known = set(modules)
    return {
        name: {target for target in imports_of(name, path, known) if (name, target) not in PENDING}
        for name, path in modules.items()
    }


def package_of(module: str) -> str:
    return module.split(".")[0]


def tier_of(package: str) -> int | None:
    return next((n for n, tier in enumerate(TIERS) if package in tier), None)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected part of more than one node, or a node importing itself (Tarjan's algorithm), each
    sorted; so each cycle is named once."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                part.append(member)
                if member == node:
                    break
            if len(part) > 1 or node in graph.get(node, ()):
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def problems(root: Path) -> list[str]:
    """Every import against the layers, and every cycle between packages or between the modules of one package."""
    graph = import_graph(root)
    out = []
    packages: dict[str, set[str]] = {}
    for importer, targets in sorted(graph.items()):
        if "." not in importer:
            continue  # module_utils/__init__.py, if any: no package
        source = package_of(importer)
        packages.setdefault(source, set())
        for target in sorted(targets):
            imported = package_of(target)
            if imported == source:
                continue
            packages[source].add(imported)
            mine, theirs = tier_of(source), tier_of(imported)
            if mine is None or theirs is None:
                unknown = source if mine is None else imported
                out.append(f"{importer} imports {target}: package {unknown} has no place in the layers (TIERS)")
            elif theirs > mine:
                out.append(f"{importer} imports {target}: {source} is below {imported}")
            elif theirs == mine:
                out.append(
                    f"{importer} imports {target}: {source} and {imported} are peers, which never import each other"
                )
    for cycle in cycles(packages):
        out.append(f"packages import each other in a cycle: {', '.join(cycle)}")
    for package in sorted({package_of(m) for m in graph}):
        inner = {m: {t for t in ts if package_of(t) == package} for m, ts in graph.items()
                 if package_of(m) == package}  # fmt: skip
        for cycle in cycles(inner):
            out.append(f"modules of {package} import each other in a cycle: {', '.join(cycle)}")
    return out


def test_module_utils_keep_their_layers():
    assert problems(MODULE_UTILS) == []


def test_every_pending_import_still_exists():
    """An entry of PENDING whose import is gone goes too: the list holds only what is still being taken out."""
    modules = modules_of(MODULE_UTILS)
    known = set(modules)
    stale = [edge for edge in sorted(PENDING) if edge[1] not in imports_of(edge[0], modules[edge[0]], known)]
    assert stale == [], "remove these from PENDING: their imports are gone"


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for directory in {p for p in root.rglob("*") if p.is_dir()}:
        (directory / "__init__.py").touch()
    return root


A_LAYERED_TREE = {
    "common/files.py": "import os\n",
    "bpf/libbpf.py": f"from {ROOT}.common import files\n",
    "bpf/program.py": "from . import libbpf\nfrom .libbpf import x\n",
    "host/netdev.py": f"from {ROOT}.bpf import program as xp\n",
    "dataplane/template.py": "from ..host import netdev\n",
    "vtep/deploy.py": f"from {ROOT}.dataplane.template import DataPlane\n",
    "filter/deploy.py": f"import {ROOT}.dataplane.template\n",
    "instances/registry.py": f"from {ROOT}.vtep import deploy\nfrom {ROOT}.filter.deploy import Filter\n",
}


def test_the_checker_passes_a_layered_tree(tmp_path):
    root = write_tree(tmp_path, A_LAYERED_TREE)
    assert problems(root) == []
    assert import_graph(root)["bpf.program"] == {"bpf.libbpf"}
    assert import_graph(root)["filter.deploy"] == {"dataplane.template"}


@pytest.mark.parametrize(
    ("path", "text", "problem"),
    [
        (
            "bpf/program.py",
            f"def f():\n    from {ROOT}.vtep import deploy\n",
            "bpf.program imports vtep.deploy: bpf is below vtep",
        ),
        (
            "host/netdev.py",
            f"import typing\nif typing.TYPE_CHECKING:\n    from {ROOT}.dataplane.template import DataPlane\n",
            "host.netdev imports dataplane.template: host is below dataplane",
        ),
        (
            "vtep/deploy.py",
            "from ..filter import deploy\n",
            "vtep.deploy imports filter.deploy: vtep and filter are peers, which never import each other",
        ),
        (
            "common/files.py",
            f"import {ROOT}.bpf.libbpf\n",
            "common.files imports bpf.libbpf: common is below bpf",
        ),
        (
            "bpf/libbpf.py",
            f"from {ROOT}.common import files\nfrom {ROOT}.bpf import program\n",
            "modules of bpf import each other in a cycle: bpf.libbpf, bpf.program",
        ),
        (
            "bpf/libbpf.py",
            f"from {ROOT}.gadgets import tool\n",
            "bpf.libbpf imports gadgets: package gadgets has no place in the layers (TIERS)",
        ),
    ],
)
def test_the_checker_fails_a_bad_import(tmp_path, path, text, problem):
    root = write_tree(tmp_path, {**A_LAYERED_TREE, path: text})
    assert problem in problems(root)


def test_the_checker_finds_a_cycle_between_packages(tmp_path, monkeypatch):
    """With the tiers made flat (as a careless edit of TIERS would), a cycle between packages still fails."""
    monkeypatch.setattr(sys.modules[__name__], "TIERS", (("common", "bpf", "host", "dataplane", "vtep", "filter",
                                                         "instances"),))  # fmt: skip
    root = write_tree(tmp_path, {**A_LAYERED_TREE, "common/files.py": f"from {ROOT}.instances import registry\n"})
    found = problems(root)
    assert any(p.startswith("packages import each other in a cycle: ") and "common" in p for p in found), found
