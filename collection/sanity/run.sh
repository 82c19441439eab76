#!/usr/bin/env bash
# ansible-test sanity on the collection as built: build it with collection/build.sh, add the sanity ignore file
# (ansible-test reads it from the collection's tests/sanity/; the tarball ships no tests/), and run ansible-test
# from inside the staged copy, every sanity test in a virtual environment of its own.
#
# Usage: collection/sanity/run.sh [--output-path DIR] [ansible-test sanity options...]
#        (default DIR: <repo>/.build/sanity; e.g. `--test pylint` runs one test)
# Env:   ANSIBLE_TEST    ansible-test to use (default: <repo>/.venv/bin/ansible-test)
#
# ansible-test bootstraps pip into those environments with a get-pip script it downloads from a host this machine
# cannot reach, or takes from ~/.ansible/test/cache/ when one is there: get_pip_offline.py is put there first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out="$repo/.build/sanity"
if [ "${1:-}" = --output-path ]; then
    out=$2
    shift 2
fi
ansible_test=${ANSIBLE_TEST:-$repo/.venv/bin/ansible-test}
# ansible-test's own interpreter (its shebang): the one whose ansible_test package says which pip it bootstraps.
python=$(sed -n '1s/^#!//p' "$ansible_test")
python_version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')

pip_version=$("$python" -c '
import sys, types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version=sys.argv[1])).get("pip", ""))
' "$python_version") || true
if [ -z "$pip_version" ]; then
    echo "sanity: cannot tell which pip version $ansible_test bootstraps (its internals changed?)" >&2
    exit 1
fi
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if ! cmp -s "$here/get_pip_offline.py" "$cache"; then
    mkdir -p "$(dirname "$cache")"
    cp "$here/get_pip_offline.py" "$cache.$$"
    mv -f "$cache.$$" "$cache"  # whole or not at all, for an ansible-test of another checkout running now
fi

ANSIBLE_GALAXY=${ANSIBLE_GALAXY:-$(dirname "$ansible_test")/ansible-galaxy} \
    "$repo/collection/build.sh" --output-path "$out" >/dev/null
stage="$out/stage/ansible_collections/xdpfleet/fabric"
mkdir -p "$stage/tests/sanity"
cp "$here"/ignore-*.txt "$stage/tests/sanity/"

cd "$stage"
# ansible-test lists a collection's files with git when it lies inside a work tree, and .build/ is ignored by the
# repository's: a repository of its own makes the staged files the ones it tests (untracked files count).
git init -q .
# --python finds python<version> on PATH: put the one next to ansible-test first. The repository's ansible.cfg
# points at the in-place collection; ansible-test must see only the staged one.
PATH="$(dirname "$python"):$PATH" exec env -u ANSIBLE_CONFIG \
    "$ansible_test" sanity --python "$python_version" --requirements --color no "$@"
