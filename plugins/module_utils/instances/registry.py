# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""Every data plane (dataplane/template.py), and which one a record is of: the restore, the teardown and the metrics
exporter find a record's data plane here and never import one by name (docs/architecture.md, "Layers")."""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.abi import Header
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane.template import DataPlane
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter import layouts as filter_layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.filter.deploy import Filter
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router import layouts as router_layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.router.deploy import Router
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen import layouts as trafficgen_layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.trafficgen.echo import EchoServer
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep import layouts as vtep_layouts
from ansible_collections.xdpfleet.fabric.plugins.module_utils.vtep.deploy import Vtep

PLANES: tuple[type[DataPlane], ...] = (Vtep, Filter, Router, EchoServer)
# Every data plane's generated C header (bpf/<plane>/<plane>_abi.h): what `make abi` writes, and what
# tests/unit/test_abi.py holds to the Python declarations and to the packages that declare numbers (an abi.py).
HEADERS: tuple[Header, ...] = (
    vtep_layouts.HEADER,
    filter_layouts.HEADER,
    router_layouts.HEADER,
    trafficgen_layouts.HEADER,
)
PROGRAM = "program"  # the kind of an instance of no data plane: xdp_program's
# Every plane's error and what removing one can fail with: what a caller acting on every instance catches.
ERRORS = tuple(plane.Error for plane in PLANES)
RELEASE_ERRORS = tuple({error for plane in PLANES for error in plane.release_errors})


def plane_of(record: dict) -> type[DataPlane] | None:
    """The data plane whose instance a state record is (the plane keeps its part under its name); None for an
    instance of no data plane."""
    return next((plane for plane in PLANES if plane.name in record), None)


def kind_of(record: dict) -> str:
    """What a state record's instance is: its data plane's name, or program."""
    plane = plane_of(record)
    return plane.name if plane else PROGRAM


def plane(name: str) -> type[DataPlane]:
    """The data plane of that name. Raises KeyError."""
    return {p.name: p for p in PLANES}[name]
