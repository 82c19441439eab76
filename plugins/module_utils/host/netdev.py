# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Interface facts from the kernel with the Python standard library only (no pyroute2 on hosts).

Sources: sysfs (/sys/class/net/<if>: mtu, operstate, address, queues, statistics), the ethtool ioctl
(SIOCETHTOOL: driver info, channels, driver statistics) and the generic-netlink `netdev` family (XDP features,
kernel 6.3+). Everything reads the network namespace the process runs in.
The byte layouts are parsed by small pure functions so they are unit-testable without a kernel.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import struct

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.netlink import nl_attr, nl_attrs

SYSFS_NET = "/sys/class/net"

SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 0x03
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_GSTATS = 0x1D
ETHTOOL_GCHANNELS = 0x3C
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
IFF_LOOPBACK = 0x8
ARPHRD_LOOPBACK = 772

# struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32], bus_info[32], erom_version[32],
# reserved2[12], n_priv_flags, n_stats, testinfo_len, eedump_len, regdump_len
_DRVINFO = struct.Struct("=I32s32s32s32s32s12sIIIII")
# struct ethtool_channels: cmd, max_rx, max_tx, max_other, max_combined, rx_count, tx_count, other_count,
# combined_count
_CHANNELS = struct.Struct("=9I")


class _Ifmap(ctypes.Structure):
    _fields_ = [
        ("mem_start", ctypes.c_ulong),
        ("mem_end", ctypes.c_ulong),
        ("base_addr", ctypes.c_ushort),
        ("irq", ctypes.c_ubyte),
        ("dma", ctypes.c_ubyte),
        ("port", ctypes.c_ubyte),
    ]


class _IfrU(ctypes.Union):
    _fields_ = [("data", ctypes.c_void_p), ("map", _Ifmap), ("addr", ctypes.c_char * 16)]


class _Ifreq(ctypes.Structure):
    """struct ifreq: the name, then a union whose ifr_data member points at the ethtool command buffer."""

    _fields_ = [("name", ctypes.c_char * IFNAMSIZ), ("u", _IfrU)]


# generic netlink
NETLINK_GENERIC = 16
GENL_ID_CTRL = 0x10
CTRL_CMD_GETFAMILY = 3
CTRL_ATTR_FAMILY_ID = 1
CTRL_ATTR_FAMILY_NAME = 2
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 0x2
NETDEV_CMD_DEV_GET = 1
NETDEV_A_DEV_IFINDEX = 1
NETDEV_A_DEV_XDP_FEATURES = 3
NETDEV_A_DEV_XDP_ZC_MAX_SEGS = 4
XDP_FEATURE_NAMES = (
    (1 << 0, "basic"),
    (1 << 1, "redirect"),
    (1 << 2, "ndo-xmit"),
    (1 << 3, "xsk-zerocopy"),
    (1 << 4, "hw-offload"),
    (1 << 5, "rx-sg"),
    (1 << 6, "ndo-xmit-sg"),
)

STAT_NAMES = (
    "rx_packets",
    "tx_packets",
    "rx_bytes",
    "tx_bytes",
    "rx_errors",
    "tx_errors",
    "rx_dropped",
    "tx_dropped",
)


class NetdevError(OSError):
    """An interface query failed: the message names the call and the errno's meaning."""

    def __init__(self, call: str, err: int):
        self.call = call
        super().__init__(err, f"{call}: {os.strerror(err)} ({errno.errorcode.get(err, str(err))})")

    def __str__(self) -> str:
        return str(self.strerror)


def errno_text(err: int) -> str:
    return f"{os.strerror(err)} ({errno.errorcode.get(err, str(err))})"


# ---- pure parsers ------------------------------------------------------------------------------------------


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def pack_ifreq(name: str, data_ptr: int) -> bytearray:
    encoded = name.encode()
    if not encoded or len(encoded) >= IFNAMSIZ or b"/" in encoded:
        raise ValueError(f"invalid interface name {name!r}")
    ifr = _Ifreq(name=encoded)
    ifr.u.data = data_ptr
    return bytearray(bytes(ifr))


def parse_drvinfo(raw: bytes) -> dict:
    f = _DRVINFO.unpack_from(raw)
    return {
        "driver": _cstr(f[1]),
        "version": _cstr(f[2]),
        "fw_version": _cstr(f[3]),
        "bus_info": _cstr(f[4]),
        "n_stats": f[8],
    }


def parse_channels(raw: bytes) -> dict:
    _cmd, max_rx, max_tx, max_other, max_combined, rx, tx, other, combined = _CHANNELS.unpack_from(raw)
    return {
        "max_rx": max_rx,
        "max_tx": max_tx,
        "max_other": max_other,
        "max_combined": max_combined,
        "rx": rx,
        "tx": tx,
        "other": other,
        "combined": combined,
    }


