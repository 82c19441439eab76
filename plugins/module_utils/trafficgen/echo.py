# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The echo server as the trafficgen module keeps it (mode=echo): bpf/trafficgen/echo.c attached to an interface
as an ordinary program instance (bpf/program.py), named tg-echo-<interface>, and the counters of what it echoed."""

from __future__ import annotations

import ipaddress
import os
from typing import ClassVar

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout, TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import DataPlane, DataPlaneError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.sender import compile_source


def instance_paths(ifname: str, pin_root: str, state_dir: str) -> xp.InstancePaths:
    return xp.InstancePaths(f"tg-echo-{ifname}", pin_root, state_dir)


class EchoError(DataPlaneError, tg.TrafficgenError):
    """The echo server's counters cannot be read."""


class EchoServer(DataPlane):
    """The echo server as a data plane: its counters and its removal. Its deploy is present(), through
    xp.converge: its state is the constants it was loaded with, no map it writes (docs/architecture.md)."""

    name = "echo"
    title = "echo server"
    module = "trafficgen"
    Error = EchoError
    map_layouts: ClassVar[dict[str, MapLayout]] = {layout.map_name: layout for layout in tg.ECHO_LAYOUTS}
    counter_maps = ("echo_counters",)

    @classmethod
    def counters(cls, maps: dict) -> dict:
        """Frames and bytes echoed since the echo server was attached."""
        values = TypedMap(maps["echo_counters"], cls.map_layouts["echo_counters"]).get(0) or []
        return {"packets": sum(v.packets for v in values), "bytes": sum(v.bytes for v in values)}


def echo_ports(ports: list[int] | None, template) -> tuple[int, int]:
    """The UDP destination ports echoed: `ports` as [low, high], else the template's destination ports."""
    if ports:
        if len(ports) != 2 or not 0 <= ports[0] <= ports[1] <= 65535:
            raise tg.TrafficgenError(f"ports: {ports} must be [low, high] with 0 <= low <= high <= 65535")
        return ports[0], ports[1]
    if template is None:
        raise tg.TrafficgenError("ports: required with mode=echo when no template is given")
    doc = pt.document(template)
    pt.validate(doc)
    # The destination ports are in the headers the template declares; MACs do not matter here.
    return pt.build(doc, src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02").udp_dst_ports


def echo_addresses(addresses: list[str] | None, template) -> tuple[str, ...]:
    """The IP addresses the echo server answers for: `addresses`, else the template's destination addresses."""
    if addresses:
        for n, text in enumerate(addresses):
            try:
                ipaddress.ip_address(text)
            except ValueError:
                raise tg.TrafficgenError(f"addresses[{n}]: {text!r} is not an IPv4 or IPv6 address") from None
        return tuple(addresses)
    if template is None:
        raise tg.TrafficgenError("addresses: required with mode=echo when no template is given")
    doc = pt.document(template)
    pt.validate(doc)
    return pt.build(doc, src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02").dst_addresses


def echo_constants(mac: str, ports: tuple[int, int], addresses) -> dict[str, int]:
    """bpf/trafficgen/echo.c's .rodata: the host it answers for (its MAC; per IP family, the range from the lowest to
    the highest of `addresses`; a family with none gets an empty range) and the ports it echoes."""
    mac_bytes = bytes.fromhex(mac.replace(":", ""))
    constants = {"port_lo": ports[0], "port_hi": ports[1], "host_mac": int.from_bytes(mac_bytes, "little")}
    parsed = [ipaddress.ip_address(a) for a in addresses]
    v4 = [int(a) for a in parsed if a.version == 4]
    v6 = [int(a) for a in parsed if a.version == 6]
    if v4:
        constants.update(ipv4_lo=min(v4), ipv4_hi=max(v4))
    if v6:
        low, high = min(v6), max(v6)
        constants.update(ipv6_lo_high=low >> 64, ipv6_lo_low=low & (1 << 64) - 1)
        constants.update(ipv6_hi_high=high >> 64, ipv6_hi_low=high & (1 << 64) - 1)
    return constants


def present(p: dict, check_mode: bool, build_dir: str | None = None) -> dict:
    """mode=echo, state=present, with the module's parameters `p`: attach the echo server (or keep it). Returns the
    module result. Raises pt.TemplateError, TrafficgenError, bpf_build.CompileError or xp.XdpProgramError."""
    ifname = p["interface"]
    paths = instance_paths(ifname, p["pin_root"], p["state_dir"])
    if not netdev.exists(ifname):
        raise tg.TrafficgenError(f"interface: {ifname} does not exist on this host")
    try:
        features.require(needs.ECHO, needs.ECHO_VARIANT)
    except features.MissingFeatures as exc:
        raise tg.TrafficgenError(f"this kernel cannot run the echo server, nothing was changed: {exc}") from exc
    lo, hi = echo_ports(p["ports"], p["template"])
    addresses = echo_addresses(p["addresses"], p["template"])
    environment, _warnings = tg.preflight(ifname, 1, sends=False)
    if not environment.get("mac"):
        raise tg.TrafficgenError(f"interface: {ifname} has no MAC address: the echo server answers frames to it")
    if no_bpffs := xp.bpffs_problem(paths.pin_root):
        raise tg.TrafficgenError(no_bpffs)
    result = {
        "ports": [lo, hi],
        "addresses": list(addresses),
        "environment": environment,
        "host": os.uname().nodename,
        "interface": ifname,
    }
    object_path = compile_source(p["src_dir"], p["cache_dir"], "echo.c", check_mode, build_dir)
    if object_path is None:
        changes = Changes(f"echo {paths.name}")
        changes.add(
            f"{ifname}: attach the echo server (ports {lo}-{hi}, addresses {', '.join(addresses)})",
            key=ifname,
            after=f"{ifname}: echo server",
        )
        return {**result, **changes.result(), "counters": None}
    done = xp.converge(
        paths,
        object_path,
        "xdp_echo",
        p["attach_mode"],
        echo_constants(environment["mac"], (lo, hi), addresses),
        [ifname],
        os.path.join(p["src_dir"], "trafficgen", "echo.c"),
        build={"include_dirs": [os.path.join(p["src_dir"], "include")], "defines": {}},
        layouts=tg.ECHO_LAYOUTS,
        check_mode=check_mode,
    )
    return {**result, **done.changes(f"echo {paths.name}").result(), "counters": EchoServer.read_counters(paths)}
