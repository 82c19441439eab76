"""The packet filter (bpf/filter) fuzzed through BPF_PROG_TEST_RUN at both hooks, against a model of its rule
semantics for every frame and against nftables, the kernel's own classifier, for a sample (fuzzlib has the run's
size and seed).

Rules: a new rule list every BLOCK frames (frame i runs under rule set i // BLOCK, so a replay of frame i sets the
same rules), drawn at random (prefixes of both families, protocols, port ranges, actions, unparsed drop or pass),
validated by filter/rules.py and written by filter/writer.py into the loaded object's maps: the path the module takes.

Frames: fuzzlib's (VLAN stacks, IPv4 with options, fragments and bad lengths, IPv6, mutations and truncations), with
addresses, protocols and ports drawn from the rules so that rules match, and IPv6 extension-header chains of 0 to 12
headers (hop-by-hop, routing, destination options, fragment at offset 0 and not, AH), past the 8 the filter walks.
Each frame runs at XDP as it is and at tc as the kernel's receive path hands it there: without its outer VLAN tag,
which the kernel moves into the skb first.

Invariants, for every frame at both hooks: no run fails; the verdict and the one counter that moved (the deciding
rule's slot, or the unmatched reason), by one packet and the frame's length in bytes, are the model's; at the end of
each rule set, no counter moved but those.

The nftables oracle: every NFT_EVERY-th frame, when comparable (see nft_comparable), is sent through a veth pair into
a namespace whose netdev ingress chain holds the same rules (one rule and one named counter each, first match wins:
drop, or accept for count, then a final counter for frames no rule matched), and the counter that moved must be the
one the model (and so the filter) chose.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import struct
import subprocess
import time
from collections import Counter
from dataclasses import dataclass

import fuzzlib as fz
import pytest
from conftest import LAB_PREFIX
from l2lib import Port, packet_socket
from vtep_netns import REPO, sh

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import abi, layouts, rules, writer

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="BPF and namespaces need root")

BLOCK = 2000
NFT_EVERY = 16
NFT_BATCH = 32
TC_ACT_SHOT, TC_ACT_UNSPEC = 2, 0xFFFFFFFF
# BPF_PROG_TEST_RUN of a tc program refuses (EINVAL) an IPv4 or IPv6 frame shorter than the IP header's fixed part.
TC_TEST_RUN_SHORTEST = {fz.ETH_IP: 14 + 20, fz.ETH_IPV6: 14 + 40}
VERDICTS = {"xdp": {"drop": fz.XDP_DROP, "pass": fz.XDP_PASS}, "tc": {"drop": TC_ACT_SHOT, "pass": TC_ACT_UNSPEC}}
VLAN_TPIDS = (fz.ETH_8021Q, fz.ETH_8021AD)
HOP, ROUTING, FRAGMENT, AUTH, DEST = 0, 43, 44, 51, 60
EXTENSION_HEADERS = {HOP, ROUTING, FRAGMENT, AUTH, DEST}
ABSENT, UNKNOWN = "absent", "unknown"  # a frame's ports when it has none, and when they are out of the parser's reach


# --- The model: the rule semantics as filter.h's header comment and the xdp_filter module's docs state them -------


@dataclass(frozen=True)
class Packet:
    """What rules match: family, addresses (ints), protocol (None: unknown) and ports ((sport, dport), ABSENT or
    UNKNOWN); for IPv6 the extension headers walked past."""

    family: int
    src: int
    dst: int
    protocol: int | None
    ports: tuple[int, int] | str
    walked: tuple[int, ...] = ()


def u16(frame: bytes, at: int) -> int:
    return frame[at] << 8 | frame[at + 1]


def transport_ports(frame: bytes, at: int, protocol: int | None):
    if protocol not in (fz.PROTO_TCP, fz.PROTO_UDP):
        return ABSENT
    return (u16(frame, at), u16(frame, at + 2)) if len(frame) >= at + 4 else UNKNOWN


def parse(frame: bytes) -> Packet | str:
    """The packet in a frame, or the unmatched reason ("not_ip", "malformed") when there is none."""
    n = len(frame)
    type_at = 12  # the EtherType, or a tag's TPID
    for _ in range(2):  # two tags at most
        if n < type_at + 2 or u16(frame, type_at) not in VLAN_TPIDS:
            break
        if n < type_at + 6:
            return "not_ip"
        type_at += 4
    if n < type_at + 2:
        return "not_ip"
    ethertype, ip = u16(frame, type_at), type_at + 2
    if ethertype == fz.ETH_IP:
        ihl = frame[ip] & 15 if n > ip else 0
        if n < ip + 20 or frame[ip] >> 4 != 4 or ihl < 5 or n < ip + 4 * ihl:
            return "malformed"
        protocol = frame[ip + 9]
        src, dst = (int.from_bytes(frame[ip + o : ip + o + 4], "big") for o in (12, 16))
        first = u16(frame, ip + 6) & 0x1FFF == 0
        return Packet(4, src, dst, protocol, transport_ports(frame, ip + 4 * ihl, protocol) if first else ABSENT)
    if ethertype == fz.ETH_IPV6:
        if n < ip + 40 or frame[ip] >> 4 != 6:
            return "malformed"
        src, dst = (int.from_bytes(frame[ip + o : ip + o + 16], "big") for o in (8, 24))
        header, at, walked = frame[ip + 6], ip + 40, ()
        for _ in range(abi.FILTER_MAX_EXT_HEADERS):
            if header not in EXTENSION_HEADERS:
                break
            if n < at + 8:
                return Packet(6, src, dst, None, UNKNOWN, walked)
            walked += (header,)
            if header == FRAGMENT:
                header, offset = frame[at], u16(frame, at + 2) >> 3
                at += 8
                if offset:  # a later fragment: no ports; its chain's rest (if any) is in the first one
                    return Packet(6, src, dst, None if header in EXTENSION_HEADERS else header, ABSENT, walked)
                continue
            length = (frame[at + 1] + 2) * 4 if header == AUTH else (frame[at + 1] + 1) * 8
            header, at = frame[at], at + length
        if header in EXTENSION_HEADERS:
            return Packet(6, src, dst, None, UNKNOWN, walked)
        return Packet(6, src, dst, header, transport_ports(frame, at, header), walked)
    return "not_ip"


@dataclass(frozen=True)
class ModelRule:
    name: str
    slot: int
    action: str
    families: tuple[int, ...]
    src: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    dst: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    protocol: int
    src_port: tuple[int, int] | None
    dst_port: tuple[int, int] | None


def in_prefix(address: int, network) -> bool:
    return network is None or address >> (network.max_prefixlen - network.prefixlen) == int(
        network.network_address
    ) >> (network.max_prefixlen - network.prefixlen)


def decide(packet: Packet | str, rule_list: list[ModelRule], unparsed: str) -> tuple[str, object]:
    """(verdict, what counts it: a ModelRule or an unmatched reason). The first rule that matches decides; a rule
    that matches on what is known but needs the protocol or ports, which are not, stops the walk: unparsed."""
    if isinstance(packet, str):
        return "pass", packet
    for rule in rule_list:
        if packet.family not in rule.families or not (
            in_prefix(packet.src, rule.src) and in_prefix(packet.dst, rule.dst)
        ):
            continue
        if rule.protocol and packet.protocol is not None and packet.protocol != rule.protocol:
            continue
        needs_ports = rule.src_port or rule.dst_port
        if needs_ports and packet.ports == ABSENT:
            continue
        if needs_ports and packet.ports != UNKNOWN:
            sport, dport = packet.ports
            if not all(r is None or r[0] <= p <= r[1] for r, p in ((rule.src_port, sport), (rule.dst_port, dport))):
                continue
        if (rule.protocol and packet.protocol is None) or (needs_ports and packet.ports == UNKNOWN):
            return unparsed, "unparsed"
        return ("drop" if rule.action == "drop" else "pass"), rule
    return "pass", "no_rule"


# --- Rule sets ------------------------------------------------------------------------------------------------------

V4_BASE, V6_BASE = int(ipaddress.ip_address("198.51.100.0")), int(ipaddress.ip_address("2001:db8::"))


def random_prefix(rng: random.Random, version: int) -> str:
    if version == 4:
        length = rng.choice((8, 16, 24, 25, 27, 28, 30, 31, 32))
        address = V4_BASE | rng.getrandbits(8)
    else:
        length = rng.choice((16, 32, 48, 64, 96, 120, 127, 128))
        address = V6_BASE | rng.getrandbits(96)
    return str(ipaddress.ip_network((address, length), strict=False))


def random_ports(rng: random.Random):
    low = rng.choice((0, 22, 53, 80, 443, 1000, 4789, 65535, rng.getrandbits(16)))
    high = min(0xFFFF, low + rng.choice((0, 0, 1, 9, 1000, rng.getrandbits(16))))
    return low if low == high and rng.random() < 0.7 else f"{low}-{high}"


def rule_set(seed: int, number: int) -> tuple[list[dict], str]:
    """Rule set `number` of a run: the inventory's items, and unparsed."""
    rng = random.Random(f"filter rules {seed} {number}")
    items = []
    for n in range(rng.choice((0, 1, 2, 3, 4, 6, 8, 12, 16, 24))):
        item = {"name": f"r{n}", "action": rng.choice(("drop", "count"))}
        version = rng.choice((4, 6, None))
        if version:
            for key in ("src", "dst"):
                if rng.random() < 0.5:
                    item[key] = random_prefix(rng, version)
            if not ("src" in item or "dst" in item) and rng.random() < 0.7:
                item["family"] = f"ipv{version}"
        kind = rng.random()
        if kind < 0.7:
            item["protocol"] = rng.choice(("tcp", "udp", "tcp", "udp", 6, 17))
            for key, chance in (("src_port", 0.3), ("dst_port", 0.7)):
                if rng.random() < chance:
                    item[key] = random_ports(rng)
        elif kind < 0.85:
            item["protocol"] = rng.choice(("icmp", "icmpv6", 0, 50, 59, 60, 132, rng.getrandbits(8)))
        items.append(item)
    return items, rng.choice(("drop", "drop", "pass"))