def parse_gstrings(raw: bytes, count: int) -> list[str]:
    return [_cstr(raw[i * ETH_GSTRING_LEN : (i + 1) * ETH_GSTRING_LEN]) for i in range(count)]


def count_queues(entries: list[str]) -> dict:
    """Count rx-N and tx-N entries of /sys/class/net/<if>/queues."""
    return {
        "rx": sum(1 for e in entries if e.startswith("rx-")),
        "tx": sum(1 for e in entries if e.startswith("tx-")),
    }


def xdp_feature_names(mask: int) -> list[str]:
    return [name for bit, name in XDP_FEATURE_NAMES if mask & bit]


# ---- sysfs -------------------------------------------------------------------------------------------------


def read_text(path: str) -> str | None:
    """A sysfs/procfs file's content, stripped; None when it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _read_int(path: str, base: int = 10) -> int | None:
    text = read_text(path)
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


def exists(name: str, sysfs: str = SYSFS_NET) -> bool:
    return bool(name) and "/" not in name and os.path.isdir(os.path.join(sysfs, name))


def ifindex(name: str, sysfs: str = SYSFS_NET) -> int | None:
    return _read_int(os.path.join(sysfs, name, "ifindex"))


def is_loopback(name: str, sysfs: str = SYSFS_NET) -> bool:
    flags = _read_int(os.path.join(sysfs, name, "flags"), 16) or 0
    return bool(flags & IFF_LOOPBACK) or _read_int(os.path.join(sysfs, name, "type")) == ARPHRD_LOOPBACK


def list_interfaces(sysfs: str = SYSFS_NET, include_loopback: bool = False) -> list[str]:
    """The interfaces of this network namespace, by ifindex."""
    try:
        names = [n for n in os.listdir(sysfs) if os.path.isdir(os.path.join(sysfs, n))]
    except OSError:
        return []
    if not include_loopback:
        names = [n for n in names if not is_loopback(n, sysfs)]
    return sorted(names, key=lambda n: (ifindex(n, sysfs) or 0, n))


def queue_counts(name: str, sysfs: str = SYSFS_NET) -> dict:
    try:
        return count_queues(os.listdir(os.path.join(sysfs, name, "queues")))
    except OSError:
        return {"rx": None, "tx": None}


def statistics(name: str, sysfs: str = SYSFS_NET) -> dict:
    """The interface's counters from sysfs (each read asks the driver, so they are current)."""
    return {stat: _read_int(os.path.join(sysfs, name, "statistics", stat)) for stat in STAT_NAMES}


def sysfs_facts(name: str, sysfs: str = SYSFS_NET) -> dict:
    base = os.path.join(sysfs, name)
    return {
        "ifindex": _read_int(os.path.join(base, "ifindex")),
        "mtu": _read_int(os.path.join(base, "mtu")),
        "mac": read_text(os.path.join(base, "address")),
        "operstate": read_text(os.path.join(base, "operstate")),
        "iflink": _read_int(os.path.join(base, "iflink")),
        "queues": queue_counts(name, sysfs),
    }


def local_peer(name: str, sysfs: str = SYSFS_NET) -> str | None:
    """The name of a veth's peer when it is in this network namespace (its iflink is our ifindex), else None."""
    own, link = ifindex(name, sysfs), _read_int(os.path.join(sysfs, name, "iflink"))
    if own is None or link is None or link == own:
        return None
    for other in list_interfaces(sysfs, include_loopback=False):
        if other != name and ifindex(other, sysfs) == link and _read_int(os.path.join(sysfs, other, "iflink")) == own:
            return other
    return None


# ---- ethtool ioctl -----------------------------------------------------------------------------------------


def _ethtool(name: str, buf: ctypes.Array, what: str) -> None:
    """SIOCETHTOOL with ifr_data pointing at buf (which starts with the command word); raises NetdevError."""
    ifr = pack_ifreq(name, ctypes.addressof(buf))
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifr)
    except OSError as exc:
        raise NetdevError(f"ioctl(SIOCETHTOOL {what}, {name})", exc.errno or errno.EIO) from None
    finally:
        sock.close()


def drvinfo(name: str) -> dict:
    buf = ctypes.create_string_buffer(_DRVINFO.pack(ETHTOOL_GDRVINFO, *([b""] * 6), *([0] * 5)), _DRVINFO.size)
    _ethtool(name, buf, "ETHTOOL_GDRVINFO")
    return parse_drvinfo(buf.raw)


