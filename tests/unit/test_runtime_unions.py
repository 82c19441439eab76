"""collection/sanity/runtime_unions.py, the lint check for `X | Y` of types that Python 3.9 would evaluate and fail
on: it finds those, and leaves annotations (not evaluated under `from __future__ import annotations`), integer
flags and dict merges alone."""

import importlib.util
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("runtime_unions", REPO / "collection" / "sanity" / "runtime_unions.py")
runtime_unions = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runtime_unions)

SOURCE = """\
from __future__ import annotations
import ctypes
Address = int | None
def f(value: int | None = None, *rest: ctypes.Structure | ctypes.Union) -> str | None:
    local: dict[str, int | None] = {}
    flags = BPF_F_REPLACE | BPF_F_EXCL
    merged = {"a": 1} | local
    if isinstance(value, (int, float)) or issubclass(type(value), list[int] | tuple):
        return None
    return isinstance(value, ctypes.Structure | ctypes.Union | None)
"""


def test_finds_the_unions_evaluated_at_run_time_and_only_those(tmp_path):
    path = tmp_path / "host_code.py"
    path.write_text(SOURCE)
    problems = runtime_unions.runtime_unions(path)
    assert [problem.split(":")[1] for problem in problems] == ["3", "8", "10"], problems
    assert "`ctypes.Structure | ctypes.Union | None`" in problems[2], "a chain is reported once, whole"


def test_main_fails_on_a_union_and_passes_without(tmp_path, capsys):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "m.py").write_text(SOURCE)
    (tmp_path / "entry-point").write_text(textwrap.dedent("""\
        #!/usr/bin/python3
        def main(code: int | None) -> int:
            return isinstance(code, (int, float))
    """))
    assert runtime_unions.main([str(tmp_path / "bad"), str(tmp_path / "entry-point")]) == 1
    assert runtime_unions.main([str(tmp_path / "entry-point")]) == 0
    assert "1 files, no run-time union of types" in capsys.readouterr().out
