"""The binding refuses a libbpf older than it needs, naming the version found and the one needed, before any call:
Ubuntu 22.04's libbpf 0.5 has no bpf_map_create, bpf_xdp_query, ... (no AttributeError half way). The old library is
a stand-in built here with the C compiler: a shared object named as Ubuntu's, with one of libbpf's functions."""

import shutil
import subprocess

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import libbpf


def test_an_old_libbpf_is_refused_naming_its_version_and_what_it_lacks(tmp_path):
    compiler = shutil.which("cc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler")
    source = tmp_path / "old.c"
    source.write_text("int libbpf_set_print(void *fn) { return 0; }\n")
    old = tmp_path / "libbpf.so.0.5.0"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(old), str(source)], check=True)
    with pytest.raises(libbpf.LibbpfUnsupported) as refused:
        libbpf._Lib(str(old))
    message = str(refused.value)
    assert message.startswith(f"libbpf 0.5.0 ({old}) cannot be used: xdpfleet needs libbpf 1.0 or newer; it lacks ")
    assert "bpf_map_create" in message and "libbpf_set_print" not in message


def test_the_version_is_read_from_the_library_file_name_when_the_library_does_not_say_it():
    assert libbpf._file_version("/usr/lib/x86_64-linux-gnu/libbpf.so.0.5.0") == (0, 5, 0)
    assert libbpf._file_version("/usr/lib64/libbpf.so") == ()
