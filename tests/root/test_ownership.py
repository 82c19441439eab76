"""What only root can set up: files and directories owned by another user. Each module that runs as root refuses,
or repairs, what another user owns; making such a file needs CAP_CHOWN, so these tests run as root (tests/unit
runs with no privilege at all)."""

import os

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import sources
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import lab as labutil
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import lab_spec, lab_state

NOBODY = 65534


def test_a_source_another_user_owns_is_given_back_to_root_in_place(tmp_path):
    tree = {"include/xdpfleet_parse.h": b"/* parse */\n", "vtep/vtep.h": b"#define V 1\n"}
    dest = tmp_path / "src"
    sources.apply(sources.plan(str(dest), tree))
    header = dest / "vtep" / "vtep.h"
    inode = os.lstat(header).st_ino
    os.chown(header, NOBODY, NOBODY)

    todo = sources.plan(str(dest), tree)
    sources.apply(todo)

    assert todo.files == ["vtep/vtep.h"]
    assert (os.lstat(header).st_uid, os.lstat(header).st_ino) == (0, inode), "the owner repaired, the file kept"
    assert not sources.plan(str(dest), tree).changed


def test_a_file_another_user_owns_is_not_trusted(tmp_path):
    target = tmp_path / "p.c"
    target.write_text("int x;\n")
    os.chmod(target, 0o644)
    assert files.path_problem(str(target)) is None
    os.chown(target, NOBODY, NOBODY)
    assert files.path_problem(str(target)) == "it is owned by uid 65534, not by root or the user running the module"


def test_a_lab_dir_another_user_made_is_refused_and_left_alone(tmp_path):
    lab_dir = tmp_path / "lab"
    lab_dir.mkdir(mode=0o700)
    (lab_dir / lab_state.STATE_FILE).write_text('{"status": "up", "hosts": {}}')
    os.chown(lab_dir, NOBODY, NOBODY)
    rule = rf"^lab_dir: {lab_dir} belongs to uid 65534, not to uid 0"
    try:
        with pytest.raises(lab_spec.LabError, match=rule):
            lab_state.load_state(str(lab_dir))
        with pytest.raises(lab_spec.LabError, match=rule):
            labutil.down("lsown", str(lab_dir))  # nothing of prefix lsown exists: the refusal comes first
        assert (lab_dir / lab_state.STATE_FILE).exists(), "nothing removed"
    finally:
        os.chown(lab_dir, 0, 0)  # so that the next run's cleanup of the temporary directories, without privilege, can
