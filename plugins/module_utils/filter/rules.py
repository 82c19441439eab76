# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""A filter's rules as the inventory gives them: validated (every problem at once, each naming the field's path and
the rule), then encoded as the data plane's filter_rule (layouts.FilterRule), and described in words for --diff.

A rule:
  name       unique in the list; the rule's counters are reported under it
  action     drop | count (count and pass)
  src, dst   an IPv4 or IPv6 prefix (198.51.100.0/27, 2001:db8::/32) or address (a /32 or /128); both of one family
  family     ipv4 | ipv6, for a rule with no prefix that should match one family only (default: both)
  protocol   tcp, udp, icmp, icmpv6 or a number 0-255
  src_port, dst_port  a port (4789) or an inclusive range ("1000-1999"); only with protocol tcp or udp
Rules are tried in list order, the first match wins.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import schema
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import abi
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter.layouts import ADDR_WORDS, FilterRule

PROTOCOLS = {"icmp": 1, "tcp": 6, "udp": 17, "icmpv6": 58}
PORT_PROTOCOLS = (PROTOCOLS["tcp"], PROTOCOLS["udp"])
NAME_RULE = f"1-{abi.FILTER_NAME_LEN - 1} letters, digits, '_', '.' or '-'"
_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_RANGE = re.compile(r"([0-9]+)-([0-9]+)")

_PORT = {"title": "port", "description": "a port 0-65535 or a range 'low-high'", "type": ["integer", "string"]}
SCHEMA = {
    "type": "array",
    "maxItems": abi.FILTER_MAX_RULES,
    "description": f"at most {abi.FILTER_MAX_RULES} rules (the data plane's FILTER_MAX_RULES)",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "action"],
        "properties": {
            "name": {"type": "string", "title": "rule name", "description": NAME_RULE},
            "action": {"enum": sorted(abi.ACTIONS)},
            "family": {"enum": ["ipv4", "ipv6"]},
            "src": {"type": "string", "title": "prefix"},
            "dst": {"type": "string", "title": "prefix"},
            "protocol": {"type": ["string", "integer"], "title": "protocol"},
            "src_port": _PORT,
            "dst_port": _PORT,
        },
    },
}


class RulesError(ValueError):
    """Rules that cannot be applied; problems lists each one, starting with the field's path."""

    def __init__(self, problems: list[str]):
        super().__init__("invalid filter rules:\n" + "\n".join(f"- {p}" for p in problems))
        self.problems = problems


@dataclass(frozen=True)
class Rule:
    """One validated rule, in the inventory's terms (what --diff shows) and ready to encode."""

    name: str
    action: str
    families: tuple[int, ...]  # 4, 6 or both
    src: str | None
    dst: str | None
    protocol: int  # 0: any
    src_port: tuple[int, int] | None
    dst_port: tuple[int, int] | None

    def describe(self) -> str:
        """The rule in words, one line: what --diff shows."""
        parts = [f"{self.name}: {self.action}"]
        if len(self.families) == 1 and not (self.src or self.dst):
            parts.append(f"ipv{self.families[0]}")
        if self.protocol:
            named = {number: name for name, number in PROTOCOLS.items()}
            parts.append(named.get(self.protocol, f"protocol {self.protocol}"))
        for label, prefix, ports in (("from", self.src, self.src_port), ("to", self.dst, self.dst_port)):
            if prefix or ports:
                where = prefix or "any"
                if ports:
                    where += f" port {ports[0]}" if ports[0] == ports[1] else f" ports {ports[0]}-{ports[1]}"
                parts.append(f"{label} {where}")
        return " ".join(parts)

    def encode(self) -> FilterRule:
        rule = FilterRule()
        for prefix, net, mask in ((self.src, rule.src, rule.src_mask), (self.dst, rule.dst, rule.dst_mask)):
            if prefix:
                _address_words(ipaddress.ip_network(prefix), net, mask)
        flags = 0
        for family in self.families:
            flags |= abi.RULE_IPV4 if family == 4 else abi.RULE_IPV6
        full = (0, 0xFFFF)
        rule.sport_lo, rule.sport_hi = self.src_port or full
        rule.dport_lo, rule.dport_hi = self.dst_port or full
        if self.src_port or self.dst_port:
            flags |= abi.RULE_PORTS
        rule.proto = self.protocol
        rule.flags = flags
        rule.action = abi.ACTIONS[self.action]
        rule.name[: len(self.name)] = list(self.name.encode())
        return rule


def decode(value: FilterRule) -> Rule:
    """A rule as the maps hold it, back in the inventory's terms (to describe what a change removes)."""
    families = tuple(f for f, bit in ((4, abi.RULE_IPV4), (6, abi.RULE_IPV6)) if value.flags & bit)
    prefixes = []
    for net, mask in ((value.src, value.src_mask), (value.dst, value.dst_mask)):
        raw_mask = b"".join(word.to_bytes(4, "little") for word in mask)
        length = sum(bin(byte).count("1") for byte in raw_mask)
        raw_net = b"".join(word.to_bytes(4, "little") for word in net)
        address = ipaddress.ip_address(raw_net[:4] if families == (4,) else raw_net)
        prefixes.append(str(ipaddress.ip_network((address, length))) if length else None)
    has_ports = bool(value.flags & abi.RULE_PORTS)
    full = (0, 0xFFFF)
    src_port, dst_port = (value.sport_lo, value.sport_hi), (value.dport_lo, value.dport_hi)
    return Rule(
        name=bytes(value.name).rstrip(b"\0").decode(),
        action={number: name for name, number in abi.ACTIONS.items()}.get(value.action, f"action {value.action}"),
        families=families,
        src=prefixes[0],
        dst=prefixes[1],
        protocol=value.proto,
        src_port=src_port if has_ports and src_port != full else None,
        dst_port=dst_port if has_ports and dst_port != full else None,
    )


