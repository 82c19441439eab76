"""The kernel feature reader (bpf/features.py) on BTF blobs built here, the refusals it gives, and each data plane's
declared needs held to what its compiled object really calls and defines (bpf/object_needs.py). No root, no kernel:
clang compiles the objects."""

import os
import re
import struct
from pathlib import Path

import pytest
from btf_blob import BtfBlob, kernel_blob

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features as ft
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import object_needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import needs as filter_needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import needs as router_needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import needs as tg_needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import needs as vtep_needs

REPO = Path(__file__).resolve().parents[2]
PLANES = [ft.COUNTER, filter_needs.NEEDS, router_needs.NEEDS, tg_needs.SENDER, tg_needs.ECHO, vtep_needs.NEEDS]


def catalog_kernel(without: tuple[str, ...] = ()) -> ft.KernelFeatures:
    """A kernel with every feature of the catalog (flags through their evidence) except those named."""
    by_kind: dict[str, dict[str, int]] = {
        k: {} for k in ("helper", "map_type", "attach_type", "link_type", "prog_type")
    }
    functions, structs = [], []
    for (kind, name), f in ft.CATALOG.items():
        if name in without:
            continue
        if kind == "kfunc":
            functions.append(name)
        elif kind == "flag":
            (functions if f.evidence[0] == "function" else structs).append(f.evidence[1])
        else:
            by_kind[kind][name] = f.value
    blob = kernel_blob(
        by_kind["helper"],
        by_kind["map_type"],
        by_kind["attach_type"],
        by_kind["link_type"],
        by_kind["prog_type"],
        functions=functions,
        tagged=functions,
        structs=structs,
    )
    return ft.KernelFeatures.from_btf(blob, source="test blob")


def test_the_reader_finds_each_kind_of_feature_by_either_spelling():
    kernel = ft.KernelFeatures.from_btf(
        kernel_blob(
            {"bpf_fib_lookup": 69},
            {"BPF_MAP_TYPE_DEVMAP_HASH": 25},
            {"BPF_XDP": 37, "BPF_TCX_INGRESS": 46},
            {"BPF_LINK_TYPE_TCX": 11},
            {"BPF_PROG_TYPE_XDP": 6},
            functions=["bpf_iter_num_new", "tcp_sendmsg"],
            tagged=["bpf_iter_num_new"],
        )
    )
    assert kernel.has_helper("bpf_fib_lookup") and kernel.has_helper("BPF_FUNC_fib_lookup")
    assert not kernel.has_helper("bpf_redirect_map")
    assert kernel.has_map_type("DEVMAP_HASH") and kernel.has_map_type("BPF_MAP_TYPE_DEVMAP_HASH")
    assert not kernel.has_map_type("HASH_OF_MAPS")
    assert kernel.has_attach_type("TCX_INGRESS") and kernel.has_attach_type("BPF_XDP")
    assert not kernel.has_attach_type("BPF_XDP_DEVMAP")
    assert not kernel.has_attach_type("__MAX_BPF_ATTACH_TYPE"), "a count is no attach type"
    assert kernel.has_link_type("TCX") and not kernel.has_link_type("XDP")
    assert kernel.has_prog_type("XDP") and not kernel.has_prog_type("SCHED_CLS")
    assert kernel.has_kfunc("bpf_iter_num_new") and not kernel.has_kfunc("bpf_iter_num_next")
    assert kernel.tagged_kfuncs == {"bpf_iter_num_new"}
    assert kernel.functions == {"bpf_iter_num_new", "tcp_sendmsg"}


