#!/usr/bin/python
# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: xdp_probe
short_description: Probe a host and its interfaces for XDP and live-frames (BPF_PROG_RUN) transmit support
version_added: "0.1.0"
description:
  - Reports, as facts under C(xdpfleet_probe), what C(xdperf probe) tells about a host and its interfaces.
  - "Host: kernel release and version, kernel BTF (C(/sys/kernel/btf/vmlinux)), bpffs mounted at C(/sys/fs/bpf),
    the libbpf version, the number of possible CPUs, and whether BPF_PROG_RUN with BPF_F_TEST_XDP_LIVE_FRAMES
    works (kernel 5.18 or newer, and one real call with a DROP program, which sends nothing)."
  - "Per interface: ifindex, driver, driver and firmware version, bus info, MTU, MAC, operstate, rx/tx queue
    counts, ethtool channels, the XDP features the driver announces now (netdev netlink, kernel 6.3+), the
    veth peer, counters, and the XDP program attached now (mode, id, name, tag)."
  - "Optional tests change the interface for a moment and are off by default, because attaching XDP on a real
    NIC (ice, mlx5) can reset its rings and flap the link: I(attach_test) and I(live_frames_test)."
  - C(problems) lists human-readable fixes for everything found missing.
  - The probe's XDP programs are built from raw BPF instructions in Python and loaded through libbpf; the host
    needs no compiler, kernel headers or object files, only C(libbpf.so.1).
  - The probe never changes anything persistent and always reports C(changed=false).
author:
  - xdpfleet developers (!UNKNOWN)
options:
  interfaces:
    description:
      - Names of the interfaces to probe, in the network namespace the module runs in.
      - Default is every interface of that namespace except loopback.
      - An unknown name fails the task before anything runs.
    type: list
    elements: str
  attach_test:
    description:
      - Attach a PASS program through bpf_link in native and in generic mode and detach it at once, to tell
        whether each mode works.
      - "Skipped with reason C(busy: program N attached) when the interface already has an XDP program; an
        existing program is never disturbed."
      - On a real NIC a native attach can reset its rings (a short link flap).
    type: bool
    default: false
  live_frames_test:
    description:
      - Send ONE real frame out of the interface with BPF_PROG_RUN in live-frames mode and an XDP_TX program, and
        check the interface's counters (XDP transmit counters of C(ethtool -S), else C(tx_packets)) to see it left.
      - "The frame: broadcast destination, the interface's MAC as source, ethertype 0x88B5 (IEEE local
        experimental), 60 bytes."
      - When the interface has no XDP program, a PASS program is attached natively for the duration of the send
        (drivers such as ice and mlx5 set up their XDP transmit rings only while a program is attached).
      - A veth transmits XDP frames only while its peer has a native XDP program or GRO enabled.
    type: bool
    default: false
  timeout:
    description:
      - Seconds to wait for the interface's counters to show the live-frames test frame.
    type: float
    default: 2.0
notes:
  - Runs as root (CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN to read programs by id).
  - In check mode the attach and live-frames tests are skipped and C(tests_skipped) says so; everything else is
    read as usual.
  - BPF program ids are global to the machine, the interfaces are those of the module's network namespace.
requirements:
  - Linux with libbpf.so.1 (libbpf 1.0 or newer).
seealso:
  - name: XDPerf
    description: The traffic generator whose probe subcommand this module follows.
    link: https://github.com/takehaya/xdperf
attributes:
  check_mode:
    support: full
    description: The attach and live-frames tests are skipped in check mode.
  diff_mode:
    support: none
    description: The probe changes nothing, so there is nothing to diff.
"""

EXAMPLES = r"""
- name: Probe every interface (read only)
  xdpfleet.fabric.xdp_probe:

- name: Probe the test NIC, including attach and one live-frames frame
  xdpfleet.fabric.xdp_probe:
    interfaces: [enp138s0f0np0]
    attach_test: true
    live_frames_test: true

