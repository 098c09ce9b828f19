#!/usr/bin/env bash
# conformance/run.sh server|client [--cases '1.*,2.*'] [--no-build]
#
# Runs the real Autobahn|Testsuite (wstest 25.10.1) against Sockeye and compares every case with
# conformance/expected.json; exits non-zero on any difference (wstest's own exit code says nothing
# about results).
#   server: wstest's fuzzingclient tests sockeye-autobahn-server on 127.0.0.1:$SERVER_PORT (9002);
#           report in target/autobahn/servers/index.json
#   client: wstest's fuzzingserver on 127.0.0.1:$CLIENT_PORT (9001) tests sockeye-autobahn-client;
#           report in target/autobahn/clients/index.json
# Installs wstest first if needed (conformance/install-wstest.sh, idempotent).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { echo "usage: conformance/run.sh server|client [--cases '1.*,2.*'] [--no-build]" >&2; exit 2; }
[ $# -ge 1 ] || usage
ROLE="$1"; shift
case "$ROLE" in server|client) ;; *) usage ;; esac
CASES='*'
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) [ $# -ge 2 ] || usage; CASES="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --tls) echo "run.sh: --tls is not available yet (wss:// support is a separate issue)" >&2; exit 2 ;;
    *) usage ;;
  esac
done
SERVER_PORT="${SOCKEYE_AUTOBAHN_SERVER_PORT:-9002}"
CLIENT_PORT="${SOCKEYE_AUTOBAHN_CLIENT_PORT:-9001}"
CACHE="${SOCKEYE_CACHE:-$HOME/.cache/sockeye}"
WSTEST="$CACHE/wstest/bin/wstest"
BIN="$ROOT/target/release"
OUT="$ROOT/target/autobahn"
say() { printf '[autobahn %s] %s\n' "$ROLE" "$*" >&2; }

bash "$ROOT/conformance/install-wstest.sh" "$CACHE/wstest"
if [ "$BUILD" = 1 ]; then
  say "building the testees (release)"
  (cd "$ROOT" && cargo build --release --quiet -p sockeye-conformance)
fi

# The case list as JSON: '1.*,2.*' -> ["1.*", "2.*"].
CASES_JSON="$(python3 -c 'import json,sys; print(json.dumps([c.strip() for c in sys.argv[1].split(",") if c.strip()]))' "$CASES")"
mkdir -p "$OUT"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_for_port() { # port, seconds
  local deadline=$((SECONDS + $2))
  until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { say "nothing listens on 127.0.0.1:$1 after $2 s"; return 1; }
    sleep 0.1
  done
}
port_free() {
  if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
    say "127.0.0.1:$1 is already in use (a leftover testee or wstest?)"; return 1
  fi
}

START=$SECONDS
if [ "$ROLE" = server ]; then
  REPORT="$OUT/servers"
  rm -rf "$REPORT"
  cat >"$OUT/fuzzingclient.json" <<JSON
{"options": {"failByDrop": false}, "outdir": "./servers",
 "servers": [{"agent": "sockeye", "url": "ws://127.0.0.1:$SERVER_PORT"}],
 "cases": $CASES_JSON, "exclude-cases": [], "exclude-agent-cases": {}}
JSON
  port_free "$SERVER_PORT"
  "$BIN/sockeye-autobahn-server" "127.0.0.1:$SERVER_PORT" 2>"$OUT/testee-server.log" &
  PIDS+=($!)
  wait_for_port "$SERVER_PORT" 10
  say "running wstest -m fuzzingclient (cases: $CASES)"
  (cd "$OUT" && timeout 900 "$WSTEST" -m fuzzingclient -s fuzzingclient.json >"$OUT/wstest-server.log" 2>&1) \
    || { say "wstest failed; see $OUT/wstest-server.log"; tail -20 "$OUT/wstest-server.log" >&2; exit 1; }
else
  REPORT="$OUT/clients"
  rm -rf "$REPORT"
  cat >"$OUT/fuzzingserver.json" <<JSON
{"url": "ws://127.0.0.1:$CLIENT_PORT", "options": {"failByDrop": false}, "outdir": "./clients",
 "cases": $CASES_JSON, "exclude-cases": [], "exclude-agent-cases": {}}
JSON
  port_free "$CLIENT_PORT"
  # wstest binds every interface here (it has no option to bind loopback only); we only connect
  # to 127.0.0.1. -u 0: no web UI.
  (cd "$OUT" && exec "$WSTEST" -m fuzzingserver -s fuzzingserver.json -u 0 >"$OUT/wstest-client.log" 2>&1) &
  PIDS+=($!)
  wait_for_port "$CLIENT_PORT" 60
  say "running sockeye-autobahn-client (cases: $CASES)"
  timeout 900 "$BIN/sockeye-autobahn-client" "ws://127.0.0.1:$CLIENT_PORT" \
    || { say "the client testee failed"; exit 1; }
  # updateReports writes the report before answering; give the file system a moment anyway.
  for _ in $(seq 50); do [ -s "$REPORT/index.json" ] && break; sleep 0.1; done
fi
say "wstest run took $((SECONDS - START)) s"

FULL=()
[ "$CASES" = '*' ] && FULL=(--full)
python3 "$ROOT/conformance/check.py" --role "$ROLE" "${FULL[@]}" "$REPORT/index.json"
