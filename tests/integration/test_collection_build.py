"""The collection as users get it: build the tarball with collection/build.sh, install it into an empty
collections path, and run its module and role by FQCN with only that path configured (the in-tree
collection under collection/ must not be found)."""

import json
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# The ansible binaries next to the interpreter running pytest (the project's .venv under `make test`).
BIN = Path(sys.executable).parent
FQCN = "xdpfleet.fabric"


@dataclass
class Installed:
    tarball: Path
    collections: Path  # the only collections path configured
    root: Path  # <collections>/ansible_collections/xdpfleet/fabric
    env: dict
    workdir: Path


def run(cmd, env, cwd, timeout=300):
    res = subprocess.run(
        [str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert res.returncode == 0, f"{' '.join(map(str, cmd))} exited {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res


def isolated_env(tmp: Path, collections: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    cfg = tmp / "ansible.cfg"
    cfg.write_text("[defaults]\n")
    env.update(
        ANSIBLE_CONFIG=str(cfg),
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_HOME=str(tmp / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="False",
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    tmp = tmp_path_factory.mktemp("collection")
    out = tmp / "build"
    collections = tmp / "collections"
    collections.mkdir()
    workdir = tmp / "work"  # not the repository: no ./ansible.cfg or ./collection nearby
    workdir.mkdir()
    env = isolated_env(tmp, collections)

    env_build = dict(env, ANSIBLE_GALAXY=str(BIN / "ansible-galaxy"))
    res = run([REPO / "collection" / "build.sh", "--output-path", out], env_build, workdir)
    tarball = Path(res.stdout.strip().splitlines()[-1])
    assert tarball.is_file() and tarball.parent == out and tarball.name.startswith("xdpfleet-fabric-")

    run([BIN / "ansible-galaxy", "collection", "install", tarball, "-p", collections], env, workdir)
    root = collections / "ansible_collections" / "xdpfleet" / "fabric"
    assert (root / "MANIFEST.json").is_file()
    return Installed(tarball, collections, root, env, workdir)


def test_tarball_contents(installed):
    with tarfile.open(installed.tarball) as tar:
        members = tar.getmembers()
    names = {m.name for m in members}
    assert {"MANIFEST.json", "FILES.json", "README.md", "meta/runtime.yml"} <= names
    assert {"meta/execution-environment.yml", "requirements.txt", "bindep.txt"} <= names
    assert "roles/xdp_host/tasks/main.yml" in names
    assert "bpf/include/xdpfleet_parse.h" in names
    assert "bpf/counter/counter.c" in names
    assert not [m.name for m in members if m.issym() or m.islnk()], "symlinks in the tarball"
    assert not [n for n in names if n.startswith("tests") or n.endswith((".o", ".pyc"))]
    manifest = json.loads((installed.root / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["namespace"] == "xdpfleet"
    assert manifest["collection_info"]["name"] == "fabric"


def test_only_the_installed_collection_is_found(installed):
    res = run(
        [BIN / "ansible-galaxy", "collection", "list", FQCN, "--format", "json"],
        installed.env,
        installed.workdir,
    )
    found = json.loads(res.stdout)
    assert list(found) == [str(installed.collections / "ansible_collections")], found
    assert FQCN in found[str(installed.collections / "ansible_collections")]


def test_xdp_probe_runs_from_the_installed_collection(installed):
    # The module that runs is the installed copy: ansible-doc resolves the FQCN to a file under the tmp path.
    res = run(
        [BIN / "ansible-doc", "-t", "module", f"{FQCN}.xdp_probe", "--json"],
        installed.env,
        installed.workdir,
    )
    docs = json.loads(res.stdout)
    assert f"{FQCN}.xdp_probe" in docs, f"xdp_probe is not in the installed collection: {sorted(docs)}"
    filename = docs[f"{FQCN}.xdp_probe"]["doc"]["filename"]
    assert Path(filename).resolve().is_relative_to(installed.root.resolve()), filename

    res = run(
        [
            BIN / "ansible", "localhost", "-i", "localhost,", "-c", "local",
            "-e", f"ansible_python_interpreter={sys.executable}",
            "-m", f"{FQCN}.xdp_probe", "-a", json.dumps({"interfaces": ["lo"]}),
        ],
        installed.env,
        installed.workdir,
    )  # fmt: skip
    # The default callback prints "localhost | SUCCESS => {json}" for an ad-hoc run.
    head, sep, body = res.stdout.partition(" => ")
    assert sep and "SUCCESS" in head, res.stdout
    result = json.loads(body)
    probe = result["ansible_facts"]["xdpfleet_probe"]
    assert {"kernel", "bpffs", "libbpf_version", "interfaces"} <= set(probe), sorted(probe)
    assert {"btf", "kernel_btf"} & set(probe), f"no BTF fact in {sorted(probe)}"
    kernel = probe["kernel"]
    release = kernel["release"] if isinstance(kernel, dict) else kernel
    assert release == os.uname().release
    assert "lo" in probe["interfaces"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the role sets root ownership")
def test_xdp_host_role_from_the_installed_collection(installed, tmp_path):
    state = tmp_path / "state"
    playbook = tmp_path / "host.yml"
    playbook.write_text(
        "- name: Prepare localhost\n"
        "  hosts: localhost\n"
        "  connection: local\n"
        "  gather_facts: false\n"
        "  roles:\n"
        f"    - role: {FQCN}.xdp_host\n"
        "      vars:\n"
        "        xdp_host_install_packages: false\n"
        f"        xdp_host_state_dir: {state}\n"
    )
    # A private mount namespace with its own bpffs: the role finds bpffs mounted and the machine's stays untouched.
    private_bpffs = [
        "unshare",
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        'mount -t bpf bpf /sys/fs/bpf && exec "$@"',
        "-",
    ]
    cmd = [
        *private_bpffs,
        BIN / "ansible-playbook",
        "-i",
        "localhost,",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        playbook,
    ]

    def recap(res):
        m = re.search(r"^localhost\s+:\s+ok=\d+\s+changed=(\d+).*failed=(\d+)", res.stdout, re.M)
        assert m, res.stdout
        return int(m.group(1)), int(m.group(2))

    # One task changes: bpf_sources creates the directories and installs the sources (bpffs is mounted).
    assert recap(run([*cmd, "--check"], installed.env, installed.workdir)) == (1, 0)
    assert not state.exists(), "check mode changed the host"
    assert recap(run(cmd, installed.env, installed.workdir)) == (1, 0)
    copied = state / "src" / "counter" / "counter.c"
    assert copied.read_bytes() == (installed.root / "bpf" / "counter" / "counter.c").read_bytes()
    assert (state.stat().st_mode & 0o777) == 0o700
    assert recap(run(cmd, installed.env, installed.workdir)) == (0, 0), "second run changed something"

    # Nothing is written while the host's copy matches; a changed file, mode or owner is put back, and a file an
    # older collection installed (its manifest lists it) and this one does not ship is removed.
    copied.write_bytes(copied.read_bytes() + b"/* edited on the host */\n")
    retired = state / "src" / "include" / "retired.h"
    retired.write_text("/* a header an older collection shipped */\n")
    manifest = state / "src" / ".xdpfleet-sources"
    manifest.write_text(manifest.read_text() + "include/retired.h\n")
    header = state / "src" / "include" / "xdpfleet_parse.h"
    header.chmod(0o644)
    os.chown(state / "src" / "vtep" / "vtep.h", 65534, 65534)
    assert recap(run(cmd, installed.env, installed.workdir)) == (1, 0)
    assert copied.read_bytes() == (installed.root / "bpf" / "counter" / "counter.c").read_bytes()
    assert (header.stat().st_mode & 0o777) == 0o600
    assert (state / "src" / "vtep" / "vtep.h").stat().st_uid == 0
    assert not retired.exists()
    assert recap(run(cmd, installed.env, installed.workdir)) == (0, 0), "run after the repair changed something"


def test_an_execution_environment_takes_the_collection_and_its_dependencies(installed, tmp_path):
    """AWX and Ansible Automation Platform run playbooks in execution environments: ansible-builder makes the build
    context of docs/awx/execution-environment.yml (no container is built here), with the tarball that
    docs/awx/requirements.yml names, and reads what the installed collection declares it needs on the controller
    (meta/execution-environment.yml: requirements.txt, bindep.txt)."""
    awx = tmp_path / "repo" / "docs" / "awx"
    awx.mkdir(parents=True)
    for name in ("execution-environment.yml", "requirements.yml"):
        (awx / name).write_text((REPO / "docs" / "awx" / name).read_text())
    definition = yaml.safe_load((awx / "execution-environment.yml").read_text())
    (copied,) = definition["additional_build_files"]
    assert (awx / copied["src"]).resolve() == (tmp_path / "repo" / ".build" / installed.tarball.name), (
        "docs/awx/execution-environment.yml copies another tarball than collection/build.sh writes"
    )
    (tmp_path / "repo" / ".build").mkdir()
    (tmp_path / "repo" / ".build" / installed.tarball.name).write_bytes(installed.tarball.read_bytes())

    context = tmp_path / "context"
    run([BIN / "ansible-builder", "create", "-f", awx / "execution-environment.yml", "-c", context], installed.env, awx)
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    (collection,) = requirements["collections"]
    assert (context / "_build" / collection["name"]).read_bytes() == installed.tarball.read_bytes()

    found = yaml.safe_load(
        run([BIN / "ansible-builder", "introspect", installed.collections], installed.env, installed.workdir).stdout
    )
    ours = {kind: [line.split("#")[0].strip() for line in found[kind] if line.endswith(f"from collection {FQCN}")]
            for kind in ("python", "system")}  # fmt: skip
    shipped = {
        kind: [line.split("#")[0].strip() for line in (REPO / "collection" / name).read_text().splitlines()
               if line.split("#")[0].strip()]
        for kind, name in (("python", "requirements.txt"), ("system", "bindep.txt"))
    }  # fmt: skip
    assert ours == shipped and "jsonschema>=4.20" in ours["python"] and any("graphviz" in s for s in ours["system"])
