#!/usr/bin/env bash
# Build (or reuse) the pyclassify OCI image from Debian's packages and this checkout only (no
# container registry): a minimal Debian made by debootstrap, the wheel built from this checkout's
# sdist, deploy/image/install.sh run in a chroot of it (the same script deploy/Containerfile
# runs), assembled into an OCI image layout with umoci.
#
#   bash scripts/build-image.sh   build what is not cached, print the OCI layout's directory;
#                                 the image is its tag pyclassify's version (umoci: DIR:0.1.0)
#
# Needs root (debootstrap, chroot), debootstrap, umoci, python3 of the image's minor version
# (the wheel is built for it) with a Rust toolchain and a C compiler, and reaches Debian's
# mirror and PyPI only. Cached outside the checkout, ${PYCLASSIFY_IMAGE_CACHE:-~/.cache/pyclassify-image}:
#   base-<release>-<hash of packages.txt>.tar   the debootstrap base, its packages included
#   image-<hash>/oci                            the image, keyed by the sdist's content, this
#                                               script, install.sh, packages.txt and the release
#   cargo-target/                               the wheel build's Rust output (incremental)
# The sdist is always built (its content is the key); the rest only when a key is new.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
CACHE=${PYCLASSIFY_IMAGE_CACHE:-${HOME:-/root}/.cache/pyclassify-image}
PYTHON=${PYTHON:-python3}
BUILD_VERSION=1.6.1  # the `build` frontend, as scripts/install_check.sh pins it
RELEASE=${DEBIAN_RELEASE:-$(. /etc/os-release && echo "$VERSION_CODENAME")}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
IMAGE_DIR=$repo/deploy/image
packages=$(sed 's/#.*//' "$IMAGE_DIR/packages.txt" | xargs)
version=$("$PYTHON" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')

say() { echo "build-image: $*" >&2; }
[[ "$(id -u)" == 0 ]] || { say "needs root (debootstrap, chroot)"; exit 1; }
for tool in debootstrap umoci chroot; do
    command -v "$tool" >/dev/null || { say "$tool is not installed (apt-get install debootstrap umoci)"; exit 1; }
done

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
work=$(mktemp -d "${TMPDIR:-/tmp}/pyclassify-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
started=$SECONDS

# The minimal Debian with the image's packages, once per release and package list.
base="$CACHE/base-$RELEASE-$(printf '%s\n' "$RELEASE" $packages | sha256sum | cut -c1-16).tar"
if [[ ! -f "$base" ]]; then
    say "debootstrap --variant=minbase $RELEASE with: $packages"
    debootstrap --variant=minbase --include="${packages// /,}" "$RELEASE" "$work/base" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 30 "$work/debootstrap.log" >&2; say "debootstrap failed"; exit 1; }
    chroot "$work/base" apt-get clean  # the .debs debootstrap fetched
    tar -C "$work/base" --numeric-owner -cf "$base.tmp" .
    mv "$base.tmp" "$base"
    rm -rf "$work/base"
    say "base ready after $((SECONDS - started)) s"
fi

# The sdist, whose content (names, modes, bytes; not the archive's timestamps) keys the image.
tools="$CACHE/tools-build-$BUILD_VERSION"
if [[ ! -f "$tools/.complete" ]]; then
    rm -rf "$tools"
    "$PYTHON" -m venv "$tools"
    "$tools/bin/python" -m pip install -q --disable-pip-version-check "build==$BUILD_VERSION"
    touch "$tools/.complete"
fi
"$tools/bin/python" -m build --sdist --outdir "$work/sdist" . >"$work/sdist.log" 2>&1 \
    || { tail -n 30 "$work/sdist.log" >&2; say "sdist build failed"; exit 1; }
sdist=$(echo "$work"/sdist/pyclassify-*.tar.gz)
sdist_hash=$("$PYTHON" - "$sdist" <<'PY'
import hashlib, sys, tarfile
h = hashlib.sha256()
with tarfile.open(sys.argv[1]) as tar:
    for m in sorted(tar.getmembers(), key=lambda m: m.name):
        h.update(f"{m.name}\0{m.type.decode()}\0{m.mode & 0o111}\0".encode())
        if m.isfile():
            h.update(hashlib.sha256(tar.extractfile(m).read()).digest())
print(h.hexdigest())
PY
)
key=$(cat <(echo "$sdist_hash $RELEASE $packages") "$repo/scripts/build-image.sh" "$IMAGE_DIR/install.sh" "$IMAGE_DIR/packages.txt" | sha256sum | cut -c1-16)
out="$CACHE/image-$key"
if [[ -f "$out/.complete" ]]; then
    say "cached: $out/oci:$version"
    echo "$out/oci"
    exit 0
fi

# The root filesystem: the base unpacked, the wheel built for its Python.
mkdir "$work/rootfs"
tar -C "$work/rootfs" --numeric-owner -xf "$base"
image_python=$(chroot "$work/rootfs" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
host_python=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ "$image_python" == "$host_python" ]] \
    || { say "the image's Python is $image_python, $PYTHON is $host_python: set PYTHON to a python$image_python"; exit 1; }
say "wheel from the sdist (the Rust engine's build reuses $CACHE/cargo-target)"
CARGO_TARGET_DIR="$CACHE/cargo-target" "$PYTHON" -m pip wheel -q --disable-pip-version-check --no-deps \
    --wheel-dir "$work/wheels" "$sdist" >"$work/wheel.log" 2>&1 \
    || { tail -n 40 "$work/wheel.log" >&2; say "wheel build failed"; exit 1; }
# Its dependencies' wheels, fetched here so that the chroot needs no network.
"$PYTHON" -m pip download -q --disable-pip-version-check --only-binary=:all: --dest "$work/wheels" \
    "$work"/wheels/pyclassify-*.whl >"$work/download.log" 2>&1 \
    || { tail -n 30 "$work/download.log" >&2; say "fetching the dependencies failed"; exit 1; }

mkdir "$work/rootfs/tmp/image"
cp "$IMAGE_DIR/install.sh" "$IMAGE_DIR/packages.txt" "$work/rootfs/tmp/image/"
cp -r "$work/wheels" "$work/rootfs/tmp/image/wheels"
say "install.sh in a chroot of the base"
env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_NO_INDEX=1 \
    chroot "$work/rootfs" /bin/sh /tmp/image/install.sh /tmp/image/wheels
rm -rf "$work/rootfs/tmp/image"

# The OCI image: the root filesystem as one layer, and the configuration deploy/Containerfile
# gives (tests/deploy/test_image.py compares the two).
say "umoci: the OCI image $version"
layout="$work/out/oci"
mkdir -p "$work/out"
umoci init --layout "$layout"
umoci new --image "$layout:$version"
umoci insert --image "$layout:$version" "$work/rootfs" /
umoci config --image "$layout:$version" \
    --config.user 0:0 \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.entrypoint pyclassify --config.cmd=--help \
    --config.workingdir / \
    --config.label "org.opencontainers.image.version=$version"
umoci gc --layout "$layout"
rm -rf "$out"
mv "$work/out" "$out"
touch "$out/.complete"
# Older images (other checkouts' keys) beyond the three newest are dropped.
ls -dt "$CACHE"/image-* 2>/dev/null | tail -n +4 | xargs -r rm -rf
say "built $out/oci:$version in $((SECONDS - started)) s"
echo "$out/oci"
