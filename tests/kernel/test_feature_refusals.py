"""Probe before change, on the real code paths: each data plane is judged against a kernel that lacks a feature
and, where it cannot run, refused before anything changes.

The older kernels are this machine's own BTF with records taken out (btf_edit.py), named by XDPFLEET_KERNEL_BTF:
- no iterators: the kfuncs bpf_iter_num_new/next/destroy (open-coded iterators, Linux 6.4), as on Debian 12's 6.1;
- no devmap broadcast: the function dev_map_enqueue_multi (BPF_F_BROADCAST, 5.13);
- no tcx: BPF_TCX_INGRESS/EGRESS and BPF_LINK_TYPE_TCX (6.6);
- no bpf_jiffies64: the helper (5.5), which the fixture object calls.
The programs still load into this machine's kernel: only the check reads the edited BTF, so where the check lets a
data plane through, it runs for real.

After each refusal nothing is different: no pin, no link, no state file, the same XDP, tc and tcx state on the
interfaces. Everything runs in one child in a network namespace of its own (veth), with pins on a bpffs that child
mounts in its own mount namespace, and reports what it saw."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import btf_edit
import pytest
from conftest import LAB_PREFIX

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build
from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import features as ft

REPO = Path(__file__).resolve().parents[2]
JIFFIES_C = Path(__file__).parent / "bpf" / "jiffies_fixture.c"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loading BPF programs needs root")

ITERATORS = ("bpf_iter_num_new", "bpf_iter_num_next", "bpf_iter_num_destroy")
OLDER_KERNELS = {
    "no_iterators": {"functions": ITERATORS},
    "no_broadcast": {"functions": ("dev_map_enqueue_multi",)},
    "no_tcx": {
        "enumerators": {
            "bpf_attach_type": ("BPF_TCX_INGRESS", "BPF_TCX_EGRESS"),
            "bpf_link_type": ("BPF_LINK_TYPE_TCX",),
        }
    },
    "no_jiffies": {"enumerators": {"bpf_func_id": ("BPF_FUNC_jiffies64",)}},
}
# veth pairs in the namespace: the first end of each is what the data planes attach to. (name, peer, mtu)
VETHS = [
    ("acc", "accp", 1500),  # the VTEP's access port
    ("ul", "ulp", 1600),  # its tunnel port
    ("f0", "f1", 1500),  # the filter's
    ("p0", "p1", 1500),  # xdp_program's
    ("racc", "raccp", 1500),  # restored: the tc VTEP's ports
    ("rul", "rulp", 1600),
    ("xacc", "xaccp", 1500),  # restored: the XDP VTEP's ports
    ("xul", "xulp", 1600),
    ("rf0", "rf1", 1500),  # restored: the filter's
]


def vtep_document(local: str, peer: str, access: str, tunnel: str) -> dict:
    return {
        "tunnel_ports": [{"port": tunnel, "local_ip": local}],
        "vnis": [
            {"vni": 100, "access_ports": [access], "peers": [{"ip": peer, "via": tunnel, "mac": "02:00:00:00:00:d2"}]}
        ],
    }


CHILD = textwrap.dedent(
    """
    import hashlib, json, os, shutil, socket, subprocess, sys, time
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import cls_bpf, features, program as xp
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import deploy as fd
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances import records as hr
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import deploy as vd
    args = json.loads(sys.argv[2])
    repo, work, kernels = args["repo"], args["work"], args["kernels"]
    bpffs = os.path.join(work, "bpffs")
    subprocess.run(["mount", "-t", "bpf", "bpf", bpffs], check=True)  # this process's mount namespace only
    host = hr.HostPaths(os.path.join(work, "state"), os.path.join(bpffs, "xdpfleet"), os.path.join(work, "cache"))
    include = [os.path.join(repo, "bpf", "include")]
    out = {}

    def kernel(name):
        if name is None:
            os.environ.pop(features.KERNEL_BTF_OVERRIDE_ENV, None)
        else:
            os.environ[features.KERNEL_BTF_OVERRIDE_ENV] = kernels[name]

    def prog_name(prog_id):
        # None for a program gone since it was listed: a link whose last pin went is released by a kernel worker.
        shown = subprocess.run(["bpftool", "-j", "prog", "show", "id", str(prog_id)], capture_output=True, text=True)
        return json.loads(shown.stdout)["name"] if shown.returncode == 0 else None

    def hooks(ifname):
        # What runs at the interface's XDP hook and its tc ingress (tcx links and cls_bpf filters), each entry with
        # the name of its program, and its qdiscs.
        net = json.loads(subprocess.run(["bpftool", "-j", "net", "show", "dev", ifname], capture_output=True,
                                        text=True, check=True).stdout)[0]
        for entry in net.get("xdp", []) + net.get("tc", []):
            entry["prog"] = prog_name(entry.get("id") or entry.get("prog_id"))
        qdiscs = json.loads(subprocess.run(["tc", "-j", "qdisc", "show", "dev", ifname], capture_output=True,
                                           text=True, check=True).stdout)
        return {"xdp": net.get("xdp", []), "tc": net.get("tc", []), "qdiscs": sorted(q["kind"] for q in qdiscs)}

    def pins():
        # Every directory and pin under the pin root.
        found = []
        for directory, dirs, files in os.walk(host.pin_root):
            found += [os.path.relpath(os.path.join(directory, entry), host.pin_root) for entry in dirs + files]
        return sorted(found)

    def state_files():
        # Every file under the state directory, with a hash of its content.
        found = {}
        for directory, _dirs, files in os.walk(host.state_dir):
            for entry in files:
                path = os.path.join(directory, entry)
                with open(path, "rb") as f:
                    found[os.path.relpath(path, host.state_dir)] = hashlib.sha256(f.read()).hexdigest()
        return found

    def snapshot(ifnames):
        return {"hooks": {i: hooks(i) for i in ifnames}, "pins": pins(), "state": state_files()}

    def attempt(ifnames, call):
        before = snapshot(ifnames)
        try:
            result, error = call(), None
        except (vd.VtepError, fd.FilterError, xp.XdpProgramError) as exc:
            result, error = None, str(exc)
        return {"error": error, "result": result, "before": before, "after": snapshot(ifnames)}

    def vtep(name, document, backend, check_mode=False):
        return lambda: vd.Vtep(
            host.instance(name), host.cache_dir, document=document, source=repo + "/bpf/vtep/vtep_xdp.c",
            include_dirs=include, backend=backend, tc_source=repo + "/bpf/vtep/vtep_tc.c", check_mode=check_mode,
            build_dir=os.path.join(work, "build") if check_mode else None,
        ).deploy()

    def the_filter(name, ifname, hook):
        return lambda: fd.Filter(
            host.instance(name), host.cache_dir,
            rules=[{"name": "udp-9999", "action": "drop", "protocol": "udp", "dst_port": 9999}], interfaces=[ifname],
            hook=hook, source=repo + "/bpf/filter/filter.c", include_dirs=include,
        ).deploy()

    def program(name, check_mode=False):
        return lambda: xp.converge(host.instance(name), args["jiffies_object"], None, "native", {}, ["p0"], None,
                                   check_mode=check_mode).changed

    def xdp_program_module_in_check_mode(name):
        # The module run by ansible, as a playbook's task runs it; returns its task record (tests/callback_plugins).
        results = os.path.join(work, "module-results.json")
        env = dict(os.environ, ANSIBLE_CONFIG=repo + "/ansible.cfg", ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
                   ANSIBLE_CALLBACK_PLUGINS=repo + "/tests/callback_plugins", ANSIBLE_CALLBACKS_ENABLED="xdpfleet_json",
                   XDPFLEET_JSON_RESULTS=results)
        module_args = {"name": name, "object": args["jiffies_object"], "interfaces": ["p0"], "mode": "native",
                       "pin_root": host.pin_root, "state_dir": host.state_dir, "cache_dir": host.cache_dir}
        subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,", "-c", "local",
             "--check", "-e", "ansible_python_interpreter=" + sys.executable,
             "-m", "xdpfleet.fabric.xdp_program", "-a", json.dumps(module_args)],
            cwd=repo, env=env, capture_output=True, timeout=300, check=False,
        )
        with open(results) as f:
            return json.load(f)["tasks"][0]

    doc = args["documents"]

    # Without open-coded iterators: the tc backend is refused (also in check mode), the XDP backend deploys; the tc
    # backend asked of the running XDP VTEP is refused and leaves it as it was.
    kernel("no_iterators")
    out["vtep_tc"] = attempt(["acc", "ul"], vtep("vtep", doc["vtep"], "tc"))
    out["vtep_tc_check"] = attempt(["acc", "ul"], vtep("vtep", doc["vtep"], "tc", check_mode=True))
    out["vtep_xdp"] = attempt(["acc", "ul"], vtep("vtep", doc["vtep"], "xdp"))
    out["vtep_xdp_to_tc"] = attempt(["acc", "ul"], vtep("vtep", doc["vtep"], "tc"))
    xp.remove(host.instance("vtep"), check_mode=False)

    # Without devmap broadcast, which has no fallback: the VTEP is refused.
    kernel("no_broadcast")
    out["vtep_no_broadcast"] = attempt(["acc", "ul"], vtep("vtep", doc["vtep"], "xdp"))

    # Without tcx: the filter's tc hook goes through a cls_bpf filter.
    kernel("no_tcx")
    out["tc_attach_kind"] = xp.tc_attach_kind()
    out["filter_tc"] = attempt(["f0"], the_filter("flt", "f0", "tc"))
    out["filter_tc_filters"] = [f.name for f in cls_bpf.filters(socket.if_nametoindex("f0"))]
    out["filter_tc_record"] = xp.load_state(host.instance("flt"))["interfaces"]["f0"]
    xp.remove(host.instance("flt"), check_mode=False)

    # A user's object calling a helper the kernel lacks: refused in-process, and by the module in check mode; with
    # this machine's own BTF the same object attaches.
    kernel("no_jiffies")
    out["program"] = attempt(["p0"], program("jif"))
    out["program_check"] = attempt(["p0"], program("jif", check_mode=True))
    before = snapshot(["p0"])
    out["program_module_check"] = {"result": xdp_program_module_in_check_mode("jif"), "before": before,
                                   "after": snapshot(["p0"])}
    kernel(None)
    out["program_this_kernel"] = attempt(["p0"], program("jif"))
    xp.remove(host.instance("jif"), check_mode=False)

    # Restore on a kernel without open-coded iterators: the tc VTEP is reported, the XDP VTEP and the filter come back.
    kernel(None)
    vtep("r-vtep-tc", doc["restore_tc"], "tc")()
    vtep("r-vtep-xdp", doc["restore_xdp"], "xdp")()
    the_filter("r-filter", "rf0", "xdp")()
    restored_ports = ["racc", "rul", "xacc", "xul", "rf0"]
    out["restore_deployed"] = snapshot(restored_ports)
    shutil.rmtree(host.pin_root)  # a reboot: the pins and the links they held are gone, the records stay
    deadline = time.monotonic() + 5  # the links go with their pins, in a kernel worker's time
    while any(h["xdp"] or h["tc"] for h in snapshot(restored_ports)["hooks"].values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    out["restore_rebooted"] = snapshot(restored_ports)
    kernel("no_iterators")
    out["restore"] = {r.name: r.report() for r in hr.restore(host, check_mode=False)}
    out["restore_after"] = snapshot(restored_ports)
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    work = tmp_path_factory.mktemp("feature_refusals")
    this_kernel = Path(ft.KERNEL_BTF).read_bytes()
    kernels = {}
    for name, taken_out in OLDER_KERNELS.items():
        path = work / f"vmlinux-{name}"
        path.write_bytes(btf_edit.without(this_kernel, **taken_out))
        kernels[name] = str(path)
    (work / "bpffs").mkdir()
    (work / "state").mkdir(mode=0o700)
    jiffies_object, _ = bpf_build.compile_object(str(JIFFIES_C), str(work / "objects"))
    documents = {
        "vtep": vtep_document("198.51.100.209", "198.51.100.210", "acc", "ul"),
        "restore_tc": vtep_document("198.51.100.211", "198.51.100.212", "racc", "rul"),
        "restore_xdp": vtep_document("198.51.100.213", "198.51.100.214", "xacc", "xul"),
    }
    netns = f"{LAB_PREFIX}-feat-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
                       check=True)  # fmt: skip
        for end, peer, mtu in VETHS:
            pair = [end, "mtu", str(mtu), "type", "veth", "peer", "name", peer, "mtu", str(mtu)]
            subprocess.run(["ip", "-n", netns, "link", "add", *pair], check=True)
            for dev in (end, peer):
                subprocess.run(["ip", "-n", netns, "link", "set", dev, "up"], check=True)
        args = {"repo": str(REPO), "work": str(work), "kernels": kernels, "jiffies_object": jiffies_object,
                "documents": documents}  # fmt: skip
        child = subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, "-c", CHILD, str(REPO / "collection"), json.dumps(args)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert child.returncode == 0, child.stderr
        (work / "child.json").write_text(child.stdout)  # what the tests below judge, for a look after a failure
        return {"kernels": kernels, "jiffies_object": jiffies_object, **json.loads(child.stdout)}
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=True)