def test_enum64_values_and_records_of_every_size_are_read():
    blob = BtfBlob()
    blob.int_type()
    blob.struct_type("s", [("a", 1), ("b", 1)])
    blob.enum64("wide", {"W_LOW": 1, "W_HIGH": 1 << 40})
    blob.func("f", kfunc_tag=True)
    blob.enum("bpf_map_type", {"BPF_MAP_TYPE_HASH": 1})
    summary = ft.parse_btf(blob.bytes())
    assert summary.enums["wide"] == {"W_LOW": 1, "W_HIGH": 1 << 40}
    assert summary.enums["bpf_map_type"] == {"BPF_MAP_TYPE_HASH": 1}, "records after an enum64 are where they were"
    assert summary.tagged_kfuncs == {"f"} and summary.structs == {"s"}


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda b: b[:10], "shorter than"),
        (lambda b: b"\xeb\x9f" + b[2:], "magic"),  # big-endian BTF
        (lambda b: b[:-8], "past the blob"),
        (lambda b: b[:4] + struct.pack("<I", 24) + b[8:12] + struct.pack("<I", 1000) + b[16:], "past the blob"),
    ],
)
def test_bytes_that_are_not_btf_are_refused_with_where_they_stop(mangle, message):
    blob = kernel_blob({"bpf_redirect": 23}, {}, {}, {}, {})
    with pytest.raises(ft.BtfError, match=message):
        ft.parse_btf(mangle(blob))


def test_an_unknown_kind_is_an_error_not_a_misread():
    blob = BtfBlob()
    blob._add("x", 31, 0, 0)
    with pytest.raises(ft.BtfError, match="kind 31"):
        ft.parse_btf(blob.bytes())


def test_no_kernel_btf_is_its_own_refusal(tmp_path, monkeypatch):
    monkeypatch.setenv(ft.KERNEL_BTF_OVERRIDE_ENV, str(tmp_path / "none"))
    with pytest.raises(ft.MissingFeatures, match="CONFIG_DEBUG_INFO_BTF"):
        ft.require(ft.COUNTER, "hook xdp")


def test_the_override_points_the_reader_at_another_file(tmp_path, monkeypatch):
    path = tmp_path / "vmlinux"
    path.write_bytes(kernel_blob({"bpf_redirect": 23}, {}, {}, {}, {}))
    monkeypatch.setenv(ft.KERNEL_BTF_OVERRIDE_ENV, str(path))
    kernel = ft.KernelFeatures.from_host()
    assert kernel.source == str(path) and kernel.helpers == {"bpf_redirect"}


def test_a_kernel_with_everything_supports_every_plane_and_variant():
    kernel = catalog_kernel()
    for needs in PLANES:
        for variant in needs.variants:
            assert needs.problems(kernel, variant) == [], (needs.plane, variant)


def test_a_kernel_without_open_coded_iterators_refuses_the_vtep_tc_backend_naming_kfunc_program_and_version():
    """Debian 12's 6.1: vtep_replicate is the tc backend's object alone, so the XDP backend runs there."""
    kernel = catalog_kernel(without=("bpf_iter_num_new", "bpf_iter_num_next", "bpf_iter_num_destroy"))
    assert vtep_needs.NEEDS.problems(kernel, vtep_needs.variant("xdp")) == []
    problems = vtep_needs.NEEDS.problems(kernel, vtep_needs.variant("tc"))
    assert len(problems) == 3
    assert problems[0] == (
        "kernel: the vtep (backend tc) needs kfunc bpf_iter_num_new (open-coded iterators, Linux 6.4) "
        "for program vtep_replicate; this kernel's BTF does not have it"
    )
    assert ft.support([filter_needs.NEEDS], kernel)["filter"]["hook tc"]["supported"]


def test_a_kernel_without_tcx_supports_the_tc_variants_through_cls_bpf():
    kernel = catalog_kernel(without=("BPF_TCX_INGRESS", "BPF_LINK_TYPE_TCX"))
    facts = ft.support(PLANES, kernel)
    assert all(v["supported"] for plane in facts.values() for v in plane.values()), facts


