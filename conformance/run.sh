#!/usr/bin/env bash
# conformance/run.sh server|client [--tls | --http2] [--cases '1.*,2.*'] [--no-build]
# conformance/run.sh server --runtime uring|epoll|auto [--tls] [--cases ...] [--no-build]
#
# Runs the real Autobahn|Testsuite (wstest 25.10.1) against Sockeye and compares every case with
# conformance/expected.json; exits non-zero on any difference (wstest's own exit code says nothing
# about results).
#   server: wstest's fuzzingclient tests sockeye-autobahn-server on 127.0.0.1:9002 (9003 with
#           --tls); report in target/autobahn/servers[-tls|-h2]/index.json
#   client: wstest's fuzzingserver on 127.0.0.1:9001 (9011 with --tls) tests
#           sockeye-autobahn-client; report in target/autobahn/clients[-tls|-h2]/index.json
# --tls: wss:// with certificates made for the run (openssl: a CA, and a leaf for localhost and
# 127.0.0.1). wstest's client verifies nothing; Sockeye's client trusts exactly that CA.
# --http2: WebSockets over HTTP/2 (RFC 8441, h2c with prior knowledge). wstest speaks only
# HTTP/1.1, so conformance/h2-bridge.mjs (Node, built-in modules) translates the handshake and
# passes the frames through unchanged (FIN <-> END_STREAM, resets <-> RST_STREAM):
#   server: wstest -> bridge 127.0.0.1:9004 -> h2c -> sockeye-autobahn-server 127.0.0.1:9005
#   client: sockeye-autobahn-client --http2 -> h2c -> bridge 127.0.0.1:9013 -> wstest 127.0.0.1:9012
#   Not combinable with --tls (the bridge speaks h2c only).
# --runtime uring|epoll|auto: the server is Sockeye's own loop (sockeye-loop) on that interface,
# on 127.0.0.1:9006 (uring, auto) or 9007 (epoll); report in target/autobahn/servers-loop-<runtime>/.
#   With --tls, wss:// on 9008 (uring, auto) or 9010 (epoll); report in servers-loop-<runtime>-tls/.
# The epoll run is the fallback's, forced (it runs where io_uring is refused); auto is io_uring
# wherever the kernel allows it (the testee's log says which it got).
# Installs wstest first if needed (conformance/install-wstest.sh, idempotent).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
usage() { echo "usage: conformance/run.sh server|client [--tls | --http2 | --runtime uring|epoll|auto [--tls]] [--cases '1.*,2.*'] [--no-build]  (--http2 combines with neither; --runtime is the server role's)" >&2; exit 2; }
[ $# -ge 1 ] || usage
ROLE="$1"; shift
case "$ROLE" in server|client) ;; *) usage ;; esac
CASES='*'
BUILD=1
TLS=0
HTTP2=0
RUNTIME=
while [ $# -gt 0 ]; do
  case "$1" in
    --cases) [ $# -ge 2 ] || usage; CASES="$2"; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --tls) TLS=1; shift ;;
    --http2) HTTP2=1; shift ;;
    --runtime) [ $# -ge 2 ] || usage; RUNTIME="$2"; shift 2 ;;
    *) usage ;;
  esac
done
[ "$TLS" = 1 ] && [ "$HTTP2" = 1 ] && usage
if [ -n "$RUNTIME" ]; then
  [ "$ROLE" = server ] && [ "$HTTP2" = 0 ] || usage
  case "$RUNTIME-$TLS" in
    uring-0 | auto-0) SERVER_PORT="${SOCKEYE_AUTOBAHN_SERVER_URING_PORT:-9006}" ;;
    epoll-0) SERVER_PORT="${SOCKEYE_AUTOBAHN_SERVER_EPOLL_PORT:-9007}" ;;
    uring-1 | auto-1) SERVER_PORT="${SOCKEYE_AUTOBAHN_SERVER_URING_TLS_PORT:-9008}" ;;
    epoll-1) SERVER_PORT="${SOCKEYE_AUTOBAHN_SERVER_EPOLL_TLS_PORT:-9010}" ;;
    *) usage ;;
  esac
  CLIENT_PORT=unused
  SCHEME=ws SUFFIX="-loop-$RUNTIME"
  [ "$TLS" = 1 ] && SCHEME=wss SUFFIX="-loop-$RUNTIME-tls"
