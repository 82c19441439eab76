"""nic_tuning's parsers, driver profiles and plans, on ethtool outputs recorded from ice, mlx5_core and veth
(tests/unit/fixtures/ethtool/SOURCES.md says where each came from)."""

from pathlib import Path

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common.changes import Changes
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import nic as nt
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import nic_ethtool as ne
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import nic_plan as npl
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import nic_profiles as npf
from ansible_collections.xdpfleet.fabric.plugins.module_utils.tuning import nic_read as nr

FIXTURES = Path(__file__).parent / "fixtures" / "ethtool"


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text()


def current(driver: str, **overrides) -> nr.Current:
    """A Current built from the recorded outputs of one driver (what read_current would have parsed)."""
    files = {p.stem for p in FIXTURES.glob("*.txt")}

    def parsed(what: str, parse):
        return parse(fixture(f"{driver}-{what}")) if f"{driver}-{what}" in files else None

    values = {
        "ifname": "eth0",
        "driver": ne.parse_driver(fixture(f"{driver}-i")),
        "channels": parsed("l", ne.parse_channels),
        "rings": parsed("g", ne.parse_rings),
        "features": parsed("k", ne.parse_features) or {},
        "coalesce": parsed("c", ne.parse_coalesce),
        "mtu": 1500,
        "mtu_range": (68, 9978),
        "irqs": {},
    }
    return nr.Current(**{**values, **overrides})


def test_channels_of_ice_mlx5_and_veth():
    assert ne.parse_channels(fixture("ice-l")) == {
        "max": {"rx": 16, "tx": 16, "other": 1, "combined": 16},
        "current": {"rx": 0, "tx": 0, "other": 1, "combined": 4},
    }
    # Older ethtool prints 0 for a kind of channel the driver lacks, netlink ethtool n/a (None); tabs or spaces.
    assert ne.parse_channels(fixture("mlx5_core-l"))["max"] == {"rx": 0, "tx": 0, "other": 0, "combined": 63}
    assert ne.parse_channels(fixture("mlx5_core-l-2"))["max"]["rx"] is None
    assert ne.parse_channels(fixture("veth-l")) == {
        "max": {"rx": 4, "tx": 4, "other": None, "combined": None},
        "current": {"rx": 4, "tx": 4, "other": None, "combined": None},
    }


def test_rings_old_and_new_ethtool_layouts():
    assert ne.parse_rings(fixture("ice-g"))["max"] == {"rx": 8160, "rx-mini": None, "rx-jumbo": None, "tx": 8160}
    rings = ne.parse_rings(fixture("mlx5_core-g"))  # the newer layout adds RX Buf Len, CQE Size, TX Push, ...
    assert rings == {
        "max": {"rx": 8192, "rx-mini": None, "rx-jumbo": None, "tx": 8192},
        "current": {"rx": 1024, "rx-mini": None, "rx-jumbo": None, "tx": 1024},
    }


def test_features_coalesce_and_driver_info():
    mlx5 = ne.parse_features(fixture("mlx5_core-k"))
    assert mlx5["rx-vlan-stag-filter"] == {"on": True, "fixed": True}
    assert mlx5["rx-vlan-offload"]["fixed"] is False
    assert "tx-checksum-ip-generic" in mlx5, "indented sub-features are features too"
    veth = ne.parse_features(fixture("veth-k"))
    assert veth["large-receive-offload"] == {"on": False, "fixed": True}
    assert veth["generic-receive-offload"] == {"on": False, "fixed": False}

    coalesce = ne.parse_coalesce(fixture("mlx5_core-c"))
    assert coalesce["adaptive-rx"] is True and coalesce["adaptive-tx"] is True
    assert coalesce["rx-usecs"] == 8 and coalesce["tx-frames"] == 128
    assert "stats-block-usecs" not in coalesce and "cqe-mode-rx" not in coalesce, "n/a and unknown lines are left out"

    assert ne.parse_driver(fixture("ice-i"))["driver"] == "ice"
    assert ne.parse_driver(fixture("mlx5_core-i-2"))["driver"] == "mlx5_core"


