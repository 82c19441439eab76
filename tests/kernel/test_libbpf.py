"""The libbpf binding and the BTF layout check, against the real kernel (root needed to load programs)."""

import ctypes
import dataclasses
import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import abi, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import btf_layout as bl
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp

FIXTURE_C = Path(__file__).parent / "bpf" / "layout_fixture.c"
COLLECTION = Path(__file__).resolve().parents[2] / "collection"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")


class FlowKey(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("vid", ctypes.c_uint16), ("pad", ctypes.c_uint8 * 2)]


class FlowStats(ctypes.Structure):
    _fields_ = [
        ("packets", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("mac", ctypes.c_uint8 * 6),
        ("delta", ctypes.c_int16),
    ]


FLOWS = bl.MapLayout("flows", FlowKey, FlowStats)
HITS = bl.MapLayout("hits", ctypes.c_uint32, ctypes.c_uint64)


@pytest.fixture(scope="module")
def fixture_object(bpf_cache):
    path, _ = bpf_build.compile_object(str(FIXTURE_C), bpf_cache)
    return path


def test_matching_layouts_pass(fixture_object):
    with libbpf.BpfObject(fixture_object) as obj:
        FLOWS.check_object(obj)
        HITS.check_object(obj)


def _mismatch(fixture_object, layout):
    with libbpf.BpfObject(fixture_object) as obj, pytest.raises(bl.LayoutMismatch) as exc:
        layout.check_object(obj)
    return str(exc.value)


class FlowStatsReordered(ctypes.Structure):
    _fields_ = [
        ("bytes", ctypes.c_uint64),
        ("packets", ctypes.c_uint64),
        ("mac", ctypes.c_uint8 * 6),
        ("delta", ctypes.c_int16),
    ]


class FlowStatsShortMac(ctypes.Structure):
    _fields_ = [
        ("packets", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("mac", ctypes.c_uint8 * 4),
        ("pad", ctypes.c_uint8 * 2),
        ("delta", ctypes.c_int16),
    ]


class FlowStatsUnsignedDelta(ctypes.Structure):
    _fields_ = [
        ("packets", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("mac", ctypes.c_uint8 * 6),
        ("delta", ctypes.c_uint16),
    ]


class FlowKeyWide(ctypes.Structure):
    _fields_ = [("ifindex", ctypes.c_uint32), ("vid", ctypes.c_uint32), ("extra", ctypes.c_uint32)]


class FlowKeyMovedField(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("ifindex", ctypes.c_uint32), ("pad", ctypes.c_uint8 * 2), ("vid", ctypes.c_uint16)]


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        (bl.MapLayout("flows", FlowKey, FlowStatsReordered), "fields ['bytes', 'packets'"),
        (bl.MapLayout("flows", FlowKey, FlowStatsShortMac), "fields"),
        (bl.MapLayout("flows", FlowKey, FlowStatsUnsignedDelta), "value.delta: signedness differs"),
        (bl.MapLayout("flows", FlowKeyWide, FlowStats), "key/value sizes 12/24 in Python, 8/24 in the map definition"),
        (bl.MapLayout("flows", FlowKeyMovedField, FlowStats), "key: fields ['ifindex', 'pad', 'vid']"),
        (bl.MapLayout("hits", ctypes.c_int32, ctypes.c_uint64), "key: signedness differs"),
        (bl.MapLayout("hits", ctypes.c_uint32, ctypes.c_uint8 * 8), "value: an array in Python"),
    ],
)
def test_mismatched_layout_is_refused(fixture_object, layout, expected):
    message = _mismatch(fixture_object, layout)
    assert message.startswith(f"map {layout.map_name}: layout differs")
    assert expected in message


def test_nested_array_length_mismatch_names_the_field(fixture_object):
    class Stats(ctypes.Structure):
        _fields_ = [
            ("packets", ctypes.c_uint64),
            ("bytes", ctypes.c_uint64),
            ("mac", ctypes.c_uint16 * 3),
            ("delta", ctypes.c_int16),
        ]

    message = _mismatch(fixture_object, bl.MapLayout("flows", FlowKey, Stats))
    assert "value.mac: 3 elements in Python, 6 in the object's BTF" in message


def test_rodata_constants_are_typed(fixture_object):
    with libbpf.BpfObject(fixture_object) as obj:
        with pytest.raises(ValueError, match=r"constants.bias: 200 does not fit a 1-byte signed integer"):
            bl.set_rodata(obj, {"bias": 200})
        with pytest.raises(ValueError, match=r"constants.nope: .* \(it has: bias, cookie, verdict\)"):
            bl.set_rodata(obj, {"nope": 1})
        blob = bl.set_rodata(obj, {"verdict": 1, "bias": -1, "cookie": 2**64 - 1})
        assert blob[:4] == (1).to_bytes(4, "little")
        assert blob[4] == 0xFF
        obj.load()
        # The loaded program runs with the constants: verdict 1 is XDP_DROP.
        assert libbpf.prog_test_run(obj.program().fd, b"\0" * 64).retval == 1
        assert obj.internal_map(".rodata").lookup(b"\0" * 4) == blob


def test_map_operations_and_batches(fixture_object):
    with libbpf.BpfObject(fixture_object) as obj:
        FLOWS.check_object(obj)
        obj.load()
        flows = bl.TypedMap(obj.map("flows"), FLOWS)
        for i in range(600):
            flows.set(FlowKey(ifindex=i, vid=10), FlowStats(packets=i, delta=-i))
        got = flows.get(FlowKey(ifindex=7, vid=10))
        assert (got.packets, got.delta) == (7, -7)
        assert flows.get(FlowKey(ifindex=7, vid=11)) is None
        raw = obj.map("flows")
        assert len(list(raw.keys())) == 600
        batch = raw.lookup_batch(chunk=64)
        assert sorted(FlowKey.from_buffer_copy(k).ifindex for k, _ in batch) == list(range(600))
        raw.delete_batch([bytes(FlowKey(ifindex=i, vid=10)) for i in range(100)])
        raw.update_batch([(bytes(FlowKey(ifindex=i, vid=20)), bytes(FlowStats(bytes=i))) for i in range(50)])
        assert len(raw.lookup_batch()) == 550
        assert flows.delete(FlowKey(ifindex=0, vid=20)) is True
        assert flows.delete(FlowKey(ifindex=0, vid=20)) is False
        with pytest.raises(ValueError, match="key is 3 bytes, the map's key_size is 8"):
            raw.lookup(b"abc")
        with pytest.raises(libbpf.LibbpfError, match=r"bpf_map_update_elem\(flows\): File exists \(EEXIST\)"):
            raw.update(bytes(FlowKey(ifindex=5, vid=20)), bytes(FlowStats()), libbpf.BPF_NOEXIST)


def test_percpu_values_and_test_run(fixture_object):
    with libbpf.BpfObject(fixture_object) as obj:
        bl.set_rodata(obj, {"cookie": 1})
        obj.load()
        result = libbpf.prog_test_run(obj.program().fd, b"\xaa" * 64, repeat=25)
        assert result.retval == 2  # XDP_PASS
        assert result.data_out == b"\xaa" * 64
        hits = bl.TypedMap(obj.map("hits"), HITS)
        per_cpu = hits.get(0)
        assert len(per_cpu) == libbpf.num_possible_cpus()
        assert sum(v.value for v in per_cpu) == 25 * 2  # each run adds 1 + (cookie & 1)
        info = obj.program().info()
        assert info.name == "xdp_fixture" and len(info.tag) == 16 and info.type == libbpf.BPF_PROG_TYPE_XDP


def test_errors_name_the_call_and_errno(tmp_path):
    with pytest.raises(libbpf.LibbpfError) as exc:
        libbpf.obj_get(str(tmp_path / "nothing"))
    assert exc.value.errno == errno.ENOENT
    assert str(exc.value).startswith(f"bpf_obj_get({tmp_path / 'nothing'}): No such file or directory (ENOENT)")
    with pytest.raises(libbpf.LibbpfError, match=r"bpf_object__open_file\(/nonexistent.o\): No such file"):
        libbpf.BpfObject("/nonexistent.o")


def test_verifier_rejection_carries_the_verifier_log(tmp_path):
    src = tmp_path / "bad.c"
    src.write_text(
        textwrap.dedent(
            """
            #include <linux/bpf.h>
            #include <bpf/bpf_helpers.h>
            SEC("xdp")
            int xdp_bad(struct xdp_md *ctx)
            {
                unsigned char *data = (void *)(long)ctx->data;
                return data[20];  /* no bounds check against data_end */
            }
            char LICENSE[] SEC("license") = "GPL";
            """
        )
    )
    obj_path, _ = bpf_build.compile_object(str(src), str(tmp_path))
    with libbpf.BpfObject(obj_path) as obj, pytest.raises(libbpf.LibbpfError) as exc:
        obj.load()
    message = str(exc.value)
    assert message.startswith(f"bpf_object__load({obj_path}): Permission denied (EACCES)")
    assert "verifier log of program xdp_bad" in message
    assert "invalid access to packet" in message


def test_compile_error_is_clangs_own(tmp_path):
    src = tmp_path / "broken.c"
    src.write_text("int main(void) { return undeclared_thing; }\n")
    with pytest.raises(bpf_build.CompileError, match="use of undeclared identifier 'undeclared_thing'"):
        bpf_build.compile_object(str(src), str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*.o"))


def test_compile_cache_is_keyed_by_content(tmp_path):
    src = tmp_path / "p.c"
    src.write_text(
        "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n"
        'SEC("xdp") int x(struct xdp_md *c) { return XDP_PASS; }\nchar L[] SEC("license") = "GPL";\n'
    )
    first, built = bpf_build.compile_object(str(src), str(tmp_path / "c"))
    again, built_again = bpf_build.compile_object(str(src), str(tmp_path / "c"))
    assert built and not built_again and first == again
    defined, built_defined = bpf_build.compile_object(str(src), str(tmp_path / "c"), defines={"X": 1})
    assert built_defined and defined != first


def test_compile_cache_sees_the_headers_next_to_the_source(tmp_path):
    """vtep_xdp.c includes vtep.h and the generated vtep_abi.h from its own directory: a changed header is a new
    object, never the one built from the old header."""
    src = tmp_path / "src" / "p.c"
    src.parent.mkdir()
    src.write_text(
        '#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n#include "verdict.h"\n'
        'SEC("xdp") int x(struct xdp_md *c) { return VERDICT; }\nchar L[] SEC("license") = "GPL";\n'
    )
    (src.parent / "verdict.h").write_text("#define VERDICT XDP_PASS\n")
    first, _ = bpf_build.compile_object(str(src), str(tmp_path / "c"))
    (src.parent / "verdict.h").write_text("#define VERDICT XDP_DROP\n")
    second, built = bpf_build.compile_object(str(src), str(tmp_path / "c"))
    assert built and second != first


CHILD = textwrap.dedent(
    """
    import ctypes, json, os, socket, subprocess, sys
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import btf_layout as bl
    subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)
    obj_path, ifname = sys.argv[2], sys.argv[3]
    ifindex = socket.if_nametoindex(ifname)
    out = {}
    with libbpf.BpfObject(obj_path) as old, libbpf.BpfObject(obj_path) as new:
        bl.set_rodata(new, {"verdict": 1})
        old.load(); new.load()
        link = libbpf.xdp_link_create(old.program().fd, ifindex, "native")
        libbpf.pin(link, "/sys/fs/bpf/link")
        old.map("flows").pin("/sys/fs/bpf/flows")
        os.close(link)
    # Both objects are closed: the pinned link alone keeps the old program attached.
    state = libbpf.xdp_query(ifindex)
    link = libbpf.obj_get("/sys/fs/bpf/link")
    info = libbpf.link_info(link)
    out["attached"] = [state.mode, state.prog_id == info.prog_id, info.ifindex == ifindex]
    with libbpf.BpfObject(obj_path) as newer:
        bl.set_rodata(newer, {"verdict": 1})
        newer.load()
        old_fd = libbpf.prog_fd_by_id(info.prog_id)
        try:
            libbpf.link_update(link, newer.program().fd, old_prog_fd=newer.program().fd)
        except libbpf.LibbpfError as exc:
            out["wrong_old"] = str(exc).split(chr(10))[0]
        libbpf.link_update(link, newer.program().fd, old_prog_fd=old_fd)
        out["replaced"] = libbpf.xdp_query(ifindex).prog_id == newer.program().info().id
    with libbpf.PinnedMap("/sys/fs/bpf/flows") as flows:
        try:
            bl.MapLayout("flows", ctypes.c_uint64, ctypes.c_uint8 * 24).check_pinned(flows)
        except bl.LayoutMismatch as exc:
            out["pinned_mismatch"] = str(exc)
    libbpf.link_detach(link)
    out["detached"] = libbpf.xdp_query(ifindex).mode
    libbpf.unpin("/sys/fs/bpf/link")
    print(json.dumps(out))
    """
)


@pytest.fixture
def veth_netns():
    name = f"xu-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "v0", "type", "veth", "peer", "name", "v1"], check=True)
        subprocess.run(["ip", "-n", name, "link", "set", "v0", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def test_pinned_link_attach_replace_detach(fixture_object, veth_netns):
    # A child in the namespace with its own mount namespace, so its bpffs is private and vanishes with it.
    result = subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            veth_netns,
            "unshare",
            "-m",
            "--propagation",
            "private",
            sys.executable,
            "-c",
            CHILD,
            str(COLLECTION),
            fixture_object,
            "v0",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    import json

    out = json.loads(result.stdout)
    assert out["attached"] == ["native", True, True]
    assert out["wrong_old"] == "bpf_link_update: Operation not permitted (EPERM)"
    assert out["replaced"] is True
    assert "map flows: layout differs" in out["pinned_mismatch"]
    assert out["detached"] == "none"


def test_btf_decode_turns_values_into_data(fixture_object):
    with libbpf.BpfObject(fixture_object) as obj:
        obj.load()
        flows = bl.TypedMap(obj.map("flows"), FLOWS)
        flows.set(
            FlowKey(ifindex=3, vid=100),
            FlowStats(packets=5, bytes=320, mac=(ctypes.c_uint8 * 6)(*b"\x02\0\0\0\0\x01"), delta=-2),
        )
        ((raw_key, raw_value),) = obj.map("flows").dump()
        btf = bl.Btf(obj.btf)
        m = obj.map("flows")
        assert bl.decode(btf, m.btf_key_type_id, raw_key) == {"ifindex": 3, "vid": 100, "pad": [0, 0]}
        assert bl.decode(btf, m.btf_value_type_id, raw_value) == {
            "packets": 5,
            "bytes": 320,
            "mac": [2, 0, 0, 0, 0, 1],
            "delta": -2,
        }
    assert bl.sum_values([{"a": 1, "b": [1, 2]}, {"a": 2, "b": [3, 4]}]) == {"a": 3, "b": [4, 6]}


def test_pinned_maps_are_reused_only_with_the_same_layout(tmp_path, bpffs):
    """An upgrade whose struct keeps its size but moves its fields must get a new map: reusing the pinned one
    would make the new program read the old bytes as other fields."""
    cache = str(tmp_path / "cache")
    same, _ = bpf_build.compile_object(str(FIXTURE_C), cache)
    reordered, _ = bpf_build.compile_object(str(FIXTURE_C), cache, defines={"FLOW_STATS_REORDERED": 1})
    paths = xp.InstancePaths("fixture", pin_root=str(bpffs), state_dir=str(tmp_path / "state"))

    def pinned_map_ids() -> dict[str, int]:
        ids = {}
        for name in ("flows", "hits"):
            with libbpf.PinnedMap(paths.map_pin(name)) as pinned:
                ids[name] = pinned.info.id
        return ids

    with xp.Instance(paths, same, "xdp_fixture", "native", {}) as first:
        first.apply(first.plan([], replace_foreign=False))
    before = pinned_map_ids()
    with xp.Instance(paths, same, "xdp_fixture", "native", {}) as again:
        assert again.new_maps == []
        assert not again.plan([], replace_foreign=False).changed
    with xp.Instance(paths, reordered, "xdp_fixture", "native", {}) as upgrade:
        assert upgrade.new_maps == ["flows"]
        plan = upgrade.plan([], replace_foreign=False)
        assert plan.changed
        upgrade.apply(plan)
    after = pinned_map_ids()
    assert after["hits"] == before["hits"]
    assert after["flows"] != before["flows"]


VERDICT = abi.Enum("fixture_verdict", "", (("FIXTURE_HIT", 0, ""), ("FIXTURE_MISS", 1, "")), count="FIXTURE_VERDICTS")
FIXTURE_ABI = abi.Abi("fixture", "fixture_abi.h", "tests/kernel/test_libbpf.py", "", (VERDICT,))
COUNTED_C = """
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "fixture_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FIXTURE_VERDICTS);
	__type(key, __u32);
	__type(value, __u64);
} verdicts SEC(".maps");

SEC("xdp")
int xdp_counted(struct xdp_md *ctx)
{
	__u32 verdict = FIXTURE_HIT;
	__u64 *n = bpf_map_lookup_elem(&verdicts, &verdict);

	if (n)
		*n += 1;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
"""


def counted_object(tmp_path, declared: abi.Abi, name: str) -> str:
    """An object whose counters are indexed by the fixture's enum, numbered as `declared` says."""
    src = tmp_path / name / "counted.c"
    src.parent.mkdir()
    src.write_text(COUNTED_C)
    (src.parent / declared.header).write_text(abi.Header(declared, declared.source, ()).render())
    return bpf_build.compile_object(str(src), str(tmp_path / "cache"))[0]


def test_pinned_maps_are_reused_only_with_the_same_numbers(tmp_path, bpffs):
    """Counters indexed by an enum whose numbers changed mean something else: an upgrade gets new maps, and a
    layout that carries the interface refuses such a pinned map (as vtep_info does with a VTEP's)."""
    swapped = (("FIXTURE_HIT", 1, ""), ("FIXTURE_MISS", 0, ""))
    numbered = counted_object(tmp_path, FIXTURE_ABI, "numbered")
    renumbered = counted_object(
        tmp_path, dataclasses.replace(FIXTURE_ABI, enums=(dataclasses.replace(VERDICT, members=swapped),)), "renumbered"
    )
    paths = xp.InstancePaths("counted", pin_root=str(bpffs), state_dir=str(tmp_path / "state"))
    verdicts = bl.MapLayout("verdicts", ctypes.c_uint32, ctypes.c_uint64, FIXTURE_ABI)
    with xp.Instance(paths, numbered, "xdp_counted", "native", {}, (verdicts,)) as first:
        first.apply(first.plan([], replace_foreign=False))
    with libbpf.PinnedMap(paths.map_pin("verdicts")) as pinned:
        verdicts.check_pinned(pinned)
    with xp.Instance(paths, numbered, "xdp_counted", "native", {}) as again:
        assert again.new_maps == []
    with xp.Instance(paths, renumbered, "xdp_counted", "native", {}) as upgrade:
        assert upgrade.new_maps == ["verdicts"]
        upgrade.apply(upgrade.plan([], replace_foreign=False))
    with libbpf.PinnedMap(paths.map_pin("verdicts")) as pinned, pytest.raises(abi.AbiMismatch) as caught:
        verdicts.check_pinned(pinned)
    assert str(caught.value).endswith(
        "enum fixture_verdict: FIXTURE_HIT is 0 in Python, 1 in the object; "
        "enum fixture_verdict: FIXTURE_MISS is 1 in Python, 0 in the object"
    )
