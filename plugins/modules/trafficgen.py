#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: trafficgen
short_description: XDP traffic generator, live-frames sender and echo server
version_added: "0.1.0"
description:
  - I(mode=echo) keeps the echo server attached to an interface (C(bpf/trafficgen/echo.c), through a pinned bpf_link
    like M(xdpfleet.fabric.xdp_program)). UDP frames to a destination port in I(ports) go back out with MAC
    addresses, IP addresses and ports swapped; everything else passes. Idempotent; C(state=absent) detaches it and
    returns what it echoed.
  - I(mode=send) sends from an interface with C(BPF_PROG_RUN) in live-frames mode (C(bpf/trafficgen/sender.c)),
    one thread per CPU. Frames come from a template (see I(template)), a few base packets and variation rules
    expanded on the host into diff entries that the XDP program writes onto the base, checksums included, so a
    sweep over many flows costs a few stores per frame.
  - The sender counts the frames that come back on its own interface (the echo server swapped their ports), so
    the loss is sent minus received. It attaches that counter through a bpf_link that only the module's process
    holds, so it is gone when the module ends, however it ends.
  - With I(search=true) it runs, for every frame size, a zero-loss throughput search (RFC 2544 style, a binary
    search on the offered rate with I(loss_tolerance)); otherwise one run of I(duration) seconds or I(count)
    frames, at I(rate_pps) or as fast as possible, with per-second samples.
  - Before anything changes it checks the host and interface and refuses with the fix where live frames cannot
    work (kernel older than 5.18, interface down, a veth whose peer has no XDP program, another XDP program on the
    interface). Run it with C(async) and poll, and stop it with I(state=absent) (the orchestration in role
    C(xdpfleet.fabric.perf_pair) does both).
  - Check mode validates the template, runs the checks and sends nothing.
seealso:
  - name: XDPerf
    description: The XDP traffic generator whose design (base packets and per-frame differences written by XDP,
      live-frames transmit, an echo server) this module follows.
    link: https://github.com/takehaya/xdperf
extends_documentation_fragment:
  - xdpfleet.fabric.host_paths
author:
  - xdpfleet developers (!UNKNOWN)
requirements:
  - Linux 5.18 or newer (BPF_F_TEST_XDP_LIVE_FRAMES), libbpf.so.1, clang, scapy (python3-scapy) on the host
