"""Unit tests of the packet templates: bases and diff entries against frames scapy builds directly, checksums as
scapy judges them, entry order, and the rejected documents. Pure Python, no kernel."""

import copy
import ipaddress
import math
import random
import re
from collections import Counter

import pytest
from jsonschema import Draft202012Validator
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.templates import TemplateError

SRC_MAC, DST_MAC = "02:00:00:00:00:01", "02:00:00:00:00:02"
DEI = "dei" if "dei" in Dot1Q().default_fields else "id"  # scapy 2.5 (Debian 12's) still calls it id


def _headers(*inner, vlan=None, ip="ipv4"):
    addresses = {"ipv4": ("198.51.100.1", "198.51.100.2"), "ipv6": ("2001:db8::1", "2001:db8::2")}[ip]
    udp = {"src": 49152} if inner else {"src": 1024, "dst": 9}  # before vxlan, dst defaults to 4789
    return [{"ethernet": {}}, *([{"vlan": vlan}] if vlan else []),
            {ip: {"src": addresses[0], "dst": addresses[1]}}, {"udp": udp}, *inner]


VXLAN_INNER = [{"vxlan": {"vni": 100}}, {"ethernet": {"src": "02:00:00:00:01:01", "dst": "02:00:00:00:01:02"}},
               {"ipv4": {"src": "198.51.100.65", "dst": "198.51.100.66", "ttl": 3}}, {"udp": {"src": 7, "dst": 9}}]

# Beyond the examples: every field that may vary, inner layers, random mode, raw offsets, odd frame sizes.
EXTRA = {
    "vxlan-inner": {"name": "vxlan-inner", "frame_size": 150, "packets": [{"headers": _headers(*VXLAN_INNER)}],
                    "variations": [{"field": "ipv4[1].src", "range": ["198.51.100.65", "198.51.100.72"]},
                                   {"field": "udp[1].src", "range": [1000, 60000], "step": 6000},
                                   {"field": "ipv4[1].ttl", "range": [1, 255], "step": 127}]},
    "ipv6-addresses": {"name": "ipv6-addresses", "frame_size": 101, "packets": [{"headers": [
        {"ethernet": {}}, {"ipv6": {"src": "2001:db8::1", "dst": "2001:db8::2", "traffic_class": 184,
                                    "flow_label": 0xABCDE, "hop_limit": 1}}, {"udp": {}}]}],
                       "variations": [{"field": "ipv6.src", "range": ["2001:db8::fff0", "2001:db8::1:000f"]},
                                      {"field": "ipv6.dst", "range": ["2001:db8::", "2001:db8::ffff:0"],
                                       "step": 0x1111_0000, "mode": "random"}]},
    "l2-fields": {"name": "l2-fields", "seed": 9, "packets": [{"headers": [
        {"ethernet": {}}, {"vlan": {"vid": 100, "pcp": 5, "dei": 1}},
        {"ipv4": {"src": "198.51.100.1", "dst": "198.51.100.2", "dscp": 46, "ecn": 1, "df": True, "id": 7}},
        {"udp": {"src": 1024, "dst": 9}}]}],
                  "variations": [{"field": "vlan.vid", "range": [4000, 4094], "step": 47, "mode": "random"},
                                 {"field": "vlan.pcp", "range": [0, 7], "step": 3},
                                 {"field": "ethernet.src", "range": ["02:00:00:00:00:fe", "02:00:00:00:01:02"]},
                                 {"field": "ipv4.dst", "range": ["198.51.100.250", "198.51.100.255"], "step": 2}]},
    "vni-udp-ports": {"name": "vni-udp-ports", "frame_size": 128, "packets": [{"headers": _headers(*VXLAN_INNER)}],
                      "variations": [{"field": "vxlan.vni", "range": [250, 260]},
                                     {"field": "udp.src", "range": [49152, 49155]},
                                     {"field": "udp[1].dst", "range": [5000, 5099], "step": 33}]},
}
TEMPLATES = {**pt.EXAMPLES, **EXTRA}
SCAPY = {  # kind: the scapy layer, and its field for each of the template's
    "ethernet": (Ether, {"src": "src", "dst": "dst"}),
    "vlan": (Dot1Q, {"vid": "vlan", "pcp": "prio", "dei": DEI}),
    "ipv4": (IP, {"src": "src", "dst": "dst", "ttl": "ttl", "id": "id"}),
    "ipv6": (IPv6, {"src": "src", "dst": "dst", "hop_limit": "hlim", "traffic_class": "tc", "flow_label": "fl"}),
    "udp": (UDP, {"src": "sport", "dst": "dport"}),
    "vxlan": (VXLAN, {"vni": "vni"}),
}


