# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Driver profiles: what a driver calls its queues and queue IRQs, and the documented defaults xdpfleet applies to its
NICs (ice, mlx5_core, virtio_net, veth) unless the user's settings override them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning.nic_ethtool import TuningError


@dataclass(frozen=True)
class Profile:
    """What a driver calls its queues and queue IRQs, and the defaults xdpfleet applies unless the user overrides.

    irq_pattern is a regular expression over /proc/interrupts names with {ifname} and {bus} filled in."""

    name: str
    channels: str  # "combined" or "rx_tx": the keys its queues are set with
    irq_pattern: str | None
    defaults: dict = field(default_factory=dict)
    notes: str = ""


PROFILES = {
    p.name: p
    for p in (
        Profile(
            "ice",
            "combined",
            r"^ice-{ifname}-TxRx-\d+(-\d+)?$",  # in-tree: TxRx-N; out-of-tree ice 1.16: TxRx-N-M
            {"channels": {"combined": "numa_local"}, "irq_affinity": "numa_local"},
            "Intel E810. One queue pair per NUMA-local core, each queue's IRQ on its own core. ice has no LRO; XDP "
            "gets its own TX queue per CPU. Add iommu=pt to the kernel command line (XDPerf: 42.3 -> 115.8 Mpps).",
        ),
        Profile(
            "mlx5_core",
            "combined",
            r"^mlx5_comp\d+@pci:{bus}$",
            {
                "channels": {"combined": "numa_local"},
                "features": {"large-receive-offload": False},
                "irq_affinity": "numa_local",
            },
            "NVIDIA ConnectX-4 and later. LRO off (XDP refuses to attach with it on). XDP_TX and redirect use the "
            "send queue of the CPU they run on, so keep the senders' CPUs below the channel count.",
        ),
        Profile(
            "virtio_net",
            "combined",
            r"^virtio\d+-(input|output)\.\d+$",
            {"channels": {"combined": "max"}, "features": {"rx-gro-hw": False}},
            "virtio-net in a VM. Native XDP needs spare queue pairs for its TX queues (so all of them) and the "
            "device's guest offloads off (rx-gro-hw).",
        ),
        Profile(
            "veth",
            "rx_tx",
            None,
            {},
            "veth: rx/tx channels up to the counts the pair was created with (numrxqueues/numtxqueues), no rings, no "
            "coalescing, no IRQs. With XDP on both ends, rx must stay at or above the peer's tx.",
        ),
    )
}
NO_PROFILE = Profile("none", "combined", None)


def profile_for(name: str, driver: str | None) -> Profile:
    if name == "none":
        return NO_PROFILE
    if name == "auto":
        return PROFILES.get(driver or "", NO_PROFILE)
    if name not in PROFILES:
        raise TuningError([f"profile: unknown profile {name!r} (known: auto, none, {', '.join(PROFILES)})"])
    return PROFILES[name]
