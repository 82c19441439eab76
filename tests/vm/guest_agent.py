"""The agent inside a test VM: connects to the host over the control NIC and runs the calls it sends, one JSON line
each way ({"op", "args"} in; {"result"} or {"error", "kind", "chain"} out).

It runs in the guest on this machine's Python (the 9p root) and deploys the data planes through the collection's own
code paths: program.converge (the xdp_program module's), filter/router/vtep deploy, the echo server as the
trafficgen module keeps it, and the sender. The frames are the host's business (planes.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(REPO / "collection"), str(REPO / "tests"), str(HERE)]

import vmlib

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import read_pinned_map

PIN_ROOT = "/sys/fs/bpf/xdpfleet"
STATE_DIR = "/tmp/xdpfleet-state"  # the guest's /tmp is its own tmpfs
SRC = REPO / "bpf"
INCLUDE_DIRS = [str(SRC / "include")]


def run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def ifname_by_mac() -> dict[str, str]:
    names = {}
    for ifname in os.listdir("/sys/class/net"):
        names[Path(f"/sys/class/net/{ifname}/address").read_text().strip()] = ifname
    return names


def paths(name: str) -> xp.InstancePaths:
    return xp.InstancePaths(name, PIN_ROOT, STATE_DIR)


# ---- calls ------------------------------------------------------------------------------------------------------


def setup() -> dict:
    """The data NICs up, without the guest's own IPv6 chatter; what they are called here."""
    names = ifname_by_mac()
    nics = [names[mac] for mac in vmlib.DATA_MACS if mac in names]
    for ifname in nics:
        Path(f"/proc/sys/net/ipv6/conf/{ifname}/disable_ipv6").write_text("1")
        run("ip", "link", "set", ifname, "up")
    driver = {n: os.path.basename(os.readlink(f"/sys/class/net/{n}/device/driver")) for n in nics}
    return {"release": os.uname().release, "nics": nics, "drivers": driver, "macs": {n: mac_of(n) for n in nics}}


def mac_of(ifname: str) -> str:
    return Path(f"/sys/class/net/{ifname}/address").read_text().strip()


def load(object_path: str) -> dict:
    """The object loaded by the collection's libbpf binding (and closed again): its programs' names. Refused first,
    as xdp_program refuses an object, where the kernel lacks a helper, kfunc or map type it uses."""
    if problems := xp.kernel_problems(object_path, "native"):
        raise xp.XdpProgramError(f"this kernel cannot load {object_path}: {'; '.join(problems)}")
    with libbpf.BpfObject(object_path) as obj:
        obj.load()
        return {"programs": sorted(obj.programs)}


def remove(name: str) -> list[str]:
    return xp.remove(paths(name), check_mode=False).steps


def xdp_state(ifname: str) -> dict:
    state = libbpf.xdp_query(socket.if_nametoindex(ifname))
    return {"prog_id": state.prog_id, "mode": state.mode}


def counter_deploy(ifname: str, mode: str, object_path: str, count_only_proto: int) -> dict:
    done = xp.converge(
        paths("counter"), object_path, "xdp_count", mode, {"count_only_proto": count_only_proto}, [ifname],
        str(SRC / "counter" / "counter.c"),
    )  # fmt: skip
    return {"changed": done.changed, "program": done.program}


def counter_read() -> int:
    entries = read_pinned_map(paths("counter").map_pin("xdp_counters"), False, False)["entries"]
    return sum(e["value"]["packets"] for e in entries)


def filter_deploy(ifname: str, hook: str, mode: str, rules: list, cache_dir: str) -> dict:
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import deploy

    result = deploy.Filter(
        paths("filter"), cache_dir, rules=rules, interfaces=[ifname], hook=hook, mode=mode, allow_generic=True,
        source=str(SRC / "filter" / "filter.c"), include_dirs=INCLUDE_DIRS,
    ).deploy()  # fmt: skip
    return {"changed": result["changed"], "program": result["program"]}


def filter_read() -> dict:
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import deploy

    counters = deploy.Filter.read_counters(paths("filter"))
    out = {rule["name"]: rule["packets"] for rule in counters["rules"]}
    out.update({reason: c["packets"] for reason, c in counters["unmatched"].items()})
    return out


def addresses(assign: dict[str, list[str]], neighbours: list[list[str]], forwarding: bool) -> None:
    """Addresses per interface (replacing what it had), static neighbours [ip, mac, ifname], IPv4 forwarding."""
    for ifname, cidrs in assign.items():
        run("ip", "addr", "flush", "dev", ifname)
        for cidr in cidrs:
            run("ip", "addr", "add", cidr, "dev", ifname)
    for ip, mac, ifname in neighbours:
        run("ip", "neigh", "replace", ip, "lladdr", mac, "dev", ifname, "nud", "permanent")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1" if forwarding else "0")