def build(doc):
    return pt.build(doc, src_mac=SRC_MAC, dst_mac=DST_MAC)


def rule_values(rule):
    """A rule's values in sequential order, in the document's terms (addresses as strings)."""
    first, last = rule["range"]
    if isinstance(first, int):
        return list(range(first, last + 1, rule.get("step", 1)))
    if re.fullmatch(r"([0-9a-f]{2}:){5}[0-9a-f]{2}", first, re.IGNORECASE):
        numbers = range(int(first.replace(":", ""), 16), int(last.replace(":", ""), 16) + 1, rule.get("step", 1))
        return [":".join(f"{n:012x}"[i : i + 2] for i in range(0, 12, 2)) for n in numbers]
    low, high = ipaddress.ip_address(first), ipaddress.ip_address(last)
    return [str(ipaddress.ip_address(n)) for n in range(int(low), int(high) + 1, rule.get("step", 1))]


def scapy_frame(doc, base, overrides):
    """The frame scapy builds directly for packets[base] with {"udp[1].src": value, ...} substituted."""
    packet = doc["packets"][base]
    frame_size = packet.get("frame_size", doc.get("frame_size", 64))
    seen, stack = Counter(), None
    for i, header in enumerate(packet["headers"]):
        ((kind, given),) = header.items()
        fields = dict(given)
        if kind == "ethernet" and i == 0:
            fields = {"src": SRC_MAC, "dst": DST_MAC, **fields}
        for name, value in overrides.items():
            layer, field = name.split(".")
            if layer in (f"{kind}[{seen[kind]}]", kind if seen[kind] == 0 else None):
                fields[field] = value
        seen[kind] += 1
        extra = {}
        if kind == "ipv4":
            fields = {"ttl": 64, "id": 0, **fields}
            extra = {"tos": fields.pop("dscp", 0) << 2 | fields.pop("ecn", 0), "flags": 2 if fields.pop("df", 0) else 0}
        elif kind == "ipv6":
            fields = {"hop_limit": 64, **fields}
        elif kind == "udp":
            vxlan_next = i + 1 < len(packet["headers"]) and "vxlan" in packet["headers"][i + 1]
            fields = {"src": 1024, "dst": 4789 if vxlan_next else 9, **fields}
        elif kind == "vxlan":
            extra = {"flags": 0x08}
        scapy_layer, names = SCAPY[kind]
        layer = scapy_layer(**{names[name]: value for name, value in fields.items()}, **extra)
        stack = layer if stack is None else stack / layer
    payload = frame_size - 4 - len(stack)
    return bytes(stack / Raw(bytes(payload)))


def entry_overrides(doc, k):
    """The field values entry k must carry: combo k // W, the first rule fastest (sequential rules only)."""
    weight = sum(p.get("weight", 1) for p in doc["packets"])
    combo, overrides = k // weight, {}
    for rule in doc.get("variations", []):
        values = rule_values(rule)
        overrides[rule["field"]] = values[combo % len(values)]
        combo //= len(values)
    return overrides


def checksums_valid(frame):
    """Every IPv4 and UDP checksum in the frame, outer and inner, is what scapy computes itself."""
    packet = Ether(frame)
    layers = [layer for layer in packet.iterpayloads() if isinstance(layer, IP | UDP)]
    assert layers
    for layer in layers:
        del layer.chksum
    return bytes(packet) == frame


