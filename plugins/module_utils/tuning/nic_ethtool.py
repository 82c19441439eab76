# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""ethtool for NIC tuning: running it, and its text output parsed (the parsers are tested on recorded outputs of ice,
mlx5_core and veth). Also the error every part of NIC tuning raises.
"""

from __future__ import annotations

import re
import subprocess

ETHTOOL = "ethtool"
CHANNEL_KEYS = ("rx", "tx", "other", "combined")
RING_KEYS = ("rx", "rx-mini", "rx-jumbo", "tx")
# ethtool's short feature names (ethtool(8), -K), mapped to the names `ethtool -k` prints.
FEATURE_ALIASES = {
    "rx": "rx-checksumming",
    "tx": "tx-checksumming",
    "sg": "scatter-gather",
    "tso": "tcp-segmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
    "lro": "large-receive-offload",
    "rxvlan": "rx-vlan-offload",
    "txvlan": "tx-vlan-offload",
    "ntuple": "ntuple-filters",
    "rxhash": "receive-hashing",
}
# `ethtool -c` prints the adaptive modes on one line; -C takes them as adaptive-rx / adaptive-tx.
_ADAPTIVE = re.compile(r"^Adaptive RX:\s*(\w+)\s+TX:\s*(\w+)", re.MULTILINE)


class TuningError(ValueError):
    """Refusals, each naming the field and the rule; nothing was changed."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("; ".join(errors))


def _value(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def _two_blocks(text: str, keys: tuple[str, ...]) -> dict[str, dict[str, int | None]]:
    """`ethtool -l` / `-g`: a "Pre-set maximums:" block and a "Current hardware settings:" block of `Key: value`."""
    blocks: dict[str, dict[str, int | None]] = {"max": {}, "current": {}}
    block = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Pre-set maximums"):
            block = "max"
        elif stripped.startswith("Current hardware settings"):
            block = "current"
        elif block and ":" in stripped:
            name, value = stripped.split(":", 1)
            key = name.strip().lower().replace(" ", "-")
            if key in keys and key not in blocks[block]:
                blocks[block][key] = _value(value)
    return blocks


def parse_channels(text: str) -> dict[str, dict[str, int | None]]:
    return _two_blocks(text, CHANNEL_KEYS)


def parse_rings(text: str) -> dict[str, dict[str, int | None]]:
    return _two_blocks(text, RING_KEYS)


def parse_features(text: str) -> dict[str, dict[str, bool]]:
    """`ethtool -k`: name -> {on, fixed}; sub-features (indented) are features too."""
    features = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([a-z0-9_-]+):\s+(on|off)(\s+\[fixed\])?", line)
        if m:
            features[m.group(1)] = {"on": m.group(2) == "on", "fixed": bool(m.group(3))}
    return features


def parse_coalesce(text: str) -> dict[str, int | bool]:
    """`ethtool -c`: the settings -C takes, with their current values (n/a ones left out)."""
    values: dict[str, int | bool] = {}
    m = _ADAPTIVE.search(text)
    if m:
        for key, word in (("adaptive-rx", m.group(1)), ("adaptive-tx", m.group(2))):
            if word in ("on", "off"):
                values[key] = word == "on"
    for line in text.splitlines():
        m = re.match(r"^([a-z][a-z0-9-]+):\s+(\S+)\s*$", line.strip())
        if m and m.group(2).isdigit():
            values[m.group(1)] = int(m.group(2))
    return values


def parse_driver(text: str) -> dict[str, str]:
    """`ethtool -i`: key -> value."""
    return {k.strip(): v.strip() for k, _sep, v in (line.partition(":") for line in text.splitlines()) if k.strip()}


def ethtool(*args: str, check: bool = True) -> tuple[int, str, str]:
    proc = subprocess.run([ETHTOOL, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode:
        raise TuningError([f"ethtool {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}"])
    return proc.returncode, proc.stdout, proc.stderr


def optional(*args: str) -> str | None:
    """Output of a read-only ethtool query, None when the driver does not support it."""
    rc, out, err = ethtool(*args, check=False)
    if rc:
        if "not supported" in err.lower() or "not supported" in out.lower():
            return None
        raise TuningError([f"ethtool {' '.join(args)}: {err.strip() or out.strip()}"])
    return out
