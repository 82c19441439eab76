# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""What the modules that keep an instance on a host share: their host paths' options, the instance's paths from
them, and state=absent. Here, not in bpf/program.py, so that the layers below never take an AnsibleModule."""

from __future__ import annotations

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import program as xp
from ansible_collections.xdpfleet.fabric.plugins.module_utils.dataplane import template

# The options of doc fragment xdpfleet.fabric.host_paths, for the modules that keep programs on a host.
HOST_PATHS_ARGUMENT_SPEC = {
    "cache_dir": {"type": "path", "default": xp.CACHE_DIR},
    "pin_root": {"type": "path", "default": xp.PIN_ROOT},
    "state_dir": {"type": "path", "default": xp.STATE_DIR},
}


def instance_paths(params: dict) -> xp.InstancePaths:
    """The paths of the instance a module's parameters name (name, and the host_paths options)."""
    return xp.InstancePaths(params["name"], params["pin_root"], params.get("state_dir", xp.STATE_DIR))


def removal(module, paths: xp.InstancePaths, label: str, plane: type[template.DataPlane] | None = None) -> dict:
    """state=absent for a module that keeps an instance (of `plane`, None for one of no data plane): remove it (or
    say what would go, in check mode) and return changed, the steps taken (removed), and the diff; a failure fails
    the module naming the instance."""
    errors = (*template.REMOVE_ERRORS, *(plane.release_errors if plane else ()))
    try:
        removed = template.remove(paths, module.check_mode, label, plane)
    except errors as exc:
        module.fail_json(msg=f"removing {label} {paths.name}: {exc}")
    result = {"changed": removed.changed, "removed": removed.steps}
    if removed.changed:
        result["diff"] = removed.diff()
    return result


def deployment(module, plane: type[template.DataPlane], paths: xp.InstancePaths, **arguments) -> dict:
    """state=present for a module that keeps an instance of `plane`: deploy it with `arguments` and the module's
    cache_dir, source, include_dirs and check mode (a compile that misses the cache goes to the module's temporary
    directory then), and return the result; a refusal fails the module with its message and every problem it lists."""
    p = module.params
    try:
        return plane(
            paths,
            p["cache_dir"],
            source=p["source"],
            include_dirs=p["include_dirs"],
            check_mode=module.check_mode,
            build_dir=module.tmpdir if module.check_mode else None,
            **arguments,
        ).deploy()
    except plane.Error as exc:
        if exc.problems:
            module.fail_json(msg=str(exc), problems=exc.problems)
        module.fail_json(msg=str(exc))