def test_schema_is_valid_and_examples_validate():
    Draft202012Validator.check_schema(pt.SCHEMA)
    assert set(pt.EXAMPLES) == {"udp4", "udp4-64flows", "udp6", "udp4-vlan", "imix", "vxlan-vni-sweep"}
    for doc in TEMPLATES.values():
        pt.validate(doc)
        Draft202012Validator(pt.SCHEMA).validate(doc)


def test_examples_use_documentation_addresses_only():
    nets = [ipaddress.ip_network("198.51.100.0/24"), ipaddress.ip_network("2001:db8::/32")]
    for doc in pt.EXAMPLES.values():
        for packet in doc["packets"]:
            for header in packet["headers"]:
                for name in ("ipv4", "ipv6"):
                    for address in (header.get(name) or {}).values():
                        if isinstance(address, str):
                            assert any(ipaddress.ip_address(address) in net for net in nets), address


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_entries_equal_frames_scapy_builds(name):
    doc = TEMPLATES[name]
    if any(rule.get("mode") == "random" for rule in doc.get("variations", [])):
        doc = copy.deepcopy(doc)
        for rule in doc["variations"]:
            rule.pop("mode", None)
    expanded = build(doc)
    count = len(expanded.entries)
    picks = sorted({0, min(1, count - 1), count - 1, *random.Random(name).sample(range(count), min(count, 8))})
    for k in picks:
        frame = expanded.frame(k)
        assert frame == scapy_frame(doc, expanded.entries[k].base, entry_overrides(doc, k)), (name, k)
        assert checksums_valid(frame), (name, k)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_every_entry_checksum_valid_and_diffs_within_limits(name):
    expanded = build(TEMPLATES[name])
    assert expanded.header_len % 8 == 0 and expanded.header_len <= pt.HEADER_MAX
    assert all(base.header_len <= expanded.header_len for base in expanded.bases)
    for k, entry in enumerate(expanded.entries):
        assert len(entry.diffs) <= pt.DIFFS_MAX
        for diff in entry.diffs:
            assert len(diff.value) in (1, 2, 4) and diff.offset + len(diff.value) <= expanded.header_len
            assert expanded.bases[entry.base].frame[diff.offset : diff.offset + len(diff.value)] != diff.value
        frame = expanded.frame(k)
        assert len(frame) == expanded.frame_sizes[entry.base] - 4 == len(expanded.bases[entry.base].frame)
        assert checksums_valid(frame), (name, k)


def test_fixed_template_has_one_entry_without_diffs():
    expanded = build(pt.EXAMPLES["udp4"])
    assert [e.diffs for e in expanded.entries] == [()]
    assert expanded.flows == 1 and expanded.header_len == 48 and expanded.bases[0].header_len == 42
    assert expanded.data_in() == expanded.frame(0) == expanded.bases[0].frame and len(expanded.data_in()) == 60


def test_udp_src_sweep_writes_port_and_checksum():
    expanded = build(pt.EXAMPLES["udp4-64flows"])
    assert expanded.flows == 64 and len(expanded.entries) == 64
    assert [d.offset for d in expanded.entries[5].diffs] == [34, 40]  # the port, then the UDP checksum
    assert [Ether(expanded.frame(k))[UDP].sport for k in range(64)] == list(range(1024, 1088))


def test_vni_sweep_keeps_reserved_byte_and_merges_words():
    expanded = build(pt.EXAMPLES["vxlan-vni-sweep"])
    assert expanded.udp_dst_ports == (4789, 4789) and expanded.header_len == 96
    assert [Ether(expanded.frame(k))[VXLAN].vni for k in range(64)] == list(range(100, 164))
    doc = copy.deepcopy(EXTRA["vni-udp-ports"])
    doc["variations"] = doc["variations"][:1]
    expanded = build(doc)
    # VNI 100 -> 256 changes the VNI's 2nd and 3rd bytes: one 4-byte write over VNI bytes 2..3 and reserved.
    entry = expanded.entries[256 - 250]
    vni_at = 14 + 20 + 8 + 4
    write = next(d for d in entry.diffs if d.offset <= vni_at + 2 < d.offset + len(d.value))
    assert (write.offset, len(write.value)) == (vni_at, 4) and write.value == bytes([0, 1, 0, 0])
    assert Ether(expanded.frame(6))[VXLAN].vni == 256


