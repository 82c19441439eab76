# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Packet templates of the live-frames traffic generator: a YAML document -> base packets and diff entries.

The XDP sender picks entry k round robin, copies the first header_len bytes of the entry's base packet into the
frame, writes the entry's few diffs (offset, 1/2/4 bytes) and trims the frame to the base's length; everything
else happens here, once, on the host (the "base packet + diffs" design of XDPerf's template engine):

    name: udp4-64flows
    frame_size: 64                 # on the wire, FCS included (RFC 2544)
    packets:
      - headers: [{ethernet: {}}, {ipv4: {src: 198.51.100.1, dst: 198.51.100.2}}, {udp: {src: 1024, dst: 9}}]
    variations:
      - {field: udp.src, range: [1024, 1087]}

Base packets are built with scapy; each entry's IPv4 and UDP checksums (outer and inner) are updated
incrementally from its base's (RFC 1624), so the sender never computes one. validate() raises TemplateError with
every problem, each naming its field path and the rule it breaks; build() returns the Expanded template.
"""

from __future__ import annotations

import copy
import ipaddress
import math
import random
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import schema as schema_words
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.abi import (
    TG_BASES_MAX,
    TG_DIFF_U16,
    TG_DIFF_U32,
    TG_HEADER_WORD,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.abi import TG_DIFFS_MAX as DIFFS_MAX
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.abi import TG_ENTRIES_MAX as ENTRIES_MAX
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.abi import TG_HEADER_MAX as HEADER_MAX

VXLAN_PORT = 4789
FCS_LEN = 4


class TemplateError(ValueError):
    """The template breaks one or more rules; .errors lists them, each starting with the field's path."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("\n".join(errors))


def _int(low: int, high: int | None = None, default: int | None = None) -> dict:
    schema = {"type": "integer", "minimum": low, "maximum": high, "default": default}
    return {key: value for key, value in schema.items() if value is not None}


def _header(required: tuple[str, ...] = (), **properties: dict) -> dict:
    return {"type": "object", "additionalProperties": False, "required": list(required), "properties": properties}


_MAC_PATTERN = "^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$"
_MAC = {"type": "string", "pattern": _MAC_PATTERN, "title": "MAC address", "description": "like 02:00:00:00:00:01"}
_IPV4, _IPV6 = {"type": "string", "format": "ipv4"}, {"type": "string", "format": "ipv6"}
_HEADERS = {
    "ethernet": _header(src=_MAC, dst=_MAC),
    "vlan": _header(("vid",), vid=_int(1, 4094), pcp=_int(0, 7, 0), dei=_int(0, 1, 0)),
    "ipv4": _header(("src", "dst"), src=_IPV4, dst=_IPV4, ttl=_int(0, 255, 64), dscp=_int(0, 63, 0),
                    ecn=_int(0, 3, 0), id=_int(0, 65535, 0), df={"type": "boolean", "default": False}),
    "ipv6": _header(("src", "dst"), src=_IPV6, dst=_IPV6, hop_limit=_int(0, 255, 64),
                    traffic_class=_int(0, 255, 0), flow_label=_int(0, 0xFFFFF, 0)),
    "udp": _header(src=_int(0, 65535, 1024), dst=_int(0, 65535, 9)),  # dst defaults to 4789 before vxlan
    "vxlan": _header(("vni",), vni=_int(0, 0xFFFFFF)),
}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "xdpfleet packet template",
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "packets"],
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$", "title": "name",
                 "description": "1 to 64 letters, digits, '_', '.' or '-'"},
        "frame_size": _int(64, 9018, 64),
        "seed": {"type": "integer", "default": 1},
        "packets": {"type": "array", "minItems": 1, "maxItems": TG_BASES_MAX, "items": {"$ref": "#/$defs/packet"}},
        "variations": {"type": "array", "maxItems": 4, "items": {"$ref": "#/$defs/variation"}},
    },
    "$defs": {
        "packet": {
            "type": "object", "additionalProperties": False, "required": ["headers"],
            "properties": {"weight": _int(1, 1000, 1), "frame_size": _int(64, 9018),
                           "headers": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/header"}}},
        },
        "header": {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": False,
                   "properties": {kind: {"$ref": f"#/$defs/{kind}"} for kind in _HEADERS},
                   "description": "a header is a mapping with one key, its kind"},
        **_HEADERS,
        "variation": {
            "type": "object", "additionalProperties": False, "required": ["range"],
            "properties": {
                "field": {"type": "string"}, "offset": _int(0, HEADER_MAX - 1), "size": {"enum": [1, 2, 4]},
                "range": {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": ["integer", "string"]}},
                "step": _int(1, None, 1), "mode": {"enum": ["sequential", "random"], "default": "sequential"},
            },
            "oneOf": [{"required": ["field"], "not": {"anyOf": [{"required": ["offset"]}, {"required": ["size"]}]}},
                      {"required": ["offset", "size"], "not": {"required": ["field"]}}],
        },
    },
}

_LENGTH = {"ethernet": 14, "vlan": 4, "ipv4": 20, "ipv6": 40, "udp": 8, "vxlan": 8}
_FOLLOWS = {"ethernet": ("vlan", "ipv4", "ipv6"), "vlan": ("ipv4", "ipv6"), "ipv4": ("udp",), "ipv6": ("udp",),
            "udp": ("vxlan",), "vxlan": ("ethernet",)}
_FAMILY_WORD = {"mac": "MAC", "ipv4": "IPv4", "ipv6": "IPv6"}


class _Field(NamedTuple):
    """Where a variable field lies in its layer: `bits` bits at `shift` inside `size` big-endian bytes."""

    offset: int
    size: int
    bits: int
    shift: int = 0
    family: str = "int"


_FIELDS = {
    "ethernet.dst": _Field(0, 6, 48, family="mac"), "ethernet.src": _Field(6, 6, 48, family="mac"),
    "vlan.vid": _Field(0, 2, 12), "vlan.pcp": _Field(0, 2, 3, shift=13),  # the TCI: the other bits stay
    "ipv4.ttl": _Field(8, 1, 8), "ipv4.src": _Field(12, 4, 32, family="ipv4"),
    "ipv4.dst": _Field(16, 4, 32, family="ipv4"), "ipv6.src": _Field(8, 16, 128, family="ipv6"),
    "ipv6.dst": _Field(24, 16, 128, family="ipv6"), "udp.src": _Field(0, 2, 16), "udp.dst": _Field(2, 2, 16),
    "vxlan.vni": _Field(4, 3, 24),
}


@dataclass(frozen=True)
class Base:
    frame: bytes  # without the FCS; payload zeros
    header_len: int
    weight: int


@dataclass(frozen=True)
class Diff:
    offset: int
    value: bytes


@dataclass(frozen=True)
class Entry:
    base: int
    diffs: tuple[Diff, ...]


@dataclass(frozen=True)
class Expanded:
    name: str
    bases: tuple[Base, ...]
    entries: tuple[Entry, ...]
    header_len: int
    udp_dst_ports: tuple[int, int]
    flows: int
    frame_sizes: tuple[int, ...]
    dst_addresses: tuple[str, ...] = ()  # the outer IP destinations of the entries, each once: the echo host's

    def frame(self, k: int) -> bytes:
        entry = self.entries[k]
        frame = bytearray(self.bases[entry.base].frame)
        for diff in entry.diffs:
            frame[diff.offset : diff.offset + len(diff.value)] = diff.value
        return bytes(frame)

    def data_in(self) -> bytes:
        return max((base.frame for base in self.bases), key=len)

    def describe(self) -> str:
        low, high = self.udp_dst_ports
        return (f"{self.name}: {len(self.bases)} base packet(s) of {'/'.join(map(str, self.frame_sizes))} bytes, "
                f"{self.flows} flow(s), {len(self.entries)} entries, {self.header_len}-byte header window, "
                f"UDP dst {low if low == high else f'{low}..{high}'}")


class _Checksum(NamedTuple):
    field: int
    spans: tuple[tuple[int, int], ...]  # UDP: its pseudo-header's addresses too
    udp: bool


class _Layout(NamedTuple):
    kinds: tuple[str, ...]
    offsets: tuple[int, ...]
    header_len: int
    frame_len: int

    def find(self, kind: str, index: int) -> int | None:
        found = [at for k, at in zip(self.kinds, self.offsets) if k == kind]
        return found[index] if index < len(found) else None

    def checksums(self) -> list[_Checksum]:
        """Innermost first: an inner checksum lies inside the outer UDP checksum's span."""
        out = []
        for i, (kind, at) in enumerate(zip(self.kinds, self.offsets)):
            if kind == "ipv4":
                out.append(_Checksum(at + 10, ((at, at + 20),), False))
            elif kind == "udp" and i > 0:
                ip = self.offsets[i - 1]
                pseudo = (ip + 12, ip + 20) if self.kinds[i - 1] == "ipv4" else (ip + 8, ip + 40)
                out.append(_Checksum(at + 6, (pseudo, (at, self.frame_len)), True))
        if any(start % 2 for c in out for start, _end in c.spans):
            raise AssertionError("checksummed words must be aligned")
        return sorted(out, key=lambda c: -c.spans[-1][0])


class _Rule(NamedTuple):
    positions: tuple[int, ...]  # per base: where the field's bytes start
    field: _Field
    values: range


def _count(values: range) -> int:
    return (values.stop - 1 - values.start) // values.step + 1  # len() overflows on IPv6 ranges


def _special(error, where: str) -> list[str] | None:
    """The one schema rule whose generic wording would mislead: a variation names its bytes one way or the other."""
    if error.validator == "oneOf":
        return [f"{where}: give either field, or offset and size"]
    return None


def _check_packet(packet: dict, at: str, layout: _Layout) -> list[str]:
    for i, kind in enumerate(layout.kinds):
        where, previous = f"{at}.headers[{i}].{kind}", layout.kinds[i - 1]
        if i == 0 and kind != "ethernet":
            return [f"{where}: the first header must be ethernet"]
        if i > 0 and kind not in _FOLLOWS[previous]:
            return [f"{where}: may not follow {previous} (after {previous}: {' or '.join(_FOLLOWS[previous])})"]
        missing = [name for name in ("src", "dst") if name not in packet["headers"][i][kind]]
        if i > 0 and kind == "ethernet" and missing:
            return [f"{where}.{name}: required in an inner (VXLAN) ethernet header" for name in missing]
    if layout.kinds[-1] != "udp":
        return [f"{at}.headers: ends with {layout.kinds[-1]}; the headers end with udp (the payload follows)"]
    if layout.header_len > HEADER_MAX:
        return [f"{at}.headers: {layout.header_len} bytes of headers, more than HEADER_MAX {HEADER_MAX}"]
    if layout.frame_len < layout.header_len:
        return [f"{at}.frame_size: {layout.frame_len + FCS_LEN} bytes ({layout.frame_len} without the FCS) "
                f"cannot hold the {layout.header_len} bytes of headers"]
    return []


def _address(text: Any) -> tuple[str, int] | None:
    if isinstance(text, str) and re.fullmatch(_MAC_PATTERN, text):
        return "mac", int(text.replace(":", ""), 16)
    try:
        address = ipaddress.ip_address(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return (f"ipv{address.version}", int(address)) if address else None


def _range(at: str, rule: dict, family: str, low: int, high: int) -> tuple[range | None, list[str]]:
    """The rule's values (integers), or the problems with its range."""
    first, last = shown = rule["range"]
    if family == "int" and not (isinstance(first, int) and isinstance(last, int)):
        return None, [f"{at}.range: {first!r}..{last!r}: this field takes integers"]
    if family != "int":
        parsed = [_address(first), _address(last)]
        if None in parsed:
            return None, [f"{at}.range: {shown[parsed.index(None)]!r} is not an address ({_FAMILY_WORD[family]} here)"]
        if parsed[0][0] != parsed[1][0]:
            return None, [f"{at}.range: {first} and {last} are not of the same address family"]
        if parsed[0][0] != family:
            return None, [f"{at}.range: {first}..{last}: this field takes {_FAMILY_WORD[family]} addresses"]
        (_first_family, first), (_last_family, last) = parsed
    if first > last:
        return None, [f"{at}.range: {shown[0]}..{shown[1]} is reversed (first must not exceed last)"]
    if first < low or last > high:
        return None, [f"{at}.range: {first}..{last} is not within {low}..{high}"]
    return range(first, last + 1, rule.get("step", 1)), []


def _check_variation(rule: dict, at: str, layouts: list[_Layout], window: int) -> tuple[_Rule | None, list[str]]:
    errors = []
    if "field" in rule:
        match = re.fullmatch(r"([a-z0-9]+)(?:\[(\d+)\])?\.([a-z_]+)", rule["field"])
        if not match or f"{match[1]}.{match[3]}" not in _FIELDS:
            return None, [f"{at}.field: unknown field {rule['field']!r} (these may vary: {', '.join(_FIELDS)})"]
        kind, index, field = match[1], int(match[2] or 0), _FIELDS[f"{match[1]}.{match[3]}"]
        found = [layout.find(kind, index) for layout in layouts]
        errors = [f"{at}.field: no layer {kind}[{index}] in packets[{j}]" for j, o in enumerate(found) if o is None]
        positions = tuple(o + field.offset for o in found if o is not None)
        bounds = _HEADERS[kind]["properties"][match[3]]
        low, high = bounds.get("minimum", 0), bounds.get("maximum", (1 << field.bits) - 1)
    else:
        offset, size = rule["offset"], rule["size"]
        field, positions, low, high = _Field(0, size, 8 * size), (offset,) * len(layouts), 0, (1 << 8 * size) - 1
        spans = f"{at}.offset: bytes {offset}..{offset + size - 1}"
        for j, layout in enumerate(layouts):
            if offset + size > min(window, layout.frame_len):
                errors.append(f"{spans} are outside the first {min(window, layout.frame_len)} bytes of packets[{j}]"
                              " that the sender rewrites")
            errors += [f"{spans} overlap the checksum at {c.field} of packets[{j}] (checksums are recomputed)"
                       for c in layout.checksums() if offset < c.field + 2 and c.field < offset + size]
    values, range_errors = _range(at, rule, field.family, low, high)
    errors += range_errors
    return (None if errors else _Rule(positions, field, values)), errors


class _Plan(NamedTuple):
    layouts: list[_Layout]
    rules: list[_Rule]
    window: int  # the header bytes the sender copies: the longest headers, rounded up to 8


def _check(doc: Any) -> _Plan:
    """Both passes: the schema, then, on the parts the schema found well-formed, the rules it cannot express."""
    schema_errors = schema_words.validation_errors(SCHEMA, doc)
    errors = schema_words.messages(schema_errors, "template", _special)

    def clean(*prefix) -> bool:
        return not any(tuple(error.absolute_path)[: len(prefix)] == prefix for error in schema_errors)

    if not isinstance(doc, dict) or not clean("packets") or not clean("frame_size"):
        raise TemplateError(errors)
    layouts = []
    for j, packet in enumerate(doc["packets"]):
        kinds = tuple(next(iter(header)) for header in packet["headers"])
        offsets = tuple(sum(_LENGTH[k] for k in kinds[:i]) for i in range(len(kinds)))
        frame_len = packet.get("frame_size", doc.get("frame_size", 64)) - FCS_LEN
        layouts.append(_Layout(kinds, offsets, sum(_LENGTH[k] for k in kinds), frame_len))
        errors += _check_packet(packet, f"packets[{j}]", layouts[-1])
    window = min(HEADER_MAX, -(-max(layout.header_len for layout in layouts) // TG_HEADER_WORD) * TG_HEADER_WORD)
    rules = []
    for i, rule in enumerate(doc.get("variations", [])):
        if clean("variations", i):
            checked, rule_errors = _check_variation(rule, f"variations[{i}]", layouts, window)
            errors += rule_errors
            rules.append(checked)
    if clean("variations") and None not in rules:
        counts = [_count(rule.values) for rule in rules]
        weight = sum(packet.get("weight", 1) for packet in doc["packets"])
        if math.prod(counts) * weight > ENTRIES_MAX:
            factors = " x ".join([*map(str, counts), *([f"{weight} (weights)"] if weight > 1 else [])])
            errors.append(f"variations: {factors} = {math.prod(counts) * weight} entries, more than {ENTRIES_MAX}")
    if errors:
        raise TemplateError(errors)
    return _Plan(layouts, rules, window)


def validate(doc: Any) -> None:
    _check(doc)


def _scapy_layer(kind: str, f: dict):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q, Ether
    from scapy.layers.vxlan import VXLAN

    dei = "dei" if "dei" in Dot1Q().default_fields else "id"  # scapy 2.5 still calls it id
    return {
        "ethernet": lambda: Ether(src=f["src"], dst=f["dst"]),
        "vlan": lambda: Dot1Q(vlan=f["vid"], prio=f["pcp"], **{dei: f["dei"]}),
        "ipv4": lambda: IP(src=f["src"], dst=f["dst"], ttl=f["ttl"], tos=f["dscp"] << 2 | f["ecn"], id=f["id"],
                           flags="DF" if f["df"] else 0),
        "ipv6": lambda: IPv6(src=f["src"], dst=f["dst"], hlim=f["hop_limit"], tc=f["traffic_class"],
                             fl=f["flow_label"]),
        "udp": lambda: UDP(sport=f["src"], dport=f["dst"]),
        "vxlan": lambda: VXLAN(flags=0x08, vni=f["vni"]),  # explicit flags: over Ether, scapy builds VXLAN-GPE
    }[kind]()


def _base_frame(headers: list[dict], frame_len: int) -> bytes:
    from scapy.packet import Raw

    stack = Raw(bytes(frame_len - sum(_LENGTH[next(iter(header))] for header in headers)))
    for i in reversed(range(len(headers))):
        ((kind, given),) = headers[i].items()
        fields = {name: spec["default"] for name, spec in _HEADERS[kind]["properties"].items() if "default" in spec}
        if kind == "udp" and i + 1 < len(headers) and "vxlan" in headers[i + 1]:
            fields["dst"] = VXLAN_PORT
        stack = _scapy_layer(kind, fields | given) / stack
    frame = bytes(stack)
    if len(frame) != frame_len:
        raise AssertionError(f"scapy built {len(frame)} bytes for a {frame_len}-byte frame")
    return frame


def _interleave(weights: list[int]) -> list[int]:
    """Smooth weighted round robin: 7,4,1 -> a b a a b a c a b a b a, not seven a's in a row."""
    current, total, order = [0] * len(weights), sum(weights), []
    for _step in range(total):
        current = [c + w for c, w in zip(current, weights)]
        order.append(current.index(max(current)))
        current[order[-1]] -= total
    return order


def _word(data: bytes | bytearray, at: int) -> int:
    return int.from_bytes(bytes(data[at : at + 2]).ljust(2, b"\0"), "big")  # an odd last byte pads with zero


def _apply(base: bytes, rules: list[_Rule], b: int, values: list[int], checksums: list[_Checksum]) -> bytearray:
    """The base's header window with the values written and its checksums updated (RFC 1624, eqn. 3)."""
    head, words = bytearray(base), set()
    for rule, value in zip(rules, values):
        at, size, mask = rule.positions[b], rule.field.size, ((1 << rule.field.bits) - 1) << rule.field.shift
        old = int.from_bytes(head[at : at + size], "big")
        head[at : at + size] = ((old & ~mask) | (value << rule.field.shift)).to_bytes(size, "big")
        words.update(range(at & ~1, at + size, 2))
    for checksum in checksums:
        total = ~_word(base, checksum.field) & 0xFFFF
        for w in words:
            if w != checksum.field and any(start <= w < end for start, end in checksum.spans):
                total += (~_word(base, w) & 0xFFFF) + _word(head, w)
        while total > 0xFFFF:
            total = (total & 0xFFFF) + (total >> 16)
        result = ~total & 0xFFFF
        result = 0xFFFF if checksum.udp and result == 0 else result  # a UDP checksum of 0 means "none"
        head[checksum.field : checksum.field + 2] = result.to_bytes(2, "big")
        words.add(checksum.field)
    return head


def _writes(base: bytes, head: bytearray) -> tuple[Diff, ...]:
    """The changed 16-bit words as writes; two adjacent words become one 4-byte write."""
    changed = [w for w in range(0, len(head), 2) if head[w : w + 2] != base[w : w + 2]]
    diffs, i = [], 0
    while i < len(changed):
        w = changed[i]
        pair = i + 1 < len(changed) and changed[i + 1] == w + 2 and w + 4 <= len(head)
        size = TG_DIFF_U32 if pair else TG_DIFF_U16
        diffs.append(Diff(w, bytes(head[w : w + size])))  # an odd frame's last write is 1 byte (TG_DIFF_U8)
        i += 2 if pair else 1
    return tuple(diffs)


def build(doc: dict, *, src_mac: str | None = None, dst_mac: str | None = None) -> Expanded:
    plan, errors, bases = _check(doc), [], []
    for j, packet in enumerate(doc["packets"]):
        headers = copy.deepcopy(packet["headers"])
        outer = headers[0]["ethernet"]
        for name, given, how in (("src", src_mac, "let the generator use its interface's MAC"),
                                 ("dst", dst_mac, "let the generator resolve the peer's MAC")):
            if name not in outer and given is None:
                errors.append(f"packets[{j}].headers[0].ethernet.{name}: required: give it, or {how}")
            elif name not in outer and not re.fullmatch(_MAC_PATTERN, given):
                errors.append(f"{name}_mac: {given!r} is not {_MAC['description']}")
            outer.setdefault(name, given)
        if not errors:
            frame = _base_frame(headers, plan.layouts[j].frame_len)
            bases.append(Base(frame, plan.layouts[j].header_len, packet.get("weight", 1)))
    if errors:
        raise TemplateError(errors)
    shuffle, cycles = random.Random(doc.get("seed", 1)), []
    for rule, spec in zip(plan.rules, doc.get("variations", [])):
        cycles.append(list(rule.values))
        if spec.get("mode") == "random":
            shuffle.shuffle(cycles[-1])
    checksums = [layout.checksums() for layout in plan.layouts]
    outer_dst = [layout.find("udp", 0) + 2 for layout in plan.layouts]
    outer_ip = [_outer_ip_dst(layout) for layout in plan.layouts]
    flows, entries, ports, addresses = math.prod(map(len, cycles)), [], set(), set()
    for combo in range(flows):
        values, stride, made = [], 1, {}
        for cycle in cycles:  # the first rule varies fastest
            values.append(cycle[combo // stride % len(cycle)])
            stride *= len(cycle)
        for b in _interleave([base.weight for base in bases]):
            if b not in made:
                window = bases[b].frame[: plan.window]
                head = _apply(window, plan.rules, b, values, checksums[b])
                made[b] = Entry(b, _writes(window, head))
                ports.add(_word(head, outer_dst[b]))
                at, size = outer_ip[b]
                addresses.add(ipaddress.ip_address(bytes(head[at : at + size])))
                if len(made[b].diffs) > DIFFS_MAX:
                    raise TemplateError([f"variations: entry {len(entries)} needs {len(made[b].diffs)} diffs "
                                         f"(packets[{b}]), more than DIFFS_MAX {DIFFS_MAX}"])
            entries.append(made[b])
    return Expanded(doc["name"], tuple(bases), tuple(entries), plan.window, (min(ports), max(ports)), flows,
                    tuple(layout.frame_len + FCS_LEN for layout in plan.layouts),
                    tuple(str(a) for a in sorted(addresses, key=lambda a: (a.version, a))))


def _outer_ip_dst(layout: _Layout) -> tuple[int, int]:
    """(offset, size) of the destination address of the IP header that carries the outer UDP."""
    ip = layout.kinds.index("udp") - 1
    return (layout.offsets[ip] + 16, 4) if layout.kinds[ip] == "ipv4" else (layout.offsets[ip] + 24, 16)


def with_frame_size(doc: dict, frame_size: int) -> dict:
    resized = copy.deepcopy(doc)
    for packet in resized["packets"]:
        packet["frame_size"] = frame_size
    return resized


def _udp4(src_port: int = 1024, dst_port: int = 9) -> list[dict]:
    return [{"ethernet": {}}, {"ipv4": {"src": "198.51.100.1", "dst": "198.51.100.2"}},
            {"udp": {"src": src_port, "dst": dst_port}}]


# The outer MACs are left to the generator (its interface's, and the resolved peer's).
EXAMPLES: dict[str, dict] = {
    "udp4": {"name": "udp4", "packets": [{"headers": _udp4()}]},
    "udp4-64flows": {"name": "udp4-64flows", "packets": [{"headers": _udp4()}],
                     "variations": [{"field": "udp.src", "range": [1024, 1087]}]},
    "udp6": {"name": "udp6", "frame_size": 78, "packets": [{"headers": [  # 78: IPv6's minimum (RFC 5180)
        {"ethernet": {}}, {"ipv6": {"src": "2001:db8::1", "dst": "2001:db8::2"}}, {"udp": {"src": 1024, "dst": 9}}]}]},
    "udp4-vlan": {"name": "udp4-vlan", "packets": [{"headers": [*_udp4()[:1], {"vlan": {"vid": 100}}, *_udp4()[1:]]}]},
    "imix": {"name": "imix",
             "packets": [{"weight": w, "frame_size": s, "headers": _udp4()} for w, s in ((7, 64), (4, 594), (1, 1518))],
             "variations": [{"field": "udp.src", "range": [1024, 1039]}]},
    "vxlan-vni-sweep": {"name": "vxlan-vni-sweep", "frame_size": 128, "packets": [{"headers": [
        *_udp4(49152, VXLAN_PORT), {"vxlan": {"vni": 100}},
        {"ethernet": {"src": "02:00:00:00:01:01", "dst": "02:00:00:00:01:02"}},
        {"ipv4": {"src": "198.51.100.65", "dst": "198.51.100.66"}}, {"udp": {"src": 1024, "dst": 9}}]}],
        "variations": [{"field": "vxlan.vni", "range": [100, 163]}]},
}


def document(template: Any) -> dict:
    """The template document a module's `template` argument gives: a document, or the name of a built-in one."""
    if isinstance(template, str):
        if template not in EXAMPLES:
            raise TemplateError([f"no built-in template {template!r} (there are: {', '.join(EXAMPLES)})"])
        return EXAMPLES[template]
    if not isinstance(template, dict):
        raise TemplateError(["must be a template document (a dict) or the name of a built-in one"])
    return template
