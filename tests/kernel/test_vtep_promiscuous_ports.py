"""The vtep module puts every access port and trunk it serves in promiscuous mode, and each back as it was.

A NIC drops unicast frames to MACs the host has not asked for (virtio_net, ice, mlx5): the frames for endpoints
behind other VTEPs never reached the VTEP's XDP program. The modules (vtep, xdp_restore, xdp_teardown) run as
Ansible runs them, inside a namespace of veths (its own sysfs), with pins on the test's own bpffs; the flag is
read from the kernel (ip -j link: the administrator's flag, which RTM_NEWLINK sets) and the promiscuity counter."""

import json
import os
import subprocess
import sys

import pytest
from conftest import LAB_PREFIX
from l2lib import netns
from vtep_netns import REPO, sh

from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.promisc import PromiscError
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import promiscuous_ports

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and XDP need root")

PORTS = ("xpul", "xpacc", "xptr", "xpold")  # tunnel port, access port, trunk, an access port promiscuous before


def document(trunk: bool = True) -> dict:
    vni_200 = {
        "vni": 200,
        "trunks": [{"port": "xptr", "vid": 20}],
        "peers": [{"ip": "198.51.100.179", "via": "xpul", "mac": "02:00:00:00:01:79"}],
    }
    return {
        "tunnel_ports": [{"port": "xpul", "local_ip": "198.51.100.177"}],
        "vnis": [
            {
                "vni": 100,
                "access_ports": ["xpacc", "xpold"],
                "peers": [{"ip": "198.51.100.178", "via": "xpul", "mac": "02:00:00:00:01:78"}],
            },
            *([vni_200] if trunk else []),
        ],
    }


@pytest.fixture
def host(tmp_path):
    """A namespace with the four ports (veths; the peer ends stay in it), xpold promiscuous by hand."""
    name = f"{LAB_PREFIX}-promisc-{os.getpid()}"
    sh("ip", "netns", "add", name)
    try:
        for port in PORTS:
            sh(
                "ip",
                "-n",
                name,
                "link",
                "add",
                port,
                "mtu",
                "1600" if port == "xpul" else "1500",
                "type",
                "veth",
                "peer",
                "name",
                f"{port}p",
            )
            sh("ip", "-n", name, "link", "set", port, "up")
            sh("ip", "-n", name, "link", "set", f"{port}p", "up")
        sh("ip", "-n", name, "addr", "add", "198.51.100.177/28", "dev", "xpul")
        sh("ip", "-n", name, "link", "set", "xpold", "promisc", "on")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def flags(ns: str) -> dict[str, tuple[bool, int]]:
    """Per port: the promiscuous flag (as ip link shows it) and the kernel's promiscuity counter."""
    links = json.loads(
        subprocess.run(["ip", "-n", ns, "-d", "-j", "link", "show"], check=True, capture_output=True, text=True).stdout
    )
    return {
        link["ifname"]: ("PROMISC" in link["flags"], link["promiscuity"]) for link in links if link["ifname"] in PORTS
    }


def promiscuous(ns: str) -> set[str]:
    return {port for port, (flag, _count) in flags(ns).items() if flag}