def test_vlan_variation_keeps_pcp_and_dei():
    doc = {"name": "vid", "packets": [{"headers": _headers(vlan={"vid": 100, "pcp": 5, "dei": 1})}],
           "variations": [{"field": "vlan.vid", "range": [1, 4094], "step": 1000}]}
    expanded = build(doc)
    for k, vid in enumerate(range(1, 4095, 1000)):
        tag = Ether(expanded.frame(k))[Dot1Q]
        assert (tag.vlan, tag.prio, getattr(tag, DEI)) == (vid, 5, 1)
        assert all(len(d.value) in (2, 4) for d in expanded.entries[k].diffs)


def test_random_mode_each_value_once_per_cycle_and_reproducible():
    doc = {"name": "rnd", "seed": 42, "packets": [{"headers": _headers()}],
           "variations": [{"field": "udp.src", "range": [2000, 2063], "mode": "random"},
                          {"field": "udp.dst", "range": [7, 9]}]}
    expanded = build(doc)
    ports = [(Ether(expanded.frame(k))[UDP].sport, Ether(expanded.frame(k))[UDP].dport) for k in range(3 * 64)]
    cycles = [[sport for sport, _ in ports[c * 64 : (c + 1) * 64]] for c in range(3)]
    for c, cycle in enumerate(cycles):
        assert sorted(cycle) == list(range(2000, 2064)) and cycle != sorted(cycle)
        assert {dport for _, dport in ports[c * 64 : (c + 1) * 64]} == {7 + c}
    assert build(copy.deepcopy(doc)).entries == expanded.entries
    assert build({**doc, "seed": 43}).entries != expanded.entries


def test_imix_weights_interleave_and_frame_lengths():
    doc = pt.EXAMPLES["imix"]
    expanded = build(doc)
    assert expanded.frame_sizes == (64, 594, 1518) and len(expanded.entries) == 16 * 12
    counts = Counter(entry.base for entry in expanded.entries)
    assert [counts[b] * 12 / len(expanded.entries) for b in range(3)] == [7, 4, 1]
    pattern = [entry.base for entry in expanded.entries[:12]]
    assert pattern == [0, 1, 0, 0, 1, 0, 2, 0, 1, 0, 1, 0]  # smooth weighted round robin, not 7 a's then 4 b's
    assert [entry.base for entry in expanded.entries[12:24]] == pattern
    for k in range(len(expanded.entries)):
        frame = expanded.frame(k)
        assert len(frame) == expanded.frame_sizes[expanded.entries[k].base] - 4
        assert Ether(frame)[UDP].sport == 1024 + k // 12
    assert len(expanded.data_in()) == 1514
    assert "imix" in expanded.describe() and "192 entries" in expanded.describe()


def test_udp_dst_ports_follow_the_outer_dst_variation():
    doc = {"name": "dst", "packets": [{"headers": _headers()}],
           "variations": [{"field": "udp.dst", "range": [5000, 5100], "step": 3}]}
    assert build(doc).udp_dst_ports == (5000, 5099)
    assert build(EXTRA["vni-udp-ports"]).udp_dst_ports == (4789, 4789)  # an inner dst sweep is not the outer


def test_dst_addresses_are_the_outer_ip_destinations():
    """The echo server answers for these (trafficgen echo's default addresses)."""
    doc = {"name": "dst", "packets": [{"headers": _headers()}],
           "variations": [{"field": "ipv4.dst", "range": ["198.51.100.20", "198.51.100.23"]}]}  # fmt: skip
    assert build(doc).dst_addresses == tuple(f"198.51.100.{n}" for n in range(20, 24))
    assert build(EXTRA["vni-udp-ports"]).dst_addresses == (_headers()[1]["ipv4"]["dst"],)  # not the inner's
    assert build(pt.EXAMPLES["udp6"]).dst_addresses == ("2001:db8::2",)


