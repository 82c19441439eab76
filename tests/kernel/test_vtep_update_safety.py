"""A VTEP update never leaves a host half-programmed, and a document that does not fit is refused before it
changes anything.

Rollback: configuration A is applied, then B with map write k refused, for every write B makes; after each
refusal every map of the object (the inner member groups of the ARRAY_OF_MAPS, the learned FDB and the counters
included) is compared byte for byte with its dump after A. B moves a group between size classes, adds and removes
groups, rewires every member onto another egress program, zeroes counters and overrides a learned MAC, so each
write of each kind is refused once. The refusal is the test's: every map update, batch update and delete (libbpf.Map's,
which every map the writer touches is) is counted, and the chosen ones fail with EIO, as a kernel refusal does, before
reaching the kernel.

Capacity: documents that overflow vlan_bindings, port_vnis, and fdb_static during an update (max_entries of the
loaded object). Host: a tunnel address the port lacks, and a port that carries the management address, for both
backends, with deploy() run inside a namespace of real interfaces as the modules run it.

The real VTEP object runs in namespaces of its own (as vtep_netns does)."""

import ctypes
import errno
import json
import os
import resource
import struct
import subprocess
import sys

import pytest
from conftest import LAB_PREFIX
from l2lib import netns
from vtep_netns import REPO, VtepNetns, sh

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts, plan, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import peer_member_key
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
            inner = libbpf.map_fd_by_id(int.from_bytes(ref, "little"))
            try:
                out[f"{name}[{int.from_bytes(slot, 'little')}]"] = dict(libbpf.Map.from_fd(inner).dump())
            finally:
                libbpf.close_fd(inner)
    return out


@pytest.fixture(scope="module")
def lab(bpf_cache):
    ports = {"a1": 1500, "a2": 1500, "a3": 1500, "a4": 1500, "tr": 1500, "ul": 1600, "ul2": 1600}
    with VtepNetns.loaded(f"{LAB_PREFIX}-rb-{os.getpid()}", ports, bpf_cache) as lab:
        yield lab


class Refusals:
    """Map writes (update, delete) counted from 1 once armed; those numbered in `refuse` fail."""

    def __init__(self, monkeypatch):
        self.count = 0
        self.refuse: frozenset = frozenset()
        for call in ("update", "update_batch", "delete"):
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
        egress = lab.obj.program(layouts.EGRESS_PROGRAM)
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
            update(lab, CONFIG_B, lab.obj.program(layouts.EGRESS_PROGRAM))
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
        update(lab, config, lab.obj.program(layouts.EGRESS_PROGRAM))
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

    update(lab, statics(0), lab.obj.program(layouts.EGRESS_PROGRAM))
    message = refused(lab, statics(100000))
    assert message.startswith("vnis[0].fdb[0]: the update adds 8200 entries to fdb_static (static FDB entries ")
    assert "before removing the 8200 that go, and fdb_static holds 16384 at most" in message


def test_a_first_apply_of_many_vnis_stays_within_a_hosts_open_file_limit(lab):
    """New member groups are open fds until published, and are published in batches: 1,200 new groups (600 VNIs, a
    flood and a local group each) go in with 700 fds to spare (a host's usual soft limit is 1024), where keeping every
    new group open until the end ran out of them (EMFILE)."""
    config = trunk_document(600, with_peer=600)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 700, hard))
    try:
        update(lab, config, lab.obj.program(layouts.EGRESS_PROGRAM))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    groups = writer.read(lab.maps).groups
    assert len(groups["flood"]) == len(groups["local"]) == 600
    trunks = {lab.ports[port].ifindex: lab.ports[port].ifindex for port in TRUNK_PORTS}
    uplink = lab.ports["ul"].ifindex
    assert groups["flood"][1599] == {**trunks, peer_member_key(uplink, 0): uplink}


# --- The document against the host's addresses: refused before anything changes ----------------------------------

HOST_DOCUMENT = {
    "tunnel_ports": [{"port": "hul", "local_ip": "198.51.100.161"}],
    "vnis": [{"vni": 100, "access_ports": ["ha1"], "peers": [{"ip": "198.51.100.162", "via": "hul"}]}],
}
DEPLOY = """
import json, os, sys
sys.path.insert(0, {collection!r})
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vd, linux as lv
document, backend, allow, pins = json.loads(sys.argv[1])
try:
    if backend == "xdp":
        paths = xp.InstancePaths("vtep", pins, pins + "-state")
        vd.Vtep(paths, pins + "-cache", document=document, check_host=True, allow_management_port=allow).deploy()
    else:
        with lv.open_ipr() as ipr:
            lv.deploy(ipr, document, pins + "-state", False, allow)
    print(json.dumps(["applied", []]))
except (vd.VtepError, lv.LinuxVtepError) as exc:
    print(json.dumps(["refused", exc.problems]))
"""


