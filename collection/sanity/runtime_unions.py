"""Fail on a `X | Y` union of types that Python evaluates at run time, in code that runs on managed hosts.

Python 3.9 (EL9's platform Python) has no `type.__or__`: `isinstance(v, int | float)` raises TypeError there. vermin
checks the standard library and syntax against 3.9 but cannot tell such a union from one in an annotation, which is
never evaluated in these files (ruff requires `from __future__ import annotations` in them), so annotations are left
out here. An operand counts as a type when it is None, a builtin type, a subscripted generic or a name whose last
part is CamelCase; integer flags (`BPF_F_A | BPF_F_B`) and sets are not.

Usage: runtime_unions.py PATH...   (folders are searched for *.py; files are read whatever their name)
"""

from __future__ import annotations

import ast
import builtins
import re
import sys
from pathlib import Path

BUILTIN_TYPES = {name for name, value in vars(builtins).items() if isinstance(value, type)}
CAMEL_CASE = re.compile(r"_*[A-Z][a-z0-9]")


def _is_type(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_type(node.left) and _is_type(node.right)
    if isinstance(node, ast.Subscript):
        return _is_type(node.value)
    if isinstance(node, ast.Name):
        return node.id in BUILTIN_TYPES or bool(CAMEL_CASE.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(CAMEL_CASE.match(node.attr))
    return False


def _annotations(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation."""
    roots: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(inner) for root in roots if root is not None for inner in ast.walk(root)}


def runtime_unions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    ors = [node for node in ast.walk(tree) if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)]
    inner = {id(side) for node in ors for side in (node.left, node.right)}  # `A | B | C` is reported once
    skipped = _annotations(tree) | inner
    return [
        f"{path}:{node.lineno}:{node.col_offset + 1}: `{ast.unparse(node)}` is a union of types evaluated at run "
        "time, which Python 3.9 cannot do: use a tuple (isinstance) or typing.Union"
        for node in sorted(ors, key=lambda node: (node.lineno, node.col_offset))
        if id(node) not in skipped and _is_type(node)
    ]


def main(paths: list[str]) -> int:
    files = []
    for name in paths:
        path = Path(name)
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    problems = [problem for path in files for problem in runtime_unions(path)]
    print("\n".join(problems) if problems else f"runtime_unions: {len(files)} files, no run-time union of types")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