def test_raw_offset_variation_equals_named_field():
    raw = {"name": "raw", "packets": [{"headers": _headers()}],
           "variations": [{"offset": 34, "size": 2, "range": [1, 100]}]}
    named = {**raw, "variations": [{"field": "udp.src", "range": [1, 100]}]}
    assert build(raw).entries == build(named).entries


def test_udp_checksum_computed_zero_is_sent_as_ffff():
    doc = {"name": "all-ports", "packets": [{"headers": _headers()}],
           "variations": [{"field": "udp.src", "range": [0, 65535]}]}
    expanded = build(doc)
    checksums = [int.from_bytes(expanded.frame(k)[40:42], "big") for k in range(0, 65536)]
    assert 0 not in checksums
    k = checksums.index(0xFFFF)
    assert checksums_valid(expanded.frame(k))


def test_with_frame_size_sets_every_packet():
    doc = pt.EXAMPLES["imix"]
    resized = pt.with_frame_size(doc, 128)
    assert [p["frame_size"] for p in resized["packets"]] == [128] * 3
    assert [p["frame_size"] for p in doc["packets"]] == [64, 594, 1518]
    assert build(resized).frame_sizes == (128, 128, 128)


def test_macs_from_the_arguments_or_the_document():
    doc = copy.deepcopy(pt.EXAMPLES["udp4"])
    with pytest.raises(TemplateError) as error:
        pt.build(doc, src_mac=SRC_MAC)
    assert error.value.errors == ["packets[0].headers[0].ethernet.dst: required: give it, or let the generator "
                                  "resolve the peer's MAC"]
    doc["packets"][0]["headers"][0]["ethernet"] = {"src": "02:00:00:00:00:0a", "dst": "02:00:00:00:00:0b"}
    ether = Ether(pt.build(doc, src_mac=SRC_MAC, dst_mac=DST_MAC).frame(0))
    assert (ether.src, ether.dst) == ("02:00:00:00:00:0a", "02:00:00:00:00:0b")


def test_too_many_diffs_is_rejected_at_build():
    everything = {"step": 2**128 - 1, "range": ["::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"]}
    doc = {"name": "wide", "frame_size": 78, "packets": [{"headers": _headers(ip="ipv6")}],
           "variations": [{"field": "ipv6.src", **everything}, {"field": "ipv6.dst", **everything}]}
    with pytest.raises(TemplateError, match=r"^variations: entry 3 needs 9 diffs"):
        build(doc)


def _doc(template="udp4", **changes):
    doc = copy.deepcopy(TEMPLATES[template])
    doc.update(changes)
    return doc


def _with_headers(headers, **changes):
    return _doc(packets=[{"headers": headers}], **changes)


def _vxlan(**vxlan):
    return _with_headers(_headers({"vxlan": vxlan}, *VXLAN_INNER[1:]), frame_size=128)