# --- Frames ---------------------------------------------------------------------------------------------------------


@dataclass
class Targets:
    """What frames are drawn from so that the rule set's rules match some of them."""

    prefixes: dict[int, list]
    protocols: list[int]
    port_ranges: list[tuple[int, int]]

    @classmethod
    def of(cls, rule_list: list[ModelRule]) -> Targets:
        prefixes = {4: [], 6: []}
        for rule in rule_list:
            for network in (rule.src, rule.dst):
                if network is not None:
                    prefixes[network.version].append(network)
        return cls(
            prefixes,
            [r.protocol for r in rule_list if r.protocol],
            [p for r in rule_list for p in (r.src_port, r.dst_port) if p],
        )

    def address(self, rng: random.Random, version: int) -> int:
        bits = 32 if version == 4 else 128
        kind = rng.random()
        if self.prefixes[version] and kind < 0.65:
            network = rng.choice(self.prefixes[version])
            host_bits = bits - network.prefixlen
            host = rng.choice((0, (1 << host_bits) - 1)) if rng.random() < 0.2 else rng.getrandbits(host_bits)
            address = int(network.network_address) | host
            if rng.random() < 0.15 and host_bits < bits:  # just outside: the prefix's last bit flipped
                address ^= 1 << host_bits
            return address
        if kind < 0.9:
            return V4_BASE | rng.getrandbits(8) if version == 4 else V6_BASE | rng.getrandbits(96)
        return rng.getrandbits(bits)

    def protocol(self, rng: random.Random) -> int:
        kind = rng.random()
        if self.protocols and kind < 0.4:
            return rng.choice(self.protocols)
        if kind < 0.9:
            return rng.choice((fz.PROTO_TCP, fz.PROTO_UDP, fz.PROTO_ICMP, 58))
        return rng.getrandbits(8)

    def port(self, rng: random.Random) -> int:
        if self.port_ranges and rng.random() < 0.7:
            low, high = rng.choice(self.port_ranges)
            return rng.choice((low, high, max(0, low - 1), min(0xFFFF, high + 1), rng.randint(low, high)))
        return rng.choice((22, 53, 4789, rng.getrandbits(16)))