options:
  mode:
    description:
      - C(send) runs the sender; C(echo) manages the echo server.
    type: str
    choices: [send, echo]
    required: true
  interface:
    description:
      - The interface to send from, or to echo on.
    type: str
    required: true
  state:
    description:
      - With I(mode=echo), C(present) attaches the echo server and C(absent) detaches it.
      - With I(mode=send), C(present) sends and C(absent) stops a sender still running on I(interface) (for
        example an C(async) job whose play failed), by the pid it recorded.
    type: str
    choices: [present, absent]
    default: present
  template:
    description:
      - The packet template, as a document (validated by a JSON Schema; every error names its field) or the name
        of a built-in one (C(udp4), C(udp4-64flows), C(udp6), C(udp4-vlan), C(imix), C(vxlan-vni-sweep)).
      - "A document: C(name); C(frame_size) (on-wire size with the 4-byte FCS, RFC 2544); C(packets), a list of
        base packets, each with C(weight) (IMIX) and C(headers), outermost first: C(ethernet), C(vlan), C(ipv4) or
        C(ipv6), C(udp), C(vxlan) and an inner Ethernet frame; C(variations), a list of rules with C(field) (for
        example C(udp.src), C(ipv4.dst), C(vxlan.vni), C(ipv4[1].src) for the inner header) or C(offset) and
        C(size), a C(range) and C(mode) C(sequential) or C(random)."
      - Required with I(mode=send); with I(mode=echo) it gives the default I(ports).
    type: raw
  src_mac:
    description:
      - Source MAC of the outermost Ethernet header where the template leaves it out. Default, the interface's MAC.
    type: str
  dst_mac:
    description:
      - Destination MAC where the template leaves it out. Default, resolved from the neighbour table for the
        template's outer IPv4 destination (as XDPerf's NeighborResolve does).
    type: str
  frame_sizes:
    description:
      - Frame sizes (with FCS) to run the template at, one after the other. Default, the template's own.
    type: list
    elements: int
  duration:
    description:
      - Seconds per run without I(search).
    type: float
    default: 10
  count:
    description:
      - Frames per run without I(search), instead of I(duration).
    type: int
  rate_pps:
    description:
      - Offered rate in frames per second over all threads, without I(search). Default, as fast as possible.
    type: float
  threads:
    description:
      - Sender threads, one per CPU, pinned. The CPUs are I(cpus), or the first I(threads) CPUs this process may use.
    type: int
    default: 1
  cpus:
    description:
      - The CPUs to send from, one thread each. Overrides I(threads).
    type: list
    elements: int
  batch_size:
    description:
      - Frames per live-frames batch (the kernel allows 1 to 256).
    type: int
    default: 64
  search:
    description:
      - Run the zero-loss throughput search for every frame size instead of one run.
    type: bool
    default: false
  loss_tolerance:
    description:
      - Search, the largest loss ratio (lost / sent) that still counts as no loss.
    type: float
    default: 0.0
  resolution:
    description:
      - Search, stop when the bracket around the zero-loss rate is narrower than this fraction of its top.
    type: float
    default: 0.02
  trial_seconds:
    description:
      - Search, seconds per trial.
    type: float
    default: 2
  max_trials:
    description:
      - Search, the most trials per frame size, the first unpaced one included.
    type: int
    default: 10
  ports:
    description:
      - I(mode=echo), the UDP destination ports echoed, C([low, high]). Default, the template's destination ports.
    type: list
    elements: int
  attach_mode:
    description:
      - XDP mode of the echo server and of the sender's return counter.
    type: str
    choices: [native, generic]
    default: native
  src_dir:
    description:
      - Where the C sources are on the host (the M(xdpfleet.fabric.xdp_program) role C(xdp_host) copies them there).
    type: path
    default: /var/lib/xdpfleet/src
  run_dir:
    description:
      - Where a running sender records its pid (C(trafficgen-<interface>.pid)) and appends each second's
        statistics while it runs (C(trafficgen-<interface>.jsonl), one JSON object a line, for C(tail -f)); both
        go when it ends.
    type: path
    default: /run/xdpfleet
"""

EXAMPLES = r"""
- name: Echo UDP test frames back on the receiving server
  xdpfleet.fabric.trafficgen:
    mode: echo
    interface: ens1f0np0
    template: udp4-64flows

- name: 10 s at 1 Mpps, 64 flows, from two CPUs
  xdpfleet.fabric.trafficgen:
    mode: send
    interface: ens1f0np0
    template: udp4-64flows
    dst_mac: "02:00:5e:10:00:02"
    rate_pps: 1000000
    duration: 10
    cpus: [2, 3]

- name: Zero-loss search over a frame-size sweep, in the background
  xdpfleet.fabric.trafficgen:
    mode: send
    interface: ens1f0np0
    template:
      name: udp4-sweep
      packets:
        - headers:
            - ethernet: {}
            - ipv4: {src: 198.51.100.1, dst: 198.51.100.2}
            - udp: {src: 1024, dst: 9}
      variations:
        - {field: udp.src, range: [1024, 1087]}
    frame_sizes: [64, 128, 256, 512, 1024, 1280, 1518]
    search: true
    threads: 8
  async: 3600
  poll: 0
  register: sender_job
"""

RETURN = r"""
results:
  description:
    - I(mode=send), one item per frame size. With I(search), C(max) (the unpaced trial), C(zero_loss) (the best
      trial within I(loss_tolerance), or null) and C(trials); without, C(run) with per-second C(samples)
      (C(tx_pps), C(rx_pps), C(tx_bps), C(rx_bps) on the wire, C(tx_pps_per_cpu)), the interface's counter changes,
      and C(trial).
  returned: mode=send and state=present
  type: list
  elements: dict
  sample:
    - frame_size: 64
      line_rate_pps: 14880952
      max: {rate_pps: null, seconds: 2.0, sent: 14000000, received: 9000000, loss_ratio: 0.357}
      zero_loss: {rate_pps: 4400000, seconds: 2.0, sent: 8800000, received: 8800000, loss_ratio: 0.0}
environment:
  description: Kernel, command line, driver, NIC, speed, queues, channels and CPUs of the interface's host.
  returned: mode=send, and mode=echo with state=present
  type: dict
