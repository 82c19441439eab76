# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Compile BPF C on the host, cached by content hash.

The cache key covers everything that decides the object's bytes: the compiler's identity, the flags, and every file
the compile reads, as clang lists them (the source, the headers next to it, in the include directories and the
system's). Objects are written to a temporary name and renamed, so a concurrent or interrupted build never leaves a
truncated object under a valid key.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files

CLANG = "clang"
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


def compile_flags(include_dirs: list[str], defines: dict[str, object]) -> list[str]:
    flags = list(BASE_FLAGS) + _multiarch_include()
    flags += [f"-I{d}" for d in include_dirs]
    for name, value in sorted(defines.items()):
        flags.append(f"-D{name}" if value is None else f"-D{name}={value}")
    return flags


def dependencies(source: str, flags: list[str]) -> list[str]:
    """Every file the compile reads (the source and each header it includes, system headers too), as clang's
    preprocessor finds them with these flags. Raises CompileError with clang's diagnostics."""
    result = subprocess.run(
        [CLANG, *flags, "-M", "-MT", "object", source], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise CompileError(f"clang failed to compile {source}:\n{result.stderr.strip()}")
    # Make syntax: "object: file file \<newline> file ...", a space inside a name escaped as "\ ".
    listed = result.stdout.replace("\\\n", " ").split(":", 1)[1]
    return [name.replace("\0", " ") for name in listed.replace("\\ ", "\0").split()]


def cache_key(source: str, flags: list[str]) -> str:
    """The compiler's identity, the flags, and the name and bytes of every file the compile reads: an edit to any
    header (next to the source, in an include directory or in the system's) is a new key."""
    digest = hashlib.sha256()
    digest.update(_compiler_identity().encode())
    digest.update("\0".join(flags).encode())
    for path in dependencies(source, flags):
        digest.update(b"\0" + path.encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


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
    key = cache_key(source, flags)
    stem = os.path.splitext(os.path.basename(source))[0]
    target = os.path.join(cache_dir, f"{stem}-{key[:16]}.o")
    if os.path.isfile(target):
        return target, False
    if build_dir:
        target = os.path.join(build_dir, os.path.basename(target))
    files.make_private_dirs(os.path.dirname(target))
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}-", suffix=".o", dir=os.path.dirname(target))
    os.close(fd)
    try:
        result = subprocess.run([CLANG, *flags, "-c", source, "-o", tmp], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise CompileError(f"clang failed to compile {source}:\n{result.stderr.strip()}")
        os.chmod(tmp, files.FILE_MODE)  # clang writes a new file of its own, with the umask's mode
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target, True