def test_program_flags_are_judged_by_the_btf_record_that_came_with_them():
    kernel = catalog_kernel(without=("BPF_F_BROADCAST", "BPF_F_EXCLUDE_INGRESS"))
    assert catalog_kernel().functions - kernel.functions == {"dev_map_enqueue_multi"}
    problems = vtep_needs.NEEDS.problems(kernel, "backend xdp")
    assert problems[0] == (
        "kernel: the vtep (backend xdp) needs program flag BPF_F_BROADCAST (devmap broadcast, Linux 5.13) for "
        "program vtep_ingress; this kernel's BTF has no function dev_map_enqueue_multi, which came with it"
    )
    live = catalog_kernel(without=("BPF_F_TEST_XDP_LIVE_FRAMES",))
    assert tg_needs.SENDER.problems(live, tg_needs.SENDER_VARIANT) == [
        "kernel: the sender (live frames) needs program flag BPF_F_TEST_XDP_LIVE_FRAMES (XDP live frames, Linux "
        "5.18) for the BPF_PROG_RUN; this kernel's BTF has no struct xdp_test_data, which came with it"
    ]
    assert tg_needs.ECHO.problems(live, tg_needs.ECHO_VARIANT) == [], "the echo server sends no live frames"


def test_an_unknown_variant_is_a_programming_error():
    with pytest.raises(ValueError, match="no variant 'backend dpdk'"):
        vtep_needs.NEEDS.required("backend dpdk")


# ---- declarations against the compiled objects --------------------------------------------------------------


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """Every data plane's object, compiled as the modules compile them."""
    cache = tmp_path_factory.mktemp("objects")
    built = {}
    for needs in PLANES:
        built[needs.plane] = [
            bpf_build.compile_object(str(REPO / "bpf" / source), str(cache), [str(REPO / "bpf" / "include")])[0]
            for source in (needs.source, *needs.more_sources)
        ]
    return built


@pytest.mark.parametrize("needs", PLANES, ids=lambda n: n.plane)
def test_each_declaration_lists_exactly_what_its_object_calls_and_defines(needs, objects):
    """A helper, kfunc or map type the C starts to use (or stops using) fails here until the declaration follows."""
    each = [
        object_needs.needs_of_object(object_needs.scan(o), needs.plane, needs.variants) for o in objects[needs.plane]
    ]
    assert {p: set(h) for s in each for p, h in s.helpers.items()} == {p: set(h) for p, h in needs.helpers.items()}
    assert {p: set(k) for s in each for p, k in s.kfuncs.items()} == {p: set(k) for p, k in needs.kfuncs.items()}
    assert {t for s in each for t in s.map_types} == set(needs.map_types)
    assert tuple(p for s in each for p in s.devmap_programs) == needs.devmap_programs
    for variant, programs in needs.programs.items():
        assert set(programs) == set(object_needs.scan(objects[needs.plane][0]).programs), variant
    for name in [n for calls in needs.helpers.values() for n in calls] + list(needs.map_types):
        assert not name.startswith("#") and name in {n for _k, n in ft.CATALOG}, f"{name}: not in the catalog"


def test_the_vtep_object_is_scanned_program_by_program(objects):
    scan, tc_scan = (object_needs.scan(o) for o in objects["vtep"])
    assert {p.name: p.section for p in scan.programs.values()} == {
        "vtep_ingress": "xdp",
        "vtep_ingress_generic": "xdp",
        "vtep_ingress_tc": "xdp",
        "vtep_egress": "xdp/devmap",
    }
    assert {p.name: p.section for p in tc_scan.programs.values()} == {"vtep_replicate": "tc"}
    assert scan.map_types["vni_flood"] == [12, 25], "the array of maps and its DEVMAP_HASH inner maps"


def test_helpers_the_catalog_does_not_know_are_named_by_the_kernel_or_missing(tmp_path):
    source = tmp_path / "p.c"
    source.write_text(
        "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n"
        'SEC("xdp") int p(struct xdp_md *c) { return bpf_get_prandom_u32() & 1 ? XDP_PASS : XDP_DROP; }\n'
        'char L[] SEC("license") = "GPL";\n'
    )
    path, _ = bpf_build.compile_object(str(source), str(tmp_path / "cache"))
    scan = object_needs.scan(path)
    assert scan.programs["p"].helper_ids == {7}
    knows = ft.KernelFeatures.from_btf(kernel_blob({"bpf_get_prandom_u32": 7}, {}, {}, {}, {}))
    named = object_needs.needs_of_object(scan, "program p", {"hook xdp": ("xdp",)}, knows)
    assert named.helpers == {"p": ("bpf_get_prandom_u32",)}
    assert named.missing(knows, "hook xdp")[0][0].name == "BPF_PROG_TYPE_XDP"
    lacks = ft.KernelFeatures.from_btf(kernel_blob({}, {}, {}, {}, {}))
    unnamed = object_needs.needs_of_object(scan, "program p", {"hook xdp": ("xdp",)}, lacks)
    assert unnamed.problems(lacks, "hook xdp")[0] == (
        "kernel: the program p (hook xdp) needs helper #7 (first version unknown to xdpfleet) for program p; this "
        "kernel's BTF does not have it"
    )