def channels(name: str) -> dict | None:
    """Channel counts, or None when the driver does not report them (EOPNOTSUPP)."""
    buf = ctypes.create_string_buffer(_CHANNELS.pack(ETHTOOL_GCHANNELS, *([0] * 8)), _CHANNELS.size)
    try:
        _ethtool(name, buf, "ETHTOOL_GCHANNELS")
    except NetdevError as exc:
        if exc.errno == errno.EOPNOTSUPP:
            return None
        raise
    return parse_channels(buf.raw)


def ethtool_stats(name: str, n_stats: int | None = None) -> dict[str, int]:
    """The driver's own counters (`ethtool -S`): name -> value; empty when the driver has none."""
    if n_stats is None:
        n_stats = drvinfo(name)["n_stats"]
    if not n_stats:
        return {}
    sbuf = ctypes.create_string_buffer(struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_STATS, n_stats), 12 + 32 * n_stats)
    _ethtool(name, sbuf, "ETHTOOL_GSTRINGS")
    count = struct.unpack_from("=I", sbuf.raw, 8)[0]
    names = parse_gstrings(sbuf.raw[12:], min(count, n_stats))
    vbuf = ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_GSTATS, len(names)), 8 + 8 * len(names))
    _ethtool(name, vbuf, "ETHTOOL_GSTATS")
    values = struct.unpack_from(f"={len(names)}Q", vbuf.raw, 8)
    return dict(zip(names, values))  # one value per name: GSTATS was asked for len(names)


# ---- generic netlink: the netdev family (XDP features) ----------------------------------------------------


class _Genl:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_GENERIC)
        self.sock.settimeout(2.0)
        self.sock.bind((0, 0))
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    def request(self, family: int, cmd: int, attrs: bytes, what: str) -> dict[int, bytes]:
        self.seq += 1
        payload = struct.pack("=BBH", cmd, 1, 0) + attrs
        self.sock.send(struct.pack("=IHHII", 16 + len(payload), family, NLM_F_REQUEST, self.seq, 0) + payload)
        while True:
            data = self.sock.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, mtype, _flags, seq, _pid = struct.unpack_from("=IHHII", data, off)
                body = data[off + 16 : off + length]
                off += (length + 3) & ~3
                if seq != self.seq:
                    continue
                if mtype == NLMSG_ERROR:
                    err = -struct.unpack_from("=i", body)[0]
                    raise NetdevError(what, err or errno.EIO)
                return nl_attrs(body[4:])


def xdp_features(index: int) -> dict | None:
    """XDP features the driver announces now (netdev netlink family, kernel 6.3+); None where unavailable.

    For veth, `ndo-xmit` appears only while the peer can receive XDP frames (an XDP program or GRO on it).
    """
    try:
        nl = _Genl()
    except OSError:
        return None
    try:
        ctrl = nl.request(
            GENL_ID_CTRL, CTRL_CMD_GETFAMILY, nl_attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0"), "genl getfamily(netdev)"
        )
        family = struct.unpack("=H", ctrl[CTRL_ATTR_FAMILY_ID][:2])[0]
        attrs = nl.request(
            family, NETDEV_CMD_DEV_GET, nl_attr(NETDEV_A_DEV_IFINDEX, struct.pack("=I", index)), "netdev dev-get"
        )
    except (OSError, KeyError, struct.error):
        return None
    finally:
        nl.close()
    mask = struct.unpack("=Q", attrs[NETDEV_A_DEV_XDP_FEATURES][:8])[0] if NETDEV_A_DEV_XDP_FEATURES in attrs else 0
    zc = attrs.get(NETDEV_A_DEV_XDP_ZC_MAX_SEGS)
    return {
        "mask": mask,
        "flags": xdp_feature_names(mask),
        "zc_max_segs": struct.unpack("=I", zc[:4])[0] if zc else None,
    }


# ---- everything about one interface ------------------------------------------------------------------------


def interface_facts(name: str, sysfs: str = SYSFS_NET) -> dict:
    """sysfs facts, driver info and channels of one interface; ethtool failures land in `errors`."""
    facts = sysfs_facts(name, sysfs)
    facts.update({"driver": None, "driver_version": None, "firmware_version": None, "bus_info": None})
    facts["channels"] = None
    errors: list[str] = []
    try:
        info = drvinfo(name)
        facts.update(
            driver=info["driver"] or None,
            driver_version=info["version"] or None,
            firmware_version=info["fw_version"] or None,
            bus_info=info["bus_info"] or None,
        )
    except NetdevError as exc:
        errors.append(str(exc))
    try:
        facts["channels"] = channels(name)
    except NetdevError as exc:
        errors.append(str(exc))
    facts["statistics"] = statistics(name, sysfs)
    if facts["driver"] == "veth":
        facts["peer"] = {"ifindex": facts["iflink"], "name": local_peer(name, sysfs)}
    else:
        facts["peer"] = None
    facts["errors"] = errors
    return facts