def transport(rng: random.Random, protocol: int, targets: Targets) -> bytes:
    payload = fz.rand_bytes(rng, rng.choice((0, 0, 4, rng.randint(0, 64))))
    if protocol == fz.PROTO_TCP:
        sport, dport = targets.port(rng), targets.port(rng)
        return struct.pack("!HHIIHHHH", sport, dport, rng.getrandbits(32), 0, 0x5002, 8192, 0, 0) + payload
    if protocol == fz.PROTO_UDP:
        return fz.udp(rng, targets.port(rng), targets.port(rng), len(payload)) + payload
    return payload


def extension_chain(rng: random.Random, upper: int) -> tuple[int, bytes]:
    """0 to 12 IPv6 extension headers before `upper`: (the first next-header value, the headers)."""
    count = rng.choice((0, 0, 0, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8)) if rng.random() < 0.95 else rng.randint(9, 12)
    kinds = [rng.choice((HOP, ROUTING, DEST, DEST, FRAGMENT, AUTH)) for _ in range(count)]
    out = b""
    for n, kind in enumerate(kinds):
        following = kinds[n + 1] if n + 1 < count else upper
        if kind == FRAGMENT:
            offset = 0 if rng.random() < 0.7 else rng.randint(1, 8191)
            out += struct.pack("!BBHI", following, 0, offset << 3 | rng.getrandbits(1), rng.getrandbits(32))
        elif kind == AUTH:
            words = rng.choice((0, 1, 4, 4, rng.randint(0, 20)))  # its length is (words + 2) * 4 bytes
            out += bytes((following, words)) + fz.rand_bytes(rng, (words + 2) * 4 - 2)
        else:
            units = rng.choice((0, 0, 0, 1, 2, rng.randint(0, 20)))  # (units + 1) * 8 bytes
            out += bytes((following, units)) + fz.rand_bytes(rng, (units + 1) * 8 - 2)
    return (kinds[0] if kinds else upper), out