BAD = [
    (_vxlan(vni=2**24), "packets[0].headers[3].vxlan.vni: 16777216 is above the maximum 16777215"),
    (_with_headers(_headers(vlan={"vid": 4095})), "packets[0].headers[1].vlan.vid: 4095 is above the maximum 4094"),
    (_with_headers([*_headers()[:2], {"udp": {"src": 70000}}]),
     "packets[0].headers[2].udp.src: 70000 is above the maximum 65535"),
    (_doc(variations=[{"field": "udp.sport", "range": [1, 2]}]), "variations[0].field: unknown field 'udp.sport'"),
    (_doc(variations=[{"field": "vlan.vid", "range": [1, 2]}]), "variations[0].field: no layer vlan[0] in packets[0]"),
    (_doc("imix", variations=[{"field": "ipv4[1].src", "range": ["198.51.100.1", "198.51.100.2"]}]),
     "variations[0].field: no layer ipv4[1] in packets[2]"),
    (_doc(variations=[{"field": "udp.src", "range": [1087, 1024]}]), "variations[0].range: 1087..1024 is reversed"),
    (_doc(variations=[{"field": "ipv4.src", "range": ["198.51.100.1", "2001:db8::1"]}]),
     "variations[0].range: 198.51.100.1 and 2001:db8::1 are not of the same address family"),
    (_doc(variations=[{"field": "ipv4.src", "range": ["2001:db8::1", "2001:db8::2"]}]),
     "this field takes IPv4 addresses"),
    (_doc(variations=[{"field": "vlan.vid", "range": [4000, 4095]}], packets=[{"headers": _headers(vlan={"vid": 1})}]),
     "variations[0].range: 4000..4095 is not within 1..4094"),
    (_doc("vxlan-vni-sweep", frame_size=64),
     "packets[0].frame_size: 64 bytes (60 without the FCS) cannot hold the 92 bytes of headers"),
    (_doc(variations=[{"field": "ipv6.src", "range": ["2001:db8::", "2001:db8::ffff:ffff:ffff:ffff"]}],
          packets=[{"headers": _headers(ip="ipv6")}], frame_size=78),
     "variations: 18446744073709551616 = 18446744073709551616 entries, more than 65536"),
    (_doc(variations=[{"field": "udp.src", "range": [0, 65535]}, {"field": "udp.dst", "range": [1, 2]}]),
     "variations: 65536 x 2 = 131072 entries, more than 65536"),
    (_doc("imix", variations=[{"field": "udp.src", "range": [1, 64]}, {"field": "udp.dst", "range": [1, 2048]}]),
     "variations: 64 x 2048 x 12 (weights) = 1572864 entries, more than 65536"),
    (_with_headers([*_headers()[:2], {"vxlan": {"vni": 1}}]), "packets[0].headers[2].vxlan: may not follow ipv4"),
    (_with_headers([{"ethernet": {}}, *_headers()]), "packets[0].headers[1].ethernet: may not follow ethernet"),
    (_with_headers(_headers()[1:]), "packets[0].headers[0].ipv4: the first header must be ethernet"),
    (_with_headers([*_headers(vlan={"vid": 1})[:2], {"vlan": {"vid": 2}}, *_headers()[1:]]),
     "packets[0].headers[2].vlan: may not follow vlan"),
    (_with_headers(_headers()[:2]), "packets[0].headers: ends with ipv4"),
    (_with_headers([*_headers()[:2], {"tcp": {"src": 1}}]),
     "packets[0].headers[2]: unknown key 'tcp' (allowed: ethernet, vlan"),
    (_with_headers([{"ethernet": {}, "ipv4": {}}]), "packets[0].headers[0]: a header is a mapping with one key"),
    (_doc(packets=[{"weight": 0, "headers": _headers()}]), "packets[0].weight: 0 is below the minimum 1"),
    (_doc(packets=[{"headers": _headers()}] * 9), "packets: lists 9, more than the maximum 8"),
    (_doc(packets=[]), "packets: must list at least 1, lists 0"),
    (_doc(frame_sizes=64), "template: unknown key 'frame_sizes' (did you mean 'frame_size'?)"),
    (_doc(frame_size=9019), "frame_size: 9019 is above the maximum 9018"),
    (_doc(name="two words"), "name: \"two words\" is not a valid name (1 to 64 letters"),
    (_with_headers([_headers()[0], {"ipv4": {"src": "198.51.100.300", "dst": "198.51.100.2"}}, _headers()[2]]),
     "packets[0].headers[1].ipv4.src: \"198.51.100.300\" is not a valid IPv4 address"),
    (_with_headers([_headers()[0], {"ipv4": {"src": "198.51.100.1"}}, _headers()[2]]),
     "packets[0].headers[1].ipv4: missing required key 'dst'"),
    (_with_headers([{"ethernet": {"dst": "02:00:00:00:00"}}, *_headers()[1:]]),
     "packets[0].headers[0].ethernet.dst: \"02:00:00:00:00\" is not a valid MAC address"),
    (_vxlan(vni=1) | {"packets": [{"headers": _headers({"vxlan": {"vni": 1}}, {"ethernet": {}}, *VXLAN_INNER[2:])}]},
     "packets[0].headers[4].ethernet.src: required in an inner (VXLAN) ethernet header"),
    (_with_headers([{"ethernet": {}}, {"vlan": {"vid": 1}}, {"ipv6": {"src": "::1", "dst": "::2"}}, {"udp": {}},
                    {"vxlan": {"vni": 1}}, VXLAN_INNER[1], {"vlan": {"vid": 1}},
                    {"ipv6": {"src": "::1", "dst": "::2"}}, {"udp": {}}], frame_size=200),
     "packets[0].headers: 140 bytes of headers, more than HEADER_MAX 128"),
    (_doc(variations=[{"field": "udp.src", "offset": 34, "range": [1, 2]}]),
     "variations[0]: give either field, or offset and size"),
    (_doc(variations=[{"offset": 40, "size": 4, "range": [1, 2]}]),
     "variations[0].offset: bytes 40..43 overlap the checksum at 40 of packets[0]"),
    (_doc(variations=[{"offset": 46, "size": 4, "range": [1, 2]}]), "variations[0].offset: bytes 46..49 are outside"),
    (_doc(variations=[{"offset": 34, "size": 3, "range": [1, 2]}]), "variations[0].size: 3 is not one of 1, 2, 4"),
    (_doc(variations=[{"field": "udp.src", "range": [1, 2], "step": 0}]),
     "variations[0].step: 0 is below the minimum 1"),
    (_doc(variations=[{"field": "udp.src", "range": [1, 2], "mode": "shuffle"}]),
     'variations[0].mode: "shuffle" is not one of sequential, random'),
    (_doc(variations=[{"field": "ethernet.src", "range": ["02:00:00:00:00:01", "2"]}]),
     "variations[0].range: '2' is not an address"),
]


