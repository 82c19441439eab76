"""The lab dir holds the key that every lab host's sshd (root) accepts: the lab makes it itself, mode 0700, and
refuses one that someone else could have made or could change, before anything of the lab is made or removed."""

import os
import re
import stat

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import lab as labutil
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import lab_spec, lab_state

PREFIX = "lsdir"  # nothing of this prefix exists: the refusals below must come before any look at namespaces


def spec(lab_dir) -> dict:
    return lab_spec.normalize(
        {"prefix": PREFIX, "mgmt_subnet": "198.51.100.248/29", "lab_dir": str(lab_dir), "hosts": []}
    )


def planted(tmp_path, kind: str):
    """A lab dir made before the lab, as another local user could make it under /tmp."""
    path = tmp_path / "lab"
    if kind == "symlink":
        target = tmp_path / "elsewhere"
        target.mkdir(mode=0o700)
        path.symlink_to(target)
    elif kind == "mode 0777":
        path.mkdir()
        path.chmod(0o777)
    elif kind == "mode 0755":
        path.mkdir()
        path.chmod(0o755)
    (path / lab_state.STATE_FILE).write_text('{"status": "up", "hosts": {}}')
    return path


RULES = {
    "symlink": r"is a symbolic link",
    "mode 0777": r"has mode 0777, not 0700",
    "mode 0755": r"has mode 0755, not 0700",
}


@pytest.mark.parametrize("kind", list(RULES))
def test_a_lab_dir_made_by_someone_else_is_refused_and_left_alone(tmp_path, kind):
    lab_dir = planted(tmp_path, kind)
    rule = rf"^lab_dir: {lab_dir} {RULES[kind]}"
    with pytest.raises(lab_spec.LabError, match=rule):
        lab_state.load_state(str(lab_dir))  # what the tests, the playbooks' lab check and the module read
    with pytest.raises(lab_spec.LabError, match=rule):
        labutil.down(PREFIX, str(lab_dir))  # state=absent, and state=present's removal of a stale lab
    with pytest.raises(lab_spec.LabError, match=rf"^lab_dir: {lab_dir} already exists"):
        labutil.up(spec(lab_dir))
    assert (lab_dir / lab_state.STATE_FILE).exists()  # nothing removed, nothing written
    assert not os.path.exists(f"/run/netns/{PREFIX}-a")


def test_the_lab_makes_its_dir_0700_whatever_the_umask(tmp_path):
    lab_dir = tmp_path / "lab"
    old = os.umask(0o077 if os.geteuid() else 0o777)
    try:
        lab_state.make_lab_dir(str(lab_dir))
    finally:
        os.umask(old)
    st = os.lstat(lab_dir)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    lab_state.check_lab_dir_owner(str(lab_dir))


def test_a_lab_dir_in_a_directory_others_may_write_to_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone could rename the lab dir away and put their own in its place
    with pytest.raises(lab_spec.LabError, match=rf"^lab_dir: {shared}/lab lies in {shared} \(mode 0777\)"):
        lab_state.make_lab_dir(str(shared / "lab"))
    assert not (shared / "lab").exists()
    shared.chmod(0o1777)  # as /tmp: only the owner of an entry may rename or remove it
    lab_state.make_lab_dir(str(shared / "lab"))


def test_missing_parents_are_made_0700_too(tmp_path):
    lab_dir = tmp_path / "labs" / "mine" / "lab"
    lab_state.make_lab_dir(str(lab_dir))
    for path in (tmp_path / "labs", tmp_path / "labs" / "mine", lab_dir):
        assert stat.S_IMODE(os.lstat(path).st_mode) == 0o700


@pytest.mark.parametrize(
    ("field", "params"),
    [
        ("prefix", {"prefix": "ls\n"}),
        ("lab_dir", {"lab_dir": "/tmp/xdpfleet-lab-ls\n"}),
        ("hosts[0].name", {"hosts": [{"name": "a\n", "mgmt_ip": "198.51.100.249"}]}),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_a_trailing_newline_is_no_part_of_a_lab_name_or_path(field, params):
    """The patterns ended in `$`, which also matches before a final newline: such names reached sh -c and paths."""
    base = {"prefix": PREFIX, "mgmt_subnet": "198.51.100.248/29", "hosts": []}
    with pytest.raises(lab_spec.LabError, match=rf"^{re.escape(field)}"):
        lab_spec.normalize({**base, **params})
