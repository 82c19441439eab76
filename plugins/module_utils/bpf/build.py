# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Compile BPF C on the host, cached by content hash.

The cache key covers everything that decides the object's bytes: the compiler's identity, the flags, and every file
the compile reads, as clang lists them (the source, the headers next to it, in the include directories and the
system's). Objects are written durably through a temporary name (common/files.py), so a concurrent or interrupted
build never leaves a truncated object under a valid key.

Working the key out runs clang twice (its version, and its preprocessor for the list of files read), which costs
seconds on a slow host. So beside each object the cache keeps a manifest of its inputs, found by what is known
without clang (the compiler binary's path, size and mtime, the flags, the source's path): the digest of every file
the compile read, and the paths that would have shadowed a header found further down the include search list. A
deploy whose manifest still matches, file by file, takes the object without running the compiler; any difference
(an edited header, one that now includes another, a new header earlier in the search list, another compiler) works
the whole key out again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files

CLANG = "clang"
# The oldest clang that compiled all of bpf/ into objects that load (Debian's clang-13 and clang-14, checked on
# this project's machines). The VTEP's kfunc externs (__ksym functions, in BTF) and the BTF-defined map-in-map
# definitions are what an older clang is least likely to have; none older was tried, so none older is accepted.
CLANG_MIN_MAJOR = 13
BASE_FLAGS = ("-O2", "-g", "-target", "bpf", "-Wall", "-Wno-unused-value", "-Wno-compare-distinct-pointer-types")


class CompileError(RuntimeError):
    """clang failed; the message is the compiler's own."""


def _multiarch_include() -> list[str]:
    # -target bpf does not search the host's multiarch directory, where asm/types.h lives.
    path = f"/usr/include/{os.uname().machine}-linux-gnu"
    return [f"-I{path}"] if os.path.isdir(path) else []


def _compiler_identity() -> str:
    try:
        out = subprocess.run([CLANG, "--version"], capture_output=True, text=True, check=True)
    except FileNotFoundError:
        raise CompileError(f"{CLANG} is not installed on this host (the xdp_host role installs it)") from None
    return out.stdout.splitlines()[0] if out.stdout else CLANG


def clang_problem(identity: str) -> str | None:
    """Why this clang (its `--version` first line) cannot build the collection's C, or None."""
    found = re.search(r"clang version (\d+)\.", identity)
    if not found:
        return f"clang: cannot tell the version of {CLANG} from {identity!r}; the C needs clang {CLANG_MIN_MAJOR}+"
    if int(found.group(1)) < CLANG_MIN_MAJOR:
        return (
            f"clang: {identity.strip()} is too old; the C needs clang {CLANG_MIN_MAJOR} or newer (kfunc externs and "
            "BTF-defined map-in-map definitions)"
        )
    return None


def _compiler_file() -> str:
    """Identity of the compiler binary without running it: its resolved path, size and mtime."""
    found = shutil.which(CLANG)
    if not found:
        raise CompileError(f"{CLANG} is not installed on this host (the xdp_host role installs it)")
    real = os.path.realpath(found)
    st = os.stat(real)
    return f"{real} {st.st_size} {st.st_mtime_ns}"


def compile_flags(include_dirs: list[str], defines: dict[str, object]) -> list[str]:
    flags = list(BASE_FLAGS) + _multiarch_include()
    flags += [f"-I{d}" for d in include_dirs]
    for name, value in sorted(defines.items()):
        flags.append(f"-D{name}" if value is None else f"-D{name}={value}")
    return flags


def _preprocess(source: str, flags: list[str]) -> tuple[list[str], list[str]]:
    """(every file the compile reads, the <...> include search list), from one run of clang's preprocessor."""
    result = subprocess.run(
        [CLANG, *flags, "-M", "-MT", "object", "-v", source], capture_output=True, text=True, check=False
    )
    # -v prints clang's version, its command and the search list on stderr before any diagnostic; the search list
    # one directory a line between these two lines.
    verbose, end, diagnostics = result.stderr.partition("End of search list.\n")
    if result.returncode != 0:
        raise CompileError(f"clang failed to compile {source}:\n{(diagnostics if end else verbose).strip()}")
    # Make syntax: "object: file file \<newline> file ...", a space inside a name escaped as "\ ".
    listed = result.stdout.replace("\\\n", " ").split(":", 1)[1]
    read = [name.replace("\0", " ") for name in listed.replace("\\ ", "\0").split()]
    search = verbose.partition("#include <...> search starts here:\n")[2]
    return read, [os.path.abspath(line.strip()) for line in search.splitlines()]


def dependencies(source: str, flags: list[str]) -> list[str]:
    """Every file the compile reads (the source and each header it includes, system headers too), as clang's
    preprocessor finds them with these flags. Raises CompileError with clang's diagnostics."""
    return _preprocess(source, flags)[0]


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _shadowing(read: list[str], search: list[str]) -> list[str]:
    """Paths that do not exist now and would hide a header found in a later directory of the search list."""
    paths = set()
    for path in map(os.path.abspath, read):
        for k, directory in enumerate(search):
            if path.startswith(directory + os.sep):
                relative = path[len(directory) + 1 :]
                paths.update(os.path.join(earlier, relative) for earlier in search[:k])
    return sorted(p for p in paths if not os.path.lexists(p))


def cache_key(source: str, flags: list[str]) -> tuple[str, dict]:
    """The compiler's identity, the flags, and the name and bytes of every file the compile reads: an edit to any
    header (next to the source, in an include directory or in the system's) is a new key. Also returns the manifest
    that finds this key again without clang (see the module's docstring)."""
    digest = hashlib.sha256()
    identity = _compiler_identity()
    if (too_old := clang_problem(identity)):
        raise CompileError(too_old)
    digest.update(identity.encode())
    digest.update("\0".join(flags).encode())
    read, search = _preprocess(source, flags)
    inputs = {}
    for path in read:
        digest.update(b"\0" + path.encode() + b"\0")
        with open(path, "rb") as f:
            data = f.read()
        digest.update(data)
        inputs[os.path.abspath(path)] = hashlib.sha256(data).hexdigest()
    return digest.hexdigest(), {"inputs": inputs, "absent": _shadowing(read, search)}


def _manifest_path(source: str, flags: list[str], cache_dir: str) -> str:
    """Where the manifest of this source with these flags and this compiler binary is kept: named by all that is
    known before the compiler runs."""
    known = "\0".join([_compiler_file(), os.path.abspath(source), *flags])
    stem = os.path.splitext(os.path.basename(source))[0]
    return os.path.join(cache_dir, f"{stem}-{hashlib.sha256(known.encode()).hexdigest()[:16]}.inputs.json")


def _cached_by_manifest(manifest_path: str, cache_dir: str) -> str | None:
    """The object the manifest names, if it is still in the cache and every input still has the digest it had."""
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
        target = os.path.join(cache_dir, manifest["object"])
        if not os.path.isfile(target) or any(os.path.lexists(p) for p in manifest["absent"]):
            return None
        if all(_digest(path) == digest for path, digest in manifest["inputs"].items()):
            return target
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no manifest yet, a file gone, or one from another version of this code: work the key out
    return None


def compile_object(
    source: str,
    cache_dir: str,
    include_dirs: list[str] | None = None,
    defines: dict[str, object] | None = None,
    build_dir: str | None = None,
) -> tuple[str, bool]:
    """Return (object path, built now?). Raises CompileError with clang's diagnostics.

    A cache miss is built into build_dir when given (check mode: the cache is left as it was), else into the cache.
    """
    include_dirs = [os.path.abspath(d) for d in include_dirs or []]
    try:
        files.check_trusted_fields({"source": source, "include_dirs": include_dirs, "cache_dir": cache_dir})
    except files.UntrustedPath as exc:
        raise CompileError(str(exc)) from None
    if not os.path.isfile(source):
        raise CompileError(f"source {source}: no such file on this host")
    flags = compile_flags(include_dirs, defines or {})
    manifest_path = _manifest_path(source, flags, cache_dir)
    cached = _cached_by_manifest(manifest_path, cache_dir)
    if cached:
        return cached, False
    key, manifest = cache_key(source, flags)
    stem = os.path.splitext(os.path.basename(source))[0]
    target = os.path.join(cache_dir, f"{stem}-{key[:16]}.o")
    manifest["object"] = os.path.basename(target)
    if os.path.isfile(target):
        if not build_dir:
            _keep_manifest(manifest_path, manifest)
        return target, False
    if build_dir:
        target = os.path.join(build_dir, os.path.basename(target))
    # The object comes on clang's stdout and goes into the cache whole, never as a truncated file under its key.
    result = subprocess.run([CLANG, *flags, "-c", source, "-o", "-"], capture_output=True, check=False)
    if result.returncode != 0:
        stderr = result.stderr.decode(errors="replace").strip()
        raise CompileError(f"clang failed to compile {source}:\n{stderr}")
    files.make_private_dirs(os.path.dirname(target))
    files.replace_durably(target, result.stdout)
    if not build_dir:
        _keep_manifest(manifest_path, manifest)
    return target, True


def _keep_manifest(path: str, manifest: dict) -> None:
    # A cache this host can only read (a shared, read-only one) keeps no manifest: the object is right, only slower
    # to find.
    with contextlib.suppress(OSError):
        files.replace_durably(path, json.dumps(manifest, sort_keys=True))
