# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""NIC queue tuning: channels, rings, features, coalescing, MTU and the queue IRQs' affinity, per interface.

Current values come from `ethtool` (its text output, parsed here; the parsers are tested on recorded outputs of
ice, mlx5_core and veth), sysfs and /proc/irq. A driver profile gives documented defaults that the user's
settings override. Only what differs changes; a failure rolls back what this run changed. The value of every
setting before xdpfleet first changed it is recorded in the host's state file, so that teardown restores exactly
those settings to exactly those values.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files, records
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.netdev import read_text

ETHTOOL = "ethtool"
SYSFS_NET = "/sys/class/net"
SYSFS_NODE = "/sys/devices/system/node"
STATE_NAME = "nic_tuning.json"
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
SETTINGS = ("mtu", "channels", "rings", "features", "coalesce", "irq_affinity")  # the order they are applied in


class TuningError(ValueError):
    """Refusals, each naming the field and the rule; nothing was changed."""

    def __init__(self, errors: list[str]):
        self.errors = errors
        super().__init__("; ".join(errors))


# ---- ethtool's text output ---------------------------------------------------------------------------------


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


# ---- driver profiles -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profile:
    """What a driver calls its queues and queue IRQs, and the defaults xdpfleet applies unless the user overrides.

    irq_pattern is a regular expression over /proc/interrupts names with {ifname} and {bus} filled in."""

    name: str
    channels: str  # "combined" or "rx_tx": the keys its queues are set with
    irq_pattern: str | None
    defaults: dict = field(default_factory=dict)
    notes: str = ""


PROFILES = {
    p.name: p
    for p in (
        Profile(
            "ice",
            "combined",
            r"^ice-{ifname}-TxRx-\d+(-\d+)?$",  # in-tree: TxRx-N; out-of-tree ice 1.16: TxRx-N-M
            {"channels": {"combined": "numa_local"}, "irq_affinity": "numa_local"},
            "Intel E810. One queue pair per NUMA-local core, each queue's IRQ on its own core. ice has no LRO; XDP "
            "gets its own TX queue per CPU. Add iommu=pt to the kernel command line (XDPerf: 42.3 -> 115.8 Mpps).",
        ),
        Profile(
            "mlx5_core",
            "combined",
            r"^mlx5_comp\d+@pci:{bus}$",
            {
                "channels": {"combined": "numa_local"},
                "features": {"large-receive-offload": False},
                "irq_affinity": "numa_local",
            },
            "NVIDIA ConnectX-4 and later. LRO off (XDP refuses to attach with it on). XDP_TX and redirect use the "
            "send queue of the CPU they run on, so keep the senders' CPUs below the channel count.",
        ),
        Profile(
            "virtio_net",
            "combined",
            r"^virtio\d+-(input|output)\.\d+$",
            {"channels": {"combined": "max"}, "features": {"rx-gro-hw": False}},
            "virtio-net in a VM. Native XDP needs spare queue pairs for its TX queues (so all of them) and the "
            "device's guest offloads off (rx-gro-hw).",
        ),
        Profile(
            "veth",
            "rx_tx",
            None,
            {},
            "veth: rx/tx channels up to the counts the pair was created with (numrxqueues/numtxqueues), no rings, no "
            "coalescing, no IRQs. With XDP on both ends, rx must stay at or above the peer's tx.",
        ),
    )
}
NO_PROFILE = Profile("none", "combined", None)


def profile_for(name: str, driver: str | None) -> Profile:
    if name == "none":
        return NO_PROFILE
    if name == "auto":
        return PROFILES.get(driver or "", NO_PROFILE)
    if name not in PROFILES:
        raise TuningError([f"profile: unknown profile {name!r} (known: auto, none, {', '.join(PROFILES)})"])
    return PROFILES[name]


# ---- reading one interface ----------------------------------------------------------------------------------


def ethtool(*args: str, check: bool = True) -> tuple[int, str, str]:
    proc = subprocess.run([ETHTOOL, *args], capture_output=True, text=True, check=False)
    if check and proc.returncode:
        raise TuningError([f"ethtool {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}"])
    return proc.returncode, proc.stdout, proc.stderr


def _optional(*args: str) -> str | None:
    """Output of a read-only ethtool query, None when the driver does not support it."""
    rc, out, err = ethtool(*args, check=False)
    if rc:
        if "not supported" in err.lower() or "not supported" in out.lower():
            return None
        raise TuningError([f"ethtool {' '.join(args)}: {err.strip() or out.strip()}"])
    return out


