# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Compile BPF C on the host, cached by content hash.

The cache key covers everything that decides the object's bytes: the compiler's identity, the flags, the source,
the headers next to it and every header in the include directories. Objects are written to a temporary name and
renamed, so a concurrent or interrupted build never leaves a truncated object under a valid key.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile

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


def cache_key(source: str, flags: list[str], include_dirs: list[str]) -> str:
    digest = hashlib.sha256()
    digest.update(_compiler_identity().encode())
    digest.update("\0".join(flags).encode())
    with open(source, "rb") as f:
        digest.update(f.read())
    # The headers next to the source, which #include "..." finds before the include directories.
    beside = os.path.dirname(os.path.abspath(source))
    for name in sorted(os.listdir(beside)):
        if name.endswith(".h"):
            digest.update(name.encode())
            with open(os.path.join(beside, name), "rb") as f:
                digest.update(f.read())
    for directory in include_dirs:
        for root, dirs, files in os.walk(directory):
            dirs.sort()
            for name in sorted(files):
                path = os.path.join(root, name)
                digest.update(os.path.relpath(path, directory).encode())
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
    if not os.path.isfile(source):
        raise CompileError(f"source {source}: no such file on this host")
    flags = compile_flags(include_dirs, defines or {})
    key = cache_key(source, flags, include_dirs)
    stem = os.path.splitext(os.path.basename(source))[0]
    target = os.path.join(cache_dir, f"{stem}-{key[:16]}.o")
    if os.path.isfile(target):
        return target, False
    if build_dir:
        target = os.path.join(build_dir, os.path.basename(target))
    os.makedirs(os.path.dirname(target), mode=0o750, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}-", suffix=".o", dir=os.path.dirname(target))
    os.close(fd)
    try:
        result = subprocess.run([CLANG, *flags, "-c", source, "-o", tmp], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise CompileError(f"clang failed to compile {source}:\n{result.stderr.strip()}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target, True