def set_mtu(ifname: str, mtu: int) -> None:
    run("ip", "link", "set", ifname, "mtu", str(mtu))


def set_promisc(ifname: str, on: bool) -> None:
    run("ip", "link", "set", ifname, "promisc", "on" if on else "off")


def router_deploy(interfaces: list[str], mode: str, cache_dir: str) -> dict:
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy

    result = deploy.Router(
        paths("router"), cache_dir, interfaces=interfaces, mode=mode, source=str(SRC / "router" / "router.c"),
        include_dirs=INCLUDE_DIRS,
    ).deploy()
    return {"changed": result["changed"], "program": result["program"]}


def router_read() -> dict:
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import deploy

    return {verdict: c["packets"] for verdict, c in deploy.Router.read_counters(paths("router")).items()}


def vtep_deploy(document: dict, mode: str, backend: str, cache_dir: str) -> dict:
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy

    result = deploy.Vtep(
        paths("vtep"),
        cache_dir,
        document=document,
        mode=mode,
        source=str(SRC / "vtep" / "vtep_xdp.c"),
        include_dirs=INCLUDE_DIRS,
        backend=backend,
        tc_source=str(SRC / "vtep" / "vtep_tc.c"),
    ).deploy()
    return {"changed": result["changed"], "program": result["program"]}


def vtep_drops() -> dict:
    """Frames the VTEP dropped, per port and reason."""
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy

    facts = deploy.Vtep.read_counters(paths("vtep"))
    return {port: c["drops"] for port, c in facts["ports"].items() if c.get("drops")}


def echo_deploy(ifname: str, mode: str, ports: list[int], addresses: list[str], cache_dir: str) -> dict:
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import echo

    p = {
        "interface": ifname, "ports": ports, "addresses": addresses, "template": None, "attach_mode": mode,
        "pin_root": PIN_ROOT, "state_dir": STATE_DIR, "cache_dir": cache_dir, "src_dir": str(SRC),
    }  # fmt: skip
    result = echo.present(p, check_mode=False)
    return {"changed": result["changed"], "counters": result["counters"]}


def echo_read(ifname: str) -> int:
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import echo

    return echo.EchoServer.read_counters(echo.instance_paths(ifname, PIN_ROOT, STATE_DIR))["packets"]


def echo_remove(ifname: str) -> list[str]:
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import echo

    return xp.remove(echo.instance_paths(ifname, PIN_ROOT, STATE_DIR), check_mode=False).steps


def sender_run(ifname: str, mode: str, object_path: str, template: dict, dst_mac: str, count: int) -> dict:
    """Send `count` frames of the template out of ifname as the trafficgen module's sender does: its checks
    (which refuse what cannot send live frames), then the sender with its return counter attached in `mode`."""
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import sender
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt

    sender.check_can_send(ifname, 1, mode)
    expanded = pt.build(template, src_mac=mac_of(ifname), dst_mac=dst_mac)
    with tg.Sender(object_path, expanded, ifname, [0], attach_mode=mode) as running:
        result = running.run(count=count)
    return {"sent": result.sent, "frames": [expanded.frame(k).hex() for k in range(len(expanded.entries))]}


OPS = {f.__name__: f for f in (
    setup, load, remove, xdp_state, set_mtu, set_promisc, counter_deploy, counter_read, filter_deploy, filter_read,
    addresses, router_deploy, router_read, vtep_deploy, vtep_drops, echo_deploy, echo_read, echo_remove, sender_run,
)}  # fmt: skip


def answer(message: dict) -> dict:
    try:
        return {"result": OPS[message["op"]](**message["args"])}
    except Exception as exc:
        chain, cause = [], exc
        while cause is not None:
            chain.append(type(cause).__name__)
            cause = cause.__cause__ or cause.__context__
        traceback.print_exc()  # onto the VM's console, for the log
        return {"error": str(exc), "kind": type(exc).__name__, "chain": chain}


def connect() -> socket.socket:
    """The host listens from before the VM starts; the control link may take a moment to come up here."""
    deadline = time.monotonic() + 30
    while True:
        try:
            conn = socket.create_connection((vmlib.CONTROL_HOST, vmlib.CONTROL_PORT), timeout=5)
            conn.settimeout(None)
            return conn
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main() -> None:
    names = ifname_by_mac()
    control = names[vmlib.CONTROL_MAC]
    run("ip", "addr", "add", f"{vmlib.CONTROL_GUEST}/{vmlib.CONTROL_PREFIX}", "dev", control)
    run("ip", "link", "set", control, "up")
    conn = connect()
    with conn, conn.makefile("r") as lines:
        for line in lines:
            message = json.loads(line)
            if message["op"] == "quit":
                conn.sendall(b'{"result": null}\n')
                return
            conn.sendall(json.dumps(answer(message)).encode() + b"\n")


if __name__ == "__main__":
    main()