- name: Refuse hosts that cannot send with live frames
  ansible.builtin.assert:
    that:
      - ansible_facts.xdpfleet_probe.live_frames.supported
      - ansible_facts.xdpfleet_probe.interfaces['enp138s0f0np0'].live_frames_test.ok
    fail_msg: "{{ ansible_facts.xdpfleet_probe.problems | join('; ') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts set by the probe.
  returned: always
  type: dict
  contains:
    xdpfleet_probe:
      description: What the host and its interfaces support.
      returned: always
      type: dict
      contains:
        kernel:
          description: Kernel C(release), C(version) and C(version_tuple) (major, minor, patch).
          type: dict
          sample: {release: 6.18.44, version: "#1 SMP PREEMPT_DYNAMIC", version_tuple: [6, 18, 44]}
        kernel_btf:
          description: Whether C(/sys/kernel/btf/vmlinux) exists.
          type: bool
        bpffs:
          description: C(path), C(mounted) (a bpf filesystem is the last mount on the path) and C(fstype).
          type: dict
          sample: {path: /sys/fs/bpf, mounted: true, fstype: bpf}
        libbpf_version:
          description: Version of the libbpf.so.1 in use; null when it cannot be loaded.
          type: str
          sample: "1.1"
        possible_cpus:
          description: Number of possible CPUs (per-CPU map values have this many slots).
          type: int
        live_frames:
          description:
            - C(supported), C(kernel_ok), and the result of one live-frames BPF_PROG_RUN with a DROP program
              (C(ok), C(error)).
            - C(kernel_ok) is what the kernel's own BTF says (BPF_F_TEST_XDP_LIVE_FRAMES, Linux 5.18, backports
              included), not its version number; null when the kernel has no BTF.
          type: dict
          sample: {supported: true, kernel_ok: true, ok: true, error: null}
        interfaces:
          description:
            - By name. Each has C(name), C(ifindex), C(driver), C(driver_version), C(firmware_version),
              C(bus_info), C(mtu), C(mac), C(operstate), C(iflink), C(queues) (C(rx), C(tx)), C(channels) (null
              when the driver does not report them), C(statistics), C(errors) (ethtool calls that failed),
              C(peer) (veth only, C(ifindex) and C(name) when the peer is in this namespace), C(xdp_features)
              (C(flags), C(mask), C(zc_max_segs); null before kernel 6.3), C(xdp) (C(mode) none, native, generic,
              offload or multi, C(prog_id), C(drv_prog_id), C(skb_prog_id), C(programs) with C(id), C(mode),
              C(name), C(tag)), C(xdp_before_skb), C(attach_test) and C(live_frames_test).
            - "C(xdp_before_skb): per XDP mode (C(native), C(generic)), whether XDP runs on frames from the wire
              before the kernel builds an skb, the only place where dropping in XDP saves work over tc: C(when) is
              C(always) (native XDP in a driver that runs it on the received buffer), C(xdp_frames_only) (veth:
              only frames that arrive as XDP frames, redirected, XDP_TX or live frames; what a socket sends is an
              skb already) or C(never) (generic mode, or a driver without native XDP), and C(why)."
            - "C(attach_test): null when not asked, else C(native) and C(generic), each C(ok), C(error)
              (C(<call>: <errno meaning>)), C(skipped) and, when skipped, C(reason)."
            - "C(live_frames_test): null when not asked, else C(ok), C(error), C(counters) (the counters that
              moved and by how much), C(helper_program) (a PASS program was attached for the send)."
          type: dict
        bpf_features:
          description:
            - "What the running kernel offers BPF programs, read from its own BTF (C(/sys/kernel/btf/vmlinux)), so
              backports count and the version number does not: C(helpers) (enum bpf_func_id, as C names such as
              bpf_fib_lookup), C(map_types), C(prog_types), C(attach_types), C(link_types) (their enumerators),
              C(kfuncs) (the functions tagged bpf_kfunc, where the kernel tags them: C(kfuncs_tagged)),
              C(functions) (how many FUNC records the BTF has: kfunc externs resolve against them) and C(source)."
            - Null when the kernel has no BTF (C(problems) says so).
          type: dict
          sample: {helpers: [bpf_fib_lookup, bpf_redirect_map], map_types: [BPF_MAP_TYPE_DEVMAP_HASH],
                   attach_types: [BPF_TCX_INGRESS, BPF_XDP], kfuncs: [bpf_iter_num_new], kfuncs_tagged: true,
                   functions: 56198, source: /sys/kernel/btf/vmlinux}
        data_planes:
          description:
            - "Per data plane (counter, filter, router, sender, echo server, vtep) and variant (C(hook xdp),
              C(hook tc), C(backend xdp), C(backend tc), C(live frames)): C(supported), and C(missing), each
              missing feature with its first mainline Linux version and what needs it. The modules refuse the
              same variants, with the same words, before they change anything."
            - Null when the kernel has no BTF.
          type: dict
          sample:
            vtep:
              backend xdp: {supported: true, missing: []}
              backend tc:
                supported: false
                missing: ["kfunc bpf_iter_num_new (open-coded iterators, Linux 6.4) for program vtep_replicate"]
        tests_skipped:
          description: Why requested tests did not run (check mode), else null.
          type: str
        problems:
          description: Human-readable fixes for what is missing, reusable by the traffic generator.
          type: list
          elements: str
          sample:
            - "bpffs not mounted at /sys/fs/bpf: mount -t bpf bpf /sys/fs/bpf (pinned maps and links need it)"
            - "veth0: veth peer needs an XDP program or GRO to receive XDP_TX frames (attach a native XDP program
              to veth1, or `ethtool -K veth1 gro on`)"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import needs as filter_needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import netdev
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import probe as xdp_probe
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import needs as router_needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import needs as tg_needs
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import needs as vtep_needs

