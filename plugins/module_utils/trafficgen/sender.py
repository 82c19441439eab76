# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""The sender as the trafficgen module runs it (mode=send), and stopping one that runs in the background.

run(): the template at each frame size, the checks that refuse before anything changes, then per frame size one
run or a zero-loss search, with each second's sample appended to a file on the host while it runs. A running
sender records its pid (generator.sender_pid_file); stop() ends it by that record, for state=absent and for
teardown (module_utils/instances/records.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import threading

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features, libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import files
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.neighbours import NeighbourError, resolve
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.rfc2544 import (
    Trial,
    check_search_arguments,
    line_rate_pps,
    search_zero_loss,
)

STOP_SECONDS = 30.0  # a sender finishes its current BPF_PROG_RUN call (about 0.5 s) and reports


def compile_source(src_dir: str, cache_dir: str, name: str, check_mode: bool, build_dir: str | None) -> str | None:
    """The object built from <src_dir>/trafficgen/<name>; None in check mode when the sources are not on the host
    yet (the xdp_host role copies them, and in check mode it copied nothing). Raises bpf_build.CompileError."""
    source = os.path.join(src_dir, "trafficgen", name)
    if check_mode and not os.path.isfile(source):
        return None
    path, _built = bpf_build.compile_object(
        source, cache_dir, [os.path.join(src_dir, "include")], build_dir=build_dir
    )
    return path


# ---- the template at each frame size ---------------------------------------------------------------------------


def outer_ip_dst(doc: dict) -> str | None:
    for header in doc["packets"][0]["headers"]:
        if "ipv4" in header:
            return header["ipv4"].get("dst")
        if "ipv6" in header:
            return header["ipv6"].get("dst")
    return None


def resolve_dst_mac(doc: dict, ifname: str) -> str:
    """The next hop's MAC for the template's outer IP destination, from the host's neighbour table (the one use of
    pyroute2 here: without it, the error says so the Ansible way)."""
    address = outer_ip_dst(doc)
    if not address:
        raise tg.TrafficgenError("dst_mac: required: the template has no ethernet.dst and no IP destination")
    try:
        return resolve(address, netdev.ifindex(ifname), 3.0)
    except NeighbourError as exc:
        raise tg.TrafficgenError(f"dst_mac: not given and not resolvable: {exc}") from exc


def expand(doc: dict, ifname: str, src_mac: str | None, dst_mac: str | None, frame_sizes: list[int]):
    """The template at each frame size (its own when none are given), validated. Raises pt.TemplateError naming the
    field, or TrafficgenError about dst_mac."""
    pt.validate(doc)
    src_mac = src_mac or netdev.sysfs_facts(ifname)["mac"]
    outer = doc["packets"][0]["headers"][0].get("ethernet") or {}
    if not dst_mac and "dst" not in outer:
        dst_mac = resolve_dst_mac(doc, ifname)
    docs = [pt.with_frame_size(doc, size) for size in frame_sizes] if frame_sizes else [doc]
    return [pt.build(d, src_mac=src_mac, dst_mac=dst_mac) for d in docs]


def summary(template: pt.Expanded) -> dict:
    return {
        "name": template.name,
        "flows": template.flows,
        "bases": len(template.bases),
        "entries": len(template.entries),
        "frame_sizes": list(template.frame_sizes),
        "udp_dst_ports": list(template.udp_dst_ports),
        "description": template.describe(),
    }


# ---- sending ----------------------------------------------------------------------------------------------------


def sender_cpus(cpus: list[int] | None, threads: int) -> list[int]:
    """The CPUs given, or the first `threads` CPUs this process may use."""
    if cpus:
        return cpus
    allowed = sorted(os.sched_getaffinity(0))
    if not 1 <= threads <= len(allowed):
        raise tg.TrafficgenError(f"threads: {threads} is not in 1..{len(allowed)} (the CPUs this process may use)")
    return allowed[:threads]


def check_run_arguments(p: dict) -> None:
    if not 1 <= p["batch_size"] <= tg.BATCH_MAX:
        raise tg.TrafficgenError(f"batch_size: {p['batch_size']} is not in 1..{tg.BATCH_MAX}")
    if p["search"]:
        try:
            check_search_arguments(
                loss_tolerance=p["loss_tolerance"], resolution=p["resolution"], max_trials=p["max_trials"]
            )
        except ValueError as exc:
            raise tg.TrafficgenError(str(exc)) from exc
    elif p["count"] is None and not p["duration"] > 0:
        raise tg.TrafficgenError("duration: must be more than 0 seconds (or give count)")


def no_xmit_message(ifname: str, environment: dict) -> str:
    if environment["driver"] == "veth":
        peer = environment.get("peer") or "its peer"
        return (
            f"{ifname} cannot transmit XDP frames: its veth peer has no XDP program attached natively (a generic one "
            f"does not count) and no GRO: start the echo server on {peer} first (mode=echo, attach_mode: native), "
            "or attach any XDP program there natively"
        )
    return f"{ifname}: driver {environment['driver']} announces no XDP transmit (ndo-xmit): live frames cannot send"


def check_can_send(ifname: str, threads: int, attach_mode: str) -> tuple[dict, list[str]]:
    """Refuse (TrafficgenError) where this kernel, host or interface cannot send live frames from ifname with the
    return counter attached in attach_mode, before anything changes; return preflight's environment and warnings."""
    try:
        features.require(needs.SENDER, needs.SENDER_VARIANT)
    except features.MissingFeatures as exc:
        raise tg.TrafficgenError(f"this kernel cannot run the sender, nothing was sent: {exc}") from exc
    environment, warnings = tg.preflight(ifname, threads)
    if (problem := tg.generic_send_problem(ifname, environment["driver"], attach_mode)):
        raise tg.TrafficgenError(problem)
    return environment, warnings


def run(p: dict, check_mode: bool, build_dir: str | None = None) -> dict:
    """mode=send, state=present, with the module's parameters `p`: check, then (unless check_mode) send. Returns
    the module result. Raises pt.TemplateError, TrafficgenError or bpf_build.CompileError, all before anything on
    the host changed, or TrafficgenError when sending failed."""
    ifname = p["interface"]
    if not netdev.exists(ifname):
        raise tg.TrafficgenError(f"interface: {ifname} does not exist on this host")
    if p["template"] is None:
        raise tg.TrafficgenError("template: required with mode=send")
    templates = expand(pt.document(p["template"]), ifname, p["src_mac"], p["dst_mac"], p["frame_sizes"] or [])
    cpus = sender_cpus(p["cpus"], p["threads"])
    check_run_arguments(p)
    environment, warnings = check_can_send(ifname, len(cpus), p["attach_mode"])
    busy = libbpf.xdp_query(netdev.ifindex(ifname))
    if busy.prog_id:
        raise tg.TrafficgenError(
            f"interface {ifname} runs XDP program {busy.prog_id}: the sender attaches its return counter there; "
            "detach that program or send from another interface"
        )
    result = {
        "changed": False,
        "environment": environment,
        "template": summary(templates[0]),
        "warnings": warnings,
        "threads": len(cpus),
        "cpus": cpus,
        "host": os.uname().nodename,
        "interface": ifname,
    }
    check_run_dir(p["run_dir"])
    pid_file = tg.sender_pid_file(p["run_dir"], ifname)
    other = tg.running_sender(pid_file)
    if other:
        raise tg.TrafficgenError(f"a sender is already running on {ifname} (pid {other}): stop it with state=absent")
    object_path = compile_source(p["src_dir"], p["cache_dir"], "sender.c", check_mode, build_dir)
    if check_mode:
        return result

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    tg.record_sender(pid_file)
    live_path = tg.sender_stats_file(p["run_dir"], ifname)
    try:
        with tg.Sender(object_path, templates[0], ifname, cpus, p["batch_size"], p["attach_mode"]) as sender:
            transmits = tg.can_transmit_xdp(ifname)  # with the return counter attached, as while sending
            if transmits is not False:
                result["results"] = [run_size(p, sender, t, environment, stop, live_path) for t in templates]
    except (tg.TrafficgenError, libbpf.LibbpfError, ValueError) as exc:
        raise tg.TrafficgenError(f"sending from {ifname} failed: {exc}") from exc
    finally:
        for path in (pid_file, live_path):  # the samples are in the result
            with contextlib.suppress(OSError):
                os.unlink(path)
    if transmits is False:
        raise tg.TrafficgenError(no_xmit_message(ifname, environment))
    result["changed"] = True
    if stop.is_set():
        result["warnings"].append("stopped by SIGTERM before the end: the last results are partial")
    return result


def run_size(
    p: dict, sender: tg.Sender, template: pt.Expanded, environment: dict, stop: threading.Event, live_path: str
) -> dict:
    """One frame size: the search, or one run. While it runs, each second's sample is appended to `live_path`
    (JSON lines), for `tail -f` on the host."""
    sender.load_template(template)
    size = template.frame_sizes[0]
    speed = environment["speed_mbps"]
    out = {"frame_size": size, "line_rate_pps": round(line_rate_pps(speed, size)) if speed else None}
    runs = []
    with files.open_private_append(live_path) as live:

        def on_sample(sample: dict) -> None:
            live.write(json.dumps({"frame_size": size, **sample}) + "\n")
            live.flush()

        def trial(rate: float | None) -> Trial:
            runs.append(sender.run(seconds=p["trial_seconds"], rate_pps=rate, stop=stop, on_sample=on_sample))
            return runs[-1].trial(rate)

        if p["search"]:
            search = search_zero_loss(
                trial,
                loss_tolerance=p["loss_tolerance"],
                resolution=p["resolution"],
                max_trials=p["max_trials"],
                ceiling_pps=out["line_rate_pps"],
            )
            # the interface's own counters (transmit drops among them) over the unpaced trial
            out.update(search.as_dict(), interface=runs[0].interface)
            return out
        seconds = None if p["count"] else p["duration"]
        run = sender.run(seconds=seconds, count=p["count"], rate_pps=p["rate_pps"], stop=stop, on_sample=on_sample)
    out["run"] = run.as_dict()
    out["trial"] = run.trial(p["rate_pps"]).as_dict()
    return out


# ---- stopping a sender ------------------------------------------------------------------------------------------


def check_run_dir(run_dir: str) -> None:
    """The pid files there name the processes stop() signals: another user must not be able to write them."""
    try:
        files.check_trusted("run_dir", run_dir)
    except files.UntrustedPath as exc:
        raise tg.TrafficgenError(str(exc)) from None


def _wait_exit(pidfd: int, timeout: float) -> bool:
    """Whether the process ended within `timeout` seconds (its pidfd turns readable when it does)."""
    return bool(select.select([pidfd], [], [], timeout)[0])


def _stop_process(pid_file: str, pid: int, timeout: float) -> bool:
    """SIGTERM, then SIGKILL after `timeout` seconds, through a pidfd taken while the record still names the process
    (a pidfd follows one process, never a later one with the same pid). False when it had to be killed."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        if tg.running_sender(pid_file) != pid:  # it ended, and the pid went to another process, before the pidfd
            return True
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        if _wait_exit(pidfd, timeout):
            return True
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        _wait_exit(pidfd, 5.0)
        return False
    finally:
        os.close(pidfd)


def stop(run_dir: str, ifname: str, check_mode: bool, timeout: float = STOP_SECONDS) -> tuple[int | None, Changes]:
    """Stop the sender recorded for an interface and remove its records: SIGTERM (it detaches its return counter
    and reports), SIGKILL after `timeout` seconds (the kernel releases the counter with the process). Returns the
    pid of the sender that ran (None: none did) and what changed (nothing when there is no record)."""
    check_run_dir(run_dir)
    pid_file = tg.sender_pid_file(run_dir, ifname)
    changes = Changes(f"sender on {ifname}")
    if not os.path.exists(pid_file):
        return None, changes
    pid = tg.running_sender(pid_file)
    if pid is None:
        changes.add(f"remove stale sender record {pid_file}", before=f"stale sender record {pid_file}")
    else:
        step = f"stop sender on {ifname} (pid {pid})"
        if not check_mode and not _stop_process(pid_file, pid, timeout):
            step += f", killed after {timeout:g} s"
        changes.add(step, key=pid_file, before=f"sender on {ifname} (pid {pid})")
    if not check_mode:
        for path in (pid_file, tg.sender_stats_file(run_dir, ifname)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    return pid, changes
