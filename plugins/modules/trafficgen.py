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
      - The interface to send from, or to echo on. Its name also names the echo server's pins and the sender's files.
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
  addresses:
    description:
      - I(mode=echo), the IP addresses of this host that the echo server answers for. It echoes only frames to the
        interface's MAC address and, per IP family, to an address from the lowest to the highest given here (a
        broadcast or a frame for another host passes). Default, the template's destination addresses.
    type: list
    elements: str
  attach_mode:
    description:
      - XDP mode of the echo server and of the sender's return counter.
      - The sender's frames leave through the driver's XDP transmit (ndo_xdp_xmit). virtio_net, ice, i40e and ixgbe
        set that up only while an XDP program is attached natively, so with I(mode=send) they refuse C(generic)
        before anything changes, naming the driver. A veth transmits XDP frames only when its peer has an XDP
        program attached natively (or GRO on), so run the echo server there with C(native).
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import names
from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import modules
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import echo, sender
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import generator as tg
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import templates as pt


def run(module: AnsibleModule) -> dict:
    p = module.params
    build_dir = module.tmpdir if module.check_mode else None
    if p["mode"] == "echo":
        if p["state"] == "present":
            return echo.present(p, module.check_mode, build_dir)
        paths = echo.instance_paths(p["interface"], p["pin_root"], p["state_dir"])
        counters = echo.EchoServer.read_counters(paths)  # before they go with the pins
        return {**modules.removal(module, paths, "echo server", echo.EchoServer), "counters": counters}
    if p["state"] == "absent":
        stopped, changes = sender.stop(p["run_dir"], p["interface"], module.check_mode)
        return {**changes.result(), "stopped": stopped}
    return sender.run(p, module.check_mode, build_dir)


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
            "addresses": {"type": "list", "elements": "str"},
            "attach_mode": {"type": "str", "choices": ["native", "generic"], "default": "native"},
            "src_dir": {"type": "path", "default": "/var/lib/xdpfleet/src"},
            "run_dir": {"type": "path", "default": "/run/xdpfleet"},
            **modules.HOST_PATHS_ARGUMENT_SPEC,
        },
        mutually_exclusive=[("cpus", "threads")],
        supports_check_mode=True,
    )
    if bad := names.ifname_problem(module.params["interface"]):
        module.fail_json(msg=f"interface: {bad}")
    try:
        result = run(module)
    except pt.TemplateError as exc:
        module.fail_json(msg=f"template: {exc}", problems=exc.errors)
    except (tg.TrafficgenError, bpf_build.CompileError, xp.XdpProgramError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