def unchanged(attempt: dict) -> None:
    """Nothing differs after a refusal: the same hooks, pins and state files."""
    assert attempt["after"] == attempt["before"]


def nothing_of_ours(snapshot: dict) -> None:
    """No pin, no state file, and nothing at any hook of the interfaces."""
    assert snapshot["pins"] == [] and snapshot["state"] == {}
    for ifname, hook in snapshot["hooks"].items():
        assert hook["xdp"] == [] and hook["tc"] == [] and "clsact" not in hook["qdiscs"], ifname


def test_the_older_kernels_lack_exactly_what_was_taken_out(run):
    this_kernel = ft.KernelFeatures.from_file(ft.KERNEL_BTF)
    older = {name: ft.KernelFeatures.from_file(path) for name, path in run["kernels"].items()}
    assert this_kernel.functions - older["no_iterators"].functions == set(ITERATORS)
    assert this_kernel.functions - older["no_broadcast"].functions == {"dev_map_enqueue_multi"}
    assert this_kernel.attach_types - older["no_tcx"].attach_types == {"BPF_TCX_INGRESS", "BPF_TCX_EGRESS"}
    assert this_kernel.link_types - older["no_tcx"].link_types == {"BPF_LINK_TYPE_TCX"}
    assert this_kernel.helpers - older["no_jiffies"].helpers == {"bpf_jiffies64"}
    assert all(k.helpers == this_kernel.helpers for n, k in older.items() if n != "no_jiffies")


