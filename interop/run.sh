#!/usr/bin/env bash
# Interop with clients, servers and proxies nobody here wrote, all on loopback:
#   Python `websockets` and Node `ws` as clients of Sockeye's server and as servers for Sockeye's
#   client (ws:// and wss://, with and without permessage-deflate); headless Chromium loading a
#   page from Sockeye's axum integration and echoing through a WebSocket to it, Chromium and
#   Firefox ESR loading it over https:// (h2, sockets as RFC 8441 streams on the page's
#   connection); Sockeye's client through tinyproxy (HTTP CONNECT, basic auth) and dante (SOCKS5,
#   with and without user/password); the pub/sub demo page in Chromium and Firefox on two nodes
#   over Redis while a node is killed and Redis restarts (interop/node/pubsub-browsers.mjs); a
#   page with a bad token told 'unauthorized' without a reconnect storm, and one whose short-lived
#   token is refreshed on its open socket (interop/node/pubsub-tokens.mjs);
#   WebSockets over HTTP/2 (RFC 8441): Node's `http2` client (own frame codec) and hand-written
#   hostile frames against Sockeye's server, h2c and h2 over TLS on the same ports as HTTP/1.1, and
#   Sockeye's client against a Node `http2` echo server.
# Prints one line per combination and fails if any fails.   Usage: bash interop/run.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
OUT=$ROOT/target/interop
mkdir -p "$OUT"
bash interop/install.sh
# redis-server and nats-server, for the pub/sub protocol's two-node checks.
bash scripts/install-backplanes.sh
PY="${HOME}/.cache/sockeye/interop-venv/bin/python"

echo "==> building ws and the examples"
cargo build --release --quiet -p sockeye-cli
cargo build --release --quiet -p sockeye --features axum --example axum --example echo_client
WS=$ROOT/target/release/ws
CLIENT=$ROOT/target/release/examples/echo_client

# A CA and a certificate for localhost and 127.0.0.1, made for this run.
(
  cd "$OUT"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 -subj /CN=sockeye-interop-ca
  openssl req -newkey rsa:2048 -nodes -keyout key.pem -out leaf.csr -subj /CN=localhost
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >leaf.ext
  openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 -extfile leaf.ext -out cert.pem
) >/dev/null 2>&1

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start() { # name, command...: runs in the background, logging to $OUT/name.log
  local name=$1; shift
  "$@" >"$OUT/$name.log" 2>&1 &
  PIDS+=($!)
}
wait_port() { # port
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done
  echo "nothing listens on port $1" >&2; return 1
}

FAILED=0
RESULTS=()
check() { # name, expectation (pass|fail:PATTERN), command...   (CHECK_TIMEOUT: seconds, default 60)
  local name=$1 expect=$2; shift 2
  local out rc=0
  out=$(timeout "${CHECK_TIMEOUT:-60}" "$@" 2>&1) || rc=$?
  local verdict=FAIL
  case "$expect" in
    pass) [ "$rc" = 0 ] && verdict=PASS ;;
    fail:*) [ "$rc" != 0 ] && grep -q "${expect#fail:}" <<<"$out" && verdict=PASS ;;
  esac
  [ "$verdict" = PASS ] || FAILED=1
  local detail
  detail=$(grep -v '^\s*$' <<<"$out" | tail -1 | cut -c1-110 || true)
  RESULTS+=("$(printf '%-4s  %-52s %s' "$verdict" "$name" "$detail")")
  echo "${RESULTS[-1]}"
}

