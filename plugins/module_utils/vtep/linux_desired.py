# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the document asks of the Linux VTEP: the rules of the Linux realisation on top of the validated document
(`check`), and the VNIs it gives (`DesiredVni`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import config as vc
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import FDB_SIZE_DEFAULT
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_host import (
    HostState,
    LinuxVtepError,
    bridge_name,
    ip_key,
    own_device,
    vxlan_name,
)


@dataclass(frozen=True)
class DesiredVni:
    vni: int
    tunnel_port: str
    local_ip: str
    mtu: int
    access_ports: tuple[str, ...]
    peers: tuple[tuple[str, str], ...]  # (ip, via)
    fdb: tuple[vc.FdbEntry, ...]  # static entries, by MAC
    aging: int  # seconds a learned MAC lives, on the bridge and on the vxlan device

    @property
    def bridge(self) -> str:
        return bridge_name(self.vni)

    @property
    def vxlan(self) -> str:
        return vxlan_name(self.vni)

    def static_where(self, entry: vc.FdbEntry) -> str:
        """Where a static entry sends its MAC, in the words _static_entries() uses for what the host has."""
        return entry.port if entry.port is not None else f"remote {entry.remote} via {self.tunnel_port}"

    def report(self) -> dict:
        """The same shape as `report()` gives for what the host has."""
        return {
            "devices": {"bridge": self.bridge, "vxlan": self.vxlan},
            "members": sorted([self.vxlan, *self.access_ports]),
            "peers": [{"ip": ip, "via": via} for ip, via in sorted(self.peers, key=ip_key)],
            "fdb": [
                {"mac": e.mac, "port": e.port} if e.port is not None else {"mac": e.mac, "remote": e.remote}
                for e in self.fdb
            ],
        }

    def record(self) -> dict:
        """What the state file keeps of this VNI."""
        return {
            **self.report(),
            "tunnel_port": self.tunnel_port,
            "local_ip": self.local_ip,
            "mtu": self.mtu,
            "fdb_aging": self.aging,
        }


def check(config: vc.VtepConfig, host: HostState, management: dict[str, str] | None = None) -> list[DesiredVni]:
    """The rules of the Linux realisation on top of validate(); raises LinuxVtepError listing every problem, each
    naming the item's path in the document. management: the interfaces the host is managed through, which no port
    may be (host/management.py: management_interfaces(); None: allowed)."""
    problems: list[str] = []
    tunnels = {t.port: t for t in config.tunnel_ports}
    for t in config.tunnel_ports:
        if t.port not in host.links:
            problems.append(f"{t.path}.port: no interface {t.port} on this host")
    addresses = {name: host.addresses.get(link.index, set()) for name, link in host.links.items()}
    problems += vc.tunnel_address_problems(config, addresses)
    problems += vc.management_port_problems(config, management or {})
    if config.fdb_size != FDB_SIZE_DEFAULT:
        problems.append(
            f"fdb_size: the Linux baseline cannot bound its learned MACs to {config.fdb_size} (each VNI's bridge "
            "and vxlan device learn into tables of their own, without a shared limit); leave fdb_size out"
        )
    desired: list[DesiredVni] = []
    for v in config.vnis:
        if v.trunks:
            problems.append(
                f"{v.path}.trunks: the Linux baseline needs bridge VLAN filtering (and 802.1Q) for trunk "
                "bindings, which it does not configure and this lab's kernel lacks; use access_ports"
            )
        first = v.first_peer()
        first_via = first.via if first else None
        for p in v.peers:
            if p.via not in tunnels:
                problems.append(f"{p.path}.via: {p.via} is not one of tunnel_ports")
            elif p.via != first_via:
                problems.append(
                    f"{p.path}.via: {p.via}, but peers[0] is via {first_via}: the Linux baseline has one "
                    "vxlan device per VNI with one local address, so all peers of a VNI go via one tunnel port"
                )
        for access in v.access_ports:
            port = access.port
            link = host.links.get(port)
            if link is None:
                problems.append(f"{access.path}: no interface {port} on this host")
                continue
            if own_device(port, link.kind) is not None:
                problems.append(f"{access.path}: {port} is a device this module makes")
            master = host.by_index(link.master) if link.master else None
            if master is not None and own_device(master.name, master.kind) is None:
                problems.append(
                    f"{access.path}: {port} is already a port of {master.name} "
                    f"({master.kind or 'unknown kind'}), which this module did not make"
                )
        for name, kind in ((bridge_name(v.vni), "bridge"), (vxlan_name(v.vni), "vxlan")):
            link = host.links.get(name)
            if link is not None and link.kind != kind:
                problems.append(f"{v.path}.vni: a device named {name} exists and is not a {kind}; remove or rename it")
        if not config.tunnel_ports:
            continue
        tunnel = tunnels.get(first_via, config.tunnel_ports[0])
        tunnel_link = host.links.get(tunnel.port)
        desired.append(
            DesiredVni(
                vni=v.vni,
                tunnel_port=tunnel.port,
                local_ip=tunnel.local_ip,
                mtu=(tunnel_link.mtu - vc.VXLAN_OVERHEAD) if tunnel_link else 0,
                access_ports=tuple(a.port for a in v.access_ports),
                peers=tuple((p.ip, p.via) for p in v.peers),
                fdb=v.fdb,
                aging=config.fdb_aging,
            )
        )
    if problems:
        message = "invalid VTEP configuration for the Linux baseline:\n" + "\n".join(f"- {x}" for x in problems)
        raise LinuxVtepError(problems, msg=message)
    return desired
