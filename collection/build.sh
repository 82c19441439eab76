#!/usr/bin/env bash
# Build the xdpfleet.fabric collection tarball.
#
# collection/ansible_collections/xdpfleet/fabric links to the top-level sources so the collection works in place,
# but ansible-galaxy skips symlinks that point outside the collection. So: copy the collection's parts, with
# symlinks dereferenced, into <output>/stage/ansible_collections/xdpfleet/fabric and build from there.
#
# Usage: collection/build.sh [--output-path DIR]    (default DIR: <repo>/.build)
# Env:   ANSIBLE_GALAXY   ansible-galaxy to use (default: <repo>/.venv/bin/ansible-galaxy, else from PATH)
# Prints the tarball's path as the last line of its output.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="$repo/.build"

while [ $# -gt 0 ]; do
    case "$1" in
        --output-path|-o) out=$2; shift 2 ;;
        --output-path=*) out=${1#*=}; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) echo "build.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done

if [ -z "${ANSIBLE_GALAXY:-}" ]; then
    if [ -x "$repo/.venv/bin/ansible-galaxy" ]; then
        ANSIBLE_GALAXY=$repo/.venv/bin/ansible-galaxy
    else
        ANSIBLE_GALAXY=ansible-galaxy
    fi
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
stage_root="$out/stage"
stage="$stage_root/ansible_collections/xdpfleet/fabric"

rm -rf "$stage_root"
mkdir -p "$stage"

# What the collection ships, as "source in the repo:name in the collection". Tests are not shipped.
parts=(
    "collection/galaxy.yml:galaxy.yml"
    "collection/meta:meta"
    "collection/requirements.txt:requirements.txt"
    "collection/bindep.txt:bindep.txt"
    "collection/CHANGELOG.md:CHANGELOG.md"
    "collection/changelogs:changelogs"
    "README.md:README.md"
    "COPYING:COPYING"
    "plugins:plugins"
    "roles:roles"
    "playbooks:playbooks"
    "bpf:bpf"
)
for part in "${parts[@]}"; do
    src="$repo/${part%%:*}"
    dst="$stage/${part#*:}"
    [ -e "$src" ] || continue
    cp -RL "$src" "$dst"
done

for required in galaxy.yml meta/runtime.yml README.md; do
    if [ ! -e "$stage/$required" ]; then
        echo "build.sh: $required is missing from the collection" >&2
        exit 1
    fi
done

# Build droppings that must not ship.
find "$stage" \( -name __pycache__ -o -name '*.pyc' -o -name '*.o' -o -name '.pytest_cache' \) -prune \
    -exec rm -rf {} +

# No symlink may be left: ansible-galaxy would skip it silently.
if find "$stage" -type l | grep -q .; then
    echo "build.sh: symlinks left in $stage:" >&2
    find "$stage" -type l >&2
    exit 1
fi

"$ANSIBLE_GALAXY" collection build --force --output-path "$out" "$stage"

version=$(sed -n 's/^version:[[:space:]]*["'\'']\{0,1\}\([^"'\'' ]*\).*/\1/p' "$stage/galaxy.yml" | head -n1)
tarball="$out/xdpfleet-fabric-$version.tar.gz"
if [ ! -f "$tarball" ]; then
    echo "build.sh: expected $tarball was not written" >&2
    exit 1
fi
echo "$tarball"