CA=$OUT/ca.pem
TLS=(--tls --cert-file "$OUT/cert.pem" --key-file "$OUT/key.pem")
echo "==> starting servers and proxies"
# The tokio server (9501, 9502: HTTP/2 too) and the own loop, the tool's default (9503, 9504).
start sockeye-ws "$WS" echo_server -q --runtime tokio --port 9501
start sockeye-wss "$WS" echo_server -q --runtime tokio --port 9502 "${TLS[@]}"
start sockeye-loop-ws "$WS" echo_server -q --port 9503
start sockeye-loop-wss "$WS" echo_server -q --port 9504 "${TLS[@]}"
start python-ws "$PY" interop/python/server.py 9511
start python-wss "$PY" interop/python/server.py 9512 --tls "$OUT/cert.pem" "$OUT/key.pem"
start node-ws node interop/node/server.mjs 9521
start node-wss node interop/node/server.mjs 9522 --tls "$OUT/cert.pem" "$OUT/key.pem"
start node-h2c node interop/node/h2-server.mjs 9523
start node-h2 node interop/node/h2-server.mjs 9524 --tls "$OUT/cert.pem" "$OUT/key.pem"
start axum "$ROOT/target/release/examples/axum" 127.0.0.1:9530

cat >"$OUT/tinyproxy.conf" <<CONF
Port 9540
Listen 127.0.0.1
Timeout 60
MaxClients 50
Allow 127.0.0.1
BasicAuth sockeye secret
DisableViaHeader Yes
LogLevel Info
CONF
if [ "$(id -u)" = 0 ]; then
  printf 'User nobody\nGroup nogroup\n' >>"$OUT/tinyproxy.conf"
fi
start tinyproxy /usr/bin/tinyproxy -d -c "$OUT/tinyproxy.conf"

# dante: one SOCKS5 proxy without authentication, one with user/password (checked against the
# system's accounts, so the run makes a locked-down user for it).
dante_conf() { # port, method
  cat <<CONF
logoutput: stderr
internal: 127.0.0.1 port = $1
external: 127.0.0.1
clientmethod: none
socksmethod: $2
user.privileged: root
user.unprivileged: nobody
client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }
socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 log: connect }
CONF
}
dante_conf 9541 none >"$OUT/danted-none.conf"
dante_conf 9542 username >"$OUT/danted-user.conf"
if [ "$(id -u)" = 0 ]; then
  id sockeyeproxy >/dev/null 2>&1 || useradd --no-create-home --shell /usr/sbin/nologin sockeyeproxy
  echo 'sockeyeproxy:secret' | chpasswd
fi
start danted-none /usr/sbin/danted -f "$OUT/danted-none.conf" -p "$OUT/danted-none.pid"
start danted-user /usr/sbin/danted -f "$OUT/danted-user.conf" -p "$OUT/danted-user.pid"
# The pub/sub protocol (docs/pubsub-protocol.md): two nodes over Redis, two over NATS JetStream.
start redis redis-server --port 9560 --bind 127.0.0.1 --save '' --appendonly no
start nats nats-server -a 127.0.0.1 -p 9565 -js -sd "$OUT/nats-js"
for port in 9501 9502 9503 9504 9511 9512 9521 9522 9523 9524 9530 9540 9541 9542 9560 9565; do wait_port "$port"; done
start pubsub-redis-a "$WS" pubsub_server -q --port 9561 --backplane redis://127.0.0.1:9560
start pubsub-redis-b "$WS" pubsub_server -q --port 9562 --backplane redis://127.0.0.1:9560
start pubsub-nats-a "$WS" pubsub_server -q --port 9566 --backplane nats://127.0.0.1:9565
start pubsub-nats-b "$WS" pubsub_server -q --port 9567 --backplane nats://127.0.0.1:9565
for port in 9561 9562 9566 9567; do wait_port "$port"; done

echo "==> real clients against Sockeye's server (ws echo_server: tokio, and the own loop)"
for runtime in tokio loop; do
  for scheme in ws wss; do
    if [ "$runtime" = tokio ]; then port=$([ $scheme = ws ] && echo 9501 || echo 9502)
    else port=$([ $scheme = ws ] && echo 9503 || echo 9504); fi
    url="$scheme://localhost:$port/"
    for deflate in on off; do
      flag=(); [ $deflate = off ] && flag=(--no-deflate)
      check "python websockets → sockeye $(printf '%-5s' "$runtime") $scheme deflate=$deflate" pass "$PY" interop/python/client.py "$url" "${flag[@]}" --ca "$CA"
      check "node ws → sockeye $(printf '%-5s' "$runtime")       $scheme deflate=$deflate" pass node interop/node/client.mjs "$url" "${flag[@]}" --ca "$CA"
    done
  done
