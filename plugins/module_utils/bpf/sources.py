# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The collection's BPF C sources on a host, installed in one call (the xdpfleet.fabric.bpf_sources module).

The host gets the tree given: every file with its content, the file mode, and the running user
as owner (root under become); every directory on the way with the directory mode. What an earlier run installed
and the tree no longer has is removed (a file the collection no longer ships, then its directory once empty), and
so is a temporary file a killed run left; the manifest .xdpfleet-sources in the destination lists the files
installed, so nothing else there (a user's file, a directory pointed at by mistake) is ever removed. Only what
differs is touched: a file is rewritten when its content differs (durably, through a temporary file: a compile
reads the old file or the new one, whole), its mode or owner set when only those differ. New files are written
before stale ones go. Optionally the state directory is created and bpffs mounted, which the same role step needs.

plan() only reads; apply() carries a plan out. A plan lists what it changes as relative paths (directories end
with "/"), which is what the module reports and its --diff shows.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, mounts

# The files the last run installed, one relative path a line, in the destination (and installed like them).
MANIFEST = ".xdpfleet-sources"
# What files.replace_durably leaves behind when killed: ".<name>." and 8 random characters (files.TEMP_NAME_CHARS).
_LEFTOVER = re.compile(r"\.(.+)\.[a-z0-9_]{8}")
# A relative path inside the tree: no empty, "." or ".." part, no leading "/".
_PART = re.compile(r"[^/\0]+")


class SourcesError(ValueError):
    """Bad input or a failed step; the message starts with the field it concerns."""


@dataclass
class Plan:
    dest: str
    wanted: dict[str, bytes]  # relative path -> content
    file_mode: int
    dir_mode: int
    owner: tuple[int, int]
    bpffs: str | None = None  # mount bpffs here (it is not mounted yet)
    directories: list[str] = field(default_factory=list)  # absolute directories outside the tree to create or repair
    files: list[str] = field(default_factory=list)  # relative paths to write or repair (directories end with "/")
    removed: list[str] = field(default_factory=list)  # relative paths that go (directories end with "/")
    previous: list[str] = field(default_factory=list)  # the files the manifest lists (the last complete run's)
    before: list[str] = field(default_factory=list)  # one line per changed entry as it is, for --diff
    after: list[str] = field(default_factory=list)  # ... and as it will be

    @property
    def changed(self) -> bool:
        return bool(self.bpffs or self.directories or self.files or self.removed)


def check_tree(wanted: dict[str, bytes], field_name: str = "files") -> None:
    """Raise SourcesError when a path cannot be a file of the tree (absolute, empty part, "." or "..") or is also
    the directory of another file."""
    directories = set()
    for path in wanted:
        parts = path.split("/")
        if not all(_PART.fullmatch(part) and part not in (".", "..") for part in parts):
            raise SourcesError(
                f"{field_name}: {path!r} is not a relative path inside the tree (no leading '/', no empty, '.' or "
                "'..' part, no NUL)"
            )
        directories.update("/".join(parts[:i]) for i in range(1, len(parts)))
    both = sorted(directories & set(wanted))
    if both:
        raise SourcesError(f"{field_name}: {both[0]!r} is both a file and the directory of another file")
    if MANIFEST in wanted:
        raise SourcesError(f"{field_name}: {MANIFEST!r} is the name of the manifest of installed files")


def tree_of(entries: list[dict], field_name: str = "files") -> dict[str, bytes]:
    """The module's `files` ({path, content} each) as {path: content as UTF-8 bytes}; a path given twice is refused."""
    tree: dict[str, bytes] = {}
    for i, entry in enumerate(entries):
        if entry["path"] in tree:
            raise SourcesError(f"{field_name}[{i}].path: {entry['path']!r} is given twice")
        tree[entry["path"]] = entry["content"].encode("utf-8", "surrogateescape")
    return tree


def parse_mode(field_name: str, value: object) -> int:
    """A mode given as octal digits (a string such as "0600") or as a number (YAML's 0600)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.fullmatch(r"0?[0-7]{3,4}", value):
        return int(value, 8)
    raise SourcesError(f"{field_name}: {value!r} is not an octal file mode such as '0600'")


def check_mode_bits(field_name: str, mode: int) -> None:
    if not 0 <= mode <= 0o7777:
        raise SourcesError(f"{field_name}: {mode:o} is not a file mode (0000 to 7777, octal)")
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise SourcesError(
            f"{field_name}: {mode:04o} lets others write; the host compiles and loads these sources as root, so "
            "only the owner may write"
        )


def _digest(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()[:16]


def _describe(rel: str, st: os.stat_result | None, content: bytes | None = None) -> str:
    if st is None:
        return f"{rel} (absent)"
    if stat.S_ISDIR(st.st_mode):
        kind = ""
    elif stat.S_ISREG(st.st_mode):
        kind = f" sha256:{_digest(content)}" if content is not None else ""
    else:
        kind = " (not a regular file)"
    return f"{rel} {stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}{kind}"


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _scan(directory: str, rel: str = "") -> dict[str, os.stat_result]:
    """Every entry under `directory` by relative path (directories end with "/"), not following symbolic links."""
    found = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            st = entry.stat(follow_symlinks=False)
            path = rel + entry.name
            if stat.S_ISDIR(st.st_mode):
                found[path + "/"] = st
                found.update(_scan(entry.path, path + "/"))
            else:
                found[path] = st
    return found


def plan(
    dest: str,
    wanted: dict[str, bytes],
    file_mode: int = files.FILE_MODE,
    dir_mode: int = files.DIR_MODE,
    state_dir: str | None = None,
    bpffs: str | None = None,
) -> Plan:
    """What makes the host's tree at `dest` equal to `wanted` (see the module's docstring); reads only."""
    check_tree(wanted)
    check_mode_bits("mode", file_mode)
    check_mode_bits("directory_mode", dir_mode)
    dest = os.path.abspath(dest)
    installing = dict(wanted)
    installing[MANIFEST] = _manifest(wanted)
    result = Plan(dest, installing, file_mode, dir_mode, (os.geteuid(), os.getegid()))
    if bpffs and mounts.mounted_type(bpffs) != mounts.BPFFS_TYPE:
        result.bpffs = bpffs
        result.before.append(f"{bpffs}: bpffs not mounted")
        result.after.append(f"{bpffs}: bpffs mounted")

    def repair(st: os.stat_result | None, want_dir: bool, mode: int) -> bool:
        right_type = st is not None and (stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode))
        return not right_type or stat.S_IMODE(st.st_mode) != mode or (st.st_uid, st.st_gid) != result.owner

    def after(rel: str, mode: int, digest: str = "") -> str:
        return f"{rel} {mode:04o} {result.owner[0]}:{result.owner[1]}{digest}"

    # The state and destination directories may be symbolic links (to another disk): they are followed, as
    # ansible.builtin.file follows them; something else than a directory there is an error, never removed.
    for name, directory in (("state_dir", state_dir), ("dest", dest)):
        if not directory or (name == "state_dir" and os.path.abspath(directory) == dest):
            continue
        directory = os.path.abspath(directory)
        st = _stat(directory)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise SourcesError(f"{name}: {directory} exists and is not a directory")
        if repair(st, True, dir_mode):
            result.directories.append(directory)
            result.before.append(_describe(directory + "/", st))
            result.after.append(after(directory + "/", dir_mode))
    existing = _scan(dest) if os.path.isdir(dest) else {}
    wanted_dirs = {"/".join(path.split("/")[:i]) + "/" for path in wanted for i in range(1, path.count("/") + 1)}
    for rel in sorted(wanted_dirs):
        st = existing.get(rel) or existing.get(rel[:-1])  # a non-directory there is listed without "/"
        if repair(st, True, dir_mode):
            result.files.append(rel)
            result.before.append(_describe(rel, st))
            result.after.append(after(rel, dir_mode))
    for rel in sorted(installing):
        if rel + "/" in existing:
            raise SourcesError(f"dest: {os.path.join(dest, rel)} is a directory where the file {rel} goes; remove it")
        st = existing.get(rel)
        content = _read(os.path.join(dest, rel)) if st is not None and stat.S_ISREG(st.st_mode) else None
        if content != installing[rel] or repair(st, False, file_mode):
            result.files.append(rel)
            result.before.append(_describe(rel, st, content))
            result.after.append(after(rel, file_mode, f" sha256:{_digest(installing[rel])}"))
    listed = existing.get(MANIFEST)
    if listed is not None and stat.S_ISREG(listed.st_mode):
        result.previous = sorted(set(_read(os.path.join(dest, MANIFEST)).decode("utf-8", "replace").splitlines()))
    result.removed = _stale(existing, set(result.previous), installing, wanted_dirs)
    for rel in result.removed:
        result.before.append(_describe(rel, existing[rel]))
    result.files.sort()  # a directory before what goes in it
    return result


def _stale(existing: dict, previous: set[str], installing: dict[str, bytes], wanted_dirs: set[str]) -> list[str]:
    """What goes: a file the manifest lists that is not installed now, a leftover temporary file of one of ours, and
    then a directory of an earlier run that is no longer wanted and holds nothing else."""
    ours = previous | set(installing)

    def installed_by_us(rel: str) -> bool:
        if rel in previous:
            return True
        directory, name = os.path.split(rel)
        leftover = _LEFTOVER.fullmatch(name)
        return bool(leftover) and os.path.join(directory, leftover.group(1)) in ours

    stale = {
        rel
        for rel, st in existing.items()
        if not stat.S_ISDIR(st.st_mode)
        and rel not in installing
        and rel + "/" not in wanted_dirs
        and installed_by_us(rel)
    }
    previous_dirs = {path[: i + 1] for path in previous for i, char in enumerate(path) if char == "/"}
    for rel in sorted(existing, reverse=True):  # what is inside a directory before it
        inside = (other for other in existing if other.startswith(rel) and other != rel)
        if (
            rel in previous_dirs
            and rel not in wanted_dirs
            and rel[:-1] not in installing
            and all(other in stale for other in inside)
        ):
            stale.add(rel)
    return sorted(stale)


def _set_attributes(path: str, mode: int, owner: tuple[int, int]) -> None:
    st = os.stat(path)  # a symbolic link here is the state or destination directory's, followed (see plan())
    if (st.st_uid, st.st_gid) != owner:
        os.chown(path, *owner)
    if stat.S_IMODE(st.st_mode) != mode:
        os.chmod(path, mode)


def _manifest(paths) -> bytes:
    return "".join(f"{path}\n" for path in sorted(paths)).encode()


def apply(todo: Plan) -> None:
    """Carry out a plan: bpffs, directories, files, the stale entries, then the manifest. Raises SourcesError naming
    the step.

    Until the run is complete the manifest lists the files of the last complete run and those of this one, so that
    a run cut short (a failure, a kill) leaves none of them unlisted: the next run, whatever it installs, still
    removes every file it does not ship. Only the complete run writes the manifest of what it installed."""
    if todo.bpffs:
        mounted = subprocess.run(["mount", "-t", "bpf", "bpf", todo.bpffs], capture_output=True, text=True, check=False)
        if mounted.returncode != 0:
            raise SourcesError(f"bpffs: mount -t bpf bpf {todo.bpffs} failed: {mounted.stderr.strip()}")
    manifest = os.path.join(todo.dest, MANIFEST)
    try:
        for directory in todo.directories:
            files.make_private_dirs(directory)
            _set_attributes(directory, todo.dir_mode, todo.owner)
        retired = set(todo.previous) - set(todo.wanted)
        if retired:  # until the run is complete: the last run's files and this one's
            files.replace_durably(manifest, _manifest(retired | set(todo.wanted) - {MANIFEST}), todo.file_mode)
        for rel in todo.files:
            if rel == MANIFEST:
                continue  # last, below
            path = os.path.join(todo.dest, rel.rstrip("/"))
            if rel.endswith("/"):
                st = _lstat(path)
                if st is None or not stat.S_ISDIR(st.st_mode):
                    files.remove_durably(path)  # a file or a link where the directory goes
                    os.mkdir(path, todo.dir_mode)
                _set_attributes(path, todo.dir_mode, todo.owner)
                continue
            st = _lstat(path)
            if st is not None and not stat.S_ISREG(st.st_mode):
                files.remove_durably(path)  # a link (never followed) or a special file where the file goes
                st = None
            if st is None or _read(path) != todo.wanted[rel]:
                files.replace_durably(path, todo.wanted[rel], todo.file_mode)
            _set_attributes(path, todo.file_mode, todo.owner)
        for rel in reversed(todo.removed):  # sorted, so what is inside a directory goes before it
            path = os.path.join(todo.dest, rel.rstrip("/"))
            if rel.endswith("/"):
                os.rmdir(path)  # empty by now (see _stale): never a tree of someone else's files
            else:
                files.remove_durably(path)
        if MANIFEST in todo.files:
            files.replace_durably(manifest, todo.wanted[MANIFEST], todo.file_mode)
            _set_attributes(manifest, todo.file_mode, todo.owner)
    except OSError as exc:
        raise SourcesError(f"dest: installing the sources in {todo.dest} failed: {exc}") from None


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()