def random_frame(rng: random.Random, targets: Targets) -> bytes:
    tags = fz.vlan_stack(rng)
    kind = rng.random()
    if kind < 0.9:
        version = 4 if kind < 0.4 else 6
        if rng.random() < 0.1:  # an address of the other family's rules
            version = 10 - version
        protocol = targets.protocol(rng)
        l4 = transport(rng, protocol, targets)
        src, dst = targets.address(rng, version), targets.address(rng, version)
        if version == 4:
            body = fz.ipv4(rng, src.to_bytes(4, "big"), dst.to_bytes(4, "big"), protocol, len(l4)) + l4
            ethertype = fz.ETH_IP
        else:
            first, chain = extension_chain(rng, protocol)
            body = fz.ipv6(rng, src.to_bytes(16, "big"), dst.to_bytes(16, "big"), first, len(chain) + len(l4))
            body += chain + l4
            ethertype = fz.ETH_IPV6
    else:
        body, ethertype = fz.rand_bytes(rng, rng.randint(0, 46)), rng.choice((fz.ETH_ARP, rng.getrandbits(16)))
    head = fz.ethernet(fz.mac("02:00:00:00:00:02"), fz.mac("02:00:00:00:00:01"), ethertype, tags)
    return fz.mutate(rng, head + body)


def at_tc(frame: bytes) -> bytes:
    """The frame as tc sees it: the kernel moves an outer 802.1Q/802.1ad tag into the skb first (skb_vlan_untag,
    which needs the tag and the next EtherType in the frame)."""
    if len(frame) >= 20 and u16(frame, 12) in VLAN_TPIDS:
        return frame[:12] + frame[16:]
    return frame


# --- The loaded filter ----------------------------------------------------------------------------------------------