DATA_PLANES = [
    features.COUNTER,
    filter_needs.NEEDS,
    router_needs.NEEDS,
    tg_needs.SENDER,
    tg_needs.ECHO,
    vtep_needs.NEEDS,
]


def feature_facts(facts: dict) -> None:
    """The kernel's BPF features and what each data plane lacks, into the probe's facts."""
    try:
        kernel = features.KernelFeatures.from_host()
    except (features.KernelBtfMissing, features.BtfError) as exc:
        facts.update(bpf_features=None, data_planes=None)
        facts["problems"].append(f"kernel: {exc}")
        return
    facts["bpf_features"] = features.summary(kernel)
    facts["data_planes"] = features.support(DATA_PLANES, kernel)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "interfaces": {"type": "list", "elements": "str"},
            "attach_test": {"type": "bool", "default": False},
            "live_frames_test": {"type": "bool", "default": False},
            "timeout": {"type": "float", "default": xdp_probe.DEFAULT_TIMEOUT},
        },
        supports_check_mode=True,
    )
    names = module.params["interfaces"]
    if names is not None:
        missing = xdp_probe.unknown_interfaces(names)
        if missing:
            have = ", ".join(netdev.list_interfaces(include_loopback=True)) or "none"
            module.fail_json(
                msg=f"interfaces: no interface named {', '.join(repr(n) for n in missing)} in this network "
                f"namespace (it has: {have})",
                changed=False,
            )
    if module.params["timeout"] <= 0:
        module.fail_json(msg="timeout: must be greater than 0", changed=False)
    facts = xdp_probe.probe(
        names,
        attach_test=module.params["attach_test"],
        live_frames_test=module.params["live_frames_test"],
        check_mode=module.check_mode,
        timeout=module.params["timeout"],
    )
    feature_facts(facts)
    module.exit_json(changed=False, ansible_facts={"xdpfleet_probe": facts})


if __name__ == "__main__":
    main()
