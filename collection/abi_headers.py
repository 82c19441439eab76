"""`make abi`: rewrite each data plane's generated C header (bpf/<plane>/<plane>_abi.h) that differs from what its
declarations in plugins/module_utils/<plane>/abi.py (the numbers) and layouts.py (the structs) render
(docs/architecture.md, "Adding a data plane")."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collection"))

from ansible_collections.xdpfleet.fabric.plugins.module_utils.instances.registry import HEADERS

for declared in HEADERS:
    header = ROOT / declared.path
    text = declared.render()
    if not header.is_file() or header.read_text() != text:
        header.write_text(text)
        print(f"written: {declared.path}")
