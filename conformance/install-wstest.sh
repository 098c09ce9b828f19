#!/usr/bin/env bash
# Installs the real Autobahn|Testsuite (`wstest`, PyPI autobahntestsuite==25.10.1, Python 2.7 only)
# self-contained under PREFIX (default: $SOCKEYE_CACHE/wstest, SOCKEYE_CACHE defaults to ~/.cache/sockeye).
#
# Python 2.7 is gone from Debian 12, so the interpreter and the two libraries its _ssl/_ctypes need
# (libssl1.1, libffi7) are downloaded as Debian *bullseye* .debs with a private apt state directory
# (the system's apt sources and dpkg database are not touched) and unpacked with `dpkg -x`.
# pip 20.3.4 (the last for 2.7) bootstraps from its own wheel; every package is pinned through
# PIP_CONSTRAINT so that wsaccel's isolated build obeys the pins too. Only wsaccel is compiled (gcc).
#
# Idempotent: a stamp file plus an import check make a second run a no-op (~0.5 s).
# Env: WSTEST_FORCE=1 reinstalls; WSTEST_DEBIAN_MIRROR overrides the mirror (use
# http://archive.debian.org/debian once bullseye leaves the main mirror).
#
# Pitfall: the autobahntestsuite *sdist* lacks requirements.txt and so installs no pins; only the
# py2 wheel carries them. Never pass --no-binary for it.
set -euo pipefail

CACHE="${SOCKEYE_CACHE:-$HOME/.cache/sockeye}"
PREFIX="$(realpath -m "${1:-$CACHE/wstest}")"
MIRROR="${WSTEST_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STAMP="autobahntestsuite-25.10.1/python-2.7.18-bullseye/sockeye-1"
ROOT="$PREFIX/root"
say() { printf '[install-wstest] %s\n' "$*" >&2; }

installed() {
  [ -x "$PREFIX/bin/wstest" ] && [ "$(cat "$PREFIX/.stamp" 2>/dev/null)" = "$STAMP" ] &&
    "$PREFIX/bin/python2.7" -c 'import autobahntestsuite, autobahn, twisted, OpenSSL, wsaccel' 2>/dev/null
}
if [ "${WSTEST_FORCE:-0}" != 1 ] && installed; then
  say "already installed: $PREFIX/bin/wstest"
  exit 0
fi
if [ -e "$PREFIX" ] && [ -n "$(ls -A "$PREFIX" 2>/dev/null)" ] && [ ! -e "$PREFIX/.made-by-sockeye" ]; then
  say "$PREFIX is not empty and was not made by this script; refusing to overwrite it"
  exit 1
fi

# Build tools: gcc and libc headers for wsaccel; the archive keyring to verify bullseye's Release file.
need=()
command -v gcc >/dev/null || need+=(gcc)
[ -e /usr/include/stdio.h ] || need+=(libc6-dev)
[ -r /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} with apt-get"
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
ARCH="$(dpkg --print-architecture)"
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

WORK="$(mktemp -d /tmp/sockeye-wstest.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

say "downloading Python 2.7 from Debian bullseye ($ARCH)"
APT="$WORK/apt"
mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$WORK/debs"
echo "deb [arch=$ARCH signed-by=$KEYRING] $MIRROR bullseye main" >"$APT/sources.list"
aptopts=(-q -o Dir::Etc::sourcelist="$APT/sources.list" -o Dir::Etc::sourceparts=/dev/null
  -o Dir::State::Lists="$APT/lists" -o Dir::Cache="$APT/cache" -o APT::Sandbox::User=root)
apt-get "${aptopts[@]}" update >/dev/null
debs=(python2.7 python2.7-minimal libpython2.7-minimal libpython2.7-stdlib libpython2.7
  libpython2.7-dev python2.7-dev libssl1.1 libffi7)
# Bookworm ships these runtime libraries under the same names; fetch bullseye's only when missing.
for p in zlib1g libbz2-1.0 libexpat1 libsqlite3-0 libreadline8 libncursesw6 libtinfo6 libdb5.3 \
  libnsl2 libtirpc3 libcrypt1; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || debs+=("$p")
done
py3pip=0
python3 -m pip --version >/dev/null 2>&1 && py3pip=1
[ "$py3pip" = 1 ] || debs+=(python-pip-whl)
(cd "$WORK/debs" && apt-get "${aptopts[@]}" download "${debs[@]}" >/dev/null)

