# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP's map contents as a network engineer reads them: members, peers, static MACs and the VLAN mode per VNI,
the VTEP's tunnel ports and aging time, and what changes.

One step per item added or removed ("VNI 100: + peer 198.51.100.34 via ul-b (02:00:00:00:01:34)", "VNI 100: + static
MAC 02:00:00:00:64:01 on acc100"), and for --diff the state line it adds or removes ("VNI 100: peer 198.51.100.34 via
ul-b (02:00:00:00:01:34)").
"""

from __future__ import annotations

import ctypes

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import (
    NS_PER_S,
    PORT_KINDS,
    PORT_TUNNEL,
    VNI_PRESERVE_VLAN,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import (
    FdbEntry,
    FdbKey,
    PeerValue,
    PortConfig,
    PortVni,
    PortVniKey,
    VtepSettings,
    ip_str,
    mac_str,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.plan import MapContents


def describe(contents: MapContents, names: dict[int, str]) -> dict[int, set[str]]:
    """What a VTEP's maps say, per VNI, in words: members, peers, static MACs and vlan_mode preserve (translate,
    the default, goes unsaid). VNI 0: the VTEP's tunnel ports and FDB aging time."""

    def name(ifindex: int) -> str:
        return names.get(ifindex, f"ifindex {ifindex}")

    ports = {
        int.from_bytes(k, "little"): PortConfig.from_buffer_copy(v) for k, v in contents.entries["port_config"].items()
    }
    out: dict[int, set[str]] = {}
    for raw_key, raw_value in contents.entries["port_vnis"].items():
        key = PortVniKey.from_buffer_copy(raw_key)
        value = PortVni.from_buffer_copy(raw_value)
        if value.flags & VNI_PRESERVE_VLAN:
            out.setdefault(key.vni, set()).add("vlan_mode preserve")
        port = ports.get(key.ifindex)
        kind = PORT_KINDS.get(port.kind, "?") if port else "?"
        if kind == "tunnel":
            continue  # said through its peers
        words = f"trunk {name(key.ifindex)} VID {value.vid}" if kind == "trunk" else f"access port {name(key.ifindex)}"
        out.setdefault(key.vni, set()).add(words)
    peers = contents.entries["tunnel_peers"]
    for (vni, ifindex), (first, count) in contents.peer_rows().items():
        for index in range(first, first + count):
            raw = peers.get(bytes(ctypes.c_uint32(index)))
            if raw is not None:
                peer = PeerValue.from_buffer_copy(raw)
                said = f"peer {ip_str(peer.remote_ip)} via {name(ifindex)} ({mac_str(peer.mac)})"
                out.setdefault(vni, set()).add(said)
    for raw_key, raw_value in contents.entries["fdb_static"].items():
        key, entry = FdbKey.from_buffer_copy(raw_key), FdbEntry.from_buffer_copy(raw_value)
        where = f"at remote {ip_str(entry.remote_ip)}" if entry.remote_ip else f"on {name(entry.ifindex)}"
        out.setdefault(key.vni, set()).add(f"static MAC {mac_str(key.mac)} {where}")
    for ifindex, port in ports.items():
        if port.kind == PORT_TUNNEL:
            out.setdefault(0, set()).add(f"tunnel port {name(ifindex)} local {ip_str(port.local_ip)} MTU {port.mtu}")
    for raw_value in contents.entries["settings"].values():
        aging = VtepSettings.from_buffer_copy(raw_value).aging_ns // NS_PER_S
        out.setdefault(0, set()).add(f"fdb_aging {aging} s")
    return out


def changes(current: MapContents, desired: MapContents, names: dict[int, str], header: str) -> Changes:
    """The difference in words: per VNI (the VTEP's own tunnel ports first), what goes, then what comes."""
    before, after = describe(current, names), describe(desired, names)
    out = Changes(header)
    for vni in sorted(set(before) | set(after)):
        label = f"VNI {vni}" if vni else "VTEP"
        for gone in sorted(before.get(vni, set()) - after.get(vni, set())):
            out.add(f"{label}: - {gone}", before=f"{label}: {gone}")
        for new in sorted(after.get(vni, set()) - before.get(vni, set())):
            out.add(f"{label}: + {new}", after=f"{label}: {new}")
    return out