@pytest.mark.parametrize("case", ["vtep_tc", "vtep_tc_check"])
def test_without_iterators_the_tc_vtep_is_refused_naming_the_kfunc_and_leaves_nothing(run, case):
    attempt = run[case]
    assert attempt["error"].startswith("this kernel cannot run the VTEP, nothing was changed:")
    for kfunc in ITERATORS:
        assert f"kfunc {kfunc} (open-coded iterators, Linux 6.4) for program vtep_replicate" in attempt["error"]
    assert "backend xdp" not in attempt["error"]
    unchanged(attempt)
    nothing_of_ours(attempt["after"])


def test_without_iterators_the_xdp_vtep_deploys(run):
    attempt = run["vtep_xdp"]
    assert attempt["error"] is None
    assert attempt["result"]["changed"]
    assert attempt["result"]["program"] == {"acc": "attach", "ul": "attach"}
    assert {i: [p["prog"] for p in h["xdp"]] for i, h in attempt["after"]["hooks"].items()} == {
        "acc": ["vtep_ingress"],
        "ul": ["vtep_ingress"],
    }
    assert "programs/vtep.json" in attempt["after"]["state"]


def test_the_tc_backend_asked_of_a_running_xdp_vtep_is_refused_and_leaves_it_running(run):
    attempt = run["vtep_xdp_to_tc"]
    assert "kfunc bpf_iter_num_new (open-coded iterators, Linux 6.4)" in attempt["error"]
    unchanged(attempt)
    assert attempt["after"] == run["vtep_xdp"]["after"]