def run_module(ns: str, module: str, args: dict, paths: dict, check_mode: bool = False) -> dict:
    """The module run in the namespace as Ansible runs it (an args file), on the test's host paths."""
    args_file = paths["dir"] / f"{module}-args.json"
    module_args = {
        **args,
        **paths["host"],
        "_ansible_check_mode": check_mode,
        "_ansible_diff": True,
        "_ansible_tmpdir": str(paths["dir"]),
    }
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": module_args}))
    done = subprocess.run(
        ["ip", "netns", "exec", ns, sys.executable, str(REPO / "plugins" / "modules" / f"{module}.py"), str(args_file)],
        env={**os.environ, "PYTHONPATH": str(REPO / "collection")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    result = json.loads(done.stdout)
    assert not result.get("failed"), result
    return result


@pytest.fixture
def paths(tmp_path, bpffs):
    state = tmp_path / "state"
    return {
        "dir": tmp_path,
        "host": {"pin_root": str(bpffs / "xdpfleet"), "state_dir": str(state), "cache_dir": str(tmp_path / "cache")},
        "record": state / "programs" / "vtep.json",
    }


def vtep(ns: str, paths: dict, backend: str, config: dict, check_mode: bool = False) -> dict:
    args = {
        "config": config,
        "backend": backend,
        "allow_management_port": True,
        "source": str(REPO / "bpf" / "vtep" / "vtep_xdp.c"),
        "tc_source": str(REPO / "bpf" / "vtep" / "vtep_tc.c"),
        "include_dirs": [str(REPO / "bpf" / "include")],
    }
    return run_module(ns, "vtep", args, paths, check_mode)


@pytest.mark.parametrize("backend", ["xdp", "tc"])
def test_access_ports_and_trunks_are_promiscuous_while_served_and_put_back_after(host, paths, backend):
    assert promiscuous(host) == {"xpold"}

    checked = vtep(host, paths, backend, document(), check_mode=True)
    assert checked["changed"]
    shown = [line for line in checked["changes"] if "promisc" in line]
    assert shown == [
        "xpacc: promisc on (receives frames for the MACs behind other VTEPs)",
        "xptr: promisc on (receives frames for the MACs behind other VTEPs)",
    ]
    assert "xpacc: promisc on" in checked["diff"]["after"] and "xpacc: promisc off" in checked["diff"]["before"]
    assert promiscuous(host) == {"xpold"}, "check mode set a flag"

    applied = vtep(host, paths, backend, document())
    assert applied["changed"] and [line for line in applied["changes"] if "promisc" in line] == shown
    # the tunnel port receives VXLAN for the host's own MAC: left as it was
    assert flags(host) == {"xpul": (False, 0), "xpacc": (True, 1), "xptr": (True, 1), "xpold": (True, 1)}
    record = json.loads(paths["record"].read_text())
    assert record["promisc_before"] == {"xpacc": False, "xpold": True, "xptr": False}

    again = vtep(host, paths, backend, document())
    assert (again["changed"], again["changes"]) == (False, [])
    assert promiscuous(host) == {"xpacc", "xptr", "xpold"}

    # The trunk leaves the document: it gets its flag back, the other ports keep theirs.
    fewer = vtep(host, paths, backend, document(trunk=False))
    assert "xptr: promisc off (as before the VTEP served it)" in fewer["changes"]
    assert promiscuous(host) == {"xpacc", "xpold"}
    assert json.loads(paths["record"].read_text())["promisc_before"] == {"xpacc": False, "xpold": True}

    # A flag lost (as after a reboot) comes back with the restore, which still knows what was there before.
    sh("ip", "-n", host, "link", "set", "xpacc", "promisc", "off")
    restored = run_module(host, "xdp_restore", {}, paths)
    assert restored["changed"] and promiscuous(host) == {"xpacc", "xpold"}
    assert json.loads(paths["record"].read_text())["promisc_before"] == {"xpacc": False, "xpold": True}

    checked_removal = run_module(host, "vtep", {"state": "absent"}, paths, check_mode=True)
    assert "xpacc: promisc off (as before the VTEP served it)" in checked_removal["removed"]
    assert promiscuous(host) == {"xpacc", "xpold"}, "check mode cleared a flag"

    removed = run_module(host, "vtep", {"state": "absent"}, paths)
    assert removed["changed"] and removed["removed"][0] == "xpacc: promisc off (as before the VTEP served it)"
    assert flags(host) == {"xpul": (False, 0), "xpacc": (False, 0), "xptr": (False, 0), "xpold": (True, 1)}
    assert not paths["record"].exists()
    assert run_module(host, "vtep", {"state": "absent"}, paths)["changed"] is False


def test_teardown_puts_the_ports_back(host, paths):
    vtep(host, paths, "xdp", document())
    assert promiscuous(host) == {"xpacc", "xptr", "xpold"}
    torn = run_module(host, "xdp_teardown", {}, paths)
    assert torn["changed"]
    assert flags(host) == {"xpul": (False, 0), "xpacc": (False, 0), "xptr": (False, 0), "xpold": (True, 1)}


def test_a_flag_that_cannot_be_set_leaves_the_others_as_they_were(host):
    """The steps are applied in order and undone on a failure: the second port is gone by then (ENODEV), so the
    first one gets its flag back and the error names the port."""
    port_flags = promiscuous_ports.PortFlags("vtep test")
    port_flags.add("xpacc", True, "test")
    port_flags.add("xpgone", True, "test")
    with netns(host), pytest.raises(PromiscError, match="xpgone: no such interface"):
        port_flags.apply()
    assert promiscuous(host) == {"xpold"}
