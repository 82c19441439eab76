"""Unit tests of the byte layouts and sysfs parsing in netdev, and of the probe's pure pieces (no kernel needed)."""

import ctypes
import struct
from pathlib import Path

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import probe as xdp_probe


def _fixed(text: str, size: int) -> bytes:
    return text.encode().ljust(size, b"\0")


def test_drvinfo_layout_and_parse():
    assert netdev._DRVINFO.size == 196  # sizeof(struct ethtool_drvinfo)
    raw = struct.pack(
        "=I32s32s32s32s32s12sIIIII",
        netdev.ETHTOOL_GDRVINFO,
        _fixed("ice", 32),
        _fixed("6.8.0-41-generic", 32),
        _fixed("4.40 0x8001c967 1.3534.0", 32),
        _fixed("0000:8a:00.0", 32),
        b"",
        b"",
        0,
        231,
        0,
        0,
        0,
    )
    assert netdev.parse_drvinfo(raw) == {
        "driver": "ice",
        "version": "6.8.0-41-generic",
        "fw_version": "4.40 0x8001c967 1.3534.0",
        "bus_info": "0000:8a:00.0",
        "n_stats": 231,
    }


def test_drvinfo_strings_stop_at_nul():
    raw = struct.pack("=I32s32s32s32s32s12sIIIII", 3, b"veth\0garbage", b"1.0", b"", b"", b"", b"", 0, 0, 0, 0, 0)
    info = netdev.parse_drvinfo(raw)
    assert info["driver"] == "veth"
    assert info["fw_version"] == ""


def test_channels_parse():
    assert netdev._CHANNELS.size == 36  # sizeof(struct ethtool_channels)
    raw = struct.pack("=9I", netdev.ETHTOOL_GCHANNELS, 0, 0, 1, 64, 0, 0, 1, 32)
    assert netdev.parse_channels(raw) == {
        "max_rx": 0,
        "max_tx": 0,
        "max_other": 1,
        "max_combined": 64,
        "rx": 0,
        "tx": 0,
        "other": 1,
        "combined": 32,
    }


def test_ifreq_carries_name_and_pointer():
    ptr_size = ctypes.sizeof(ctypes.c_void_p)
    ifr = netdev.pack_ifreq("eth0", 0x1122334455667788 if ptr_size == 8 else 0x11223344)
    assert len(ifr) == (40 if ptr_size == 8 else 32)
    assert bytes(ifr[:16]) == b"eth0".ljust(16, b"\0")
    fmt = "=Q" if ptr_size == 8 else "=I"
    assert struct.unpack_from(fmt, ifr, 16)[0] == (0x1122334455667788 if ptr_size == 8 else 0x11223344)


@pytest.mark.parametrize("bad", ["", "a" * 16, "a/b"])
def test_ifreq_rejects_bad_names(bad):
    with pytest.raises(ValueError, match="invalid interface name"):
        netdev.pack_ifreq(bad, 0)


def test_gstrings():
    raw = _fixed("peer_ifindex", 32) + _fixed("rx_queue_0_xdp_packets", 32) + _fixed("tx_queue_1_xdp_xmit", 32)
    assert netdev.parse_gstrings(raw, 3) == ["peer_ifindex", "rx_queue_0_xdp_packets", "tx_queue_1_xdp_xmit"]


def test_count_queues():
    assert netdev.count_queues(["rx-0", "rx-1", "tx-0", "tx-1", "tx-2"]) == {"rx": 2, "tx": 3}
    assert netdev.count_queues([]) == {"rx": 0, "tx": 0}


def test_netlink_attrs_roundtrip_and_padding():
    a = netdev.nl_attr(2, b"netdev\0")  # 4 + 7 = 11, padded to 12
    assert len(a) == 12
    b = netdev.nl_attr(3, struct.pack("=Q", 0x47))
    attrs = netdev.nl_attrs(a + b)
    assert attrs[2] == b"netdev\0"
    assert struct.unpack("=Q", attrs[3])[0] == 0x47
    nested = struct.pack("=HH", 8, 0x8001) + b"abcd"  # NLA_F_NESTED is masked off the type
    assert netdev.nl_attrs(nested) == {1: b"abcd"}


def test_xdp_feature_names():
    assert netdev.xdp_feature_names(0x23) == ["basic", "redirect", "rx-sg"]
    assert netdev.xdp_feature_names(0x67) == ["basic", "redirect", "ndo-xmit", "rx-sg", "ndo-xmit-sg"]
    assert netdev.xdp_feature_names(0) == []


def _iface(root: Path, name: str, ifindex: int, iflink: int, *, flags="0x1003", rxq=2, txq=2, stats=None):
    d = root / name
    (d / "queues").mkdir(parents=True)
    (d / "statistics").mkdir()
    for i in range(rxq):
        (d / "queues" / f"rx-{i}").mkdir()
    for i in range(txq):
        (d / "queues" / f"tx-{i}").mkdir()
    values = {"ifindex": ifindex, "iflink": iflink, "flags": flags, "type": 1, "mtu": 1500}
    values.update(address=f"02:00:00:00:00:{ifindex:02x}", operstate="up")
    for key, value in values.items():
        (d / key).write_text(f"{value}\n")
    for stat in netdev.STAT_NAMES:
        (d / "statistics" / stat).write_text(f"{(stats or {}).get(stat, 0)}\n")