def test_the_helpers_of_the_subprograms_a_program_calls_are_the_programs(tmp_path):
    """A global function (verified on its own) and a static one it calls, in .text: their helpers are those of the
    program that calls them, and of no other."""
    source = tmp_path / "p.c"
    source.write_text(
        "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n"
        "static __attribute__((noinline)) int inner(int x) { return x + (int)bpf_ktime_get_ns(); }\n"
        "__attribute__((noinline)) int outer(int x) { return inner(x) ^ (int)bpf_get_prandom_u32(); }\n"
        'SEC("xdp") int p(struct xdp_md *c) { return outer(c->data) & 1 ? XDP_PASS : XDP_DROP; }\n'
        'SEC("xdp") int q(struct xdp_md *c) { return XDP_PASS; }\n'
        'char L[] SEC("license") = "GPL";\n'
    )
    path, _ = bpf_build.compile_object(str(source), str(tmp_path / "cache"))
    scan = object_needs.scan(path)
    assert (scan.programs["p"].helper_ids, scan.programs["q"].helper_ids) == ({5, 7}, set())


def test_a_file_that_is_not_a_bpf_object_is_refused(tmp_path):
    path = tmp_path / "x.o"
    path.write_bytes(b"\x7fELF\x02\x01" + b"\0" * 100)
    with pytest.raises(object_needs.ObjectError, match="another machine"):
        object_needs.scan(str(path))
    with pytest.raises(object_needs.ObjectError, match=r"(?i)no such file"):
        object_needs.scan(str(tmp_path / "missing.o"))


# ---- the catalog's numbers against the headers the objects are built with -----------------------------------


def _include(name: str) -> str:
    for directory in ("/usr/include", f"/usr/include/{os.uname().machine}-linux-gnu"):
        if os.path.exists(os.path.join(directory, name)):
            return Path(directory, name).read_text()
    pytest.skip(f"{name} is not installed")


def test_helper_ids_are_those_of_libbpfs_helper_definitions():
    defs = dict(
        (name, int(value))
        for name, value in re.findall(
            r"\(\*(bpf_\w+)\)\([^;]*?\) = \(void \*\) (\d+);", _include("bpf/bpf_helper_defs.h")
        )
    )
    for f in ft.CATALOG.values():
        if f.kind == "helper":
            assert defs[f.name] == f.value, f.name


def test_uapi_numbers_are_those_of_linux_bpf_h():
    header = re.sub(r"/\*.*?\*/", "", _include("linux/bpf.h"), flags=re.S)
    enums = {}
    for enum in ("bpf_map_type", "bpf_prog_type", "bpf_attach_type", "bpf_link_type"):
        body = re.search(rf"enum {enum} \{{(.*?)\}};", header, re.S).group(1)
        value, enums[enum] = -1, {}
        for item in filter(None, (i.strip() for i in body.split(","))):
            name, _, explicit = (part.strip() for part in item.partition("="))
            value = int(explicit, 0) if explicit and explicit[0].isdigit() else value + 1
            enums[enum][name] = value
    kinds = {"map_type": "bpf_map_type", "prog_type": "bpf_prog_type", "attach_type": "bpf_attach_type"}
    kinds["link_type"] = "bpf_link_type"
    for f in ft.CATALOG.values():
        if f.kind in kinds and f.name in enums[kinds[f.kind]]:  # an older header lacks the newest (tcx: 6.6)
            assert enums[kinds[f.kind]][f.name] == f.value, f.name
