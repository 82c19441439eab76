"""Test harness for the network-namespace lab.

A `Lab` is a topology (prefix, management subnet, hosts, endpoints, links) written as a real inventory into a
work dir; `up()` and `down()` run the real `playbooks/lab.yml` against it, and every other playbook of the project
can be run against the same inventory with `Lab.run_playbook`. Results come back through the xdpfleet_json
callback (tests/callback_plugins) as per-host stats and per-task results.

Out-of-band access, for checks that must not go through Ansible:
  host_exec(host, argv)      nsenter into the host's mount, network, UTS and PID namespaces (by its sshd pid)
  endpoint_exec(ep, argv)    ip netns exec into an endpoint
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# The ansible binaries next to the interpreter running the tests (the project's venv).
BIN = Path(sys.executable).parent
CALLBACK_DIR = REPO / "tests" / "callback_plugins"
LAB_PLAYBOOK = REPO / "playbooks" / "lab.yml"
DEFAULT_INVENTORY = REPO / "inventories" / "lab"

from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import lab as labutil
from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import lab_spec, lab_state


@dataclass
class PlaybookResult:
    rc: int
    stdout: str
    stderr: str
    stats: dict[str, dict]  # host -> {ok, changed, failed, unreachable, skipped, rescued, ignored}
    tasks: list[dict]  # {play, task, action, host, status, changed, result} in the order they finished
    argv: list[str] = field(default_factory=list)

    def changed(self, host: str | None = None) -> int:
        """Number of changed tasks, for one host or summed over all."""
        return sum(s["changed"] for h, s in self.stats.items() if host in (None, h))

    def failed(self, host: str | None = None) -> int:
        return sum(s["failed"] + s["unreachable"] for h, s in self.stats.items() if host in (None, h))

    def results(self, task: str | None = None, host: str | None = None, action: str | None = None) -> list[dict]:
        """Task records matching a task name (exact), host and/or action (FQCN or short name)."""
        return [
            t
            for t in self.tasks
            if task in (None, t["task"]) and host in (None, t["host"]) and action in (None, t["action"])
        ]

    def result(self, task: str | None = None, host: str | None = None, action: str | None = None) -> dict:
        """The module result of the only task record matching; fails when there is not exactly one."""
        found = self.results(task, host, action)
        assert len(found) == 1, f"{len(found)} results for task={task} host={host} action={action}:\n{self}"
        return found[0]["result"]

    def messages(self) -> str:
        """All failure messages of the run, one per line (for asserting on an error)."""
        return "\n".join(str(t["result"].get("msg", "")) for t in self.tasks if t["status"] == "failed")

    def __str__(self) -> str:
        return f"$ {' '.join(self.argv)}\nrc={self.rc}\n{self.stdout[-6000:]}\n{self.stderr[-3000:]}"


def printed_diff(stdout: str, header: str) -> list[str]:
    """What `--diff` printed for the resource `header` (its diff's before/after_header): the unified diff's lines,
    "-" for a line only before, "+" for one only after, " " for one in both."""
    lines = stdout.splitlines()
    out = []
    for line in lines[lines.index(f"+++ after: {header}") + 1 :]:
        if not line or line[0] not in "+- @":
            break
        if not line.startswith("@@"):
            out.append(line)
    return out


def split_promisc(diff_lines: list[str]) -> tuple[list[str], list[str]]:
    """A printed diff's lines about promiscuous flags (the VTEP's ports, sorted), and the others in their order."""
    flags = sorted(line for line in diff_lines if ": promisc " in line)
    return flags, [line for line in diff_lines if ": promisc " not in line]


def _end_ssh_masters(control_dir: str) -> None:
    """Ask every ControlPersist master of this run to exit (they would linger ~60 s otherwise)."""
    for sock in Path(control_dir).iterdir():
        subprocess.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "lab-host"],
            capture_output=True,
            timeout=10,
            check=False,
        )


def run_playbook(
    playbook: str | os.PathLike,
    inventory: str | os.PathLike,
    extra_vars: dict | None = None,
    check: bool = False,
    diff: bool = False,
    extra_args: tuple | list = (),
    timeout: float = 600,
) -> PlaybookResult:
    """Run ansible-playbook from the repo root with the project's ansible.cfg and the JSON callback."""
    with tempfile.TemporaryDirectory(prefix="xdpf-run-") as tmp:
        control_dir = os.path.join(tmp, "cp")  # per-run ControlPersist sockets, short enough for sun_path
        os.mkdir(control_dir)
        out = os.path.join(tmp, "results.json")
        env = dict(os.environ)
        env.update(
            {
                "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
                "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACK_DIR),
                "ANSIBLE_CALLBACKS_ENABLED": "xdpfleet_json",
                "XDPFLEET_JSON_RESULTS": out,
                "ANSIBLE_SSH_CONTROL_PATH_DIR": control_dir,
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_FORCE_COLOR": "0",
            }
        )
        argv = [str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        if check:
            argv.append("--check")
        if diff:
            argv.append("--diff")
        argv += [str(a) for a in extra_args]
        started = time.monotonic()
        try:
            proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        finally:
            _end_ssh_masters(control_dir)
        data = json.loads(Path(out).read_text()) if os.path.exists(out) else {"stats": {}, "tasks": []}
    if os.environ.get(RUN_TIMES_ENV):
        _log_run_time(Path(os.environ[RUN_TIMES_ENV]), argv, time.monotonic() - started, data["tasks"])
    return PlaybookResult(proc.returncode, proc.stdout, proc.stderr, data["stats"], data["tasks"], argv)


# Where the suite's time goes: with XDPFLEET_RUN_TIMES=<file>, every playbook run appends its wall time and its
# slowest tasks (the longest host of each) to <file>.
RUN_TIMES_ENV = "XDPFLEET_RUN_TIMES"


def _log_run_time(path: Path, argv: list[str], seconds: float, tasks: list[dict], slowest: int = 8) -> None:
    longest: dict[tuple[str, str], float] = {}
    for task in tasks:
        key = (task["play"], task["task"])
        longest[key] = max(longest.get(key, 0.0), task.get("seconds", 0.0))
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    lines = [f"{seconds:7.1f} s  {test}  {' '.join(argv[3:])[:200]}"]
    for (play, task), spent in sorted(longest.items(), key=lambda item: -item[1])[:slowest]:
        lines.append(f"    {spent:6.1f} s  {play} / {task}")
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")


def _auto_mgmt_ip(subnet: str, index: int) -> str:
    net = ipaddress.ip_network(subnet)
    return str(net.network_address + 2 + index)  # +1 is the bridge


class Lab:
    """A lab topology with its own inventory in `workdir`.

    hosts: list of {name, mgmt_ip (default: the subnet's 2nd, 3rd, ... address), forwarding, routes}
    endpoints, links: as the role's lab_endpoints / lab_links (see roles/lab/meta/argument_specs.yml).
    """

    def __init__(
        self,
        prefix: str,
        mgmt_subnet: str,
        hosts: list[dict],
        endpoints: list[dict] | None = None,
        links: list[dict] | None = None,
        workdir: str | os.PathLike | None = None,
    ):
        self.prefix = prefix
        self.mgmt_subnet = mgmt_subnet
        self.hosts = [{"mgmt_ip": _auto_mgmt_ip(mgmt_subnet, i), **h} for i, h in enumerate(hosts)]
        self.endpoints = list(endpoints or [])
        self.links = list(links or [])
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"xdpf-lab-{prefix}-"))
        self.lab_dir = lab_spec.default_lab_dir(prefix)
        self.inventory = self.workdir / "inventory"
        self.write_inventory()

    @classmethod
    def standard(cls, prefix: str, mgmt_subnet: str, workdir: str | os.PathLike | None = None) -> Lab:
        """A lab with the default inventory's topology (see standard_topology)."""
        return cls(prefix, mgmt_subnet, workdir=workdir, **standard_topology())

    def params(self) -> dict:
        """This lab as the xdpfleet.fabric.lab module's parameters (for lab_spec.normalize)."""
        return {
            "prefix": self.prefix,
            "mgmt_subnet": self.mgmt_subnet,
            "hosts": self.hosts,
            "endpoints": self.endpoints,
            "links": self.links,
        }

    # ---------------------------------------------------------------------------------------------- inventory

    def write_inventory(self) -> Path:
        """The default inventory's group_vars and host_vars (connection vars etc.), with this topology."""
        if self.inventory.exists():
            shutil.rmtree(self.inventory)
        for sub in ("group_vars", "host_vars"):
            if (DEFAULT_INVENTORY / sub).is_dir():
                shutil.copytree(DEFAULT_INVENTORY / sub, self.inventory / sub)
        host_entries = {}
        for host in self.hosts:
            entry = {"lab_mgmt_ip": host["mgmt_ip"]}
            if host.get("forwarding"):
                entry["lab_forwarding"] = True
            if host.get("routes"):
                entry["lab_routes"] = host["routes"]
            host_entries[host["name"]] = entry
        hosts_yml = {"all": {"children": {"lab_hosts": {"hosts": host_entries or None}}}}
        topology = {
            "lab_prefix": self.prefix,
            "lab_mgmt_subnet": self.mgmt_subnet,
            "lab_dir": self.lab_dir,
            "lab_endpoints": self.endpoints,
            "lab_links": self.links,
        }
        (self.inventory / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
        (self.inventory / "hosts.yml").write_text(yaml.safe_dump(hosts_yml, sort_keys=False))
        (self.inventory / "group_vars" / "all" / "lab.yml").write_text(yaml.safe_dump(topology, sort_keys=False))
        return self.inventory

    # ---------------------------------------------------------------------------------------------- lifecycle

    def run_playbook(self, playbook, extra_vars=None, check=False, diff=False, extra_args=()) -> PlaybookResult:
        """Any playbook (path, or relative to the repo root) against this lab's inventory."""
        return run_playbook(REPO / playbook, self.inventory, extra_vars, check, diff, extra_args)

    def run_tasks(self, tasks: list[dict], hosts: str = "lab_hosts", check=False, diff=False) -> PlaybookResult:
        """A one-play playbook of `tasks` (gather_facts off) against `hosts` of this lab."""
        play = [{"name": "lablib tasks", "hosts": hosts, "gather_facts": False, "tasks": tasks}]
        path = Path(tempfile.mkstemp(prefix="tasks-", suffix=".yml", dir=self.workdir)[1])
        path.write_text(yaml.safe_dump(play, sort_keys=False))
        return self.run_playbook(path, check=check, diff=diff)

    def up(self, check=False, diff=False) -> PlaybookResult:
        return self.run_playbook(LAB_PLAYBOOK, {"lab_state": "present"}, check=check, diff=diff)

    def down(self, check=False) -> PlaybookResult:
        return self.run_playbook(LAB_PLAYBOOK, {"lab_state": "absent"}, check=check)

    # ---------------------------------------------------------------------------------------------- inspection

    def state(self) -> dict | None:
        return lab_state.load_state(self.lab_dir)

    def health(self) -> list[str]:
        """Why the running lab differs from this topology; [] when it is up and matches."""
        return lab_state.health(lab_spec.normalize(self.params()))

    def namespaces(self) -> list[str]:
        return lab_state.existing(self.prefix, self.lab_dir)["namespaces"]

    def root_links(self) -> list[str]:
        return lab_state.existing(self.prefix, self.lab_dir)["root_links"]

    def host_pids(self, host: str) -> tuple[int, int]:
        """(unshare pid, sshd pid) of a host, root-namespace pids."""
        return lab_state.host_pids(self.lab_dir, host)

    def restart_host(self, host: str) -> None:
        """Restart a host as a reboot would: pins, XDP links and /run go; interfaces and /etc, /var, /boot stay."""
        labutil.restart_host(self.lab_dir, host)

    def mgmt_ip(self, host: str) -> str:
        return next(h["mgmt_ip"] for h in self.hosts if h["name"] == host)

    # ---------------------------------------------------------------------------------------------- out of band

    def host_exec(self, host: str, argv: list[str], check=True, input=None, timeout=60):
        """Run argv inside a host (its mounts, network, hostname and pids), not through SSH."""
        _, sshd = self.host_pids(host)
        return _run(["nsenter", "-t", str(sshd), "-m", "-n", "-u", "-p", "--", *argv], check, input, timeout)

    def xdp_interfaces(self, host: str) -> set[str]:
        """The interfaces of a host that run an XDP program."""
        links = json.loads(self.host_exec(host, ["ip", "-j", "link"]).stdout)
        return {link["ifname"] for link in links if "xdp" in link}

    def state_files(self, host: str) -> list[str]:
        """What xdpfleet recorded on a host: the files under /var/lib/xdpfleet (but the copied C sources and the
        compile cache, which teardown leaves) and /run/xdpfleet (the senders' records)."""
        found = self.host_exec(
            host,
            ["find", "/var/lib/xdpfleet", "/run/xdpfleet", "-path", "/var/lib/xdpfleet/src", "-prune", "-o",
             "-path", "/var/lib/xdpfleet/cache", "-prune", "-o", "-type", "f", "-print"],
            check=False,
        )  # fmt: skip
        return found.stdout.split()

    def endpoint_exec(self, endpoint: str, argv: list[str], check=True, input=None, timeout=60):
        return _run(["ip", "netns", "exec", lab_spec.ns_name(self.prefix, endpoint), *argv], check, input, timeout)


def standard_topology() -> dict:
    """The default inventory's topology (inventories/lab), read from its files so tests and demo never drift apart:
    hosts with their forwarding and routes (management addresses are assigned per lab), endpoints and links."""
    hosts_yml = yaml.safe_load((DEFAULT_INVENTORY / "hosts.yml").read_text())
    topology = yaml.safe_load((DEFAULT_INVENTORY / "group_vars" / "all" / "lab.yml").read_text())
    hosts = []
    for name, hostvars in hosts_yml["all"]["children"]["lab_hosts"]["hosts"].items():
        host = {"name": name}
        if hostvars.get("lab_forwarding"):
            host["forwarding"] = True
        if hostvars.get("lab_routes"):
            host["routes"] = hostvars["lab_routes"]
        hosts.append(host)
    return {"hosts": hosts, "endpoints": topology["lab_endpoints"], "links": topology["lab_links"]}


def _run(argv, check, input, timeout) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode:
        raise AssertionError(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc
