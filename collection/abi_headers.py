"""`make abi`: rewrite each data plane's generated C header (bpf/<plane>/<plane>_abi.h) that differs from what its
declaration in plugins/module_utils/<plane>/abi.py renders."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collection"))

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf.abi import collection_abis

for declared in collection_abis(str(ROOT)):
    header = ROOT / declared.header
    text = declared.render()
    if not header.is_file() or header.read_text() != text:
        header.write_text(text)
        print(f"written: {declared.header}")