def cpulist(text: str) -> list[int]:
    """ "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus = []
    for part in filter(None, text.strip().split(",")):
        lo, _sep, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def numa_local_cpus(ifname: str, sysfs: str = SYSFS_NET, nodes: str = SYSFS_NODE) -> list[int]:
    """The online CPUs of the interface's NUMA node; all online CPUs when it has none (virtual devices)."""
    node = read_text(os.path.join(sysfs, ifname, "device", "numa_node"))
    if node and node.lstrip("-").isdigit() and int(node) >= 0:
        text = read_text(os.path.join(nodes, f"node{node}", "cpulist"))
        if text:
            return cpulist(text)
    return cpulist(read_text("/sys/devices/system/cpu/online") or "0")


def queue_irqs(ifname: str, profile: Profile, bus: str | None, interrupts: str | None = None) -> list[int]:
    """The interface's queue IRQs, in queue order, by the profile's naming rule over /proc/interrupts."""
    if profile.irq_pattern is None:
        return []
    pattern = re.compile(profile.irq_pattern.format(ifname=re.escape(ifname), bus=re.escape(bus or "")))
    if interrupts is None:
        interrupts = read_text("/proc/interrupts") or ""
    irqs = []
    for line in interrupts.splitlines():
        number, _sep, rest = line.partition(":")
        if number.strip().isdigit() and rest.split() and pattern.match(rest.split()[-1]):
            irqs.append(int(number))
    return irqs


@dataclass
class Current:
    """One interface as it is now."""

    ifname: str
    driver: dict[str, str]
    channels: dict | None  # {"max": {...}, "current": {...}}; None: not supported
    rings: dict | None
    features: dict[str, dict[str, bool]]
    coalesce: dict[str, int | bool] | None
    mtu: int
    mtu_range: tuple[int, int]
    irqs: dict[int, str]  # queue IRQ -> its smp_affinity_list

    def value(self, setting: str) -> dict | int:
        """The current value of a setting in the shape the user writes it."""
        if setting == "mtu":
            return self.mtu
        if setting in ("channels", "rings"):
            table = getattr(self, setting)
            return dict(table["current"]) if table else {}
        if setting == "features":
            return {name: f["on"] for name, f in self.features.items()}
        if setting == "coalesce":
            return dict(self.coalesce or {})
        return {str(irq): cpus for irq, cpus in self.irqs.items()}


def read_current(ifname: str, profile_name: str = "auto") -> tuple[Current, Profile]:
    if not os.path.isdir(os.path.join(SYSFS_NET, ifname)):
        raise TuningError([f"name: interface {ifname} does not exist on this host"])
    driver = parse_driver(ethtool("-i", ifname)[1])
    profile = profile_for(profile_name, driver.get("driver"))
    channels = _optional("-l", ifname)
    rings = _optional("-g", ifname)
    coalesce = _optional("-c", ifname)
    link = json.loads(
        subprocess.run(
            ["ip", "-d", "-j", "link", "show", "dev", ifname], capture_output=True, text=True, check=True
        ).stdout
    )[0]
    irqs = {
        irq: read_text(f"/proc/irq/{irq}/smp_affinity_list") or ""
        for irq in queue_irqs(ifname, profile, driver.get("bus-info"))
    }
    current = Current(
        ifname=ifname,
        driver=driver,
        channels=parse_channels(channels) if channels else None,
        rings=parse_rings(rings) if rings else None,
        features=parse_features(ethtool("-k", ifname)[1]),
        coalesce=parse_coalesce(coalesce) if coalesce else None,
        mtu=int(link["mtu"]),
        mtu_range=(int(link.get("min_mtu", 68)), int(link.get("max_mtu", 65535))),
        irqs=irqs,
    )
    return current, profile


# ---- what the user wants, resolved and checked ------------------------------------------------------------------


def merged(spec: dict, profile: Profile) -> dict:
    """The profile's defaults under the user's settings (a user's value wins, key by key)."""
    out = {}
    for setting in SETTINGS:
        default, given = profile.defaults.get(setting), spec.get(setting)
        if isinstance(default, dict) and isinstance(given, dict):
            out[setting] = {**default, **given}
        elif given is not None:
            out[setting] = given
        elif default is not None:
            out[setting] = default
    return out


