"""One source for each C/Python interface: a data plane's numbers are declared in plugins/module_utils/<plane>/abi.py
and its map keys and values in layouts.py, its committed C header is what those declarations render, and the objects
compiled from its C carry the same numbers and structs in their BTF, which the map layouts check before a load.

No root and no kernel: clang compiles, and libbpf only opens the objects (reading their BTF needs no load).
"""

import ctypes
import dataclasses
import importlib
import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf import Btf, LayoutMismatch
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import registry
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import layouts as tg_layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import abi as vtep_abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts as vtep_layouts

HEADERS = {found.abi.name: found for found in registry.HEADERS}
ABIS = {name: header.abi for name, header in HEADERS.items()}


def test_every_package_that_declares_numbers_has_its_header_listed():
    """A data plane's abi.py (bpf's own is the mechanism) has its header in the registry, so `make abi` writes it
    and the tests here hold it: a plane added without listing it fails here."""
    utils = REPO / "plugins" / "module_utils"
    declaring = {path.parent.name for path in utils.glob("*/abi.py")} - {"bpf"}
    assert {header.abi.name for header in registry.HEADERS} == declaring
    assert {Path(header.path).parent.name for header in registry.HEADERS} == declaring


def compile_in(tree: Path, source: str, bpf_cache: str) -> str:
    path, _ = bpf_build.compile_object(str(tree / source), bpf_cache, [str(tree / "bpf" / "include")])
    return path


def test_every_data_plane_with_shared_numbers_declares_them():
    assert sorted(ABIS) == ["filter", "router", "trafficgen", "vtep"]
    for declared in ABIS.values():
        assert (REPO / declared.source).is_file(), declared.source


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_the_committed_header_is_what_python_renders(name):
    declared = HEADERS[name]
    assert (REPO / declared.path).read_text() == declared.render(), (
        f"{declared.path} differs from {declared.abi.source} and {declared.layouts}: run `make abi`"
    )


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_every_struct_of_a_map_is_generated(name):
    """Each map's key and value struct, of every layout the plane's layouts.py declares, is in its header (and with
    it every struct it holds: rendering refuses one that is not declared before)."""
    declared = HEADERS[name]
    module = importlib.import_module(
        "ansible_collections.xdpfleet.fabric." + declared.layouts.removesuffix(".py").replace("/", ".")
    )
    layouts = [
        item
        for value in vars(module).values()
        if isinstance(value, (dict, tuple))
        for item in (value.values() if isinstance(value, dict) else value)
        if isinstance(item, MapLayout)
    ]
    assert layouts
    structs = {t for layout in layouts for t in (layout.key, layout.value) if issubclass(t, ctypes.Structure)}
    assert structs <= set(declared.structs), sorted(t.__name__ for t in structs - set(declared.structs))


def test_every_generated_header_has_its_declaration():
    assert sorted(str(p.relative_to(REPO)) for p in REPO.glob("bpf/*/*_abi.h")) == sorted(
        a.header for a in ABIS.values()
    )


