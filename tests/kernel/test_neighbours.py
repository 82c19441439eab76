"""host/neighbours.py against the kernel's neighbour table in a namespace: what the next-hop refresher's
confirmation (NTF_USE) does to the entries it is asked about."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import LAB_PREFIX

COLLECTION = Path(__file__).resolve().parents[2] / "collection"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces need root")

CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.xdpfleet.fabric.plugins.module_utils.host import neighbours
    with neighbours.ip_route(RuntimeError("pyroute2")) as ipr:
        hop = neighbours.current(ipr, "198.51.100.194")
        neighbours.confirm(ipr, hop)
        after = neighbours.current(ipr, "198.51.100.194")
    print(hop.state, hop.mac, after.state, after.mac)
    """
)


def test_a_permanent_next_hop_entry_stays_as_it_is():
    """A host that pins its next hop's MAC (nud permanent) keeps it: the refresher's confirmation turned it into an
    incomplete entry, which a next hop that does not answer ARP never fills again."""
    ns = f"{LAB_PREFIX}-neigh-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for argv in (
            ["link", "add", "ul", "type", "veth", "peer", "name", "ulp"],
            ["link", "set", "ul", "up"],
            ["addr", "add", "198.51.100.193/30", "dev", "ul"],
            ["neigh", "add", "198.51.100.194", "lladdr", "02:00:00:00:01:94", "dev", "ul", "nud", "permanent"],
        ):
            subprocess.run(["ip", "-n", ns, *argv], check=True)
        run = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CHILD, str(COLLECTION)],
                             capture_output=True, text=True, check=False)  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["128", "02:00:00:00:01:94", "128", "02:00:00:00:01:94"]
        shown = subprocess.run(["ip", "-n", ns, "neigh", "show", "198.51.100.194"], capture_output=True, text=True)
        assert "PERMANENT" in shown.stdout, shown.stdout
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
