"""The compile cache (bpf/build.py): its key covers every file the compile reads, so an edited header anywhere is a
new object, never the one built before the edit. clang only, no root."""

import os

from ansible_collections.xdpfleet.fabric.plugins.module_utils.bpf import build as bpf_build

SOURCE = (
    "#include <linux/bpf.h>\n"
    "#include <bpf/bpf_helpers.h>\n"
    '#include "../shared/verdict.h"\n'
    '#include "sub/extra.h"\n'
    'SEC("xdp") int x(struct xdp_md *c) { return VERDICT + EXTRA; }\n'
    'char L[] SEC("license") = "GPL";\n'
)


def test_an_edited_header_outside_the_source_directory_is_a_new_object(tmp_path):
    """Headers reached through a relative path or a subdirectory are neither next to the source nor in an include
    directory: the key must still change when they do."""
    src = tmp_path / "src" / "p.c"
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "shared").mkdir()
    src.write_text(SOURCE)
    verdict, extra = tmp_path / "shared" / "verdict.h", tmp_path / "src" / "sub" / "extra.h"
    verdict.write_text("#define VERDICT XDP_PASS\n")
    extra.write_text("#define EXTRA 0\n")
    cache = str(tmp_path / "cache")
    first, built = bpf_build.compile_object(str(src), cache)
    assert built
    assert bpf_build.compile_object(str(src), cache) == (first, False), "unchanged: the cached object"
    objects = {first}
    for header, text in ((verdict, "#define VERDICT XDP_DROP\n"), (extra, "#define EXTRA 1\n")):
        header.write_text(text)
        again, built = bpf_build.compile_object(str(src), cache)
        assert built and again not in objects, f"{header.name} edited, the old object came back"
        objects.add(again)


def test_the_key_covers_the_system_headers(tmp_path):
    src = tmp_path / "p.c"
    src.write_text(SOURCE.replace('#include "../shared/verdict.h"\n#include "sub/extra.h"\n', ""))
    src.write_text(src.read_text().replace("VERDICT + EXTRA", "XDP_PASS"))
    read = bpf_build.dependencies(str(src), bpf_build.compile_flags([], {}))
    assert read[0] == str(src)
    assert "/usr/include/linux/bpf.h" in read
    assert any(path.endswith("/bpf/bpf_helpers.h") for path in read)
    assert all(os.path.isfile(path) for path in read)


def test_the_cache_directory_is_made_private(tmp_path):
    src = tmp_path / "p.c"
    src.write_text(
        SOURCE.replace('#include "../shared/verdict.h"\n#include "sub/extra.h"\n', "").replace(
            "VERDICT + EXTRA", "XDP_PASS"
        )
    )
    cache = tmp_path / "var" / "cache"
    path, _ = bpf_build.compile_object(str(src), str(cache))
    modes = {p: oct(os.stat(p).st_mode & 0o777) for p in (cache.parent, cache, path)}
    assert modes == {cache.parent: "0o700", cache: "0o700", path: "0o600"}
