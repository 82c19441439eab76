# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""JSON Schema errors in the document's own terms: "<path>: <rule in plain words>", every problem at once.

Used by every document the collection validates (the VTEP configuration, traffic templates), so that they word
the same mistake the same way. A schema's `title` names a value ("VNI") and its `description` states the rule;
both end up in the message.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
from typing import Any

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names

_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}
_ADDRESS_WORDS = {"ipv4": "IPv4", "ipv6": "IPv6"}


def path(parts, root: str = "document") -> str:
    """A JSON path as the user wrote it: vnis[0].trunks[1].vid; the whole document is `root`."""
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or root


def describe(value: Any) -> str:
    """A value in words, never a Python repr."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {quote(value)}"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, dict):
        return "a mapping"
    return f"a value of type {type(value).__name__}"


def quote(text: str, limit: int = 40) -> str:
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return json.dumps(text, ensure_ascii=False)


def _rule(schema: dict) -> str:
    return schema.get("description") or schema.get("title") or ""


def _with_rule(text: str, schema: dict) -> str:
    rule = _rule(schema)
    return f"{text} ({rule})" if rule else text


def render(error, root: str = "document") -> list[str]:
    """One jsonschema error as messages (several for several unknown or missing keys)."""
    where = path(error.absolute_path, root)
    schema = error.schema if isinstance(error.schema, dict) else {}
    kind, expected, value = error.validator, error.validator_value, error.instance

    if kind == "additionalProperties":
        known = list(schema.get("properties", {}))
        out = []
        for key in value:
            if key in known:
                continue
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else "allowed: " + ", ".join(known)
            out.append(f"{where}: unknown key '{key}' ({hint})")
        return out
    if kind == "required":
        rule = _rule(schema)
        return [
            f"{where}: missing required key '{key}'" + (f" ({rule})" if rule else "")
            for key in expected
            if key not in value
        ]
    if kind == "type":
        wanted = " or ".join(_TYPE_WORDS.get(t, t) for t in ([expected] if isinstance(expected, str) else expected))
        noun = schema.get("title")
        scalar = expected not in ("object", "array")
        rule = schema.get("description", "")
        if noun and rule and not rule.startswith(noun):
            rule = f"{noun}: {rule}"
        what = f"{wanted} ({rule})" if scalar and rule else wanted
        return [f"{where}: must be {what}, got {describe(value)}"]
    if kind == "minimum":
        return [f"{where}: " + _with_rule(f"{value} is below the minimum {expected}", schema)]
    if kind == "maximum":
        return [f"{where}: " + _with_rule(f"{value} is above the maximum {expected}", schema)]
    if kind == "format" and expected in _ADDRESS_WORDS:
        return [f"{where}: " + _with_rule(f"{quote(value)} is not a valid {_ADDRESS_WORDS[expected]} address", schema)]
    if kind in ("pattern", "minLength", "maxLength", "format"):
        noun = schema.get("title", "value")
        return [f"{where}: " + _with_rule(f"{quote(value)} is not a valid {noun}", schema)]
    if kind == "enum":
        shown = quote(value) if isinstance(value, str) else json.dumps(value)
        return [f"{where}: {shown} is not one of {', '.join(map(str, expected))}"]
    if kind == "minItems":
        return [f"{where}: " + _with_rule(f"must list at least {expected}, lists {len(value)}", schema)]
    if kind == "maxItems":
        return [f"{where}: " + _with_rule(f"lists {len(value)}, more than the maximum {expected}", schema)]
    if kind in ("minProperties", "maxProperties", "oneOf", "anyOf") and _rule(schema):
        return [f"{where}: {_rule(schema)}"]
    return [f"{where}: " + _with_rule(f"breaks the schema rule '{kind}'", schema)]


def _document_order(parts) -> tuple:
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, str(part)) for part in parts)


def format_checker():
    """The draft's formats, and "ifname": a Linux interface name by the kernel's rules, which a pattern cannot
    say (its limit is in bytes, and a pattern's $ lets a trailing newline through)."""
    from jsonschema import Draft202012Validator, FormatChecker

    checker = FormatChecker(list(Draft202012Validator.FORMAT_CHECKER.checkers))
    checker.checks("ifname")(lambda value: not isinstance(value, str) or names.ifname_problem(value) is None)
    return checker


def _inline_refs(node: Any, defs: dict, expanding: tuple = ()) -> Any:
    """The schema with every {"$ref": "#/$defs/<name>"} replaced by that definition (a recursive one stays a $ref):
    jsonschema resolves a $ref on every item it checks, which costs more than the checks it leads to."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if len(node) == 1 and isinstance(ref, str) and ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/") :]
            if name in defs and name not in expanding:
                return _inline_refs(defs[name], defs, (*expanding, name))
        return {key: _inline_refs(value, defs, expanding) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline_refs(value, defs, expanding) for value in node]
    return node


_VALIDATORS: dict[str, Any] = {}  # the schema as canonical JSON -> its validator
_LAST: list = [None, None]  # the schema object asked for last and its validator: most callers ask for one again


def validator(schema: dict):
    """The validator of a schema, made once per process (with its $refs inlined). Needs jsonschema, imported here so
    that callers import on a host without it."""
    if schema is _LAST[0]:
        return _LAST[1]
    key = json.dumps(schema, sort_keys=True)
    if key not in _VALIDATORS:
        from jsonschema import Draft202012Validator

        inlined = _inline_refs(schema, schema.get("$defs", {}))
        _VALIDATORS[key] = Draft202012Validator(inlined, format_checker=format_checker())
    _LAST[:] = [schema, _VALIDATORS[key]]
    return _VALIDATORS[key]


def validation_errors(schema: dict, document: Any) -> list:
    """jsonschema's errors of `document`, in document order of their paths."""
    errors = validator(schema).iter_errors(document)
    return sorted(errors, key=lambda e: (_document_order(e.absolute_path), e.validator))


def messages(errors, root: str = "document", special=None) -> list[str]:
    """jsonschema errors as messages, each once, in the order of the errors.

    special(error, path) may word an error in the document's own terms (return a list of messages) or decline
    (return None).
    """
    out: list[str] = []
    for error in errors:
        worded = special(error, path(error.absolute_path, root)) if special else None
        for message in worded if worded is not None else render(error, root):
            if message not in out:
                out.append(message)
    return out


def problems(schema: dict, document: Any, root: str = "document", special=None) -> list[str]:
    """Every schema problem of `document`, in document order of the paths, each once (special: as in messages)."""
    return messages(validation_errors(schema, document), root, special)


def is_ipv6(text: Any) -> bool:
    if not isinstance(text, str):
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True
