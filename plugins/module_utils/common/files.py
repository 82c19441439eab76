# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The files a module keeps on a host: private (0700 directories, 0600 files, as the xdp_host role makes them),
written durably, and read only from paths no one but root (or the user running the module) can change.

Durable: a record is written to a temporary file in its directory, flushed to disk, renamed over the old one, and the
directory is flushed too, so after a crash, a kill or a full disk the record is the old one or the new one, whole.
Trusted: the host runs as root what these paths hold (a C source compiled and loaded into the kernel, an object, a
record the boot-time restore re-applies), so a path anyone else could write to, or swap through a directory on the
way, is refused before anything is read from it.
"""

from __future__ import annotations

import json
import os
import secrets
import stat

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import kill_points

DIR_MODE = 0o700
FILE_MODE = 0o600
TEMP_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"


def make_private_dirs(path: str) -> None:
    """Create `path` and every missing parent 0700 (os.makedirs gives the parents the umask's mode)."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return
    make_private_dirs(os.path.dirname(path))
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not os.path.isdir(path):
            raise
        return
    os.chmod(path, DIR_MODE)  # the umask may have taken bits away; it never adds any


def _sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_private(path: str, text: str) -> None:
    """Replace `path` with `text`, 0600, durably (see above); its directory is created 0700 when missing. Raises
    OSError (ENOSPC: a full disk) with the old file untouched."""
    make_private_dirs(os.path.dirname(os.path.abspath(path)))
    replace_durably(path, text)


def replace_durably(
    path: str,
    text: str | bytes,
    mode: int = FILE_MODE,
    dir_fd: int | None = None,
    owner: tuple[int, int] | None = None,
) -> None:
    """Replace `path` with `text` (bytes as they are; file mode `mode`, owner and group `owner` when given, else the
    running user's) through a temporary file in its directory, which must exist: a reader sees the old file or the
    new one, whole. Raises OSError with the old file untouched. With dir_fd, `path` is a name in that open
    directory: a caller that checked the directory through its fd writes into that one, whatever is renamed on the
    way to it meanwhile."""
    if dir_fd is None:
        dir_fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
        try:
            replace_durably(os.path.basename(path), text, mode, dir_fd, owner)
        finally:
            os.close(dir_fd)
        return
    kill_points.step()
    # ".<name>.<8 random characters>", 0600 until written: a reader of *.<suffix> (node_exporter: *.prom) passes
    # over it; O_EXCL|O_NOFOLLOW: never a file or link that was there
    while True:
        tmp = f".{path}.{''.join(secrets.choice(TEMP_NAME_CHARS) for _position in range(8))}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            if owner is not None:
                os.fchown(f.fileno(), *owner)  # before the mode: a chown clears set-id bits
            os.fchmod(f.fileno(), mode)  # the umask may have taken bits of FILE_MODE away
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def replace_keeping_owner(path: str, data: bytes, new_mode: int = 0o644) -> None:
    """replace_durably() for a file of the system's that the module edits (/etc/default/grub): the new file keeps
    the old one's mode, owner and group, which other tools and users rely on; a file that was not there is made
    `new_mode`, the running user's."""
    try:
        old = os.stat(path)
    except FileNotFoundError:
        replace_durably(path, data, new_mode)
        return
    owner = (old.st_uid, old.st_gid)
    replace_durably(
        path, data, stat.S_IMODE(old.st_mode), owner=None if owner == (os.geteuid(), os.getegid()) else owner
    )


def write_json(path: str, data: dict) -> None:
    write_private(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def remove_durably(path: str, dir_fd: int | None = None) -> bool:
    """Unlink `path` (with dir_fd, a name in that open directory) so that it stays gone after a crash; False when
    there was nothing to remove."""
    kill_points.step()
    try:
        os.unlink(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return False
    if dir_fd is None:
        _sync_dir(os.path.dirname(os.path.abspath(path)))
    else:
        os.fsync(dir_fd)
    return True


def open_private_append(path: str):
    """A file opened for appending, created 0600 when missing (open() creates it 0644)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE), "a")


# ---- trusted paths -------------------------------------------------------------------------------------------------


class UntrustedPath(ValueError):
    """A path refused: the message names the field, the path and the rule it breaks."""


def path_problem(path: str) -> str | None:
    """Why the host should not trust what `path` holds (or will hold), or None.

    The path itself, where it exists, must be owned by root or the running user and writable by no one else (no
    group or world write bit). So must every directory on the way from /, except that a directory with the sticky
    bit (/tmp) may be writable by all, since no one can rename or remove another user's entries there. Symbolic links
    are followed: what counts is the file they lead to and the directories on its way."""
    real = os.path.realpath(path)
    owners = {0, os.geteuid()}
    parts = [part for part in real.split(os.sep) if part]
    walked = [os.sep + os.sep.join(parts[:i]) for i in range(len(parts) + 1)]
    for place in walked:
        try:
            st = os.stat(place)
        except (FileNotFoundError, NotADirectoryError):
            return None  # the rest is made by the module itself, 0700 (or the use of the path fails)
        last = place == real
        what = ("its target " + real if real != os.path.abspath(path) else "it") if last else f"directory {place}"
        if st.st_uid not in owners:
            return f"{what} is owned by uid {st.st_uid}, not by root or the user running the module"
        mode = stat.S_IMODE(st.st_mode)
        if mode & (stat.S_IWGRP | stat.S_IWOTH) and (last or not mode & stat.S_ISVTX):
            who = "others" if mode & stat.S_IWOTH else "its group"
            return f"{what} is writable by {who} (mode {mode:04o}){'' if last else ' and has no sticky bit'}"
    return None


def check_trusted(field: str, path: str | None) -> None:
    """Raise UntrustedPath naming `field` when `path` (if given) breaks the rule of path_problem()."""
    if not path:
        return
    problem = path_problem(path)
    if problem:
        raise UntrustedPath(
            f"{field}: {path} is refused: {problem}; the host runs what it holds as root, so it and every directory "
            "on its way must be writable only by root (or the user running the module)"
        )


def check_trusted_fields(fields: dict) -> None:
    """check_trusted() for each field: a path, or a list of paths (field[i] in the message)."""
    for field, value in fields.items():
        if isinstance(value, (list, tuple)):
            for i, path in enumerate(value):
                check_trusted(f"{field}[{i}]", path)
        else:
            check_trusted(field, value)
