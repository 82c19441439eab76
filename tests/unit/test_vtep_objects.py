"""The VTEP's two objects: the XDP backend's (vtep_xdp.c) needs nothing that the TC backend's tc program does, so it
loads on kernels older than that program's features (Debian 12's 6.1 has no open-coded iterators, 6.4); the tc
program's object (vtep_tc.c) declares the same maps, so that the TC backend runs both on one set."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf import Btf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.program import compatible
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vtep_deploy
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts


@pytest.fixture(scope="module")
def objects(bpf_cache) -> dict[str, str]:
    include = [str(REPO / "bpf" / "include")]
    return {
        backend: bpf_build.compile_object(str(REPO / "bpf" / "vtep" / f"vtep_{backend}.c"), bpf_cache, include)[0]
        for backend in ("xdp", "tc")
    }


def kernel_symbols(path: str) -> list[str]:
    """The externs the kernel must resolve at load (kfuncs, ksyms): the object's undefined symbols (libbpf rewrites
    its .ksyms section at open, so it is read from the ELF file)."""
    listed = subprocess.run(["llvm-nm", "--undefined-only", "--just-symbol-name", path], capture_output=True, text=True)
    assert listed.returncode == 0, listed.stderr
    return sorted(listed.stdout.split())


def test_the_xdp_object_has_the_xdp_programs_only_and_needs_no_kernel_symbol(objects):
    with libbpf.BpfObject(objects["xdp"]) as obj:
        assert sorted(obj.programs) == sorted(
            [*layouts.INGRESS_PROGRAMS.values(), layouts.TC_BACKEND_INGRESS_PROGRAM, layouts.EGRESS_PROGRAM]
        )
        assert {p.section for p in obj.programs.values()} == {"xdp", "xdp/devmap"}
        assert kernel_symbols(objects["xdp"]) == []


def test_the_tc_object_holds_the_tc_program_on_the_same_maps(objects):
    with libbpf.BpfObject(objects["xdp"]) as xdp, libbpf.BpfObject(objects["tc"]) as tc:
        assert list(tc.programs) == [layouts.TC_PROGRAM]
        assert kernel_symbols(objects["tc"]) == ["bpf_iter_num_destroy", "bpf_iter_num_new", "bpf_iter_num_next"]
        shared = {name: m for name, m in tc.maps.items() if not m.internal}
        assert set(shared) == {name for name, m in xdp.maps.items() if not m.internal}
        xdp_btf, tc_btf = Btf(xdp.btf), Btf(tc.btf)
        for name, m in shared.items():
            assert compatible(xdp.map(name), xdp_btf, m, tc_btf), name


@pytest.mark.parametrize(
    "mode, backend, release, refused",
    [
        ("generic", "xdp", "6.1.0-50-amd64", True),
        ("generic", "xdp", "5.15.0-91-generic", True),
        ("generic", "xdp", "6.12.117+deb13-amd64", False),
        ("generic", "xdp", "6.18.0", False),
        ("native", "xdp", "6.1.0-50-amd64", False),
        ("generic", "tc", "6.1.0-50-amd64", False),  # the tc backend floods in tc, with skb copies of its own
    ],
)
def test_generic_flooding_is_refused_where_the_vm_matrix_saw_it_lose_copies(mode, backend, release, refused):
    problem = vtep_deploy.generic_broadcast_problem(mode, backend, release)
    assert (problem is not None) == refused
    if refused:
        assert problem.startswith("mode: generic with backend: xdp") and release in problem
        assert "nothing was changed" in problem