elif [ "$HTTP2" = 1 ]; then
  # SERVER_PORT and CLIENT_PORT are the ports wstest uses (the bridge's in the server role,
  # wstest's own in the client role); TESTEE_PORT and BRIDGE_PORT are the other ends.
  SERVER_PORT="${SOCKEYE_AUTOBAHN_SERVER_H2_PORT:-9004}"
  TESTEE_PORT="${SOCKEYE_AUTOBAHN_SERVER_H2_TESTEE_PORT:-9005}"
  CLIENT_PORT="${SOCKEYE_AUTOBAHN_CLIENT_H2_PORT:-9012}"
  BRIDGE_PORT="${SOCKEYE_AUTOBAHN_CLIENT_H2_BRIDGE_PORT:-9013}"
  SCHEME=ws SUFFIX=-h2
  command -v node >/dev/null || { echo "conformance/run.sh: --http2 needs node (the bridge is conformance/h2-bridge.mjs)" >&2; exit 1; }
elif [ "$TLS" = 1 ]; then
  SERVER_PORT="${SOCKEYE_AUTOBAHN_SERVER_TLS_PORT:-9003}"
  CLIENT_PORT="${SOCKEYE_AUTOBAHN_CLIENT_TLS_PORT:-9011}"
  SCHEME=wss SUFFIX=-tls
else
  SERVER_PORT="${SOCKEYE_AUTOBAHN_SERVER_PORT:-9002}"
  CLIENT_PORT="${SOCKEYE_AUTOBAHN_CLIENT_PORT:-9001}"
  SCHEME=ws SUFFIX=
fi
CACHE="${SOCKEYE_CACHE:-$HOME/.cache/sockeye}"
WSTEST="$CACHE/wstest/bin/wstest"
BIN="$ROOT/target/release"
OUT="$ROOT/target/autobahn"
say() { printf '[autobahn %s%s] %s\n' "$ROLE" "$SUFFIX" "$*" >&2; }

bash "$ROOT/conformance/install-wstest.sh" "$CACHE/wstest"
if [ "$BUILD" = 1 ]; then
  say "building the testees (release)"
  (cd "$ROOT" && cargo build --release --quiet -p sockeye-conformance)
fi

# The case list as JSON: '1.*,2.*' -> ["1.*", "2.*"].
CASES_JSON="$(python3 -c 'import json,sys; print(json.dumps([c.strip() for c in sys.argv[1].split(",") if c.strip()]))' "$CASES")"
mkdir -p "$OUT"
TLSDIR="$OUT/tls-$ROLE$SUFFIX"
if [ "$TLS" = 1 ]; then
  # A CA for the run and a leaf it signs: WebPKI (rustls) refuses a self-signed CA certificate
  # as a server's end-entity certificate, as browsers do.
  mkdir -p "$TLSDIR"
  (
    cd "$TLSDIR"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 \
      -subj "/CN=Sockeye Autobahn test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign"
    openssl req -newkey rsa:2048 -nodes -keyout key.pem -out leaf.csr -subj /CN=localhost
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' >leaf.ext
    openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile leaf.ext -out cert.pem
  ) >/dev/null 2>&1 || { say "openssl could not make the test certificates"; exit 1; }
fi
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
  REPORT="$OUT/servers$SUFFIX"
  rm -rf "$REPORT"
  cat >"$OUT/fuzzingclient$SUFFIX.json" <<JSON
{"options": {"failByDrop": false}, "outdir": "./servers$SUFFIX",
 "servers": [{"agent": "sockeye", "url": "$SCHEME://127.0.0.1:$SERVER_PORT"}],
 "cases": $CASES_JSON, "exclude-cases": [], "exclude-agent-cases": {}}