@pytest.fixture(scope="module")
def host_ns():
    """A namespace whose ports are plain veths: hul (tunnel port, 198.51.100.161/27) and ha1 (an access port, which
    the tests make the management interface: 198.51.100.170/27, the default route)."""
    name = f"{LAB_PREFIX}-host-{os.getpid()}"
    sh("ip", "netns", "add", name)
    try:
        for port, address, mtu in (("hul", "198.51.100.161/27", "1600"), ("ha1", "198.51.100.170/27", "1500")):
            sh("ip", "-n", name, "link", "add", port, "mtu", mtu, "type", "veth", "peer", "name", f"{port}p")
            sh("ip", "-n", name, "addr", "add", address, "dev", port)
            sh("ip", "-n", name, "link", "set", port, "up")
        sh("ip", "-n", name, "route", "add", "default", "via", "198.51.100.171", "dev", "ha1", "onlink")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def host_state(ns: str) -> str:
    """The namespace's links (with any XDP program and master) and addresses."""
    links = subprocess.run(["ip", "-n", ns, "-d", "link", "show"], check=True, capture_output=True, text=True).stdout
    addrs = subprocess.run(["ip", "-n", ns, "addr", "show"], check=True, capture_output=True, text=True).stdout
    return links + addrs


def deploy(ns: str, tmp_path, document: dict, backend: str, allow: bool = False, ssh: str | None = None):
    """deploy() of a backend run inside the namespace (ip netns exec: its own sysfs), as the module runs it."""
    env = {k: v for k, v in os.environ.items() if k != "SSH_CONNECTION"}
    if ssh is not None:
        env["SSH_CONNECTION"] = ssh
    script = DEPLOY.format(collection=str(REPO / "collection"))
    argv = json.dumps([document, backend, allow, str(tmp_path / "pins")])
    done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script, argv], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    return json.loads(done.stdout)


@pytest.mark.parametrize("backend", ["xdp", "linux"])
def test_a_tunnel_address_the_port_does_not_have_is_refused(host_ns, tmp_path, backend):
    before = host_state(host_ns)
    document = {**HOST_DOCUMENT, "tunnel_ports": [{"port": "hul", "local_ip": "198.51.100.163"}]}
    outcome, problems = deploy(host_ns, tmp_path, document, backend, allow=True)
    assert (outcome, problems) == (
        "refused",
        [
            "tunnel_ports[0].local_ip: 198.51.100.163 is not an address of hul (this module does not add underlay "
            "addresses: configure them first)"
        ],
    )
    assert host_state(host_ns) == before and not (tmp_path / "pins").exists()


@pytest.mark.parametrize("backend", ["xdp", "linux"])
@pytest.mark.parametrize(
    ("ssh", "why"),
    [
        ("198.51.100.171 50022 198.51.100.170 22", "carries 198.51.100.170, the address of the SSH session"),
        (None, "has the default route"),
    ],
    ids=["ssh-session", "default-route"],
)
def test_a_port_the_host_is_managed_through_is_refused_unless_allowed(host_ns, tmp_path, backend, ssh, why):
    before = host_state(host_ns)
    outcome, problems = deploy(host_ns, tmp_path, HOST_DOCUMENT, backend, ssh=ssh)
    assert outcome == "refused" and len(problems) == 1, problems
    assert problems[0].startswith(f"vnis[0].access_ports[0]: ha1 {why}")
    assert problems[0].endswith("set allow_management_port: true to use it anyway")
    assert host_state(host_ns) == before and not (tmp_path / "pins").exists()


def test_the_session_address_on_another_port_is_no_reason_to_refuse(host_ns, tmp_path):
    """The SSH session's address decides, not the default route: here the session comes in through hul, which is
    a tunnel port (refused), while ha1 (the default route) is free to be an access port."""
    outcome, problems = deploy(host_ns, tmp_path, HOST_DOCUMENT, "linux", ssh="198.51.100.162 50022 198.51.100.161 22")
    assert outcome == "refused"
    assert [p.split(":")[0] for p in problems] == ["tunnel_ports[0].port"]


def test_a_management_port_is_taken_when_allowed(host_ns, tmp_path):
    """allow_management_port: true lets the Linux backend make its bridge with ha1 in it."""
    ssh = "198.51.100.171 50022 198.51.100.170 22"
    assert deploy(host_ns, tmp_path, HOST_DOCUMENT, "linux", allow=True, ssh=ssh) == ["applied", []]
    assert "master xbr100" in subprocess.run(["ip", "-n", host_ns, "link", "show", "ha1"], check=True,
                                             capture_output=True, text=True).stdout  # fmt: skip