class LoadedFilter:
    """One object, both programs, the maps as the module writes them; counters read on one CPU."""

    def __init__(self, object_path: str, cpu: int):
        self.obj = libbpf.BpfObject(object_path)
        for layout in layouts.LAYOUTS.values():
            layout.check_object(self.obj)
        self.obj.load()
        self.maps = writer.typed({name: self.obj.map(name) for name in layouts.MAP_NAMES})
        self.fds = {hook: self.obj.program(program).fd for hook, program in layouts.PROGRAMS.items()}
        self.raw = {name: self.obj.map(name) for name in ("filter_counters", "filter_unmatched")}
        self.cpu = cpu

    def set_rules(self, items: list[dict], unparsed: str) -> list[ModelRule]:
        desired = rules.validate(items)
        writer.apply(self.maps, writer.plan(writer.read(self.maps), desired, "filter", unparsed))
        slots = [installed.slot for installed in writer.read(self.maps).rules]
        return [
            ModelRule(
                r.name,
                slot,
                r.action,
                r.families,
                ipaddress.ip_network(r.src) if r.src else None,
                ipaddress.ip_network(r.dst) if r.dst else None,
                r.protocol,
                r.src_port,
                r.dst_port,
            )
            for r, slot in zip(desired, slots, strict=True)
        ]

    def counter(self, where: tuple[str, int]) -> tuple[int, int]:
        """(packets, bytes) of one counter on this CPU: ("filter_counters", slot) or ("filter_unmatched", reason)."""
        m = self.raw[where[0]]
        return struct.unpack_from("<QQ", m.lookup(struct.pack("<I", where[1])), self.cpu * m.value_stride)

    def all_counters(self) -> dict[tuple[str, int], tuple[int, int]]:
        out = {
            ("filter_counters", slot): self.counter(("filter_counters", slot)) for slot in range(abi.FILTER_MAX_RULES)
        }
        out.update(
            {
                ("filter_unmatched", n): self.counter(("filter_unmatched", n))
                for n in range(abi.UNMATCHED["UNMATCHED_REASONS"])
            }
        )
        return out

    def close(self) -> None:
        self.obj.close()


REASONS = {label: n for n, label in enumerate(abi.UNMATCHED_REASONS)}


def counted_in(what) -> tuple[str, int]:
    return ("filter_counters", what.slot) if isinstance(what, ModelRule) else ("filter_unmatched", REASONS[what])


# --- The nftables oracle --------------------------------------------------------------------------------------------

NFT_TABLE = f"{LAB_PREFIX}fuzz"
NO_MATCH = "no_match"


def nft_comparable(wire: bytes, packet: Packet | str, counted) -> str | None:
    """Why nftables at netdev ingress may classify this frame otherwise than the rules' semantics say, or None when
    it may not."""
    if len(wire) < 20 and u16(wire, 12) in VLAN_TPIDS:
        return "tag cut short: the kernel drops it before ingress"
    seen = at_tc(wire)
    if u16(seen, 12) in VLAN_TPIDS:
        return "a second tag: the filter parses it, nft's meta protocol is the tag's TPID"
    if packet == "malformed":
        return "malformed: nft matches meta protocol on the EtherType alone"
    if counted == "unparsed":
        return "unparsed: nft parses chains of any length and reads past the frame's linear part"
    if isinstance(packet, Packet) and packet.ports == ABSENT and packet.protocol in (fz.PROTO_TCP, fz.PROTO_UDP):
        # nft_payload_fast_eval reads th fields without looking at fragoff (its slow path does look)
        return "non-first TCP/UDP fragment: nft's th reads its first bytes as ports, the filter gives it none"
    if isinstance(packet, Packet):
        l3 = len(seen) - 14
        if packet.family == 4:
            ihl, total = (seen[14] & 15) * 4, u16(seen, 16)
            if total > l3 or total < ihl:
                return "IPv4 total length past the frame or inside the header: nft sets no l4proto"
        elif 40 + u16(seen, 18) > l3:
            return "IPv6 payload length past the frame: nft sets no l4proto"
        elif AUTH in packet.walked:
            return "AH in the chain: nft's l4proto is AH (ipv6_find_hdr with IP6_FH_F_AUTH), the filter walks past it"
        elif packet.protocol is None:
            # nft's walk (ipv6_find_hdr) reads 2 bytes of a header where the filter wants 8 (4 of a fragment header)
            return "IPv6 protocol unknown to the filter: nft may walk on"
    return None


