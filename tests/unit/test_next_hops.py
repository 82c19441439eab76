"""The next-hop refresher's pieces that need no kernel: which peers the document pins to a MAC, how a peer's next
hop reads, and the boot entry point telling systemd it is ready (a real datagram socket)."""

import importlib.machinery
import importlib.util
import os
import socket
from pathlib import Path

from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import next_hops as nh

ENTRY_POINT = Path(__file__).resolve().parents[2] / "roles" / "xdp_host" / "files" / "xdpfleet-restore"


def test_only_the_peers_with_a_mac_in_the_document_are_left_alone():
    document = {
        "vnis": [
            {"vni": 100, "peers": [{"ip": "198.51.100.98", "via": "ul-a", "mac": "02:00:00:00:00:98"},
                                   {"ip": "198.51.100.102", "via": "ul-a"}]},
            {"vni": 200, "peers": [{"ip": "198.51.100.98", "via": "ul-a"}]},
            {"vni": 300, "access_ports": ["acc300"]},
        ]
    }  # fmt: skip
    assert nh.given_macs(document) == {(100, "198.51.100.98")}


def test_a_peer_is_stale_only_when_its_next_hop_answers_from_another_mac():
    hop = nh.PeerHop(100, "198.51.100.102", "ul-a", 3, "02:00:00:00:00:01", "198.51.100.97", "02:00:00:00:00:01")
    assert not hop.stale and "problem" not in hop.report()
    hop.next_hop_mac = "02:00:00:00:00:02"
    assert hop.stale and hop.report()["stale"] is True
    unknown = nh.PeerHop(100, "198.51.100.102", "ul-a", 3, "02:00:00:00:00:01", "198.51.100.97", None, "no entry")
    assert not unknown.stale and unknown.report()["problem"] == "no entry"
    assert str(hop) == "VNI 100 peer 198.51.100.102 via ul-a"


def test_the_entry_point_tells_systemd_it_is_ready(tmp_path, monkeypatch):
    loader = importlib.machinery.SourceFileLoader("xdpfleet_restore", str(ENTRY_POINT))
    entry_point = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(entry_point)
    entry_point.notify("READY=1")  # no NOTIFY_SOCKET: not run by systemd, nothing to tell
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:
        systemd.bind(str(tmp_path / "notify"))
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
        entry_point.notify("READY=1\nSTATUS=done")
        assert systemd.recv(256) == b"READY=1\nSTATUS=done"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as systemd:  # systemd's own: in the abstract namespace
        name = f"xdpfleet-test-notify-{os.getpid()}"
        systemd.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        entry_point.notify("READY=1")
        assert systemd.recv(256) == b"READY=1"
