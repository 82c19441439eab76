"""bpf/sources.py (the bpf_sources module): the host's copy of the collection's bpf/ tree made equal to it in one
step, touching only what differs, removing what the collection does not ship; and the action's read of bpf/."""

import os
import stat

import pytest

from ansible_collections.xdpfleet.fabric.plugins.action.bpf_sources import BPF_DIR, TREES, read_tree
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import sources

TREE = {
    "counter/counter.c": b'#include "xdpfleet_parse.h"\nint x;\n',
    "include/xdpfleet_parse.h": b"/* parse */\n",
    "vtep/vtep.c": b"int vtep;\n",
    "vtep/vtep.h": b"#define V 1\n",
}


def install(dest, tree=TREE, **kwargs):
    todo = sources.plan(str(dest), tree, **kwargs)
    sources.apply(todo)
    return todo


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_fresh_host_gets_the_tree_private_and_a_second_run_changes_nothing(tmp_path):
    state, dest = tmp_path / "state", tmp_path / "state" / "src"
    check = sources.plan(str(dest), TREE, state_dir=str(state))
    assert not state.exists(), "plan() only reads"
    assert check.directories == [str(state), str(dest)]
    assert check.files == sorted(["counter/", "include/", "vtep/", *TREE, sources.MANIFEST])
    assert check.removed == []

    done = install(dest, state_dir=str(state))
    assert (done.directories, done.files) == (check.directories, check.files)
    for rel, content in TREE.items():
        assert (dest / rel).read_bytes() == content
        assert mode(dest / rel) == 0o600
        assert (os.lstat(dest / rel).st_uid, os.lstat(dest / rel).st_gid) == (os.geteuid(), os.getegid())
    assert (dest / sources.MANIFEST).read_text() == "".join(f"{rel}\n" for rel in sorted(TREE))
    for directory in (state, dest, dest / "vtep", dest / "include"):
        assert mode(directory) == 0o700
    assert not sources.plan(str(dest), TREE, state_dir=str(state)).changed


def test_only_what_differs_is_rewritten_or_repaired(tmp_path):
    dest = tmp_path / "src"
    install(dest)
    inodes = {rel: os.lstat(dest / rel).st_ino for rel in TREE}
    (dest / "vtep" / "vtep.c").write_bytes(b"/* edited on the host */\n")
    os.chmod(dest / "include" / "xdpfleet_parse.h", 0o644)
    os.chmod(dest / "vtep", 0o755)

    todo = install(dest)
    assert todo.files == ["include/xdpfleet_parse.h", "vtep/", "vtep/vtep.c"]
    assert (dest / "vtep" / "vtep.c").read_bytes() == TREE["vtep/vtep.c"]
    assert mode(dest / "include" / "xdpfleet_parse.h") == 0o600
    assert mode(dest / "vtep") == 0o700
    # Rewritten: the edited file only; a mode repair keeps the file (an owner repair too: tests/root).
    assert os.lstat(dest / "vtep" / "vtep.c").st_ino != inodes["vtep/vtep.c"]
    for rel in ("counter/counter.c", "include/xdpfleet_parse.h", "vtep/vtep.h"):
        assert os.lstat(dest / rel).st_ino == inodes[rel], rel
    assert not sources.plan(str(dest), TREE).changed


def test_what_an_earlier_run_installed_and_the_collection_no_longer_ships_is_removed(tmp_path):
    dest = tmp_path / "src"
    install(dest, {**TREE, "old/retired.h": b"/* gone from the collection */\n", "mixed/retired.h": b""})
    (dest / "mixed" / "mine.txt").write_text("a user's file in a directory of ours")
    (dest / "vtep" / ".vtep.c.k2j3h4ab").write_text("what a killed run left")
    (dest / "notes.txt").write_text("a user's file")
    (dest / "vtep" / ".notes.k2j3h4ab").write_text("not a leftover of ours")

    todo = install(dest)
    assert todo.files == [sources.MANIFEST]
    assert todo.removed == ["mixed/retired.h", "old/", "old/retired.h", "vtep/.vtep.c.k2j3h4ab"]
    assert sorted(os.listdir(dest)) == [sources.MANIFEST, "counter", "include", "mixed", "notes.txt", "vtep"]
    assert sorted(os.listdir(dest / "mixed")) == ["mine.txt"], "a directory with someone else's file stays"
    assert sorted(os.listdir(dest / "vtep")) == [".notes.k2j3h4ab", "vtep.c", "vtep.h"]
    assert not sources.plan(str(dest), TREE).changed