def _address_words(network, net, mask) -> None:
    """A network as four 32-bit words in network order (IPv4 in word 0), each as the u32 whose bytes in memory are
    the address's bytes."""
    raw_net = network.network_address.packed.ljust(16, b"\0")
    raw_mask = network.netmask.packed.ljust(16, b"\0")
    for word in range(ADDR_WORDS):
        net[word] = int.from_bytes(raw_net[word * 4 : word * 4 + 4], "little")
        mask[word] = int.from_bytes(raw_mask[word * 4 : word * 4 + 4], "little")


def _prefix(value: str, where: str, problems: list[str]):
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        try:
            loose = ipaddress.ip_network(value, strict=False)
        except ValueError:
            problems.append(f"{where}: {schema.quote(value)} is not an IPv4 or IPv6 prefix or address ({exc})")
            return None
        problems.append(f"{where}: {schema.quote(value)} has host bits set: the prefix is {loose}")
        return None


def _protocol(value, where: str, problems: list[str]) -> int:
    if isinstance(value, str):
        if value.lower() in PROTOCOLS:
            return PROTOCOLS[value.lower()]
        if not value.isdigit():
            problems.append(f"{where}: {schema.quote(value)} is not one of {', '.join(PROTOCOLS)} or a number 0-255")
            return 0
        value = int(value)
    if not 0 <= value <= 255:
        problems.append(f"{where}: {value} is not an IP protocol number (0-255)")
        return 0
    return value


def _ports(value, where: str, problems: list[str]) -> tuple[int, int] | None:
    if isinstance(value, int) and not isinstance(value, bool):
        low = high = value
    elif isinstance(value, str) and value.isdigit():
        low = high = int(value)
    elif isinstance(value, str) and _RANGE.fullmatch(value):
        low, high = (int(part) for part in _RANGE.fullmatch(value).groups())
    else:
        problems.append(f"{where}: {schema.quote(str(value))} is not a port or a range 'low-high'")
        return None
    if not (0 <= low <= 0xFFFF and 0 <= high <= 0xFFFF):
        problems.append(f"{where}: {value} is outside 0-65535")
        return None
    if low > high:
        problems.append(f"{where}: the range {low}-{high} is reversed (write {high}-{low})")
        return None
    return low, high


def _rule(item: dict, where: str, problems: list[str]) -> Rule | None:
    name = item["name"]
    who = f" (rule {schema.quote(name)})"
    mark = len(problems)
    if len(name.encode()) >= abi.FILTER_NAME_LEN or not _NAME.fullmatch(name):
        problems.append(f"{where}.name: {schema.quote(name)} is not a rule name ({NAME_RULE})")
    networks = {}
    for key in ("src", "dst"):
        if key in item:
            networks[key] = _prefix(item[key], f"{where}.{key}", problems)
    versions = {n.version for n in networks.values() if n is not None}
    if len(versions) > 1:
        problems.append(f"{where}.dst: {item['dst']} is IPv{networks['dst'].version}, src {item['src']} is not")
    family = item.get("family")
    if family and versions and {int(family[-1])} != versions:
        problems.append(f"{where}.family: {family} contradicts the rule's IPv{versions.pop()} prefixes")
    families = (int(family[-1]),) if family else tuple(sorted(versions)) or (4, 6)
    protocol = _protocol(item["protocol"], f"{where}.protocol", problems) if "protocol" in item else 0
    ports = {key: _ports(item[key], f"{where}.{key}", problems) for key in ("src_port", "dst_port") if key in item}
    if ports and protocol not in PORT_PROTOCOLS:
        key = next(iter(ports))
        problems.append(
            f"{where}.{key}: ports need protocol tcp or udp (the rule's protocol is {item.get('protocol', 'any')})"
        )
    for n in range(mark, len(problems)):
        problems[n] += who
    if len(problems) > mark:
        return None
    return Rule(
        name=name,
        action=item["action"],
        families=families,
        src=str(networks["src"]) if networks.get("src") else None,
        dst=str(networks["dst"]) if networks.get("dst") else None,
        protocol=protocol,
        src_port=ports.get("src_port"),
        dst_port=ports.get("dst_port"),
    )


def validate(items, root: str = "rules") -> list[Rule]:
    """The rules, validated; raises RulesError listing every problem."""
    # Under their key, so that paths read rules[0].action.
    problems = schema.problems({"type": "object", "properties": {root: SCHEMA}}, {root: items})
    if problems:
        raise RulesError(problems)
    out, seen = [], {}
    for n, item in enumerate(items):
        where = f"{root}[{n}]"
        if item["name"] in seen:
            problems.append(
                f"{where}.name: {schema.quote(item['name'])} is already the name of {root}[{seen[item['name']]}]"
            )
            continue
        seen[item["name"]] = n
        rule = _rule(item, where, problems)
        if rule is not None:
            out.append(rule)
    if problems:
        raise RulesError(problems)
    return out
