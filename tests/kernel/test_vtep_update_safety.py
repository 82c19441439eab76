"""A VTEP update that fails half-way puts back every byte it changed: configuration A is applied, then B with the
kernel refusing write k, for every write B makes, and after each refusal every map of the object (the inner
member groups of the ARRAY_OF_MAPS and the learned FDB and counters included) is compared byte for byte with
its dump after A. B moves a group between size classes, adds and removes groups, rewires every member onto another
egress program, zeroes counters, overrides a learned MAC: each write of each kind is refused once.

Runs the real VTEP object in a namespace of its own (as vtep_netns does). The refusal is the test's: every map
update and delete (libbpf.Map's, which every map the writer touches is) is counted, and the chosen ones fail with
EIO as a kernel refusal does, before reaching the kernel."""

import ctypes
import errno
import os
import struct

import pytest
from vtep_netns import VtepNetns, netns

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts, plan, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.config import (
    AccessPort,
    FdbEntry,
    Peer,
    TrunkBinding,
    TunnelPort,
    Vni,
    VtepConfig,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

LAB_PREFIX = os.environ.get("XDPFLEET_TEST_LAB_PREFIX", "xt")
LEARNED_MAC = "02:00:00:00:64:07"


def peers(count: int, via: str = "ul", first: int = 10) -> tuple[Peer, ...]:
    return tuple(Peer(f"198.51.100.{first + i}", via, f"02:00:00:00:01:{first + i:02x}") for i in range(count))


CONFIG_A = VtepConfig(
    tunnel_ports=(TunnelPort("ul", "198.51.100.1"), TunnelPort("ul2", "198.51.100.2")),
    vnis=(
        Vni(100, (AccessPort("a1"), AccessPort("a2")), (), peers(16)),  # 18 members: a large flood group
        Vni(200, (AccessPort("a3"),), (), peers(3)),
        Vni(300, (), (TrunkBinding("tr", 30),), peers(1, "ul2"), fdb=(FdbEntry("02:00:00:00:64:01", "tr", None),)),
        Vni(400, (), (TrunkBinding("tr", 40),), ()),
    ),
)
CONFIG_B = VtepConfig(
    tunnel_ports=(TunnelPort("ul", "198.51.100.1"), TunnelPort("ul2", "198.51.100.3")),
    vnis=(
        Vni(100, (AccessPort("a1"),), (), peers(4)),  # moves to the small maps; a2 leaves its local group
        # VNI 200 and its groups go
        Vni(
            300,
            (),
            (TrunkBinding("tr", 31),),
            peers(2, "ul2"),
            fdb=(FdbEntry(LEARNED_MAC, None, "198.51.100.11"),),  # overrides a learned entry
            vlan_mode="preserve",
        ),
        Vni(400, (), (TrunkBinding("tr", 40),), ()),
        Vni(500, (AccessPort("a2"), AccessPort("a4")), (), peers(1, first=30)),  # new; a4 a new port
    ),
    fdb_aging=60,
)


class RawProgram:
    """A program loaded from instructions, used as update() uses the object's egress program."""

    def __init__(self, fd: int):
        self.fd = fd

    def info(self) -> libbpf.ProgInfo:
        return libbpf.prog_info(self.fd)


def pass_program() -> RawProgram:
    """A devmap egress program other than the object's (r0 = XDP_PASS; exit): B rewires every member off it."""
    insns = struct.pack("<BBhi", 0xB7, 0, 0, 2) + struct.pack("<BBhi", 0x95, 0, 0, 0)
    return RawProgram(libbpf.prog_load(libbpf.BPF_PROG_TYPE_XDP, insns, "vs_pass", "GPL", libbpf.BPF_XDP_DEVMAP))


def dump(lab: VtepNetns) -> dict[str, dict]:
    """Every map of the object, and every member group its ARRAY_OF_MAPS hold; fdb_generation aside (an undo moves
    it on: what the CPUs remember of the FDB is stale)."""
    out = {}
    for name, m in lab.obj.maps.items():
        if name == layouts.FDB_GENERATION:
            continue
        out[name] = dict(m.dump())
    for name in layouts.GROUP_MAPS.values():
        for slot, ref in out[name].items():
            inner = writer._inner(ref)
            try:
                out[f"{name}[{int.from_bytes(slot, 'little')}]"] = sorted(inner.dump())
            finally:
                libbpf.close_fd(inner.fd)
    return out


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    ports = {"a1": 1500, "a2": 1500, "a3": 1500, "a4": 1500, "tr": 1500, "ul": 1600, "ul2": 1600}
    lab = VtepNetns.create(f"{LAB_PREFIX}-rb-{os.getpid()}", ports)
    try:
        lab.load("native", str(tmp_path_factory.mktemp("bpfcache")))
        yield lab
    finally:
        lab.close()


class Refusals:
    """Map writes (update, delete) counted from 1 once armed; those numbered in `refuse` fail."""

    def __init__(self, monkeypatch):
        self.count = 0
        self.refuse: frozenset = frozenset()
        for call in ("update", "delete"):
            monkeypatch.setattr(libbpf.Map, call, self._counted(getattr(libbpf.Map, call)))

    def arm(self, *numbers: int) -> None:
        self.count, self.refuse = 0, frozenset(numbers)

    def _counted(self, write):
        def counted(m, *args, **kwargs):
            self.count += 1
            if self.count in self.refuse:
                raise libbpf.LibbpfError(f"map write {self.count} on {m.name} (refused by the test)", errno.EIO)
            return write(m, *args, **kwargs)

        return counted


@pytest.fixture
def refusals(monkeypatch):
    return Refusals(monkeypatch)


def update(lab: VtepNetns, config: VtepConfig, egress) -> None:
    with netns(lab.name), writer.update(lab.maps, egress, config, lab.ports, {}):
        pass


def apply_a(lab: VtepNetns, old_egress: RawProgram) -> dict[str, list]:
    """Configuration A on the other egress program, with counters in every slot and a MAC learned that B makes
    static: the bytes an update must put back."""
    update(lab, CONFIG_A, old_egress)
    for name in ("port_stats", "vni_stats"):
        m = lab.maps[name]
        for slot in range(m.max_entries):
            m.update(slot.to_bytes(4, "little"), bytes([slot % 251 + 1]) * m.value_buffer_size)
    key = bytes(layouts.FdbKey(300, (ctypes.c_uint8 * 6)(*layouts.mac_bytes(LEARNED_MAC))))
    value = layouts.FdbEntry(seen_ns=123, ifindex=lab.ports["tr"].ifindex, vid=30)
    lab.maps[layouts.LEARNED_FDB].update(key, bytes(value))
    return dump(lab)


def test_every_refused_write_leaves_every_map_as_it_was(lab, refusals):
    old_egress = pass_program()
    try:
        before = apply_a(lab, old_egress)
        egress = lab.obj.program("vtep_egress")
        # update()'s read, compile and diff once: after each refusal the maps are A's again (as asserted)
        current = writer.read(lab.maps)
        difference = plan.diff(current, plan.compile_desired(CONFIG_B, lab.ports, {}, current, egress.info().tag))
        refused = 0
        for k in range(1, 10000):
            refusals.arm(k)
            try:
                with netns(lab.name), writer.Writer(lab.maps, current, egress.fd) as write:
                    write.apply(difference)
            except writer.WriteError as exc:
                assert "refused by the test" in str(exc)
                refused += 1
            else:
                break  # B makes fewer writes than k: it went through
            after = dump(lab)
            changed = sorted(name for name in before.keys() | after.keys() if before.get(name) != after.get(name))
            assert not changed, f"map write {k} refused: {changed} differ from before"
        # B makes writes of every kind: counters, entries, members, groups moved, published and removed
        assert refused > 50
        assert dump(lab) != before  # and B went through in the end
        assert writer.read(lab.maps).groups["flood"][500]
    finally:
        os.close(old_egress.fd)


def test_a_failed_undo_is_said_and_named(lab, refusals):
    """The write after the refused one is the undo's first: it fails too. The error says the maps are
    half-programmed and names what is not back; the undo carries on with the rest."""
    old_egress = pass_program()
    try:
        apply_a(lab, old_egress)
        refusals.arm(40, 41)
        with pytest.raises(writer.RollbackError) as caught:
            update(lab, CONFIG_B, lab.obj.program("vtep_egress"))
        assert "map write 40 on" in caught.value.cause
        assert len(caught.value.unrestored) == 1
        assert "map write 41 on" in caught.value.unrestored[0]
        message = str(caught.value)
        assert "could not restore" in message and "restored" not in message.replace("could not restore", "")
    finally:
        os.close(old_egress.fd)


# --- Capacity: a document that overflows a map is refused before any write --------------------------------------

TRUNK_PORTS = ("a1", "a2", "a3", "a4", "tr")


def trunk_document(vnis: int, with_peer: int = 0) -> VtepConfig:
    """`vnis` VNIs on all five trunks (VID = its index + 1), the first `with_peer` of them with a peer via ul."""
    return VtepConfig(
        tunnel_ports=(TunnelPort("ul", "198.51.100.1"),),
        vnis=tuple(
            Vni(
                1000 + i,
                (),
                tuple(TrunkBinding(port, i + 1, f"vnis[{i}].trunks[{j}]") for j, port in enumerate(TRUNK_PORTS)),
                peers(1) if i < with_peer else (),
                path=f"vnis[{i}]",
            )
            for i in range(vnis)
        ),
    )


def refused(lab: VtepNetns, config: VtepConfig) -> str:
    """The DoesNotFit message of an update to `config`, after checking that no map changed."""
    before = dump(lab)
    with pytest.raises(plan.DoesNotFit) as caught:
        update(lab, config, lab.obj.program("vtep_egress"))
    assert dump(lab) == before
    return str(caught.value)


@pytest.mark.parametrize(
    ("config", "problems"),
    [
        (  # 5 trunks x 3277 VNIs: 16385 bindings, and as many VNIs on ports
            trunk_document(3277),
            [
                "vnis[3276].trunks[4]: the document needs 16385 entries of vlan_bindings for its trunk bindings "
                "(vnis[].trunks), above the data plane's limit of 16384 (max_entries of vlan_bindings in the data "
                "plane)",
                "vnis[3276].trunks[4]: the document needs 16385 entries of port_vnis for its VNIs on ports",
            ],
        ),
        (  # 16380 bindings fit, but five VNIs are also on the tunnel port
            trunk_document(3276, with_peer=5),
            ["vnis[4].peers: the document needs 16385 entries of port_vnis for its VNIs on ports"],
        ),
    ],
    ids=["vlan_bindings", "port_vnis"],
)
def test_a_document_that_overflows_a_map_is_refused_before_any_write(lab, config, problems):
    message = refused(lab, config)
    for problem in problems:
        assert problem in message
    assert message.count("; vnis[") == len(problems) - 1  # and no other map


def test_an_update_that_would_overflow_while_adding_before_removing_is_refused(lab):
    """Each document's 8200 static MACs fit fdb_static (16384), but going from one to the other would hold 16400
    of them at once."""

    def statics(first: int) -> VtepConfig:
        macs = (f"02:00:00:{n >> 16 & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}" for n in range(first, first + 8200))
        entries = tuple(FdbEntry(mac, "a1", None, f"vnis[0].fdb[{j}]") for j, mac in enumerate(macs))
        return VtepConfig((), (Vni(700, (AccessPort("a1"),), (), (), path="vnis[0]", fdb=entries),))

    update(lab, statics(0), lab.obj.program("vtep_egress"))
    message = refused(lab, statics(100000))
    assert message.startswith("vnis[0].fdb[0]: the update adds 8200 entries to fdb_static (static FDB entries ")
    assert "before removing the 8200 that go, and fdb_static holds 16384 at most" in message
