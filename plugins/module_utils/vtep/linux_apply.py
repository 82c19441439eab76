# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Running the planned steps through netlink, in order; the first failure stops them."""

from __future__ import annotations

import errno
import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.abi import VXLAN_PORT
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_guards import (
    GUARD_HANDLE,
    GUARD_PRIO,
    TC_INGRESS,
    guard_program,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_host import (
    NTF_MASTER,
    NTF_SELF,
    NTF_STICKY,
    NUD_NOARP,
    NUD_PERMANENT,
    USER_HZ,
    ZERO_MAC,
    LinuxVtepError,
    Remote,
    bridge_name,
    vxlan_name,
)
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.linux_plan import Step

try:
    from pyroute2.netlink.exceptions import NetlinkError
except ImportError:  # linux.py reports the missing library before any step runs

    class NetlinkError(OSError):  # placeholder so `except NetlinkError` stays valid
        pass


def _index(ipr, name: str) -> int:
    found = ipr.link_lookup(ifname=name)
    if not found:
        raise LinuxVtepError(f"{name}: the device disappeared while being configured")
    return found[0]


def _no_ipv6(name: str) -> None:
    """IPv6 off on a device the module made, before it comes up: otherwise the host gives it a link-local address and
    its own stack sends into the VNI (duplicate address detection, MLD reports, and router solicitations with no end:
    router_solicitations is -1 by default, every 4 s doubling up to an hour), frames the endpoints never asked for
    and a VTEP floods. A host without IPv6 (ipv6.disable=1) has no such setting and nothing to turn off."""
    path = f"/proc/sys/net/ipv6/conf/{name}/disable_ipv6"
    if os.path.exists(path):
        with open(path, "w") as f:
            f.write("1")


def _vxlan_add(ipr, a: dict) -> None:
    ipr.link(
        "add",
        ifname=a["name"],
        kind="vxlan",
        vxlan_id=a["vni"],
        vxlan_port=VXLAN_PORT,
        vxlan_local=a["local"],
        vxlan_link=_index(ipr, a["link"]),
        vxlan_learning=1,
        vxlan_ageing=a["ageing"],
        mtu=a["mtu"],
    )  # down until it is a port of its bridge, with its guard (enslave brings it up): a vxlan device of its own
    # would hand every frame it decapsulates up to this host
    _no_ipv6(a["name"])


def _vxlan_fdb(ipr, command: str, vxlan: str, mac: str, r: Remote) -> None:
    """Add or delete one destination of a static entry (or of the all-zeros entry) on a vxlan device."""
    extra = {}
    if r.ifindex:
        extra["NDA_IFINDEX"] = r.ifindex
    if r.port is not None:
        extra["NDA_PORT"] = r.port
    if r.vni is not None:
        extra["NDA_VNI"] = r.vni
    ipr.fdb(
        command,
        ifindex=_index(ipr, vxlan),
        lladdr=mac,
        dst=r.dst,
        state=NUD_PERMANENT | NUD_NOARP,
        flags=NTF_SELF,
        **extra,
    )


def _netlink_code(exc: NetlinkError):
    """The errno a netlink request failed with."""
    return exc.code if hasattr(exc, "code") else exc.args[0]


def _static_set(ipr, a: dict) -> None:
    """A static entry: the vxlan device's destination first (for a remote), then the bridge entry that sends the
    MAC there; each replaces whatever the kernel had learned for the MAC."""
    for r in a["stale"]:
        _vxlan_fdb(ipr, "del", vxlan_name(a["vni"]), a["mac"], r)
    if a["remote"] is not None:
        remote = Remote(dst=a["remote"], ifindex=_index(ipr, a["via"]))
        _vxlan_fdb(ipr, "replace", vxlan_name(a["vni"]), a["mac"], remote)
    ipr.fdb(
        "replace",
        ifindex=_index(ipr, a["port"]),
        lladdr=a["mac"],
        master=_index(ipr, bridge_name(a["vni"])),
        state=NUD_NOARP,
        flags=NTF_MASTER | NTF_STICKY,
    )


def _static_del(ipr, a: dict) -> None:
    try:
        if a["port"] is not None:
            ipr.fdb("del", ifindex=a["port"], lladdr=a["mac"], master=_index(ipr, a["bridge"]), flags=NTF_MASTER)
    except NetlinkError as exc:
        if _netlink_code(exc) != errno.ENOENT:  # gone: its port left the bridge earlier in this run
            raise
    for r in a["stale"]:
        _vxlan_fdb(ipr, "del", a["vxlan"], a["mac"], r)


def _guard_set(ipr, name: str, guard: str) -> None:
    """The guard first on the device's ingress (clsact made when missing); the filter keeps the program loaded."""
    index = _index(ipr, name)
    try:
        ipr.tc("add", "clsact", index)
    except NetlinkError as exc:
        if _netlink_code(exc) != errno.EEXIST:
            raise
    fd = libbpf.prog_load(libbpf.BPF_PROG_TYPE_SCHED_CLS, guard_program(guard), guard)
    try:
        ipr.tc(
            "add-filter",
            "bpf",
            index,
            GUARD_HANDLE,
            parent=TC_INGRESS,
            prio=GUARD_PRIO,
            fd=fd,
            name=guard,
            direct_action=True,
        )
    finally:
        os.close(fd)


def _run_step(ipr, step: Step) -> None:
    a = step.args
    if step.op == "bridge_add":
        ipr.link("add", ifname=a["name"], kind="bridge", br_mcast_snooping=0, br_ageing_time=a["ageing"] * USER_HZ)
        _no_ipv6(a["name"])
        ipr.link("set", index=_index(ipr, a["name"]), state="up")
    elif step.op == "bridge_set":
        index = _index(ipr, a["name"])
        ipr.link("set", index=index, kind="bridge", br_mcast_snooping=0, br_ageing_time=a["ageing"] * USER_HZ)
    elif step.op == "up":
        ipr.link("set", index=_index(ipr, a["name"]), state="up")
    elif step.op == "vxlan_add":
        _vxlan_add(ipr, a)
    elif step.op == "vxlan_recreate":
        ipr.link("del", index=_index(ipr, a["name"]))
        _vxlan_add(ipr, a)
    elif step.op == "vxlan_set":
        index = _index(ipr, a["name"])
        ipr.link(
            "set",
            index=index,
            kind="vxlan",
            vxlan_local=a["local"],
            vxlan_link=_index(ipr, a["link"]),
            vxlan_learning=1,
            vxlan_ageing=a["ageing"],
        )
        ipr.link("set", index=index, mtu=a["mtu"])
    elif step.op == "enslave":
        index = _index(ipr, a["port"])
        ipr.link("set", index=index, master=_index(ipr, bridge_name(a["vni"])))
        ipr.link("set", index=index, state="up")
    elif step.op == "release":
        ipr.link("set", index=_index(ipr, a["port"]), master=0)
    elif step.op == "port_learning":
        ipr.brport("set", index=_index(ipr, a["port"]), learning=1)
    elif step.op == "peer_add":
        _vxlan_fdb(ipr, "append", a["vxlan"], ZERO_MAC, Remote(dst=a["ip"], ifindex=_index(ipr, a["via"])))
    elif step.op == "peer_del":
        _vxlan_fdb(ipr, "del", a["vxlan"], ZERO_MAC, a["r"])
    elif step.op == "static_set":
        _static_set(ipr, a)
    elif step.op == "static_del":
        _static_del(ipr, a)
    elif step.op == "guard_set":
        _guard_set(ipr, a["name"], a["guard"])
    elif step.op == "guard_del":
        g = a["guard"]
        ipr.tc("del-filter", "bpf", _index(ipr, a["name"]), g.handle, parent=TC_INGRESS, prio=g.prio)
    elif step.op == "delete":
        found = ipr.link_lookup(ifname=a["name"])
        if found:
            ipr.link("del", index=found[0])
    elif step.op != "noop":
        raise ValueError(f"unknown step {step.op}")


def _failure(step: Step, exc: Exception) -> str:
    if isinstance(exc, NetlinkError):
        code = _netlink_code(exc)
        return f"{step.line}: netlink failed: {os.strerror(code) if isinstance(code, int) else exc}"
    return str(exc)


def apply(ipr, steps: list[Step]) -> None:
    """Run the steps in order; the first failure stops them (the steps before it stay done) and raises
    LinuxVtepError with every step of the run."""
    for step in steps:
        try:
            _run_step(ipr, step)
        except (NetlinkError, LinuxVtepError) as exc:
            raise LinuxVtepError(_failure(step, exc), changes=[s.line for s in steps]) from None