def objects_of(declared: abi.Abi) -> list[str]:
    """The data plane's C programs: every .c next to its generated header."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / declared.header).parent.glob("*.c"))


@pytest.mark.parametrize("name", sorted(ABIS))
def test_compiled_objects_carry_the_python_numbers_in_their_btf(name, bpf_cache):
    declared = ABIS[name]
    assert objects_of(declared)
    for source in objects_of(declared):
        with libbpf.BpfObject(compile_in(REPO, source, bpf_cache)) as obj:
            declared.check_object(obj)
            assert set(abi.declared_enums(Btf(obj.btf))) == {enum.name for enum in declared.enums}, source


def edited_tree(tmp_path: Path, header: str, edits: dict[str, str]) -> Path:
    """A copy of bpf/ with lines of a generated header replaced, as by hand."""
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "bpf", tree / "bpf")
    text = (tree / header).read_text()
    for old, new in edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (tree / header).write_text(text)
    return tree


@pytest.mark.parametrize(
    ("source", "layout", "first", "second", "numbers"),
    [
        ("bpf/vtep/vtep_xdp.c", vtep_layouts.LAYOUTS["port_stats"], "DROP_MTU", "DROP_NO_PEER", (9, 10)),
        ("bpf/trafficgen/sender.c", tg_layouts.SENDER_LAYOUTS["tg_entries"], "TG_DIFF_U16", "TG_DIFF_U32", (2, 4)),
    ],
    ids=["vtep", "trafficgen"],
)
def test_a_c_enum_out_of_step_with_python_fails_before_the_load(
    tmp_path, bpf_cache, source, layout, first, second, numbers
):
    """A header edited by hand (or an object from another version) numbers two members the other way round: the
    layout check that runs before every load refuses the object, naming both, where the data plane would otherwise
    mislabel every drop counter or write the wrong bytes."""
    a, b = numbers
    header = layout.abi.header
    tree = edited_tree(
        tmp_path, header, {f"\t{first} = {a},": f"\t{first} = {b},", f"\t{second} = {b},": f"\t{second} = {a},"}
    )
    assert (tree / header).read_text() != HEADERS[layout.abi.name].render()
    with libbpf.BpfObject(compile_in(tree, source, bpf_cache)) as obj, pytest.raises(abi.AbiMismatch) as caught:
        layout.check_object(obj)
    enum = next(e.name for e in layout.abi.enums if first in e.values())
    assert str(caught.value) == (
        f"the {layout.abi.name} data plane's numbers differ between {layout.abi.source} and the BPF object's BTF: "
        f"enum {enum}: {first} is {a} in Python, {b} in the object; "
        f"enum {enum}: {second} is {b} in Python, {a} in the object"
    )


def test_a_python_declaration_out_of_step_with_the_object_fails(bpf_cache):
    path = compile_in(REPO, "bpf/vtep/vtep_xdp.c", bpf_cache)
    members = {m[0]: m for m in vtep_abi.PORT_KIND.members}
    reordered = dataclasses.replace(
        vtep_abi.PORT_KIND,
        members=(members["PORT_NONE"], ("PORT_TRUNK", 1, ""), ("PORT_ACCESS", 2, ""), members["PORT_TUNNEL"]),
    )
    grown = dataclasses.replace(vtep_abi.LIMITS, members=(*vtep_abi.LIMITS.members, ("VTEP_MAX_TRUNKS", 64, "")))
    others = tuple(e for e in vtep_abi.ABI.enums if e not in (vtep_abi.PORT_KIND, vtep_abi.LIMITS))
    changed = dataclasses.replace(vtep_abi.ABI, enums=(reordered, grown, *others))
    with libbpf.BpfObject(path) as obj:
        assert changed.problems(Btf(obj.btf)) == [
            "enum port_kind: PORT_TRUNK is 1 in Python, 2 in the object",
            "enum port_kind: PORT_ACCESS is 2 in Python, 1 in the object",
            "enum vtep_limits: VTEP_MAX_TRUNKS only in Python",
        ]
    assert dataclasses.replace(HEADERS["vtep"], abi=changed).render() != (REPO / vtep_abi.ABI.header).read_text()


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_a_struct_changed_in_python_leaves_the_committed_header_stale(name):
    """The structs are part of what the header renders: a layout whose last two members trade places (the same
    size, what no _Static_assert in C notices) renders another header, so the test above fails until `make abi`."""
    declared = HEADERS[name]
    struct = declared.structs[-1]
    *kept, last, before_last = struct._members_  # the last two, swapped

    @abi.c_struct(struct._c_name_)
    class Reordered(ctypes.Structure):
        _members_ = (*kept, last, before_last)

    changed = dataclasses.replace(declared, structs=(*declared.structs[:-1], Reordered))
    assert changed.render() != (REPO / declared.path).read_text()


VTEP_HEADER = "bpf/vtep/vtep_abi.h"


@pytest.mark.parametrize(
    ("source", "header", "layout", "edits", "problem"),
    [
        (
            "bpf/vtep/vtep_xdp.c",
            VTEP_HEADER,
            vtep_layouts.LAYOUTS["port_vnis"],
            {
                "\t__u16 vni_slot; /* the VNI's slot */": "\t__u16 peers;",
                "\t__u16 peers; /* tunnel:": "\t__u16 vni_slot; /*",
            },
            "value: fields ['vid', 'vni_slot', 'peers', 'flags', 'first_peer'] in Python, "
            "['vid', 'peers', 'vni_slot', 'flags', 'first_peer'] in the object's BTF (struct port_vni)",
        ),
        (
            "bpf/vtep/vtep_tc.c",
            VTEP_HEADER,
            vtep_layouts.LAYOUTS["fdb"],
            {
                "\t__u8 mac[6];\n\t__u16 pad;\n};\n_Static_assert(sizeof(struct fdb_key)": (
                    "\t__u8 mac[6];\n\t__u8 pad[2];\n};\n_Static_assert(sizeof(struct fdb_key)"
                )
            },
            "key.pad: an integer in Python, array in the object's BTF",
        ),
        (
            "bpf/trafficgen/sender.c",
            "bpf/trafficgen/trafficgen_abi.h",
            tg_layouts.SENDER_LAYOUTS["tg_entries"],
            {"\t__u8 size; /* enum tg_diff_size */": "\t__s8 size;"},
            "value.diffs[].size: signedness differs (c_ubyte in Python, int signed char in BTF)",
        ),
    ],
    ids=["reordered", "integer-to-array", "signedness"],
)
def test_a_c_struct_out_of_step_with_python_fails_before_the_load(
    tmp_path, bpf_cache, source, header, layout, edits, problem
):
    """A generated struct edited by hand, in ways that keep its size (its _Static_assert holds and the object
    compiles): the layout check that runs before every load refuses the object, naming the map and the member."""
    tree = edited_tree(tmp_path, header, edits)
    with libbpf.BpfObject(compile_in(tree, source, bpf_cache)) as obj, pytest.raises(LayoutMismatch) as caught:
        layout.check_object(obj)
    assert str(caught.value) == f"map {layout.map_name}: layout differs from the BPF object: {problem}"


def test_a_c_struct_of_another_size_does_not_compile(tmp_path, bpf_cache):
    """A hand edit that changes a generated struct's size stops at its _Static_assert, before any object exists."""
    edit = {"\t__u8 pad;\n\t__u8 name[": "\t__u16 pad;\n\t__u8 name["}
    tree = edited_tree(tmp_path, "bpf/filter/filter_abi.h", edit)
    with pytest.raises(bpf_build.CompileError, match="the size of FilterRule in Python"):
        compile_in(tree, "bpf/filter/filter.c", bpf_cache)