def test_a_run_cut_short_leaves_every_file_it_retires_listed_for_the_next_run(tmp_path):
    """v2 retires vtep/vtep.h and fails part-way (a name too long for the file system); the manifest must still list
    vtep/vtep.h, or no later run removes it: here v3, which ships neither it nor v2's new file."""
    dest = tmp_path / "src"
    install(dest)
    v2 = {rel: content for rel, content in TREE.items() if rel != "vtep/vtep.h"}
    v2["a.c"] = b"new in v2\n"
    v2["z" * 300 + ".c"] = b"ENAMETOOLONG\n"
    with pytest.raises(sources.SourcesError, match="File name too long"):
        install(dest, v2)
    listed = set((dest / sources.MANIFEST).read_text().splitlines())
    assert {"vtep/vtep.h", "a.c"} <= listed
    v3 = {rel: content for rel, content in TREE.items() if rel != "vtep/vtep.h"}
    done = install(dest, v3)
    assert "vtep/vtep.h" in done.removed and "a.c" in done.removed
    assert not (dest / "vtep" / "vtep.h").exists() and not (dest / "a.c").exists()
    assert (dest / sources.MANIFEST).read_text() == "".join(f"{rel}\n" for rel in sorted(v3))
    assert mode(dest / sources.MANIFEST) == 0o600


def test_a_directory_pointed_at_by_mistake_loses_nothing(tmp_path):
    """/opt or /usr/local as the destination: the tree is added, nothing that was there is removed."""
    dest = tmp_path / "opt"
    (dest / "include").mkdir(parents=True)
    (dest / "include" / "theirs.h").write_text("x")
    (dest / "tool").write_text("x")
    todo = install(dest)
    assert todo.removed == []
    assert (dest / "include" / "theirs.h").exists() and (dest / "tool").exists()


def test_an_entry_of_the_wrong_type_is_replaced_and_a_link_is_not_followed(tmp_path):
    dest = tmp_path / "src"
    install(dest)
    outside = tmp_path / "outside.h"
    outside.write_text("not ours\n")
    os.unlink(dest / "vtep" / "vtep.h")
    (dest / "vtep" / "vtep.h").symlink_to(outside)  # a link where a file goes
    os.unlink(dest / "include" / "xdpfleet_parse.h")
    os.rmdir(dest / "include")
    (dest / "include").write_text("a file where a directory goes")

    todo = install(dest)
    assert todo.files == ["include/", "include/xdpfleet_parse.h", "vtep/vtep.h"]
    for rel, content in TREE.items():
        assert not (dest / rel).is_symlink()
        assert (dest / rel).read_bytes() == content
    assert outside.read_text() == "not ours\n", "the link's target is left alone"
    assert not sources.plan(str(dest), TREE).changed


def test_a_directory_where_a_file_goes_is_an_error_before_anything_changes(tmp_path):
    dest = tmp_path / "src"
    install(dest)
    os.unlink(dest / "vtep" / "vtep.c")
    (dest / "vtep" / "vtep.c").mkdir()
    (dest / "vtep" / "vtep.c" / "inside").write_text("x")
    os.chmod(dest / "counter" / "counter.c", 0o644)
    with pytest.raises(sources.SourcesError, match=f"^dest: {dest}/vtep/vtep.c is a directory where the file"):
        install(dest)
    assert (dest / "vtep" / "vtep.c" / "inside").exists()
    assert mode(dest / "counter" / "counter.c") == 0o644


def test_a_linked_destination_is_followed(tmp_path):
    (tmp_path / "disk").mkdir(mode=0o700)
    (tmp_path / "src").symlink_to(tmp_path / "disk")
    todo = install(tmp_path / "src")
    assert todo.directories == []
    assert (tmp_path / "src").is_symlink()
    assert (tmp_path / "disk" / "vtep" / "vtep.c").read_bytes() == TREE["vtep/vtep.c"]


def test_diff_lines_name_each_changed_entry(tmp_path):
    dest = tmp_path / "src"
    install(dest)
    (dest / "vtep" / "vtep.c").write_bytes(b"edited\n")
    (dest / "vtep" / ".vtep.c.k2j3h4ab").write_text("x")
    todo = sources.plan(str(dest), TREE)
    owner = f"{os.geteuid()}:{os.getegid()}"
    assert todo.before[0].startswith(f"vtep/vtep.c 0600 {owner} sha256:")  # what changes, then what goes
    assert todo.after == [f"vtep/vtep.c 0600 {owner} sha256:{sources._digest(TREE['vtep/vtep.c'])}"]
    assert todo.before[1].startswith("vtep/.vtep.c.k2j3h4ab 0")


