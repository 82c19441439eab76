# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The VTEP's forwarding database as users see it: per VNI, every MAC the data plane sends to one place, and where.

Each VNI's table maps a MAC (lowercase) to where frames for it go:

    "02:00:00:00:64:01": {type: learned, port: acc100, age: 12}
    "02:00:00:00:64:02": {type: learned, port: trunk0, vid: 10, age: 0}
    "02:00:00:00:64:03": {type: static, port: uplink0, remote: 198.51.100.130}

- type: static (the document's fdb entries: never aged, never overridden by learning) or learned;
- port: the local port the MAC is behind, or, with remote, the tunnel port towards the remote VTEP it is behind;
- vid: on a trunk, the VID the MAC is reached with there;
- age: learned entries only, whole seconds since the last frame from the MAC (the data plane writes an entry's time
  again at most every FDB_REFRESH_NS, so a busy MAC shows up to 1 s old).

The table shows what the data plane would use now, by its own rules: a learned entry older than the VTEP's aging
time is gone for the data plane (it is removed on its next lookup), a learned MAC that has a static entry is sent by
the static one, and an entry whose port or peer the configuration no longer has is not used (such frames are
flooded); none of these is shown. Entries of VNIs the VTEP no longer serves are not shown either.
"""

from __future__ import annotations

import time

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import plan, writer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import (
    NS_PER_S,
    PORT_ACCESS,
    PORT_TRUNK,
    PORT_TUNNEL,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.layouts import (
    LEARNED_FDB,
    FdbEntry,
    FdbKey,
    PeerValue,
    PortConfig,
    PortVniKey,
    VtepSettings,
    ip_str,
    mac_str,
    u32,
)


def table(
    learned: list[tuple[bytes, bytes]], contents: plan.MapContents, names: dict[int, str], now_ns: int
) -> dict[int, dict[str, dict]]:
    """Per VNI of `contents` (what the configuration maps hold, writer.read()), its FDB: MAC -> where, sorted by
    MAC. learned: the learned FDB's entries (key and value bytes); now_ns: CLOCK_MONOTONIC, the data plane's
    clock (bpf_ktime_get_coarse_ns, to within a tick), read after them."""
    entries = contents.entries
    ports = {int.from_bytes(k, "little"): PortConfig.from_buffer_copy(v) for k, v in entries["port_config"].items()}
    members = {(key.vni, key.ifindex) for key in map(PortVniKey.from_buffer_copy, entries["port_vnis"])}
    peers = entries["tunnel_peers"]
    raw_settings = entries["settings"].get(u32(0))
    aging_ns = VtepSettings.from_buffer_copy(raw_settings).aging_ns if raw_settings else 0

    def where(vni: int, e: FdbEntry) -> dict | None:
        """Where the data plane sends a frame for the entry's MAC, or None when the configuration no longer backs
        the entry (the checks of vtep_xdp.c's local_target and send_remote)."""
        port = ports.get(e.ifindex)
        name = names.get(e.ifindex, str(e.ifindex))
        if not e.remote_ip:
            if port is None or port.kind not in (PORT_ACCESS, PORT_TRUNK) or (vni, e.ifindex) not in members:
                return None
            return {"port": name, "vid": e.vid} if port.kind == PORT_TRUNK else {"port": name}
        raw_peer = peers.get(u32(e.peer))
        peer = PeerValue.from_buffer_copy(raw_peer) if raw_peer else None
        if peer is None or (peer.remote_ip, peer.vni) != (e.remote_ip, vni) or port is None or port.kind != PORT_TUNNEL:
            return None
        return {"port": name, "remote": ip_str(e.remote_ip)}

    vnis = contents.vni_slots()
    out: dict[int, dict[str, dict]] = {vni: {} for vni in sorted(vnis)}
    static: set[tuple[int, str]] = set()  # the data plane looks these up first, and never the learned entry then
    for raw_key, raw_value in entries["fdb_static"].items():
        key = FdbKey.from_buffer_copy(raw_key)
        static.add((key.vni, mac_str(key.mac)))
        place = where(key.vni, FdbEntry.from_buffer_copy(raw_value)) if key.vni in vnis else None
        if place is not None:
            out[key.vni][mac_str(key.mac)] = {"type": "static", **place}
    for raw_key, raw_value in learned:
        key, e = FdbKey.from_buffer_copy(raw_key), FdbEntry.from_buffer_copy(raw_value)
        mac, age_ns = mac_str(key.mac), now_ns - e.seen_ns
        if key.vni not in vnis or (key.vni, mac) in static or age_ns > aging_ns:
            continue
        place = where(key.vni, e)
        if place is not None:
            out[key.vni][mac] = {"type": "learned", **place, "age": age_ns // NS_PER_S}
    return {vni: dict(sorted(macs.items())) for vni, macs in out.items()}


def read(maps: dict[str, libbpf.Map], contents: plan.MapContents, names: dict[int, str]) -> dict[int, dict[str, dict]]:
    """Each VNI's FDB (see table()), the learned entries read from the VTEP's fdb map now."""
    learned = maps[LEARNED_FDB].dump()
    # The data plane stamps entries with bpf_ktime_get_coarse_ns(), CLOCK_MONOTONIC to within a tick, the clock of
    # time.monotonic_ns() (in the initial time namespace, where the modules run). Read after the entries, so that no
    # age is negative.
    return table(learned, contents, names, time.monotonic_ns())


def facts(maps: dict[str, libbpf.Map], contents: plan.MapContents, names: dict[int, str]) -> dict:
    """The VTEP's facts: writer.counters() with each VNI's FDB table under "fdb"."""
    out = writer.counters(maps, contents, names)
    tables = read(maps, contents, names)
    for vni, counters in out["vnis"].items():
        counters["fdb"] = tables[vni]
    return out