def resolve(spec: dict, current: Current, profile: Profile, where: str) -> dict:
    """Desired values as concrete numbers and booleans; raises TuningError naming every bad field."""
    errors: list[str] = []
    wanted = merged(spec, profile)
    out: dict = {}
    if "mtu" in wanted:
        lo, hi = current.mtu_range
        if not isinstance(wanted["mtu"], int) or not lo <= wanted["mtu"] <= hi:
            errors.append(f"{where}.mtu: {wanted['mtu']} is outside {lo}..{hi} (the driver's MTU range)")
        else:
            out["mtu"] = wanted["mtu"]
    for setting, keys, table in (("channels", CHANNEL_KEYS, current.channels), ("rings", RING_KEYS, current.rings)):
        if setting not in wanted:
            continue
        if table is None:
            errors.append(f"{where}.{setting}: driver {current.driver.get('driver')} has no {setting} settings")
            continue
        resolved = {}
        for key, value in wanted[setting].items():
            path, maximum = f"{where}.{setting}.{key}", table["max"].get(key)
            if key not in keys:
                errors.append(f"{path}: unknown (known: {', '.join(keys)})")
            elif not maximum:  # "n/a", or 0 from older ethtool builds
                errors.append(f"{path}: driver {current.driver.get('driver')} does not have {key} {setting}")
            elif value == "max":
                resolved[key] = maximum
            elif value == "numa_local" and setting == "channels":
                resolved[key] = min(maximum, len(numa_local_cpus(current.ifname)))
            elif not isinstance(value, int) or isinstance(value, bool) or value < 0:
                errors.append(
                    f"{path}: {value!r} must be a number, max" + (", or numa_local" if setting == "channels" else "")
                )
            elif value > maximum:
                errors.append(f"{path}: {value} is more than the maximum {maximum} the NIC has")
            else:
                resolved[key] = value
        out[setting] = resolved
    if "features" in wanted:
        features = {}
        for name, on in wanted["features"].items():
            full = FEATURE_ALIASES.get(name, name)
            known = current.features.get(full)
            if known is None:
                errors.append(f"{where}.features.{name}: the driver has no such feature (ethtool -k {current.ifname})")
            elif not isinstance(on, bool):
                errors.append(f"{where}.features.{name}: {on!r} must be true or false")
            elif known["fixed"] and known["on"] != on:
                errors.append(f"{where}.features.{name}: fixed {'on' if known['on'] else 'off'} by the driver")
            else:
                features[full] = on
        out["features"] = features
    if "coalesce" in wanted:
        if current.coalesce is None:
            errors.append(f"{where}.coalesce: driver {current.driver.get('driver')} has no coalescing settings")
        else:
            for key, value in wanted["coalesce"].items():
                if key not in current.coalesce:
                    errors.append(f"{where}.coalesce.{key}: the driver does not report it (ethtool -c)")
                elif isinstance(current.coalesce[key], bool) != isinstance(value, bool):
                    kind = "true or false" if isinstance(current.coalesce[key], bool) else "a number"
                    errors.append(f"{where}.coalesce.{key}: {value!r} must be {kind}")
            out["coalesce"] = dict(wanted["coalesce"])
    if "irq_affinity" in wanted:
        out["irq_affinity"] = _irq_plan(wanted["irq_affinity"], current, profile, where, errors)
    if errors:
        raise TuningError(errors)
    return out


def _irq_plan(value, current: Current, profile: Profile, where: str, errors: list[str]) -> dict[str, str]:
    """Queue IRQs spread round robin over the chosen CPUs: IRQ of queue i on cpus[i % len(cpus)]."""
    path = f"{where}.irq_affinity"
    if not current.irqs:
        errors.append(f"{path}: no queue IRQs found for {current.ifname} (profile {profile.name})")
        return {}
    online = set(cpulist(read_text("/sys/devices/system/cpu/online") or "0"))
    if value == "numa_local":
        cpus = numa_local_cpus(current.ifname)
    elif isinstance(value, list) and value and all(isinstance(c, int) and not isinstance(c, bool) for c in value):
        cpus = value
    else:
        errors.append(f"{path}: {value!r} must be numa_local or a list of CPU numbers")
        return {}
    offline = sorted(set(cpus) - online)
    if offline:
        errors.append(f"{path}: CPUs {offline} are not online")
        return {}
    return {str(irq): str(cpus[i % len(cpus)]) for i, irq in enumerate(sorted(current.irqs))}


# ---- the difference, applied --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    setting: str
    key: str | None  # None for mtu
    before: object
    after: object

    @property
    def what(self) -> str:
        return self.setting if self.key is None else f"{self.setting} {self.key}"

    def words(self, ifname: str) -> str:
        return f"{ifname}: {self.what} {_show(self.before)} -> {_show(self.after)}"

    def state(self, ifname: str, value) -> str | None:
        """The setting at `value` as a line of the diff; None when it has no value (the NIC did not report one)."""
        return None if value is None else f"{ifname}: {self.what} {_show(value)}"