JSON
  port_free "$SERVER_PORT"
  TESTEE_ARGS=()
  [ -n "$RUNTIME" ] && TESTEE_ARGS=(--runtime "$RUNTIME")
  [ "$TLS" = 1 ] && TESTEE_ARGS+=(--tls "$TLSDIR/cert.pem" "$TLSDIR/key.pem")
  if [ "$HTTP2" = 1 ]; then
    # The testee serves h2c (prior knowledge) on its plain port; wstest talks to the bridge.
    port_free "$TESTEE_PORT"
    "$BIN/sockeye-autobahn-server" "127.0.0.1:$TESTEE_PORT" 2>"$OUT/testee-server$SUFFIX.log" &
    PIDS+=($!)
    wait_for_port "$TESTEE_PORT" 10
    node "$ROOT/conformance/h2-bridge.mjs" server --listen "127.0.0.1:$SERVER_PORT" \
      --target "http://127.0.0.1:$TESTEE_PORT" 2>"$OUT/h2-bridge-server.log" &
    PIDS+=($!)
  else
    "$BIN/sockeye-autobahn-server" "127.0.0.1:$SERVER_PORT" "${TESTEE_ARGS[@]}" 2>"$OUT/testee-server$SUFFIX.log" &
    PIDS+=($!)
  fi
  wait_for_port "$SERVER_PORT" 10
  say "running wstest -m fuzzingclient (cases: $CASES)"
  (cd "$OUT" && timeout 1500 "$WSTEST" -m fuzzingclient -s "fuzzingclient$SUFFIX.json" >"$OUT/wstest-server$SUFFIX.log" 2>&1) \
    || { say "wstest failed; see $OUT/wstest-server$SUFFIX.log"; tail -20 "$OUT/wstest-server$SUFFIX.log" >&2; exit 1; }
else
  REPORT="$OUT/clients$SUFFIX"
  rm -rf "$REPORT"
  # wstest's fuzzingserver reads key and cert only from the spec (its -k/-c flags are ignored
  # in this mode); the paths are relative to its working directory.
  KEYCERT=
  [ "$TLS" = 1 ] && KEYCERT="\"key\": \"tls-$ROLE$SUFFIX/key.pem\", \"cert\": \"tls-$ROLE$SUFFIX/cert.pem\","
  cat >"$OUT/fuzzingserver$SUFFIX.json" <<JSON
{"url": "$SCHEME://127.0.0.1:$CLIENT_PORT", $KEYCERT "options": {"failByDrop": false}, "outdir": "./clients$SUFFIX",
 "cases": $CASES_JSON, "exclude-cases": [], "exclude-agent-cases": {}}
JSON
  port_free "$CLIENT_PORT"
  [ "$HTTP2" = 1 ] && port_free "$BRIDGE_PORT"
  # wstest binds every interface here (it has no option to bind loopback only); we only connect
  # to 127.0.0.1. -u 0: no web UI.
  (cd "$OUT" && exec "$WSTEST" -m fuzzingserver -s "fuzzingserver$SUFFIX.json" -u 0 >"$OUT/wstest-client$SUFFIX.log" 2>&1) &
  PIDS+=($!)
  wait_for_port "$CLIENT_PORT" 60
  TESTEE_URL="$SCHEME://127.0.0.1:$CLIENT_PORT"
  CLIENTARGS=()
  [ "$TLS" = 1 ] && CLIENTARGS=(--ca-file "$TLSDIR/ca.pem")
  if [ "$HTTP2" = 1 ]; then
    # The client speaks HTTP/2 only (h2c, prior knowledge) to the bridge, which speaks HTTP/1.1
    # to wstest.
    node "$ROOT/conformance/h2-bridge.mjs" client --listen "127.0.0.1:$BRIDGE_PORT" \
      --target "ws://127.0.0.1:$CLIENT_PORT" 2>"$OUT/h2-bridge-client.log" &
    PIDS+=($!)
    wait_for_port "$BRIDGE_PORT" 10
    TESTEE_URL="ws://127.0.0.1:$BRIDGE_PORT"
    CLIENTARGS=(--http2)
  fi
  say "running sockeye-autobahn-client (cases: $CASES)"
  timeout 1500 "$BIN/sockeye-autobahn-client" "$TESTEE_URL" "${CLIENTARGS[@]}" \
    || { say "the client testee failed"; tail -5 "$OUT/wstest-client$SUFFIX.log" >&2; exit 1; }
  # updateReports writes the report before answering; give the file system a moment anyway.
  for _ in $(seq 50); do [ -s "$REPORT/index.json" ] && break; sleep 0.1; done
fi
say "wstest run took $((SECONDS - START)) s"

FULL=()
[ "$CASES" = '*' ] && FULL=(--full)
python3 "$ROOT/conformance/check.py" --role "$ROLE" "${FULL[@]}" "$REPORT/index.json"