def test_struct_declarations_are_checked():
    u8, u32 = ctypes.c_uint8, ctypes.c_uint32

    @abi.c_struct("inner")
    class Inner(ctypes.Structure):
        """What it holds."""

        _members_ = (abi.Field("addr", u32, "an address", network_order=True), abi.Field("mac", u8 * 6))

    @abi.c_struct("outer")
    class Outer(ctypes.Structure):
        _members_ = (abi.Field("count", u32), abi.Field("inner", Inner * 2, length="TWO"))

    assert abi.render_struct(Inner, {}, set()) == (
        "/* What it holds. */\nstruct inner {\n\t__be32 addr; /* an address */\n\t__u8 mac[6];\n};\n"
        '_Static_assert(sizeof(struct inner) == 12, "the size of Inner in Python");'
    )
    assert "\tstruct inner inner[TWO];\n" in abi.render_struct(Outer, {"TWO": 2}, {"inner"})
    with pytest.raises(ValueError, match=r"struct outer\.inner: struct inner is not declared before"):
        abi.render_struct(Outer, {"TWO": 2}, set())
    with pytest.raises(ValueError, match=r"struct outer\.inner: 2 elements, but TWO is 3"):
        abi.render_struct(Outer, {"TWO": 3}, {"inner"})
    with pytest.raises(ValueError, match=r"network order is for unsigned 16, 32 or 64-bit integers$"):
        abi.Field("b", u8, network_order=True).c_declaration()
    with pytest.raises(ValueError, match="c_double has no C type here"):
        abi.Field("d", ctypes.c_double).c_declaration()