@pytest.mark.parametrize(
    "tree, message",
    [
        ({"../x.c": b""}, "files: '../x.c' is not a relative path inside the tree"),
        ({"/etc/x.c": b""}, "files: '/etc/x.c' is not a relative path inside the tree"),
        ({"a//x.c": b""}, "files: 'a//x.c' is not a relative path inside the tree"),
        ({"a/./x.c": b""}, "files: 'a/./x.c' is not a relative path inside the tree"),
        ({"a": b"", "a/x.c": b""}, "files: 'a' is both a file and the directory of another file"),
        ({".xdpfleet-sources": b""}, "files: '.xdpfleet-sources' is the name of the manifest of installed files"),
    ],
)
def test_a_bad_path_is_refused_before_anything_changes(tmp_path, tree, message):
    with pytest.raises(sources.SourcesError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        sources.plan(str(tmp_path / "src"), tree)
    assert not (tmp_path / "src").exists()


def test_the_module_arguments_are_checked_naming_the_field(tmp_path):
    entries = [{"path": "a.c", "content": "x"}, {"path": "a.c", "content": "y"}]
    with pytest.raises(sources.SourcesError, match=r"^files\[1\]\.path: 'a\.c' is given twice"):
        sources.tree_of(entries)
    assert sources.tree_of([{"path": "a.c", "content": "é"}]) == {"a.c": "é".encode()}
    assert sources.parse_mode("mode", "0600") == 0o600
    assert sources.parse_mode("mode", 0o640) == 0o640
    with pytest.raises(sources.SourcesError, match=r"^directory_mode: 'rwx' is not an octal file mode"):
        sources.parse_mode("directory_mode", "rwx")
    with pytest.raises(sources.SourcesError, match=r"^mode: 0664 lets others write"):
        sources.plan(str(tmp_path / "src"), TREE, file_mode=0o664)
    (tmp_path / "state").write_text("a file")
    with pytest.raises(sources.SourcesError, match=f"^state_dir: {tmp_path}/state exists and is not a directory"):
        sources.plan(str(tmp_path / "src"), TREE, state_dir=str(tmp_path / "state"))
    assert not (tmp_path / "src").exists()


def test_the_action_reads_every_file_of_the_collections_bpf_tree():
    tree = read_tree(BPF_DIR)
    on_disk = sorted(
        os.path.relpath(os.path.join(directory, name), BPF_DIR)
        for directory, _dirs, names in os.walk(BPF_DIR)
        for name in names
    )
    assert [entry["path"] for entry in tree] == on_disk
    assert "vtep/vtep_xdp.c" in on_disk and "include/xdpfleet_parse.h" in on_disk
    with open(os.path.join(BPF_DIR, "vtep", "vtep_xdp.c"), encoding="utf-8") as f:
        assert next(e for e in tree if e["path"] == "vtep/vtep_xdp.c")["content"] == f.read()


def test_the_host_library_tree_is_the_python_sources_without_byte_code(tmp_path):
    """tree=module_utils (the xdp_host role's library for its units); byte-code caches, which the controller's Python
    writes there, stay behind (they are not UTF-8: read_tree would refuse them)."""
    paths = [entry["path"] for entry in read_tree(TREES["module_utils"])]
    assert "instances/records.py" in paths and "vtep/deploy.py" in paths
    assert not [p for p in paths if not p.endswith(".py")], paths
    (tmp_path / "host" / "__pycache__").mkdir(parents=True)
    (tmp_path / "host" / "records.py").write_text("RECORDS = 1\n")
    (tmp_path / "host" / "__pycache__" / "records.cpython-311.pyc").write_bytes(b"\xa7\r\r\n")
    assert [entry["path"] for entry in read_tree(str(tmp_path))] == ["host/records.py"]


def test_the_compile_cache_still_hits_after_a_repair(tmp_path):
    """The collection's own tree, as the action passes it: a run that repairs a mode, removes a stale file or finds
    nothing to do leaves the compile's input as it was, so the object built before is used (clang, no root)."""
    dest, cache = tmp_path / "src", str(tmp_path / "cache")
    tree = sources.tree_of(read_tree(BPF_DIR))
    install(dest, tree)
    source, include = str(dest / "counter" / "counter.c"), [str(dest / "include")]
    first, built = bpf_build.compile_object(source, cache, include)
    assert built
    os.chmod(dest / "include" / "xdpfleet_parse.h", 0o644)
    (dest / "include" / ".xdpfleet_parse.h.abcd1234").write_text("/* a killed run's */\n")
    assert install(dest, tree).changed
    assert bpf_build.compile_object(source, cache, include) == (first, False)
