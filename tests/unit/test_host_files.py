"""common/files.py: which paths a module trusts with what runs as root, and the modes of what it creates."""

import os

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files


@pytest.fixture
def tree(tmp_path):
    """shared/ writable by all without the sticky bit, sticky/ writable by all with it (as /tmp), safe/ as root
    keeps its own directories; a file in each."""
    for name, mode in (("shared", 0o777), ("sticky", 0o1777), ("safe", 0o755)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "p.c").write_text("int x;\n")
        os.chmod(tmp_path / name, mode)
    return tmp_path


def test_a_directory_others_can_write_on_the_way_is_refused(tree):
    assert files.path_problem(str(tree / "safe" / "p.c")) is None
    assert files.path_problem(str(tree / "shared" / "p.c")) == (
        f"directory {tree}/shared is writable by others (mode 0777) and has no sticky bit"
    )
    assert files.path_problem(str(tree / "shared" / "not-yet" / "cache")) is not None, "a directory to be made there"
    assert files.path_problem(str(tree / "sticky" / "p.c")) is None, "others cannot replace root's file in /tmp"
    assert files.path_problem(str(tree / "sticky")) == "it is writable by others (mode 1777)", "but not the dir"


def test_a_file_others_can_write_is_refused(tree):
    target = tree / "safe" / "p.c"
    os.chmod(target, 0o664)
    assert files.path_problem(str(target)) == "it is writable by its group (mode 0664)"
    os.chmod(target, 0o644)
    (tree / "safe" / "link.c").symlink_to(tree / "shared" / "p.c")
    assert files.path_problem(str(tree / "safe" / "link.c")).startswith(f"directory {tree}/shared is writable")


def test_the_error_names_the_field_and_the_rule_and_nothing_is_compiled(tree):
    cache = tree / "safe" / "cache"
    with pytest.raises(bpf_build.CompileError) as refused:
        bpf_build.compile_object(str(tree / "shared" / "p.c"), str(cache))
    assert str(refused.value) == (
        f"source: {tree}/shared/p.c is refused: directory {tree}/shared is writable by others (mode 0777) and has no "
        "sticky bit; the host runs what it holds as root, so it and every directory on its way must be writable only "
        "by root (or the user running the module)"
    )
    with pytest.raises(bpf_build.CompileError, match=r"^include_dirs\[1\]: "):
        bpf_build.compile_object(str(tree / "safe" / "p.c"), str(cache), [str(tree / "safe"), str(tree / "shared")])
    with pytest.raises(bpf_build.CompileError, match=r"^cache_dir: "):
        bpf_build.compile_object(str(tree / "safe" / "p.c"), str(tree / "shared" / "cache"))
    assert not cache.exists() and not (tree / "shared" / "cache").exists()


def test_records_are_private_and_replaced_whole(tmp_path):
    record = tmp_path / "var" / "lib" / "xdpfleet" / "programs" / "x.json"
    files.write_json(str(record), {"a": 1})
    files.write_json(str(record), {"a": 2})
    assert record.read_text() == '{\n  "a": 2\n}\n'
    made = [record.parent, record.parent.parent, record.parent.parent.parent, tmp_path / "var"]
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in made} == {str(p): "0o700" for p in made}
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in record.parent.iterdir()) == ["x.json"], "no temporary file left"
    assert files.remove_durably(str(record)) and not files.remove_durably(str(record))


def test_replace_keeping_owner_keeps_the_mode_and_makes_a_new_file_0644(tmp_path):
    kept, new = tmp_path / "grub", tmp_path / "new"
    kept.write_text("old\n")
    kept.chmod(0o640)
    files.replace_keeping_owner(str(kept), b"GRUB=\xff\n")
    files.replace_keeping_owner(str(new), b"x\n")
    assert kept.read_bytes() == b"GRUB=\xff\n"
    assert (oct(kept.stat().st_mode & 0o7777), oct(new.stat().st_mode & 0o7777)) == ("0o640", "0o644")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grub", "new"], "no temporary file left"
