#!/bin/sh
# pyclassify installed into a Debian root filesystem, run inside it as root: by
# scripts/build-image.sh (in a chroot of a debootstrap base, no network: the wheels are all in
# WHEEL_DIR and PIP_NO_INDEX is set) and by deploy/Containerfile (RUN), so the two images are
# made by the same steps.
#
#   sh install.sh WHEEL_DIR
#
# WHEEL_DIR holds pyclassify's wheel and, optionally, its dependencies' (pip takes the rest from
# PyPI, at the versions pyproject.toml pins). The package goes into a virtualenv, /opt/pyclassify,
# apart from Debian's Python packages; `pyclassify` is on PATH through /usr/local/bin.
set -eu
here=$(dirname "$0")
wheels=$1
[ -n "$(ls "$wheels"/pyclassify-*.whl 2>/dev/null)" ] || { echo "install.sh: no pyclassify wheel in $wheels" >&2; exit 1; }

missing=""
for package in $(sed 's/#.*//' "$here/packages.txt"); do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing="$missing $package"
done
if [ -n "$missing" ]; then
    apt-get update
    # shellcheck disable=SC2086  # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
fi

python3 -m venv /opt/pyclassify
/opt/pyclassify/bin/python -m pip install --no-cache-dir --disable-pip-version-check -q \
    --find-links "$wheels" "$wheels"/pyclassify-*.whl
# pip and setuptools were needed for the install only.
/opt/pyclassify/bin/python -m pip uninstall -y -q pip setuptools
ln -sf /opt/pyclassify/bin/pyclassify /usr/local/bin/pyclassify

# What a running daemon never reads: package lists and caches, manuals, translations,
# documentation (the copyright files kept), logs of the build; and the Kubernetes client's
# asyncio variant (kubernetes.aio, half the package): pyclassify uses the synchronous client.
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old /var/log/* \
    /usr/share/man/* /usr/share/info/* /root/.cache /opt/pyclassify/lib/python3*/site-packages/kubernetes/aio
find /usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
find /usr/share/doc -type f ! -name copyright -delete
pyclassify --help >/dev/null