@pytest.fixture
def fake_sysfs(tmp_path):
    _iface(tmp_path, "lo", 1, 1, flags="0x9", rxq=1, txq=1)
    (tmp_path / "lo" / "type").write_text("772\n")
    _iface(tmp_path, "xpb", 7, 6, stats={"tx_packets": 5, "rx_dropped": 2})
    _iface(tmp_path, "xpa", 6, 7)
    _iface(tmp_path, "xpc", 9, 44, rxq=1, txq=1)  # a veth whose peer is in another namespace
    return str(tmp_path)


def test_list_interfaces_by_ifindex_without_loopback(fake_sysfs):
    assert netdev.list_interfaces(fake_sysfs) == ["xpa", "xpb", "xpc"]
    assert netdev.list_interfaces(fake_sysfs, include_loopback=True) == ["lo", "xpa", "xpb", "xpc"]
    assert netdev.list_interfaces(fake_sysfs + "/missing") == []


def test_sysfs_facts_and_statistics(fake_sysfs):
    facts = netdev.sysfs_facts("xpb", fake_sysfs)
    assert facts == {
        "ifindex": 7,
        "mtu": 1500,
        "mac": "02:00:00:00:00:07",
        "operstate": "up",
        "iflink": 6,
        "queues": {"rx": 2, "tx": 2},
    }
    stats = netdev.statistics("xpb", fake_sysfs)
    assert stats["tx_packets"] == 5 and stats["rx_dropped"] == 2 and stats["rx_bytes"] == 0
    assert netdev.queue_counts("nope", fake_sysfs) == {"rx": None, "tx": None}


def test_exists_and_peer(fake_sysfs):
    assert netdev.exists("xpa", fake_sysfs)
    assert not netdev.exists("nope", fake_sysfs)
    assert not netdev.exists("../xpa", fake_sysfs)
    assert not netdev.exists("", fake_sysfs)
    assert netdev.local_peer("xpa", fake_sysfs) == "xpb"
    assert netdev.local_peer("xpb", fake_sysfs) == "xpa"
    assert netdev.local_peer("xpc", fake_sysfs) is None
    assert netdev.local_peer("lo", fake_sysfs) is None


def test_netdev_error_names_call_and_errno():
    err = netdev.NetdevError("ioctl(SIOCETHTOOL ETHTOOL_GCHANNELS, lo)", 95)
    assert str(err).startswith("ioctl(SIOCETHTOOL ETHTOOL_GCHANNELS, lo): Operation not supported (")
    assert err.errno == 95


# ---- the probe's pure pieces ------------------------------------------------------------------------------


def test_xdp_return_program_is_mov_exit():
    insns = xdp_probe.xdp_return_program(xdp_probe.XDP_TX)
    assert insns == bytes([0xB7, 0, 0, 0, 3, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0])


def test_probe_frame_and_ctx():
    frame = xdp_probe.probe_frame("d2:15:9a:41:32:4b")
    assert len(frame) == 60
    assert frame[:6] == b"\xff" * 6
    assert frame[6:12] == bytes.fromhex("d2159a41324b")
    assert frame[12:14] == b"\x88\xb5"
    assert xdp_probe.probe_frame(None)[6:12] == b"\x02\x00\x00\x00\x00\x01"
    assert xdp_probe.xdp_md(60, 5) == struct.pack("=6I", 0, 60, 0, 5, 0, 0)


@pytest.mark.parametrize(
    ("release", "expected"),
    [("6.18.44-fc-v857", (6, 18, 44)), ("5.15.0-91-generic", (5, 15, 0)), ("6.8", (6, 8, 0)), ("weird", (0, 0, 0))],
)
def test_parse_kernel_release(release, expected):
    assert xdp_probe.parse_kernel_release(release) == expected


def test_judge_tx_prefers_xdp_counters():
    # veth: the XDP transmit counter moved
    assert xdp_probe.judge_tx({"tx_packets": 1}, {"tx_queue_1_xdp_xmit": 1}, True) == (
        True,
        {"tx_queue_1_xdp_xmit": 1},
    )
    # a driver with XDP counters: tx_packets alone (other traffic) is not proof
    assert xdp_probe.judge_tx({"tx_packets": 3}, {}, True) == (None, {})
    # a driver without XDP counters: tx_packets is the only evidence
    assert xdp_probe.judge_tx({"tx_packets": 1}, {}, False) == (True, {"statistics.tx_packets": 1})
    # failures
    assert xdp_probe.judge_tx({}, {"tx_queue_0_xdp_xmit_errors": 1}, True) == (
        False,
        {"tx_queue_0_xdp_xmit_errors": 1},
    )
    assert xdp_probe.judge_tx({"tx_dropped": 1}, {}, False) == (False, {"statistics.tx_dropped": 1})
    assert xdp_probe.judge_tx({}, {}, True) == (None, {})


def test_counter_deltas():
    assert xdp_probe.counter_deltas({"a": 1, "b": 2, "c": None}, {"a": 1, "b": 5, "c": 3, "d": 1}) == {"b": 3}