def test_an_object_without_the_header_is_refused(bpf_cache):
    path = compile_in(REPO, "bpf/counter/counter.c", bpf_cache)
    with libbpf.BpfObject(path) as obj:
        assert vtep_abi.ABI.problems(Btf(obj.btf)) == [
            "it declares no enums (no section .xdpfleet_abi): it was not built with bpf/vtep/vtep_abi.h"
        ]


def test_python_reads_the_counters_by_the_c_names():
    assert vtep_abi.DROP_REASONS[:3] == ("malformed", "untagged", "vid_reserved")
    assert len(vtep_abi.DROP_REASONS) == vtep_abi.DROP_REASON["DROP_REASONS"] == 19
    assert vtep_abi.DROP_REASONS[vtep_abi.DROP_REASON["DROP_SPLIT_HORIZON"]] == "split_horizon"
    assert vtep_abi.PORT_KINDS == {1: "access", 2: "trunk", 3: "tunnel"}
    assert vtep_layouts.TrafficStats.drops.size == 8 * len(vtep_abi.DROP_REASONS)


def test_peer_member_keys_never_meet_a_port_or_each_other():
    """Every key decodes back to its (ifindex, copy) within the limits, and has the bit no ifindex has."""
    shift = vtep_abi.PEER_MEMBER_IFINDEX_SHIFT
    for ifindex in (1, 2, vtep_abi.VTEP_MAX_IFINDEX - 1):
        for copy in (0, 1, vtep_abi.VTEP_MAX_MEMBERS - 1):
            key = vtep_abi.peer_member_key(ifindex, copy)
            assert key < 1 << 32 and key & vtep_abi.PEER_MEMBER_BIT
            assert ((key & ~vtep_abi.PEER_MEMBER_BIT) >> shift, key & ((1 << shift) - 1)) == (ifindex, copy)
    assert vtep_abi.VTEP_MAX_IFINDEX <= vtep_abi.PEER_MEMBER_BIT


def test_enum_declarations_are_checked():
    with pytest.raises(ValueError, match=r"counted by N, so its values must be 0\.\.n-1"):
        abi.Enum("e", "", (("A", 0, ""), ("B", 2, "")), count="N")
    with pytest.raises(ValueError, match="a name is declared twice"):
        abi.Enum("e", "", (("A", 0, ""), ("A", 1, "")))
    with pytest.raises(ValueError, match="A = 4294967296 is not a 32-bit unsigned value"):
        abi.Enum("e", "", (("A", 1 << 32, ""),))
    assert abi.Enum("e", "", (("E_B", 1, ""), ("E_A", 0, ""))).labels("E_") == {0: "a", 1: "b"}


@pytest.mark.parametrize("name", sorted(HEADERS))
def test_generated_headers_keep_to_the_line_width(name):
    for line in HEADERS[name].render().splitlines():
        assert len(line.expandtabs(8)) <= abi.LINE_WIDTH, line


def test_counter_is_read_by_the_names_its_btf_gives(bpf_cache):
    """The counter shares no numbers with Python: bpf_map_info decodes its map by BTF and set_rodata finds its
    knob by name. What the xdp_counter role names must therefore be in the object's BTF."""
    tasks = REPO / "roles" / "xdp_counter" / "tasks"
    read = yaml.safe_load((tasks / "read.yml").read_text())[0]["xdpfleet.fabric.bpf_map_info"]
    attach = yaml.safe_load((tasks / "main.yml").read_text())[0]["xdpfleet.fabric.xdp_program"]
    with libbpf.BpfObject(compile_in(REPO, "bpf/counter/counter.c", bpf_cache)) as obj:
        btf = Btf(obj.btf)
        counters = obj.map(read["map"])
        fields = [name for name, *_ in btf.struct_members(counters.btf_value_type_id)]
        assert fields == ["packets", "bytes"]  # xdp_counter_totals and the site report read these
        assert set(attach["constants"]) <= set(btf.datasec_vars(".rodata"))