template:
  description: The expanded template (name, flows, base packets, entries, description).
  returned: mode=send and state=present
  type: dict
counters:
  description: I(mode=echo), frames and bytes echoed since the echo server was attached.
  returned: mode=echo
  type: dict
  sample: {packets: 8800000, bytes: 528000000}
warnings:
  description: What works but is slow (for example a single-queue veth with several sender threads).
  returned: always
  type: list
"""

import contextlib
import json
import os
import signal
import threading

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.btf_layout import TypedMap
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host.neighbours import NeighbourError, resolve
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.rfc2544 import (
    Trial,
    check_search_arguments,
    line_rate_pps,
    search_zero_loss,
)


def template_doc(module, required: bool) -> dict | None:
    template = module.params["template"]
    if template is None:
        if required:
            module.fail_json(msg="template: required with mode=send")
        return None
    if isinstance(template, str):
        if template not in pt.EXAMPLES:
            module.fail_json(msg=f"template: no built-in template {template!r} (there are: {', '.join(pt.EXAMPLES)})")
        return pt.EXAMPLES[template]
    if not isinstance(template, dict):
        module.fail_json(msg="template: must be a template document (a dict) or the name of a built-in one")
    return template


def outer_ipv4_dst(doc: dict) -> str | None:
    for header in doc["packets"][0]["headers"]:
        if "ipv4" in header:
            return header["ipv4"].get("dst")
        if "ipv6" in header:
            return header["ipv6"].get("dst")
    return None


def expand(module, doc: dict, frame_sizes: list[int]) -> list[pt.Expanded]:
    """The template at each frame size, validated; fails the module naming the field."""
    iface = module.params["interface"]
    src_mac = module.params["src_mac"] or netdev.sysfs_facts(iface)["mac"]
    dst_mac = module.params["dst_mac"]
    try:
        pt.validate(doc)
        outer = doc["packets"][0]["headers"][0].get("ethernet") or {}
        if not dst_mac and "dst" not in outer:
            address = outer_ipv4_dst(doc)
            if not address:
                module.fail_json(msg="dst_mac: required: the template has no ethernet.dst and no IP destination")
            try:
                dst_mac = resolve(address, netdev.ifindex(iface), 3.0)
            except NeighbourError as exc:
                module.fail_json(msg=f"dst_mac: not given and not resolvable: {exc}")
        docs = [pt.with_frame_size(doc, size) for size in frame_sizes] if frame_sizes else [doc]
        return [pt.build(d, src_mac=src_mac, dst_mac=dst_mac) for d in docs]
    except pt.TemplateError as exc:
        module.fail_json(msg=f"template: {exc}", problems=exc.errors)


def sender_cpus(module) -> list[int]:
    if module.params["cpus"]:
        return module.params["cpus"]
    allowed = sorted(os.sched_getaffinity(0))
    threads = module.params["threads"]
    if not 1 <= threads <= len(allowed):
        module.fail_json(msg=f"threads: {threads} is not in 1..{len(allowed)} (the CPUs this process may use)")
    return allowed[:threads]


def pid_file(module) -> str:
    return tg.sender_pid_file(module.params["run_dir"], module.params["interface"])


def live_stats_file(module) -> str:
    return tg.sender_stats_file(module.params["run_dir"], module.params["interface"])


def compile_source(module, name: str) -> str | None:
    """The object built from bpf/trafficgen/<name>; None in check mode when the sources are not on the host yet
    (the xdp_host role copies them, and in check mode it copied nothing)."""
    source = os.path.join(module.params["src_dir"], "trafficgen", name)
    if module.check_mode and not os.path.isfile(source):
        return None
    try:
        path, _built = bpf_build.compile_object(
            source,
            module.params["cache_dir"],
            [os.path.join(module.params["src_dir"], "include")],
            build_dir=module.tmpdir if module.check_mode else None,
        )
    except bpf_build.CompileError as exc:
        module.fail_json(msg=str(exc))
    return path


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


def send(module) -> dict:
    p = module.params
    iface = p["interface"]
    if not netdev.exists(iface):
        module.fail_json(msg=f"interface: {iface} does not exist on this host")
    templates = expand(module, template_doc(module, required=True), p["frame_sizes"] or [])
    cpus = sender_cpus(module)
    if not 1 <= p["batch_size"] <= tg.BATCH_MAX:
        module.fail_json(msg=f"batch_size: {p['batch_size']} is not in 1..{tg.BATCH_MAX}")
    if p["search"]:
        try:
            check_search_arguments(
                loss_tolerance=p["loss_tolerance"], resolution=p["resolution"], max_trials=p["max_trials"]
            )
        except ValueError as exc:
            module.fail_json(msg=str(exc))
    elif p["count"] is None and not p["duration"] > 0:
        module.fail_json(msg="duration: must be more than 0 seconds (or give count)")
    try:
        environment, warnings = tg.preflight(iface, len(cpus))
    except tg.TrafficgenError as exc:
        module.fail_json(msg=str(exc))
    busy = libbpf.xdp_query(netdev.ifindex(iface))
    if busy.prog_id:
        module.fail_json(
            msg=f"interface {iface} runs XDP program {busy.prog_id}: the sender attaches its return counter there; "
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
        "interface": iface,
    }
    other = tg.running_sender(pid_file(module))
    if other:
        module.fail_json(msg=f"a sender is already running on {iface} (pid {other}): stop it with state=absent")
    object_path = compile_source(module, "sender.c")
    if module.check_mode:
        return result

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    os.makedirs(p["run_dir"], exist_ok=True)
    with open(pid_file(module), "w") as f:
        f.write(f"{os.getpid()}\n")
    try:
        with tg.Sender(object_path, templates[0], iface, cpus, p["batch_size"], p["attach_mode"]) as sender:
            if tg.can_transmit_xdp(iface) is False:
                module.fail_json(msg=no_xmit_message(iface, environment))
            result["results"] = [run_size(module, sender, t, environment, stop) for t in templates]
    except (tg.TrafficgenError, libbpf.LibbpfError, ValueError) as exc:
        module.fail_json(msg=f"sending from {iface} failed: {exc}")
    finally:
        for path in (pid_file(module), live_stats_file(module)):  # the samples are in the result
            with contextlib.suppress(OSError):
                os.unlink(path)
    result["changed"] = True
    if stop.is_set():
        result["warnings"].append("stopped by SIGTERM before the end: the last results are partial")
    return result


def no_xmit_message(iface: str, environment: dict) -> str:
    if environment["driver"] == "veth":
        peer = environment.get("peer") or "its peer"
        return (
            f"{iface} cannot transmit XDP frames: its veth peer has no XDP program (and no GRO): start the echo "
            f"server on {peer} first (mode=echo), or attach any XDP program there"
        )
    return f"{iface}: driver {environment['driver']} announces no XDP transmit (ndo-xmit): live frames cannot send"


def run_size(module, sender: tg.Sender, template: pt.Expanded, environment: dict, stop: threading.Event) -> dict:
    """One frame size: the search, or one run. While it runs, each second's sample is appended to the live
    statistics file (JSON lines), for `tail -f` on the host."""
    p = module.params
    sender.load_template(template)
    size = template.frame_sizes[0]
    speed = environment["speed_mbps"]
    out = {"frame_size": size, "line_rate_pps": round(line_rate_pps(speed, size)) if speed else None}
    runs = []
    with open(live_stats_file(module), "a") as live:

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


# ---- echo -------------------------------------------------------------------------------------------------------


def echo_counters(maps: dict) -> dict:
    values = TypedMap(maps["echo_counters"], tg.ECHO_LAYOUTS[0]).get(0) or []
    return {"packets": sum(v.packets for v in values), "bytes": sum(v.bytes for v in values)}


def read_echo_counters(paths: xp.InstancePaths) -> dict | None:
    try:
        with libbpf.PinnedMap(paths.map_pin("echo_counters")) as pinned:
            return echo_counters({"echo_counters": pinned})
    except libbpf.LibbpfError:
        return None


def echo_ports(module) -> tuple[int, int]:
    ports = module.params["ports"]
    if ports:
        if len(ports) != 2 or not 0 <= ports[0] <= ports[1] <= 65535:
            module.fail_json(msg=f"ports: {ports} must be [low, high] with 0 <= low <= high <= 65535")
        return ports[0], ports[1]
    doc = template_doc(module, required=False)
    if doc is None:
        module.fail_json(msg="ports: required with mode=echo when no template is given")
    try:
        pt.validate(doc)
    except pt.TemplateError as exc:
        module.fail_json(msg=f"template: {exc}", problems=exc.errors)
    # The destination ports are in the headers the template declares; MACs do not matter here.
    return pt.build(doc, src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02").udp_dst_ports


def echo(module) -> dict:
    p = module.params
    paths = xp.InstancePaths(f"tg-echo-{p['interface']}", p["pin_root"], p["state_dir"])
    if p["state"] == "absent":
        counters = read_echo_counters(paths)
        return {**xp.removal(module, paths, "echo server"), "counters": counters}
    iface = p["interface"]
    if not netdev.exists(iface):
        module.fail_json(msg=f"interface: {iface} does not exist on this host")
    lo, hi = echo_ports(module)
    try:
        environment, _warnings = tg.preflight(iface, 1)
    except tg.TrafficgenError as exc:
        module.fail_json(msg=str(exc))
    if (no_bpffs := xp.bpffs_problem()):
        module.fail_json(msg=no_bpffs)
    result = {"ports": [lo, hi], "environment": environment, "host": os.uname().nodename, "interface": iface}
    object_path = compile_source(module, "echo.c")
    if object_path is None:
        changes = [f"{iface}: attach the echo server (ports {lo}-{hi})"]
        return {**result, **changes_and_diff(paths, changes), "counters": None}
    try:
        done = xp.converge(
            paths,
            object_path,
            "xdp_echo",
            p["attach_mode"],
            {"port_lo": lo, "port_hi": hi},
            [iface],
            os.path.join(p["src_dir"], "trafficgen", "echo.c"),
            build={"include_dirs": [os.path.join(p["src_dir"], "include")], "defines": {}},
            layouts=tg.ECHO_LAYOUTS,
            check_mode=module.check_mode,
        )
    except xp.XdpProgramError as exc:
        module.fail_json(msg=str(exc))
    changes = [f"{s.ifname}: {s.action} {s.after or s.before}" for s in done.plan.steps if s.action != "unchanged"]
    return {**result, **changes_and_diff(paths, changes), "counters": read_echo_counters(paths)}


def changes_and_diff(paths: xp.InstancePaths, changes: list[str]) -> dict:
    out = {"changed": bool(changes), "changes": changes}
    if changes:
        out["diff"] = {
            "before_header": f"echo {paths.name}",
            "after_header": f"echo {paths.name}",
            "before": "",
            "after": "\n".join(changes) + "\n",
        }
    return out


def stop_sender(module) -> dict:
    path = pid_file(module)
    pid = tg.running_sender(path)
    if pid is None:
        with contextlib.suppress(FileNotFoundError):
            if not module.check_mode:
                os.unlink(path)  # a stale record: its sender is gone
        return {"changed": False, "stopped": None}
    if not module.check_mode:
        os.kill(pid, signal.SIGTERM)
    return {"changed": True, "stopped": pid}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["send", "echo"], "required": True},
            "interface": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "template": {"type": "raw"},
            "src_mac": {"type": "str"},
            "dst_mac": {"type": "str"},
            "frame_sizes": {"type": "list", "elements": "int"},
            "duration": {"type": "float", "default": 10},
            "count": {"type": "int"},
            "rate_pps": {"type": "float"},
            "threads": {"type": "int", "default": 1},
            "cpus": {"type": "list", "elements": "int"},
            "batch_size": {"type": "int", "default": 64},
            "search": {"type": "bool", "default": False},
            "loss_tolerance": {"type": "float", "default": 0.0},
            "resolution": {"type": "float", "default": 0.02},
            "trial_seconds": {"type": "float", "default": 2},
            "max_trials": {"type": "int", "default": 10},
            "ports": {"type": "list", "elements": "int"},
            "attach_mode": {"type": "str", "choices": ["native", "generic"], "default": "native"},
            "src_dir": {"type": "path", "default": "/var/lib/xdpfleet/src"},
            "run_dir": {"type": "path", "default": "/run/xdpfleet"},
            **xp.HOST_PATHS_ARGUMENT_SPEC,
        },
        mutually_exclusive=[("cpus", "threads")],
        supports_check_mode=True,
    )
    if module.params["mode"] == "echo":
        module.exit_json(**echo(module))
    if module.params["state"] == "absent":
        module.exit_json(**stop_sender(module))
    module.exit_json(**send(module))


if __name__ == "__main__":
    main()
