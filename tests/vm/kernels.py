"""Debian's own kernels for the VM tests: the linux-image-amd64 of a suite, fetched from the Debian package registry
with a private apt state (own sources list, lists and cache: the machine's apt setup is not touched), extracted with
dpkg-deb and given a modules.dep by depmod.

Kept outside the repository, under CACHE_ROOT/kernels/<package>_<version>/, so a clean clone on the same machine
boots the kernels it already has without the network; a suite is looked up in the registry again only when no
kernel of it is cached or XDPFLEET_VM_REFRESH=1 asks for its newest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

CACHE_ROOT = Path(os.environ.get("XDPFLEET_VM_CACHE", "/var/cache/xdpfleet-tests"))
# The machine's own Debian archive, as its apt sources name it (deb822 or one-line style).
APT_SOURCES = ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list")
# suite -> what it is called in the matrix; bullseye last: its boot is the least certain (see tests/vm/README.md).
SUITES = {"bookworm": "Debian 12", "trixie": "Debian 13", "bullseye": "Debian 11"}
META_PACKAGE = "linux-image-amd64"


class KernelFetchError(RuntimeError):
    pass


def debian_archive() -> str:
    """The URI of the Debian archive this machine's apt uses: the kernels come from the same place."""
    for path in APT_SOURCES:
        if not os.path.exists(path):
            continue
        for line in Path(path).read_text().splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 1:
                return next(w for w in words[1:] if not w.startswith("["))
    raise KernelFetchError(f"no Debian archive in {' or '.join(APT_SOURCES)}: the kernels are fetched from it")


@dataclass(frozen=True)
class Kernel:
    suite: str
    package: str  # linux-image-6.1.0-50-amd64
    version: str  # the package's version, 6.1.176-1
    release: str  # uname -r, 6.1.0-50-amd64
    root: Path  # the extracted package

    @property
    def vmlinuz(self) -> Path:
        return self.root / "boot" / f"vmlinuz-{self.release}"

    @property
    def modules(self) -> Path:
        """lib/modules/<release>, under usr/ from trixie on (merged /usr)."""
        for base in ("usr/lib/modules", "lib/modules"):
            path = self.root / base / self.release
            if path.is_dir():
                return path
        raise KernelFetchError(f"{self.package}: no modules directory for {self.release}")

    @property
    def label(self) -> str:
        return f"{self.release} ({self.suite})"


def _run(argv: list[str], cwd: Path | None = None) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)
    if result.returncode != 0:
        raise KernelFetchError(f"{' '.join(argv[:3])}...: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout


def _apt_options(suite: str) -> list[str]:
    """A private apt state per suite: its own sources list, package lists and download cache."""
    state = CACHE_ROOT / "apt" / suite
    sources = state / "sources.list"
    if not sources.exists():
        for sub in ("lists/partial", "cache/archives/partial"):
            (state / sub).mkdir(parents=True, exist_ok=True)
        sources.write_text(f"deb {debian_archive()} {suite} main\n")
    return [
        f"-oDir::Etc::SourceList={sources}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={state / 'lists'}",
        f"-oDir::Cache={state / 'cache'}",
        "-oDir::State::Status=/dev/null",  # nothing counts as installed: download what the suite has
        "-oAPT::Sandbox::User=root",  # apt-get download writes into our own directory, which _apt may not enter
    ]


def _newest_in_registry(suite: str) -> tuple[str, str]:
    """(kernel package, its version) that the suite's linux-image-amd64 depends on now."""
    options = _apt_options(suite)
    _run(["apt-get", *options, "-q", "update"])
    shown = _run(["apt-cache", *options, "show", "--no-all-versions", META_PACKAGE])
    for line in shown.splitlines():
        if line.startswith("Depends:"):
            package, _, version = line.split(":", 1)[1].split(",")[0].strip().partition(" ")
            return package, version.strip("(=) ")
    raise KernelFetchError(f"{suite}: {META_PACKAGE} names no kernel package")


def _index_path(suite: str) -> Path:
    return CACHE_ROOT / "kernels" / f"{suite}.json"


def _extract(suite: str, package: str, version: str) -> Kernel:
    target = CACHE_ROOT / "kernels" / f"{package}_{version}"
    work = target.with_name(target.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    _run(["apt-get", *_apt_options(suite), "-q", "download", f"{package}={version}"], cwd=work)
    [deb] = work.glob("*.deb")
    _run(["dpkg-deb", "-x", str(deb), str(work / "root")])
    deb.unlink()
    release = package.removeprefix("linux-image-")
    kernel = Kernel(suite, package, version, release, work / "root")
    base = kernel.modules.parents[2]  # depmod -b wants the directory that holds lib/modules
    _run(["depmod", "-b", str(base), release])
    (work / "root").rename(work / "tree")
    shutil.rmtree(target, ignore_errors=True)
    work.rename(target)
    return Kernel(suite, package, version, release, target / "tree")


def kernel(suite: str) -> Kernel:
    """The suite's kernel: the cached one, else (or with XDPFLEET_VM_REFRESH=1) the registry's newest."""
    index = _index_path(suite)
    if index.exists() and os.environ.get("XDPFLEET_VM_REFRESH") != "1":
        known = json.loads(index.read_text())
        tree = CACHE_ROOT / "kernels" / f"{known['package']}_{known['version']}" / "tree"
        if tree.is_dir():
            return Kernel(suite, known["package"], known["version"], known["release"], tree)
    package, version = _newest_in_registry(suite)
    tree = CACHE_ROOT / "kernels" / f"{package}_{version}" / "tree"
    release = package.removeprefix("linux-image-")
    found = Kernel(suite, package, version, release, tree) if tree.is_dir() else _extract(suite, package, version)
    index.write_text(json.dumps({"package": package, "version": version, "release": release}))
    return found
