#!/usr/bin/env bash
# Installs what the interop tests use, idempotently: Debian's tinyproxy, dante-server (danted),
# chromium, firefox-esr, libnss3-tools (certutil) and openssl; Node's `ws` and `playwright-core`
# (interop/node, from package-lock.json); Python's `websockets` in a virtual environment under
# ~/.cache/sockeye/interop-venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

need=()
command -v tinyproxy >/dev/null 2>&1 || [ -x /usr/bin/tinyproxy ] || need+=(tinyproxy)
[ -x /usr/sbin/danted ] || need+=(dante-server)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || need+=(firefox-esr)
command -v certutil >/dev/null 2>&1 || need+=(libnss3-tools)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
  echo "==> apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Package scripts must not start system services: the tests start their own, on loopback.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  }
fi

bash install-node.sh

VENV="${HOME}/.cache/sockeye/interop-venv"
if ! "$VENV/bin/python" -c 'import websockets' >/dev/null 2>&1; then
  echo "==> pip install websockets (into $VENV)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r python/requirements.txt
fi