def test_profiles_are_picked_by_driver_and_merged_under_the_users_settings():
    assert npf.profile_for("auto", "ice").name == "ice"
    assert npf.profile_for("auto", "mlx5_core").name == "mlx5_core"
    assert npf.profile_for("auto", "r8169").name == "none"
    with pytest.raises(nt.TuningError, match="profile: unknown profile 'cx7'"):
        npf.profile_for("cx7", "mlx5_core")
    mlx5 = npf.PROFILES["mlx5_core"]
    merged = npl.merged({"features": {"rxvlan": False}, "channels": {"combined": 8}}, mlx5)
    assert merged["features"] == {"large-receive-offload": False, "rxvlan": False}
    assert merged["channels"] == {"combined": 8}, "the user's count wins over numa_local"
    assert merged["irq_affinity"] == "numa_local"
    assert npl.merged({"mtu": 9000}, npf.NO_PROFILE) == {"mtu": 9000}


def test_resolve_max_and_numbers_on_recorded_nics():
    ice = current("ice")
    wanted = npl.resolve(
        {"rings": {"rx": "max", "tx": 2048}, "channels": {"combined": "max"}}, ice, npf.NO_PROFILE, "interfaces[0]"
    )
    assert wanted == {"rings": {"rx": 8160, "tx": 2048}, "channels": {"combined": 16}}
    changes = npl.plan(ice, wanted)
    assert [c.words("eth0") for c in changes] == [
        "eth0: channels combined 4 -> 16",
        "eth0: rings rx 4096 -> 8160",
        "eth0: rings tx 4096 -> 2048",
    ]


@pytest.mark.parametrize(
    ("driver", "spec", "message"),
    [
        ("ice", {"rings": {"rx": 9000}}, "interfaces[0].rings.rx: 9000 is more than the maximum 8160"),
        ("ice", {"channels": {"combined": 17}}, "interfaces[0].channels.combined: 17 is more than the maximum 16"),
        ("mlx5_core", {"channels": {"rx": 2}}, "interfaces[0].channels.rx: driver mlx5_core does not have rx"),
        ("ice", {"channels": {"queues": 2}}, "interfaces[0].channels.queues: unknown"),
        ("ice", {"rings": {"rx": "lots"}}, "interfaces[0].rings.rx: 'lots' must be a number, max"),
        ("mlx5_core", {"features": {"rx-vlan-stag-filter": False}}, "rx-vlan-stag-filter: fixed on by the driver"),
        ("mlx5_core", {"features": {"warp": True}}, "interfaces[0].features.warp: the driver has no such feature"),
        ("mlx5_core", {"features": {"lro": "off"}}, "interfaces[0].features.lro: 'off' must be true or false"),
        ("mlx5_core", {"coalesce": {"rx-usecs-low": 2}}, "coalesce.rx-usecs-low: the driver does not report it"),
        ("mlx5_core", {"coalesce": {"adaptive-rx": 5}}, "coalesce.adaptive-rx: 5 must be true or false"),
        ("veth", {"rings": {"rx": 512}}, "interfaces[0].rings: driver veth has no rings settings"),
        ("veth", {"coalesce": {"rx-usecs": 0}}, "interfaces[0].coalesce: driver veth has no coalescing settings"),
        ("veth", {"mtu": 10000}, "interfaces[0].mtu: 10000 is outside 68..9978"),
        ("veth", {"irq_affinity": [0]}, "interfaces[0].irq_affinity: no queue IRQs found for eth0"),
    ],
)
def test_bad_settings_name_the_field_and_the_rule(driver, spec, message):
    with pytest.raises(nt.TuningError) as exc:
        npl.resolve(spec, current(driver), npf.NO_PROFILE, "interfaces[0]")
    assert any(message in e for e in exc.value.errors), exc.value.errors


def test_every_problem_is_reported_at_once():
    with pytest.raises(nt.TuningError) as exc:
        npl.resolve({"rings": {"rx": 9000, "tx": 9000}, "mtu": 1}, current("ice"), npf.NO_PROFILE, "interfaces[2]")
    assert len(exc.value.errors) == 3