def test_without_devmap_broadcast_the_vtep_is_refused_naming_it(run):
    attempt = run["vtep_no_broadcast"]
    assert "program flag BPF_F_BROADCAST (devmap broadcast, Linux 5.13)" in attempt["error"]
    assert "this kernel's BTF has no function dev_map_enqueue_multi" in attempt["error"]
    unchanged(attempt)
    nothing_of_ours(attempt["after"])


def test_without_tcx_the_filters_tc_hook_goes_through_cls_bpf(run):
    assert run["tc_attach_kind"] == "cls_bpf"
    attempt = run["filter_tc"]
    assert attempt["error"] is None and attempt["result"]["changed"]
    assert run["filter_tc_filters"] == ["xdpfleet:flt"]
    hook = attempt["after"]["hooks"]["f0"]
    assert "clsact" in hook["qdiscs"]
    assert [(p["kind"], p["name"], p["prog"]) for p in hook["tc"]] == [("clsact/ingress", "xdpfleet:flt", "filter_tc")]
    assert not any(pin.startswith("flt/tc-links/") for pin in attempt["after"]["pins"])  # no tcx link
    assert run["filter_tc_record"]["tc_filter"]["priority"] > 0


@pytest.mark.parametrize("case", ["program", "program_check"])
def test_an_object_calling_a_helper_the_kernel_lacks_is_refused(run, case):
    attempt = run[case]
    assert attempt["error"].startswith(f"this kernel cannot run {run['jiffies_object']}, nothing was changed:")
    assert "needs helper bpf_jiffies64 (jiffies, Linux 5.5) for program jiffies_pass" in attempt["error"]
    unchanged(attempt)
    nothing_of_ours(attempt["after"])


