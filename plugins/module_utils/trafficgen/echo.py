# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The echo server as the trafficgen module keeps it (mode=echo), a data plane (dataplane/template.py):
bpf/trafficgen/echo.c attached to an interface, named tg-echo-<interface>, and the counters of what it echoed."""

from __future__ import annotations

import ipaddress
import os
from typing import ClassVar

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import MapLayout, TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import DataPlane, DataPlaneError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import layouts as tg_layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt


def instance_paths(ifname: str, pin_root: str, state_dir: str) -> xp.InstancePaths:
    return xp.InstancePaths(f"tg-echo-{ifname}", pin_root, state_dir)


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


class EchoError(DataPlaneError, tg.TrafficgenError):
    """A refusal or failure of the echo server, worded for the person running the playbook."""


class EchoServer(DataPlane):
    """The echo server on `interface`: it answers the UDP frames to `addresses` and `ports` (else the template's)
    with their ports swapped. Its state is the constants it runs with (echo_constants()); it writes no map.

    mac: the interface's MAC it answers for; None: read from the host (tg.preflight), as the module does; a restore
    gives the recorded one, as the interface may not be up yet at boot."""

    name = "echo"
    title = "echo server"
    module = "trafficgen"
    what = "the echo server"
    what_applied = "the echo server"
    what_loaded = "the echo server"
    Error = EchoError
    map_layouts: ClassVar[dict[str, MapLayout]] = {layout.map_name: layout for layout in tg_layouts.ECHO_LAYOUTS}
    counter_maps = ("echo_counters",)

    def __init__(
        self,
        paths: xp.InstancePaths,
        cache_dir: str,
        *,
        interface: str,
        ports: list[int] | None = None,
        addresses: list[str] | None = None,
        template=None,
        mode: str = "native",
        mac: str | None = None,
        **common,
    ):
        super().__init__(paths, cache_dir, **common)
        self.interface = interface
        self.ports_given = ports
        self.addresses_given = addresses
        self.template = template
        self.mode = mode
        self.mac = mac
        self.environment: dict = {}

    def validate(self) -> None:
        """Raises EchoError, and pt.TemplateError for a template that is not one."""
        if not netdev.exists(self.interface):
            raise EchoError(f"interface: {self.interface} does not exist on this host")
        try:
            self.ports = echo_ports(self.ports_given, self.template)
            self.addresses = echo_addresses(self.addresses_given, self.template)
            if self.mac is None:
                self.environment, _warnings = tg.preflight(self.interface, 1, sends=False)
                self.mac = self.environment.get("mac")
        except EchoError:
            raise
        except tg.TrafficgenError as exc:
            raise EchoError(str(exc)) from exc
        if not self.mac:
            raise EchoError(f"interface: {self.interface} has no MAC address: the echo server answers frames to it")

    def needs(self):
        return needs.ECHO, needs.ECHO_VARIANT

    def interfaces(self) -> list[str]:
        return [self.interface]

    def compile_arguments(self) -> dict:
        constants = echo_constants(self.mac, self.ports, self.addresses)
        return {"program": "xdp_echo", "mode": self.mode, "constants": constants}

    def part(self) -> dict:
        return {
            "interface": self.interface,
            "ports": list(self.ports),
            "addresses": list(self.addresses),
            "mac": self.mac,
        }

    def without_sources(self) -> dict:
        """In check mode before the xdp_host role copied the sources (in check mode it copied nothing): what would
        be attached."""
        lo, hi = self.ports
        changes = Changes(self.header)
        changes.add(
            f"{self.interface}: attach the echo server (ports {lo}-{hi}, addresses {', '.join(self.addresses)})",
            key=self.interface,
            after=f"{self.interface}: echo server",
        )
        return {**self.description(), **changes.result(), "counters": None}

    def description(self) -> dict:
        return {
            "ports": list(self.ports),
            "addresses": list(self.addresses),
            "environment": self.environment,
            "host": os.uname().nodename,
            "interface": self.interface,
        }

    def results(self, instance: xp.Instance, attach_plan: xp.Plan, planned) -> dict:
        return {**self.description(), "counters": self.read_counters(self.paths)}

    @classmethod
    def counters(cls, maps: dict) -> dict:
        """Frames and bytes echoed since the echo server was attached."""
        values = TypedMap(maps["echo_counters"], cls.map_layouts["echo_counters"]).get(0) or []
        return {"packets": sum(v.packets for v in values), "bytes": sum(v.bytes for v in values)}

    @classmethod
    def arguments(cls, record: dict, options: dict) -> dict:
        part = record[cls.name]
        return {
            "interface": part["interface"],
            "ports": part["ports"],
            "addresses": part["addresses"],
            "mac": part["mac"],
            "mode": record.get("mode", "native"),
            "source": record.get("source"),
            "include_dirs": (record.get("build") or {}).get("include_dirs"),
        }


def present(p: dict, check_mode: bool, build_dir: str | None = None) -> dict:
    """mode=echo, state=present, with the module's parameters `p`: attach the echo server (or keep it). Returns the
    module result. Raises EchoError or pt.TemplateError."""
    return EchoServer(
        instance_paths(p["interface"], p["pin_root"], p["state_dir"]),
        p["cache_dir"],
        interface=p["interface"],
        ports=p["ports"],
        addresses=p["addresses"],
        template=p["template"],
        mode=p["attach_mode"],
        source=os.path.join(p["src_dir"], "trafficgen", "echo.c"),
        include_dirs=[os.path.join(p["src_dir"], "include")],
        check_mode=check_mode,
        build_dir=build_dir,
    ).deploy()
