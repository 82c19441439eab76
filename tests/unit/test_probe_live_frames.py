"""xdp_probe's judgement of live frames (host/probe.py) by the kernel's BTF, as the modules judge every feature: a
pretend kernel's BTF, named by XDPFLEET_KERNEL_BTF, with or without the struct that came with live frames."""

from btf_blob import kernel_blob

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features as ft
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import probe


def pretend_kernel(monkeypatch, tmp_path, structs: list[str]) -> None:
    path = tmp_path / "vmlinux"
    path.write_bytes(
        kernel_blob({"bpf_map_lookup_elem": 1}, {}, {"BPF_XDP": 37}, {}, {"BPF_PROG_TYPE_XDP": 6}, structs=structs)
    )
    monkeypatch.setenv(ft.KERNEL_BTF_OVERRIDE_ENV, str(path))


def test_a_kernel_whose_btf_has_live_frames_has_them_whatever_its_version(monkeypatch, tmp_path):
    pretend_kernel(monkeypatch, tmp_path, ["xdp_test_data"])
    assert probe.live_frames_in_kernel() == (True, None)


def test_a_kernel_without_them_is_told_what_is_missing_and_since_when(monkeypatch, tmp_path):
    pretend_kernel(monkeypatch, tmp_path, ["xdp_buff"])
    assert probe.live_frames_in_kernel() == (
        False,
        "kernel: live frames need program flag BPF_F_TEST_XDP_LIVE_FRAMES (XDP live frames, Linux 5.18); this "
        "kernel's BTF has no struct xdp_test_data, which came with it",
    )


def test_without_btf_it_is_unknown_and_unreadable_btf_is_a_problem(monkeypatch, tmp_path):
    monkeypatch.setenv(ft.KERNEL_BTF_OVERRIDE_ENV, str(tmp_path / "none"))
    assert probe.live_frames_in_kernel() == (None, None)
    (tmp_path / "garbage").write_bytes(b"\0" * 64)
    monkeypatch.setenv(ft.KERNEL_BTF_OVERRIDE_ENV, str(tmp_path / "garbage"))
    ok, problem = probe.live_frames_in_kernel()
    assert ok is None
    assert problem.startswith(f"kernel: live frames cannot be judged: {tmp_path / 'garbage'}: BTF: magic 0x0000")