def test_the_xdp_program_module_refuses_it_in_check_mode(run):
    check = run["program_module_check"]
    assert check["result"]["status"] == "failed"
    assert "needs helper bpf_jiffies64 (jiffies, Linux 5.5)" in check["result"]["result"]["msg"]
    assert check["after"] == check["before"]
    nothing_of_ours(check["after"])


def test_with_this_machines_own_btf_the_same_object_attaches(run):
    """The refusals above come from the BTF alone: this kernel runs the object."""
    attempt = run["program_this_kernel"]
    assert attempt["error"] is None and attempt["result"] is True
    assert [p["prog"] for p in attempt["after"]["hooks"]["p0"]["xdp"]] == ["jiffies_pass"]


def test_a_restore_reports_the_instance_this_kernel_cannot_run_and_restores_the_others(run):
    deployed, rebooted, after = run["restore_deployed"], run["restore_rebooted"], run["restore_after"]
    assert all(deployed["hooks"][i]["xdp"] for i in ("racc", "rul", "xacc", "xul", "rf0"))
    assert all(not h["xdp"] and not h["tc"] for h in rebooted["hooks"].values())

    report = run["restore"]
    assert sorted(report) == ["r-filter", "r-vtep-tc", "r-vtep-xdp"]
    tc = report["r-vtep-tc"]
    assert tc["kind"] == "vtep" and tc["changed"] is False
    assert tc["error"].startswith("this kernel cannot run the VTEP, nothing was changed:")
    assert "kfunc bpf_iter_num_new (open-coded iterators, Linux 6.4) for program vtep_replicate" in tc["error"]
    assert report["r-vtep-xdp"]["changed"] is True and "error" not in report["r-vtep-xdp"]
    assert report["r-filter"]["changed"] is True and "error" not in report["r-filter"]

    # The refused instance: nothing at its ports and no pins, its record kept for a kernel that can run it.
    assert after["hooks"]["racc"] == rebooted["hooks"]["racc"] and after["hooks"]["rul"] == rebooted["hooks"]["rul"]
    assert not any(pin.startswith("r-vtep-tc") for pin in after["pins"])
    assert after["state"]["programs/r-vtep-tc.json"] == deployed["state"]["programs/r-vtep-tc.json"]
    # The others run again what they ran before the reboot.
    for ifname in ("xacc", "xul", "rf0"):
        assert [p["prog"] for p in after["hooks"][ifname]["xdp"]] == [
            p["prog"] for p in deployed["hooks"][ifname]["xdp"]
        ]
