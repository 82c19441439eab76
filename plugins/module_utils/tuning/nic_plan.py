# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the user wants of an interface, resolved against it and its profile and checked; the difference as changes,
applied setting by setting with a roll-back of this run's changes on a failure.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_ethtool import (
    CHANNEL_KEYS,
    FEATURE_ALIASES,
    RING_KEYS,
    TuningError,
    ethtool,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_profiles import Profile
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_read import (
    Current,
    numa_local_cpus,
    online_cpus,
)

SETTINGS = ("mtu", "channels", "rings", "features", "coalesce", "irq_affinity")  # the order they are applied in


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
    online = set(online_cpus())
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