@pytest.mark.parametrize(("doc", "expected"), BAD, ids=[f"{i:02d}" for i in range(len(BAD))])
def test_bad_documents_are_rejected_naming_the_field(doc, expected):
    with pytest.raises(TemplateError) as error:
        pt.validate(doc)
    assert any(expected in message for message in error.value.errors), error.value.errors
    assert expected in str(error.value)


def test_all_problems_are_reported_at_once():
    doc = _with_headers([_headers()[0], _headers(vlan={"vid": 4095})[1], {"ipv4": {"src": "198.51.100.1"}},
                         {"udp": {"dst": -1}}], weight=1, variations=[{"field": "udp.src", "range": [2, 1]}])
    with pytest.raises(TemplateError) as error:
        pt.validate(doc)
    assert error.value.errors == [
        "template: unknown key 'weight' (allowed: name, frame_size, seed, packets, variations)",
        "packets[0].headers[1].vlan.vid: 4095 is above the maximum 4094",
        "packets[0].headers[2].ipv4: missing required key 'dst'",
        "packets[0].headers[3].udp.dst: -1 is below the minimum 0",
    ]
    # The semantic pass runs on the parts the schema found well-formed.
    doc = _doc(variations=[{"field": "udp.src", "range": [2, 1]}, {"field": "ipv6.src", "range": [1, 2]},
                           {"field": "udp.dst", "range": [1, 2], "mode": "?"}])
    with pytest.raises(TemplateError) as error:
        pt.validate(doc)
    assert [message.split(":")[0] for message in error.value.errors] == [
        "variations[2].mode", "variations[0].range", "variations[1].field", "variations[1].range"]


def test_entries_cap_counts_weights():
    doc = _doc("imix", variations=[{"field": "udp.src", "range": [1, 65536 // 12]}])
    assert len(build(doc).entries) == math.prod([65536 // 12, 12]) <= pt.ENTRIES_MAX