done

echo "==> Python websockets speaking the pub/sub protocol to two nodes (interop/pubsub_client.py)"
# Two topics on one socket, publish, then a resume on the other node with exactly what was missed.
check "python websockets ↔ ws pubsub_server ×2, Redis" pass "$PY" interop/pubsub_client.py ws://127.0.0.1:9561/ ws://127.0.0.1:9562/
check "python websockets ↔ ws pubsub_server ×2, NATS JetStream" pass "$PY" interop/pubsub_client.py ws://127.0.0.1:9566/ ws://127.0.0.1:9567/

echo "==> Chromium and Firefox ESR on the demo page, two nodes over Redis (interop/node/pubsub-browsers.mjs)"
# Its own Redis (9570, no persistence) and nodes A (9571) and B (9572), started and stopped by the
# script: it kills node A and restarts Redis during the traffic. Screenshots of both pages, their
# state and the servers' logs: $OUT/pubsub-browsers*.
CHECK_TIMEOUT=150 check "chromium + firefox ↔ ws pubsub_server ×2, node killed, Redis restarted" pass \
  node interop/node/pubsub-browsers.mjs "$WS" "$OUT" 9570 9571 9572

echo "==> Chromium and short-lived tokens: refused with a reason, refreshed on the open socket (interop/node/pubsub-tokens.mjs)"
# One node whose clients need 8 s JWTs (the secret from a file): bad tokens get 'unauthorized'
# and no reconnect storm; a page refreshes its token on the open socket and misses nothing of a
# backend's publications. The pages' event logs and the node's log: $OUT/pubsub-tokens*.
CHECK_TIMEOUT=90 check "chromium ↔ ws pubsub_server, token refused and refreshed" pass \
  node interop/node/pubsub-tokens.mjs "$WS" "$OUT" 9575