rm -rf "$PREFIX"
mkdir -p "$ROOT" "$PREFIX/bin"
echo "made by sockeye conformance/install-wstest.sh; safe to delete" >"$PREFIX/.made-by-sockeye"
for d in "$WORK"/debs/*.deb; do dpkg -x "$d" "$ROOT"; done
LIBDIR="$(dirname "$(ls "$ROOT"/usr/lib/*/libpython2.7.so.1.0)")"

cat >"$PREFIX/bin/python2.7" <<WRAP
#!/bin/sh
# Python 2.7 from Debian bullseye, unpacked under $ROOT; it finds its prefix from its own path.
LD_LIBRARY_PATH="$LIBDIR\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
PYTHONNOUSERSITE=1
PYTHONWARNINGS="\${PYTHONWARNINGS:-ignore:Python 2 is no longer supported}"
export LD_LIBRARY_PATH PYTHONNOUSERSITE PYTHONWARNINGS
unset PYTHONHOME PYTHONPATH PYTHONSTARTUP
exec "$ROOT/usr/bin/python2.7" "\$@"
WRAP
cat >"$PREFIX/bin/pip" <<WRAP
#!/bin/sh
# sysconfig hard-codes -I/usr/include/python2.7; point the compiler at the unpacked headers.
CPATH="$ROOT/usr/include/python2.7:$ROOT/usr/include\${CPATH:+:\$CPATH}"
export CPATH
exec "$PREFIX/bin/python2.7" -m pip --disable-pip-version-check "\$@"
WRAP
cat >"$PREFIX/bin/wstest" <<WRAP
#!/bin/sh
exec "$PREFIX/bin/python2.7" -c 'import sys; from autobahntestsuite.wstest import run; sys.argv[0] = "wstest"; sys.exit(run())' "\$@"
WRAP
chmod 755 "$PREFIX"/bin/*
"$PREFIX/bin/python2.7" -c 'import ssl, ctypes, zlib, hashlib' || { say "the unpacked python2.7 is broken"; exit 1; }

say "bootstrapping pip 20.3.4"
if [ "$py3pip" = 1 ]; then
  python3 -m pip download -q --no-deps --only-binary :all: --python-version 27 --implementation py \
    --abi none --platform any -d "$WORK/pip" pip==20.3.4
  wheel="$(ls "$WORK"/pip/pip-20.3.4-*.whl)"
else
  wheel="$(ls "$ROOT"/usr/share/python-wheels/pip-20.3.4-*.whl)"
fi
pipflags=(-q --no-cache-dir --no-warn-script-location --no-python-version-warning)
"$PREFIX/bin/python2.7" "$wheel/pip" install "${pipflags[@]}" --disable-pip-version-check \
  pip==20.3.4 setuptools==44.0.0 wheel==0.37.1

# autobahntestsuite 25.10.1's own pins, then its transitive dependencies as resolved by pip 20.3.4,
# then Cython, which only wsaccel's build needs.
cat >"$PREFIX/constraints.txt" <<'PINS'
setuptools==44.0.0
txaio==2.1.0
incremental==16.10.1
pyOpenSSL==19.1.0
cryptography==3.3.2
Twisted==19.10.0
zope.interface==4.6.0
Jinja2==2.11.3
MarkupSafe==1.1.1
Werkzeug==1.0.1
klein==17.10.0
service-identity==18.1.0
unittest2==1.1.0
six==1.16.0
autobahn==0.10.9
attrs==21.4.0
Automat==22.10.0
cffi==1.15.1
constantly==15.1.0
enum34==1.1.10
hyperlink==21.0.0
idna==2.10
ipaddress==1.0.23
linecache2==1.0.0
pyasn1==0.5.1
pyasn1-modules==0.3.0
pycparser==2.21
PyHamcrest==1.10.1
traceback2==1.4.0
typing==3.10.0.0
ujson==2.0.3
wsaccel==0.6.6
Cython==3.0.12
PINS
say "installing autobahntestsuite 25.10.1 (compiles wsaccel)"
PIP_CONSTRAINT="$PREFIX/constraints.txt" "$PREFIX/bin/pip" install "${pipflags[@]}" autobahntestsuite==25.10.1
"$PREFIX/bin/python2.7" -c 'import autobahntestsuite, autobahn, twisted, OpenSSL, wsaccel, ujson'
echo "$STAMP" >"$PREFIX/.stamp"
say "installed: $PREFIX/bin/wstest"