def _show(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def plan(current: Current, wanted: dict) -> list[Change]:
    changes = []
    for setting in SETTINGS:
        if setting not in wanted:
            continue
        now = current.value(setting)
        if setting == "mtu":
            if now != wanted["mtu"]:
                changes.append(Change("mtu", None, now, wanted["mtu"]))
            continue
        for key, value in wanted[setting].items():
            if now.get(key) != value:
                changes.append(Change(setting, key, now.get(key), value))
    return changes


def _apply_group(ifname: str, setting: str, values: dict) -> None:
    if setting == "mtu":
        subprocess.run(
            ["ip", "link", "set", "dev", ifname, "mtu", str(values[None])], capture_output=True, text=True, check=True
        )
    elif setting == "irq_affinity":
        for irq, cpus in values.items():
            with open(f"/proc/irq/{irq}/smp_affinity_list", "w") as f:
                f.write(f"{cpus}\n")
    else:
        flag = {"channels": "-L", "rings": "-G", "features": "-K", "coalesce": "-C"}[setting]
        args = [flag, ifname]
        for key, value in values.items():
            args += [key, ("on" if value else "off") if isinstance(value, bool) else str(value)]
        ethtool(*args)


def _groups(changes: list[Change], side: str) -> list[tuple[str, dict]]:
    groups: dict[str, dict] = {}
    for c in changes:
        groups.setdefault(c.setting, {})[c.key] = getattr(c, side)
    return [(s, groups[s]) for s in SETTINGS if s in groups]


def apply(ifname: str, changes: list[Change], driver: str | None) -> None:
    """Apply setting by setting; on a failure put back the settings already changed, then raise."""
    done: list[tuple[str, dict]] = []
    befores = dict(_groups(changes, "before"))
    for setting, values in _groups(changes, "after"):
        try:
            _apply_group(ifname, setting, values)
        except (TuningError, OSError, subprocess.CalledProcessError) as exc:
            problems = []
            for undo_setting, _values in reversed(done):
                try:
                    _apply_group(ifname, undo_setting, befores[undo_setting])
                except (TuningError, OSError, subprocess.CalledProcessError) as undo:
                    problems.append(f"rolling back {undo_setting} failed too: {undo}")
            detail = getattr(exc, "stderr", None) or str(exc)
            hint = ""
            if setting == "channels" and driver == "veth":
                hint = (
                    " (veth: with XDP attached, rx must stay at or above the peer's tx and tx at or below the "
                    "peer's rx: change the peer first)"
                )
            raise TuningError([f"{ifname}: setting {setting} failed: {str(detail).strip()}{hint}", *problems]) from exc
        done.append((setting, values))


# ---- the record of original values ------------------------------------------------------------------------


def check_state_dir(state_dir: str) -> None:
    """The record there says what state=absent writes back to the NICs: another user must not be able to write it."""
    try:
        files.check_trusted("state_dir", state_dir)
    except files.UntrustedPath as exc:
        raise TuningError([str(exc)]) from None


def load_record(state_dir: str) -> dict:
    try:
        return records.Record(state_dir, STATE_NAME).load() or {"interfaces": {}}
    except records.RecordError as exc:
        raise TuningError([str(exc)]) from None


def save_record(state_dir: str, record: dict) -> None:
    store = records.Record(state_dir, STATE_NAME)
    if not record["interfaces"]:
        store.remove()
        return
    store.save(record)


def remember(record: dict, ifname: str, changes: list[Change]) -> None:
    """Keep each setting's value from before xdpfleet first changed it (a later change keeps the first record)."""
    originals = record["interfaces"].setdefault(ifname, {})
    for c in changes:
        if c.key is None:
            originals.setdefault(c.setting, c.before)
        else:
            originals.setdefault(c.setting, {}).setdefault(c.key, c.before)


def restoration(record: dict, ifname: str) -> dict:
    """The recorded originals of one interface in the shape resolve() returns (irq affinities keyed by IRQ)."""
    originals = record["interfaces"].get(ifname, {})
    return {s: originals[s] for s in SETTINGS if s in originals}


# ---- the module's work: every interface checked, then each changed -------------------------------------------------


def xdp_program(ifname: str) -> tuple[int, str | None]:
    """(program id, mode) of the XDP program on the interface; (0, None) without one."""
    ifindex = netdev.ifindex(ifname)
    if ifindex is None:
        return 0, None
    state = libbpf.xdp_query(ifindex)
    return state.prog_id, state.mode


def irqbalance_running() -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "irqbalance":
                    return True
        except OSError:
            continue
    return False


def shown(current: Current, profile: Profile) -> dict:
    return {"profile": profile.name, **{s: current.value(s) for s in SETTINGS if s != "features"}}


def apply_interface(ifname: str, changes: list[Change], driver: str | None) -> None:
    """Apply, then make sure an attached XDP program survived a channel change (else put the channels back)."""
    before = xdp_program(ifname)
    apply(ifname, changes, driver)
    if before[0] and xdp_program(ifname) != before:
        undo = [Change(c.setting, c.key, c.after, c.before) for c in changes]
        try:
            apply(ifname, undo, driver)
        except TuningError as exc:
            raise TuningError(
                [
                    f"{ifname}: XDP program {before[0]} ({before[1]}) did not survive, and putting the settings back "
                    f"failed: {exc}"
                ]
            ) from exc
        raise TuningError(
            [
                f"{ifname}: XDP program {before[0]} ({before[1]}) was not attached the same way after the change; the "
                "previous settings are back"
            ]
        )


def report(done: Changes, ifname: str, changes: list[Change]) -> None:
    """Add an interface's changes to the module's report: each change a step, each setting's values the diff."""
    for c in changes:
        key = (ifname, c.setting, c.key)
        done.add(c.words(ifname), key=key, before=c.state(ifname, c.before), after=c.state(ifname, c.after))


def present(interfaces: list[dict] | None, state_dir: str, check_mode: bool) -> dict:
    """state=present: resolve and check every interface first, then change each, recording the original values
    before the change. Returns the module result; raises TuningError naming the fields."""
    check_state_dir(state_dir)
    record = load_record(state_dir)
    done = Changes("nic_tuning")
    planned, errors, result = [], [], {"interfaces": {}, "warnings": []}
    for n, spec in enumerate(interfaces or []):
        where = f"interfaces[{n}]"
        try:
            current, profile = read_current(spec["name"], spec.get("profile") or "auto")
            wanted = resolve(spec, current, profile, where)
        except TuningError as exc:
            errors += [e if e.startswith(where) else f"{where}.{e}" for e in exc.errors]
            continue
        planned.append((current, profile, plan(current, wanted)))
        if "irq_affinity" in wanted and irqbalance_running():
            result["warnings"].append(f"{spec['name']}: irqbalance is running and will move the queue IRQs again")
    if errors:  # every interface is checked before any changes
        raise TuningError(errors)
    for current, profile, changes in planned:
        report(done, current.ifname, changes)
        if changes and not check_mode:
            remember(record, current.ifname, changes)
            save_record(state_dir, record)  # before the change: teardown can always undo it
            apply_interface(current.ifname, changes, current.driver.get("driver"))
            current, profile = read_current(current.ifname, profile.name)
        result["interfaces"][current.ifname] = shown(current, profile)
    return {**result, **done.result()}


def absent(interfaces: list[dict] | None, state_dir: str, check_mode: bool) -> dict:
    """state=absent: put back the recorded original values of the interfaces named (all recorded ones by default)
    and forget them. Returns the module result; raises TuningError."""
    check_state_dir(state_dir)
    record = load_record(state_dir)
    names = [i["name"] for i in interfaces or []] or sorted(record["interfaces"])
    done = Changes("nic_tuning")
    result = {"interfaces": {}, "warnings": []}
    for ifname in names:
        if ifname not in record["interfaces"]:
            continue
        if not os.path.isdir(os.path.join(SYSFS_NET, ifname)):
            result["warnings"].append(f"{ifname}: gone from the host; its record is dropped")
            changes = []
        else:
            current, profile = read_current(ifname, "none")
            changes = plan(current, restoration(record, ifname))
            report(done, ifname, changes)
            if changes and not check_mode:
                apply_interface(ifname, changes, current.driver.get("driver"))
                current, profile = read_current(ifname, "none")
            result["interfaces"][ifname] = shown(current, profile)
        if not changes:  # the record itself goes: that is a change of the host's state too
            done.add(
                f"{ifname}: forget the recorded original values (they are in place)",
                before=f"{ifname}: recorded original values",
            )
        if not check_mode:
            del record["interfaces"][ifname]
            save_record(state_dir, record)
    return {**result, **done.result()}
