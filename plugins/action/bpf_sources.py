# Copyright: xdpfleet developers
# GNU General Public License v2.0 only (see COPYING or https://www.gnu.org/licenses/gpl-2.0.txt)
"""xdpfleet.fabric.bpf_sources: the controller's side. Reads one of the collection's trees (bpf/, or with
tree=module_utils plugins/module_utils/) and runs the module of the same name once with all of it
(ansible.builtin.copy of a tree runs two modules per file)."""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

# <collection>/plugins/action/bpf_sources.py -> <collection>/bpf
COLLECTION_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BPF_DIR = os.path.join(COLLECTION_DIR, "bpf")
TREES = {"bpf": BPF_DIR, "module_utils": os.path.join(COLLECTION_DIR, "plugins", "module_utils")}


def read_tree(root: str) -> list[dict]:
    """Every file under `root` (symbolic links followed, as the copy module did) as {path, content}, sorted;
    Python's byte-code caches left out (made on the controller, for its Python)."""
    tree = []
    for directory, dirs, names in os.walk(root, followlinks=True):
        if "__pycache__" in dirs:
            dirs.remove("__pycache__")
        for name in names:
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            with open(path, "rb") as f:
                data = f.read()
            try:
                tree.append({"path": rel, "content": data.decode("utf-8")})
            except UnicodeDecodeError as exc:
                raise AnsibleActionFail(f"files: {path} is not UTF-8 text ({exc})") from None
    if not tree:
        raise AnsibleActionFail(f"files: {root} holds no file; is the collection complete?")
    return sorted(tree, key=lambda entry: entry["path"])


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if "files" in args:
            raise AnsibleActionFail("files: set from the collection's tree (option tree), not by a task")
        tree = args.get("tree", "bpf")
        if tree not in TREES:
            raise AnsibleActionFail(f"tree: {tree!r} is not one of {', '.join(TREES)}")
        try:
            args["files"] = read_tree(TREES[tree])
        except OSError as exc:
            raise AnsibleActionFail(f"files: cannot read the collection's tree in {TREES[tree]}: {exc}") from None
        result.update(
            self._execute_module(module_name="xdpfleet.fabric.bpf_sources", module_args=args, task_vars=task_vars)
        )
        # The module echoes its arguments back (-vvv shows them, a registered result keeps them): the paths say it.
        invocation = result.get("invocation", {}).get("module_args", {})
        if "files" in invocation:
            invocation["files"] = [entry["path"] for entry in args["files"]]
        return result