def nft_rule(rule: ModelRule) -> str:
    family = {4: "ip", 6: "ip6"}
    parts = [f"meta protocol {family[rule.families[0]]}" if len(rule.families) == 1 else "meta protocol { ip, ip6 }"]
    for field, network in (("saddr", rule.src), ("daddr", rule.dst)):
        if network is not None:
            parts.append(f"{family[network.version]} {field} {network}")
    if rule.protocol:
        parts.append(f"meta l4proto {rule.protocol}")
    for field, ports in (("sport", rule.src_port), ("dport", rule.dst_port)):
        if ports:
            parts.append(f"th {field} {ports[0]}" if ports[0] == ports[1] else f"th {field} {ports[0]}-{ports[1]}")
    parts.append(f'counter name "{rule.name}"')
    parts.append("drop" if rule.action == "drop" else "accept")  # accept: the chain ends, the frame passes
    return " ".join(parts)


class NftLab:
    """A veth pair in its own namespace (IPv6 off, so the kernel sends nothing of its own) with a netdev ingress
    chain on rx; frames sent from a packet socket on tx."""

    def __init__(self):
        self.ns = f"{LAB_PREFIX}-nft-{os.getpid()}"
        sh("ip", "netns", "add", self.ns)
        self.run("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1")
        sh("ip", "-n", self.ns, "link", "add", "ftx", "type", "veth", "peer", "name", "frx")
        for end in ("ftx", "frx"):
            sh("ip", "-n", self.ns, "link", "set", end, "mtu", "9000", "up")
        self.sock = packet_socket(Port(self.ns, "ftx"))  # sends; receives nothing
        self.names: list[str] = []

    def run(self, *argv: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            ["ip", "netns", "exec", self.ns, *argv], input=stdin, capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise AssertionError(f"{' '.join(argv)}: {done.stderr}\n{stdin or ''}")
        return done.stdout

    def load(self, rule_list: list[ModelRule]) -> None:
        self.names = [r.name for r in rule_list] + [NO_MATCH]
        counters = "\n".join(f"    counter {name} {{ }}" for name in self.names)
        chain = "\n".join(f"        {nft_rule(r)}" for r in rule_list)
        self.run("nft", "-f", "-", stdin=(
            f"table netdev {NFT_TABLE}\ndelete table netdev {NFT_TABLE}\n"
            f"table netdev {NFT_TABLE} {{\n{counters}\n"
            f'    chain ingress {{\n        type filter hook ingress device "frx" priority 0; policy accept;\n'
            f'{chain}\n        counter name "{NO_MATCH}"\n    }}\n}}\n'
        ))  # fmt: skip

    def counts(self) -> Counter:
        listed = json.loads(self.run("nft", "-j", "list", "counters", "table", "netdev", NFT_TABLE))
        return Counter({o["counter"]["name"]: o["counter"]["packets"] for o in listed["nftables"] if "counter" in o})

    def classify(self, frames: list[bytes]) -> Counter:
        """Send the frames; the counters that moved (waits until each frame is counted once)."""
        before = self.counts()
        for frame in frames:
            self.sock.send(frame)
        deadline = time.monotonic() + 5
        while True:
            moved = self.counts() - before
            if sum(moved.values()) >= len(frames) or time.monotonic() > deadline:
                return moved
            time.sleep(0.001)

    def close(self) -> None:
        self.sock.close()
        sh("ip", "netns", "del", self.ns)


@pytest.fixture(scope="module")
def nft_lab():
    lab = NftLab()
    try:
        yield lab
    finally:
        lab.close()


# --- The run --------------------------------------------------------------------------------------------------------


@dataclass
class Sampled:
    index: int
    frame: bytes
    expected: str  # the nft counter: a rule's name or NO_MATCH


def nft_check(fuzz: fz.Run, lab: NftLab, batch: list[Sampled], rule_text: str) -> None:
    if not batch:
        return
    expected = Counter(s.expected for s in batch)
    if lab.classify([s.frame for s in batch]) == expected:
        for sampled in batch:
            fuzz.note("nft compared: " + ("no rule matched" if sampled.expected == NO_MATCH else "a rule matched"))
        return
    for sampled in batch:  # which one: again, alone
        moved = lab.classify([sampled.frame])
        if moved != Counter([sampled.expected]):
            fuzz.fail(sampled.index, f"nftables, rules: {rule_text}", sampled.frame,
                      f"nft counted {dict(moved)}, the model and the filter {sampled.expected}")  # fmt: skip
    raise AssertionError(f"nftables: batch ending at frame {batch[-1].index} differed, none of its frames alone")


def test_fuzz_filter(tmp_path, nft_lab):
    fuzz = fz.Run("filter")
    path, _ = bpf_build.compile_object(
        str(REPO / "bpf" / "filter" / "filter.c"), str(tmp_path), [str(REPO / "bpf" / "include")]
    )
    with fz.one_cpu() as cpu:
        filt = LoadedFilter(path, cpu)
        try:
            run_blocks(fuzz, filt, nft_lab)
        finally:
            filt.close()
    fuzz.frames = fz.FRAMES
    fuzz.report()


def run_blocks(fuzz: fz.Run, filt: LoadedFilter, lab: NftLab) -> None:
    for block in range(0, fz.FRAMES, BLOCK):
        items, unparsed = rule_set(fuzz.seed, block // BLOCK)
        rule_list = filt.set_rules(items, unparsed)
        rule_text = f"unparsed {unparsed}; " + "; ".join(r.describe() for r in rules.validate(items))
        lab.load(rule_list)
        targets = Targets.of(rule_list)
        expected_counts = filt.all_counters()
        batch: list[Sampled] = []
        for index in range(block, min(block + BLOCK, fz.FRAMES)):
            wire = random_frame(fz.frame_rng(fuzz.seed, index), targets)
            for hook, data in (("xdp", wire), ("tc", at_tc(wire))):
                packet = parse(data)
                if hook == "tc" and len(data) < TC_TEST_RUN_SHORTEST.get(u16(data, 12), 0):
                    fuzz.note("tc: not run, IP frame shorter than an IP header (BPF_PROG_TEST_RUN refuses it)")
                    continue
                verdict, counted = decide(packet, rule_list, unparsed)
                where = counted_in(counted)
                try:
                    result = libbpf.prog_test_run(filt.fds[hook], data, data_out_size=len(data) + 64)
                except libbpf.LibbpfError as exc:
                    fuzz.fail(index, f"hook {hook}", data, f"the run failed: {exc}")
                packets, octets = expected_counts[where]
                expected_counts[where] = (packets + 1, octets + len(data))
                got = filt.counter(where)
                if result.retval != VERDICTS[hook][verdict] or got != expected_counts[where]:
                    name = counted.name if isinstance(counted, ModelRule) else counted
                    moved = [k for k, v in filt.all_counters().items() if v != expected_counts[k]]
                    fuzz.fail(index, f"hook {hook}, rules: {rule_text}", data,
                              f"verdict {result.retval}, counters off the model's: {moved}; the model: {verdict}, "
                              f"counted by {name} ({where})")  # fmt: skip
                fuzz.note(f"{hook} {verdict}")
            fuzz.note("counted by a rule" if isinstance(counted, ModelRule) else f"counted {counted}")
            if isinstance(packet, Packet) and packet.family == 6:
                chain = "0-2" if len(packet.walked) <= 2 else "3-4" if len(packet.walked) <= 4 else "5-8"
                fuzz.note(f"ipv6 behind {chain} headers" + (", ports read" if isinstance(packet.ports, tuple) else ""))
            if index % NFT_EVERY == 0:
                why_not = nft_comparable(wire, packet, counted)
                if why_not:
                    fuzz.note(f"nft not comparable: {why_not.split(':')[0]}")
                else:
                    batch.append(Sampled(index, wire, counted.name if isinstance(counted, ModelRule) else NO_MATCH))
                    if len(batch) == NFT_BATCH:
                        nft_check(fuzz, lab, batch, rule_text)
                        batch = []
        nft_check(fuzz, lab, batch, rule_text)
        moved_elsewhere = {k: v for k, v in filt.all_counters().items() if v != expected_counts[k]}
        assert not moved_elsewhere, (
            f"rule set {block // BLOCK}: counters the model did not expect moved: {moved_elsewhere}"
        )
