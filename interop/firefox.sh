#!/usr/bin/env bash
# Headless Firefox ESR (Debian's `firefox-esr`, no downloaded browser build) loads the axum
# example's page with `report=1`; the page sends its PASS/FAIL back as `GET /report/<result>`, which
# the example logs. Firefox trusts the run's test CA through a fresh profile's NSS database
# (interop/firefox-profile.sh). Run as root it needs its sandboxes off. HOME is a temporary
# directory too, so nothing is left in the real one.
# Usage: bash interop/firefox.sh URL SERVER_LOG CA_PEM
set -euo pipefail
url=$1 log=$2 ca=$3
dir=$(mktemp -d)
ff=
cleanup() {
  if [ -n "$ff" ]; then kill "$ff" 2>/dev/null || true; wait "$ff" 2>/dev/null || true; fi
  rm -rf "$dir"
}
trap cleanup EXIT
profile=$dir/profile
bash "$(dirname "${BASH_SOURCE[0]}")/firefox-profile.sh" "$profile" "$ca"
export HOME=$dir MOZ_DISABLE_CONTENT_SANDBOX=1 MOZ_DISABLE_GMP_SANDBOX=1 MOZ_DISABLE_RDD_SANDBOX=1 \
  MOZ_DISABLE_SOCKET_PROCESS_SANDBOX=1
version=$(firefox-esr --version 2>/dev/null | awk '{print $NF}')
timeout 50 firefox-esr --headless --no-remote --profile "$profile" "$url" >"$dir/firefox.log" 2>&1 &
ff=$!
report=
for _ in $(seq 400); do
  report=$(sed -n 's|^request: .* GET /report/\([^ ]*\) peer=.*|\1|p' "$log" | head -1)
  [ -n "$report" ] && break
  kill -0 "$ff" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$report" ]; then
  tail -5 "$dir/firefox.log" >&2
  echo "FAIL firefox $version: no report from the page in $log"
  exit 1
fi
result=$(printf '%b' "${report//%/\\x}")
echo "firefox $version: $result"
[[ $result == PASS* ]]
