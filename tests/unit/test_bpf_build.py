"""The compile cache (bpf/build.py): its key covers every file the compile reads, so an edited header anywhere is a
new object, never the one built before the edit. clang only, no root."""

import os
import shutil

import pytest

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


def test_clang_older_than_the_oldest_that_builds_the_c_is_refused_by_version():
    assert bpf_build.clang_problem("Debian clang version 14.0.6") is None
    assert bpf_build.clang_problem("clang version 13.0.1 (Fedora 13.0.1-1.fc35)") is None
    assert bpf_build.clang_problem("Ubuntu clang version 12.0.1-19ubuntu3") == (
        "clang: Ubuntu clang version 12.0.1-19ubuntu3 is too old; the C needs clang 13 or newer (kfunc externs and "
        "BTF-defined map-in-map definitions)"
    )
    assert "cannot tell the version" in bpf_build.clang_problem("gcc (Debian 12.2.0-14) 12.2.0")


# ---- the manifest: a cache hit runs no compiler ------------------------------------------------------------------


def recording_clang(path, calls, version_note=""):
    """A clang on `path` that appends each call's arguments to `calls` and runs the real clang; `version_note`
    changes what `--version` says, as another build of the compiler would."""
    real = shutil.which("clang")
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{calls}"\n'
        f'if [ "$1" = --version ] && [ -n "{version_note}" ]; then echo "clang {version_note}"; exit 0; fi\n'
        f'exec "{real}" "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def clang_calls(tmp_path, monkeypatch):
    """The calls the compile makes to clang, read and cleared by calling the fixture."""
    log = tmp_path / "clang-calls"
    monkeypatch.setattr(bpf_build, "CLANG", recording_clang(tmp_path / "clang", log))

    def take() -> list[str]:
        calls = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return calls

    return take


def nested_tree(tmp_path):
    """p.c includes outer.h, which includes inner.h; both next to the source."""
    src = tmp_path / "src" / "p.c"
    src.parent.mkdir()
    src.write_text(SOURCE.replace('#include "../shared/verdict.h"\n#include "sub/extra.h"\n', '#include "outer.h"\n'))
    (src.parent / "outer.h").write_text('#include "inner.h"\n#define EXTRA 0\n')
    (src.parent / "inner.h").write_text("#define VERDICT XDP_PASS\n")
    return src


def test_a_cache_hit_runs_no_compiler(tmp_path, clang_calls):
    src, cache = nested_tree(tmp_path), str(tmp_path / "cache")
    first, built = bpf_build.compile_object(str(src), cache)
    assert built
    assert any("-c" in call.split() for call in clang_calls()), "the miss compiled"
    for _ in range(2):
        assert bpf_build.compile_object(str(src), cache) == (first, False)
        assert clang_calls() == [], "a hit ran the compiler"


def test_an_edited_nested_header_rebuilds_and_a_new_include_is_followed(tmp_path, clang_calls):
    src, cache = nested_tree(tmp_path), str(tmp_path / "cache")
    objects = {bpf_build.compile_object(str(src), cache)[0]}
    inner = src.parent / "inner.h"
    inner.write_text("#define VERDICT XDP_DROP\n")
    again, built = bpf_build.compile_object(str(src), cache)
    assert built and again not in objects, "inner.h edited, the old object came back"
    objects.add(again)
    # inner.h now includes a header of its own: the next edit of that one must rebuild too.
    inner.write_text('#include "innermost.h"\n#define VERDICT XDP_DROP\n')
    (src.parent / "innermost.h").write_text("#define UNUSED 1\n")
    again, built = bpf_build.compile_object(str(src), cache)
    assert built and again not in objects
    objects.add(again)
    clang_calls()
    assert bpf_build.compile_object(str(src), cache) == (again, False)
    assert clang_calls() == []
    (src.parent / "innermost.h").write_text("#define UNUSED 2\n")
    again, built = bpf_build.compile_object(str(src), cache)
    assert built and again not in objects, "innermost.h edited, the old object came back"


def test_other_flags_are_another_object_and_each_stays_a_hit(tmp_path, clang_calls):
    src, cache = nested_tree(tmp_path), str(tmp_path / "cache")
    plain, _ = bpf_build.compile_object(str(src), cache)
    defined, built = bpf_build.compile_object(str(src), cache, defines={"X": 1})
    assert built and defined != plain
    clang_calls()
    assert bpf_build.compile_object(str(src), cache) == (plain, False)
    assert bpf_build.compile_object(str(src), cache, defines={"X": 1}) == (defined, False)
    assert clang_calls() == []


def test_another_compiler_is_asked_again_and_rebuilds_when_it_is_another_version(tmp_path, clang_calls):
    src, cache = nested_tree(tmp_path), str(tmp_path / "cache")
    first, _ = bpf_build.compile_object(str(src), cache)
    clang_calls()
    # The same clang behind a changed file (a reinstall): asked for its version and the files read, same object.
    wrapper = tmp_path / "clang"
    wrapper.write_text(wrapper.read_text() + "# reinstalled\n")
    assert bpf_build.compile_object(str(src), cache) == (first, False)
    assert any(call.startswith("--version") for call in clang_calls())
    # Another version of clang: another object.
    recording_clang(wrapper, tmp_path / "clang-calls", version_note="version 99.0.0 (another build)")
    again, built = bpf_build.compile_object(str(src), cache)
    assert built and again != first


def test_a_new_header_earlier_in_the_search_list_rebuilds(tmp_path, clang_calls):
    """A header that would now be found before the one compiled (a new file in an earlier include directory) is not
    an edit of any file the compile read: the manifest records where it would be."""
    src = tmp_path / "src" / "p.c"
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    for d in (src.parent, first_dir, second_dir):
        d.mkdir()
    src.write_text(SOURCE.replace('#include "../shared/verdict.h"\n#include "sub/extra.h"\n', "#include <v.h>\n"))
    (second_dir / "v.h").write_text("#define VERDICT XDP_PASS\n#define EXTRA 0\n")
    cache, include = str(tmp_path / "cache"), [str(first_dir), str(second_dir)]
    first, _ = bpf_build.compile_object(str(src), cache, include)
    assert bpf_build.compile_object(str(src), cache, include) == (first, False)
    (first_dir / "v.h").write_text("#define VERDICT XDP_DROP\n#define EXTRA 0\n")
    again, built = bpf_build.compile_object(str(src), cache, include)
    assert built and again != first


def test_check_mode_leaves_the_cache_as_it_was(tmp_path, clang_calls):
    src, cache, scratch = nested_tree(tmp_path), tmp_path / "cache", tmp_path / "check"
    first, _ = bpf_build.compile_object(str(src), str(cache))
    before = sorted(p.name for p in cache.iterdir())
    (src.parent / "inner.h").write_text("#define VERDICT XDP_DROP\n")
    built_aside, built = bpf_build.compile_object(str(src), str(cache), build_dir=str(scratch))
    assert built and os.path.dirname(built_aside) == str(scratch)
    assert sorted(p.name for p in cache.iterdir()) == before
    # And the cached object's manifest still finds it once the header is as it was.
    (src.parent / "inner.h").write_text("#define VERDICT XDP_PASS\n")
    clang_calls()
    assert bpf_build.compile_object(str(src), str(cache), build_dir=str(scratch)) == (first, False)
    assert clang_calls() == []