def test_queue_irqs_follow_the_profiles_naming():
    # /proc/interrupts lines in the shape the kernel prints, with the names ice and mlx5_core give their vectors.
    interrupts = "\n".join(
        [
            "           CPU0       CPU1",
            " 150:          0          0  IR-PCI-MSIX-0000:17:00.0    0-edge      ice-0000:17:00.0:misc",
            " 151:        120          0  IR-PCI-MSIX-0000:17:00.0    1-edge      ice-ens1f0np0-TxRx-0",
            " 152:          0        130  IR-PCI-MSIX-0000:17:00.0    2-edge      ice-ens1f0np0-TxRx-1",
            " 153:          0        130  IR-PCI-MSIX-0000:17:00.1    1-edge      ice-ens1f1np1-TxRx-0",
            " 160:          5          0  IR-PCI-MSIX-0000:41:00.0    1-edge      mlx5_comp0@pci:0000:41:00.0",
            " 161:          5          0  IR-PCI-MSIX-0000:41:00.0    2-edge      mlx5_comp1@pci:0000:41:00.0",
            " 162:          5          0  IR-PCI-MSIX-0000:41:00.0    0-edge      mlx5_async0@pci:0000:41:00.0",
        ]
    )
    assert nr.queue_irqs("ens1f0np0", npf.PROFILES["ice"], "0000:17:00.0", interrupts) == [151, 152]
    assert nr.queue_irqs("enp65s0f0np0", npf.PROFILES["mlx5_core"], "0000:41:00.0", interrupts) == [160, 161]
    assert nr.queue_irqs("veth0", npf.PROFILES["veth"], None, interrupts) == []


def test_irq_affinity_spreads_queues_round_robin(monkeypatch):
    monkeypatch.setattr(nr, "read_text", lambda path: "0-3" if path.endswith("/online") else None)
    errors: list[str] = []
    plan = npl._irq_plan(
        [2, 3], current("ice", irqs={151: "0-3", 152: "0-3", 153: "0-3"}), npf.PROFILES["ice"], "interfaces[0]", errors
    )
    assert errors == [] and plan == {"151": "2", "152": "3", "153": "2"}
    npl._irq_plan([7], current("ice", irqs={151: "0"}), npf.PROFILES["ice"], "interfaces[0]", errors)
    assert errors == ["interfaces[0].irq_affinity: CPUs [7] are not online"]


def test_numa_local_cpus_read_the_devices_node(tmp_path):
    (tmp_path / "net" / "ens1f0np0" / "device").mkdir(parents=True)
    (tmp_path / "net" / "ens1f0np0" / "device" / "numa_node").write_text("1\n")
    (tmp_path / "node" / "node1").mkdir(parents=True)
    (tmp_path / "node" / "node1" / "cpulist").write_text("16-19,48-51\n")
    cpus = nr.numa_local_cpus("ens1f0np0", sysfs=str(tmp_path / "net"), nodes=str(tmp_path / "node"))
    assert cpus == [16, 17, 18, 19, 48, 49, 50, 51]


def test_the_first_original_is_kept_and_restored():
    record = {"interfaces": {}}
    eth0 = current("ice")
    first = npl.plan(eth0, {"channels": {"combined": 8}, "mtu": 9000})
    nt.remember(record, "eth0", first)
    later = [npl.Change("channels", "combined", 8, 12), npl.Change("mtu", None, 9000, 1500)]
    nt.remember(record, "eth0", later)
    assert nt.restoration(record, "eth0") == {"mtu": 1500, "channels": {"combined": 4}}
    assert npl.plan(eth0, nt.restoration(record, "eth0")) == [], "the recorded values are what the NIC had"


def test_a_record_round_trips_and_goes_when_no_interface_is_left(tmp_path):
    state_dir = tmp_path / "state"
    assert nt.load_record(str(state_dir)) == {"interfaces": {}}
    record = {"interfaces": {"eth0": {"mtu": 1500}}}
    nt.save_record(str(state_dir), record)
    assert nt.load_record(str(state_dir)) == record
    nt.save_record(str(state_dir), {"interfaces": {}})
    assert not (state_dir / nt.STATE_NAME).exists()


def test_a_corrupt_record_is_refused_naming_the_file(tmp_path):
    (tmp_path / nt.STATE_NAME).write_text("{")
    with pytest.raises(nt.TuningError, match=rf"^state_dir: the record {tmp_path}/{nt.STATE_NAME} is corrupt"):
        nt.load_record(str(tmp_path))


def test_the_report_shows_each_setting_before_and_after():
    done = Changes("nic_tuning")
    nt.report(done, "eth0", npl.plan(current("ice"), {"channels": {"combined": 16}, "mtu": 9000}))
    assert done.steps == ["eth0: mtu 1500 -> 9000", "eth0: channels combined 4 -> 16"]
    assert done.diff()["before"] == "eth0: mtu 1500\neth0: channels combined 4\n"
    assert done.diff()["after"] == "eth0: mtu 9000\neth0: channels combined 16\n"