echo "==> Sockeye's client against real servers"
for scheme in ws wss; do
  for deflate in on off; do
    flag=(); [ $deflate = off ] && flag=(--no-deflate)
    for peer in python:951 node:952; do
      name=${peer%%:*}; base=${peer##*:}
      port=$([ $scheme = ws ] && echo "${base}1" || echo "${base}2")
      check "sockeye → $name $(printf '%-19s' "")$scheme deflate=$deflate" pass "$CLIENT" "$scheme://localhost:$port/" "${flag[@]}" --ca-file "$CA"
    done
  done
done

echo "==> HTTP/2 (RFC 8441)"
# ws echo_server --runtime tokio takes h2c (prior knowledge) and h2 (ALPN) on its HTTP/1.1 ports (the
# own loop serves HTTP/1.1 only: crates/sockeye-cli/tests/cli.rs checks its answer). The hostile cases'
# reports (what the server did, per case) are kept in $OUT/h2-hostile-*.log.
check "node http2 → sockeye (10 streams, 1 conn)   h2c" pass node interop/node/h2-client.mjs http://127.0.0.1:9501/
check "node http2 → sockeye (10 streams, 1 conn)   h2 TLS" pass node interop/node/h2-client.mjs https://localhost:9502/ --ca "$CA"
check "hostile HTTP/2 → sockeye, refused per stream h2c" pass bash -c "set -o pipefail; node interop/node/h2-hostile.mjs http://127.0.0.1:9501/ | tee '$OUT/h2-hostile-h2c.log'"
check "hostile HTTP/2 → sockeye, refused per stream h2 TLS" pass bash -c "set -o pipefail; node interop/node/h2-hostile.mjs https://localhost:9502/ --ca '$CA' | tee '$OUT/h2-hostile-h2.log'"
check "sockeye --http2 → node http2 server         h2c" pass "$CLIENT" ws://localhost:9523/ --http2
check "sockeye --http2 → node http2 server         h2 TLS" pass "$CLIENT" wss://localhost:9524/ --http2 --ca-file "$CA"

echo "==> Chromium"
check "chromium → sockeye (axum page + socket) ws deflate=on" pass node interop/node/chromium.mjs "http://127.0.0.1:9530/"
# Over https:// the browsers speak HTTP/2 (ALPN h2) and open the page's sockets as RFC 8441 streams
# on the page's connection; the example logs each request with its connection's peer, which
# h2-page-log.mjs reads. One server (and log) per browser.
start axum-h2-chromium "$ROOT/target/release/examples/axum" 127.0.0.1:9531 --tls "$OUT/cert.pem" "$OUT/key.pem"
start axum-h2-firefox "$ROOT/target/release/examples/axum" 127.0.0.1:9532 --tls "$OUT/cert.pem" "$OUT/key.pem"
wait_port 9531 && wait_port 9532
check "chromium → sockeye (axum page, 3 sockets) wss h2" pass node interop/node/chromium.mjs "https://localhost:9531/?sockets=3" --ignore-certificate-errors
check "chromium: page + sockets on one h2 connection" pass node interop/node/h2-page-log.mjs "$OUT/axum-h2-chromium.log" 3

echo "==> Firefox ESR (test CA trusted via certutil in a fresh profile)"
check "firefox → sockeye (axum page, 3 sockets) wss h2" pass bash interop/firefox.sh "https://localhost:9532/?sockets=3&report=1" "$OUT/axum-h2-firefox.log" "$CA"
check "firefox: page + sockets on one h2 connection" pass node interop/node/h2-page-log.mjs "$OUT/axum-h2-firefox.log" 3

echo "==> proxies"
check "sockeye via tinyproxy CONNECT (basic auth) ws" pass "$CLIENT" ws://127.0.0.1:9501/ --proxy http://sockeye:secret@127.0.0.1:9540
check "sockeye via tinyproxy CONNECT (basic auth) wss" pass "$CLIENT" wss://localhost:9502/ --ca-file "$CA" --proxy http://sockeye:secret@127.0.0.1:9540
check "sockeye via tinyproxy CONNECT, wss over h2" pass "$CLIENT" wss://localhost:9502/ --ca-file "$CA" --proxy http://sockeye:secret@127.0.0.1:9540 --http2
check "sockeye via tinyproxy, wrong password → 401/407" "fail:status: 40[17]" "$CLIENT" ws://127.0.0.1:9501/ --proxy http://sockeye:wrong@127.0.0.1:9540
check "sockeye via dante SOCKS5 (no auth) ws" pass "$CLIENT" ws://127.0.0.1:9501/ --proxy socks5://127.0.0.1:9541
check "sockeye via dante SOCKS5h (user/password) wss" pass "$CLIENT" wss://localhost:9502/ --ca-file "$CA" --proxy socks5h://sockeyeproxy:secret@127.0.0.1:9542
check "sockeye via dante SOCKS5, wrong password → refused" "fail:AuthFailed" "$CLIENT" ws://127.0.0.1:9501/ --proxy socks5://sockeyeproxy:wrong@127.0.0.1:9542
check "sockeye via HTTPS_PROXY from the environment wss" pass env HTTPS_PROXY=http://sockeye:secret@127.0.0.1:9540 "$CLIENT" wss://localhost:9502/ --ca-file "$CA"
check "ws cat --proxy socks5://… (the CLI)" pass bash -c "printf 'hello proxy\n' | '$WS' cat --proxy socks5://127.0.0.1:9541 ws://127.0.0.1:9501/ | grep -qx 'hello proxy'"
# The tunnels really went through the proxies: each logged the CONNECTs it made.
check "tinyproxy logged the tunnels" pass grep -q "CONNECT" "$OUT/tinyproxy.log"
check "dante logged the tunnels" pass grep -q "pass(1): tcp/connect" "$OUT/danted-none.log" "$OUT/danted-user.log"

echo
echo "==> interop: $(printf '%s\n' "${RESULTS[@]}" | grep -c '^PASS') of ${#RESULTS[@]} combinations passed"
exit "$FAILED"
