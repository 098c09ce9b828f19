#!/usr/bin/env bash
# The side-by-side benchmark: builds everything in release mode, then runs every scenario against
# Sockeye and the peers in one run — tokio-tungstenite, fastwebsockets and tokio-websockets
# (crates.io), Node `ws` (npm), picows (PyPI), a raw TCP baseline, and uWebSockets when UWS_DIR
# (or UWS_BIN_DIR) is set: see bench/README.md — and prints one table per scenario (medians of
# REPS repetitions, ratios to the best peer and to raw TCP). Writes target/bench/results.jsonl and
# bench/RESULTS.md.
#
#   bash bench/run.sh              # the full run (about 12 minutes on 2 cores)
#   bash bench/run.sh --smoke      # every scenario briefly, one repetition (what CI runs)
#   bash bench/run.sh --only=pubsub   # one part only: core (sections 1–10) or pubsub (11)
#   bash bench/run.sh --only=streamed,wss,under-load   # parts of core: 5's streamed rows, 4's
#                                  # and 5's wss rows, 2's round trips under load (comma list)
#   bash bench/run.sh --only=instructions   # part of core: sections 8 and 8b, the callgrind
#                                  # instruction counts (repeatable: before/after a change)
#   bash bench/run.sh --only=load-test,broadcast-test   # part of core: sections 12 and 13, uWS's
#                                  # own load generators (need UWS_DIR or UWS_BIN_DIR)
#
# Servers are single-threaded and pinned to CPU 0; the load generator runs on CPU 1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
BENCH=$PWD
SMOKE=0; REPS=3; ONLY=
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=1; REPS=1 ;;
    --reps=*) REPS=${arg#--reps=} ;;
    --only=*)
      ONLY=${arg#--only=}
      for p in ${ONLY//,/ }; do
        case "$p" in core | pubsub | streamed | wss | under-load | instructions | load-test | broadcast-test) ;;
          *) echo "unknown part $p" >&2; exit 2 ;;
        esac
      done ;;
    *) echo "usage: bash bench/run.sh [--smoke] [--reps=N] [--only=core|pubsub|streamed|wss|under-load|instructions|load-test|broadcast-test[,…]]" >&2; exit 2 ;;
  esac
done
# Whether a part runs: everything without --only; core includes streamed, wss, under-load,
# instructions, load-test and broadcast-test.
part() {
  [ -z "$ONLY" ] && return 0
  local p
  for p in ${ONLY//,/ }; do
    [ "$p" = "$1" ] && return 0
    [ "$p" = core ] && case "$1" in streamed | wss | under-load | instructions | load-test | broadcast-test) return 0 ;; esac
  done
  return 1
}
# The peers' servers (Node ws, picows) take part in these.
peers_needed() { part core || part wss || part under-load; }
OUT=$BENCH/../target/bench
mkdir -p "$OUT"
# Each section says when it began (seconds since the start), so a slow run shows where it went.
section() { printf '==> [%d s] %s\n' "$SECONDS" "$*"; }
RESULTS=$OUT/results.jsonl
: >"$RESULTS"

section "building (release)"
# The harness is a workspace of its own (the peers' crates stay out of the project's lock file)
# but builds into the project's target directory: the dependencies both share with the same
# features (aws-lc-sys, rustls, hyper...) compile once, minutes saved on a fresh machine.
export CARGO_TARGET_DIR="$BENCH/../target"
(cd harness && cargo build --release --quiet)
if part instructions && ! command -v valgrind >/dev/null 2>&1; then
  section "apt-get install valgrind (for the instruction counts)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null 2>&1 || {
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
  }
fi
(cd peers/node-ws && { [ -d node_modules/ws ] || npm ci --no-audit --no-fund --loglevel=error; })
VENV="${HOME}/.cache/sockeye/bench-venv"
if peers_needed && ! "$VENV/bin/python" -c 'import picows' >/dev/null 2>&1; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r peers/picows/requirements.txt
fi
BIN=$CARGO_TARGET_DIR/release

# uWebSockets, optional (see bench/README.md): built from UWS_DIR (a uWebSockets checkout) and
# USOCKETS_DIR (a uSockets checkout, by default $UWS_DIR/uSockets) into target/bench/uws, cached;
# or its four programs taken as they are from UWS_BIN_DIR. Neither set: its rows say so.
UWS_BIN=
UWS_NOT_RUN="not run (set UWS_DIR to a uWebSockets checkout, or UWS_BIN_DIR to its built programs: see bench/README.md)"
if ! { part core || part under-load || part load-test || part broadcast-test; }; then
  : # no part this run takes has a uWS row
elif [ -n "${UWS_BIN_DIR:-}" ]; then
  UWS_BIN=$(cd "$UWS_BIN_DIR" && pwd)
  for p in uws_echo uws_broadcast load_test broadcast_test; do
    [ -x "$UWS_BIN/$p" ] || { echo "UWS_BIN_DIR=$UWS_BIN_DIR has no $p" >&2; exit 2; }
  done
elif [ -n "${UWS_DIR:-}" ]; then
  section "building uWebSockets from $UWS_DIR (cached)"
  if ! bash peers/uws/build.sh "$OUT/uws" >"$OUT/uws-build.log" 2>&1; then
    tail -20 "$OUT/uws-build.log" >&2
    echo "bench: uWebSockets did not build from UWS_DIR=$UWS_DIR (log: $OUT/uws-build.log)" >&2
    exit 1
  fi
  tail -1 "$OUT/uws-build.log"
  UWS_BIN=$OUT/uws
fi
# The ws tool's echo server is measured by uWS's load_test beside the library's, and its
# pub/sub servers (`broadcast_server`, `pubsub_server`) across nodes in section 11.
if { [ -n "$UWS_BIN" ] && part load-test; } || part pubsub; then
  (cd .. && cargo build --release --quiet -p sockeye-cli)
fi
PIN_SERVER=(taskset -c 0); PIN_LOAD=(taskset -c 1)
command -v taskset >/dev/null 2>&1 || { PIN_SERVER=(); PIN_LOAD=(); }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

if [ "$SMOKE" = 1 ]; then
  PUSH_N=20000; RTT_N=50; CONN_N=50; SECS=1; CONN_SECS=1; LARGE_REPS=1; IDLE=200; DEFLATE_IDLE=100
  DEFLATE_PUSH_N=2000; SIZES="0 1024"; LOAD_SECS=3
else
  PUSH_N=1000000; RTT_N=1000; CONN_N=1000; SECS=5; CONN_SECS=3; LARGE_REPS=10; IDLE=10000
  DEFLATE_IDLE=1000; DEFLATE_PUSH_N=100000; SIZES="0 16 64 256 1024 4096"; LOAD_SECS=10
fi
PORT=9700
SERVER_PID=
FAILURES=0
start_server() { # system mode [n]
  local system=$1 mode=$2 n=${3:-$PUSH_N}
  PORT=$((PORT + 1))
  local log=$OUT/server-$system.log
  # Emptied here, not by the background job's redirection: that runs later, and the wait below
  # would find the previous run's "ready" in the file and send load to a server not yet listening.
  : >"$log"
  case "$system" in
    node) "${PIN_SERVER[@]}" node peers/node-ws/server.mjs "$mode" "$PORT" "$n" >"$log" 2>&1 & ;;
    picows) "${PIN_SERVER[@]}" "$VENV/bin/python" peers/picows/server.py "$mode" "$PORT" "$n" >"$log" 2>&1 & ;;
    # uWS's echo server (its EchoServer example) and its topic server; the ws tool's echo server;
    # Sockeye's hub written like the uWS topic server. The first three print no "ready": the
    # wait below tries their port.
    uws) "${PIN_SERVER[@]}" "$UWS_BIN/uws_echo" "$PORT" >"$log" 2>&1 & ;;
    uws-broadcast) "${PIN_SERVER[@]}" "$UWS_BIN/uws_broadcast" "$PORT" >"$log" 2>&1 & ;;
    # The tool's default is the own loop (one loop thread on the pinned CPU); -tokio its tokio loop.
    ws-tool) "${PIN_SERVER[@]}" "$BIN/ws" echo_server -q --port "$PORT" >"$log" 2>&1 & ;;
    ws-tool-tokio) "${PIN_SERVER[@]}" "$BIN/ws" echo_server -q --runtime tokio --port "$PORT" >"$log" 2>&1 & ;;
    sockeye-broadcast) "${PIN_SERVER[@]}" "$BIN/broadcast-server" "$PORT" >"$log" 2>&1 & ;;
    *) "${PIN_SERVER[@]}" "$BIN/bench-server" "$system" "$mode" "$PORT" "$n" >"$log" 2>&1 & ;;
  esac
  SERVER_PID=$!
  for _ in $(seq 100); do
    case "$system" in
      uws | uws-broadcast | ws-tool | ws-tool-tokio) (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && return 0 ;;
      *) grep -q ready "$log" 2>/dev/null && return 0 ;;
    esac
    sleep 0.05
  done
  echo "the $system server did not start" >&2; cat "$log" >&2; return 1
}
stop_server() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }
trap stop_server EXIT
record() { # scenario system params json
  printf '{"scenario": "%s", "system": "%s", "params": "%s", "result": %s}\n' "$1" "$2" "$3" "$4" >>"$RESULTS"
}
run() { # scenario system params command...: runs REPS times, bounded, and records each
  local scenario=$1 system=$2 params=$3; shift 3
  local rep json rc why tries
  for rep in $(seq "$REPS"); do
    # The smoke run (CI, on a machine shared with other jobs) gives a run that produced nothing
    # within the bound a second try, and says so: a server or load generator that answers wrong
    # fails at once, and one that hangs fails twice. The full run records the failure.
    tries=$([ "$SMOKE" = 1 ] && echo 2 || echo 1)
    while :; do
      rc=0
      json=$(timeout 120 "${PIN_LOAD[@]}" "$@" 2>"$OUT/last-error.log" | tail -1) || rc=$?
      [ "$rc" = 0 ] && [ -n "$json" ] && break
      why=$(tail -1 "$OUT/last-error.log")
      [ "$rc" = 124 ] && why="no result within 120 s${why:+ ($why)}"
      why=${why:-"exit $rc and no result"}
      tries=$((tries - 1))
      if [ "$rc" = 124 ] && [ "$tries" -gt 0 ]; then
        echo "   $scenario/$system/$params: $why; once more" >&2
        continue
      fi
      break
    done
    if [ "$rc" = 0 ] && [ -n "$json" ]; then
      record "$scenario" "$system" "$params" "$json"
    else
      echo "   $scenario/$system/$params failed (repetition $rep): $why" >&2
      record "$scenario" "$system" "$params" '{"failed": true}'
      FAILURES=$((FAILURES + 1))
    fi
  done
}
raw_flag() { case "$1" in raw | raw-sf) echo --raw ;; esac; }
# The server mode of the connect rows: the raw server closes first on the client's close frame,
# as the WebSocket servers do.
connect_mode() { [ "$1" = raw ] && echo connect || echo echo; }
SERVERS="raw sockeye tungstenite fastwebsockets tokio-websockets node picows"
# Sockeye's own loop (sockeye-loop, issue 40): io_uring, and its epoll fallback forced.
LOOP_SERVERS="sockeye-loop sockeye-loop-epoll"
# uWS's echo server where it can take part: ws:// echoes and connects (it has no push mode, is
# built without TLS, and sets TCP_NODELAY itself).
UWS_ECHO=${UWS_BIN:+uws}
if [ -n "$UWS_BIN" ]; then
  if [ -n "${UWS_BIN_DIR:-}" ]; then uws_version="prebuilt, UWS_BIN_DIR=$UWS_BIN"
  else uws_version=$(tail -1 "$OUT/uws-build.log" | grep -o '(uWebSockets.*)' | tr -d '()'); fi
  record uws-status uws "-" "{\"version\": \"$uws_version\"}"
fi

"$BIN/bench-server" gen-cert "$OUT/tls"

# Sections 1–10 (`--only=core`), not re-indented.
if part core; then

section "1. push: server pushes $PUSH_N × \"yo\""
for s in $SERVERS $LOOP_SERVERS; do
  start_server "$s" push
  run push-server "$s" "$PUSH_N" "$BIN/loadgen" push "127.0.0.1:$PORT" "$PUSH_N" $(raw_flag "$s")
  stop_server
done
start_server encoded push
for c in sockeye tungstenite fastwebsockets tokio-websockets; do
  run push-client "$c" "$PUSH_N" "$BIN/bench-client" "$c" "127.0.0.1:$PORT" "$PUSH_N"
done
run push-client node "$PUSH_N" node peers/node-ws/client.mjs "127.0.0.1:$PORT" "$PUSH_N"
run push-client picows "$PUSH_N" "$VENV/bin/python" peers/picows/client.py "127.0.0.1:$PORT" "$PUSH_N"
stop_server

section "2, 4, 5. round trip, echo-many, large"
for s in $SERVERS $LOOP_SERVERS $UWS_ECHO; do
  start_server "$s" echo
  addr=127.0.0.1:$PORT
  raw=$(raw_flag "$s")
  # Repetitions outermost, text and binary alternating: a slow stretch of the shared machine then
  # lands in one repetition of every row, not in whole rows (one full run had Sockeye's first 24
  # invocations, text 0 to binary 16, at ~62 µs and every later one at ~47: a step in time that
  # read as "text costs 15 µs more"; interleaved, text and binary measure the same).
  for _ in $(seq "$REPS"); do
    for size in $SIZES; do
      for kind in text binary; do
        REPS=1 run rtt "$s" "$kind $size" "$BIN/loadgen" rtt "$addr" "$RTT_N" "$size" "$kind" $raw
      done
    done
  done
  for conns in 100 1000; do
    run echo-many "$s" "$conns×16×64B" "$BIN/loadgen" echo-many "$addr" "$conns" 16 64 "$SECS" $raw
  done
  run large "$s" "1 MiB" "$BIN/loadgen" large "$addr" $((1 << 20)) "$LARGE_REPS" $raw
  run large "$s" "16 MiB" "$BIN/loadgen" large "$addr" $((16 << 20)) $(( LARGE_REPS > 3 ? 3 : LARGE_REPS )) $raw
  stop_server
done
# The floor of a whole-message echo: raw TCP that reads each frame whole before writing it back.
start_server raw-sf echo
run large raw-sf "1 MiB" "$BIN/loadgen" large "127.0.0.1:$PORT" $((1 << 20)) "$LARGE_REPS" --raw
run large raw-sf "16 MiB" "$BIN/loadgen" large "127.0.0.1:$PORT" $((16 << 20)) $(( LARGE_REPS > 3 ? 3 : LARGE_REPS )) --raw
stop_server

fi # part core (sections 1, 2, 4, 5)

# Rows of sections 4 and 5 over wss:// (TLS 1.3, the self-signed certificate of the connect
# scenarios), every system: the same load generator, BENCH_TLS for the servers and for it.
if part wss; then
section "4, 5 over wss: echo-many, large"
export BENCH_TLS="$OUT/tls"
for s in $SERVERS $LOOP_SERVERS; do
  start_server "$s" echo
  addr=127.0.0.1:$PORT
  raw=$(raw_flag "$s")
  for conns in 100 1000; do
    run echo-many "$s" "$conns×16×64B, wss" "$BIN/loadgen" echo-many "$addr" "$conns" 16 64 "$SECS" $raw
  done
  run large "$s" "1 MiB, wss" "$BIN/loadgen" large "$addr" $((1 << 20)) "$LARGE_REPS" $raw
  run large "$s" "16 MiB, wss" "$BIN/loadgen" large "$addr" $((16 << 20)) $(( LARGE_REPS > 3 ? 3 : LARGE_REPS )) $raw
  stop_server
done
unset BENCH_TLS
fi

# Section 5, streamed: the same large echo, Sockeye's server cut-through (`recv_chunk` →
# `send_fragment`: each piece goes back out as it arrives) against the raw TCP baseline (which
# echoes each read); the load generator checks the echo as it arrives (`large-streamed`), for
# both alike. No peer can hand over part of a frame, so they sit these rows out.
if part streamed; then
section "5. large, streamed (cut-through)"
for variant in ws wss; do
  if [ "$variant" = wss ]; then export BENCH_TLS="$OUT/tls"; label=", wss"; else unset BENCH_TLS; label=""; fi
  for s in raw sockeye; do
    start_server "$s" stream
    raw=$(raw_flag "$s")
    run large "$s" "1 MiB, streamed$label" "$BIN/loadgen" large-streamed "127.0.0.1:$PORT" $((1 << 20)) "$LARGE_REPS" $raw
    run large "$s" "16 MiB, streamed$label" "$BIN/loadgen" large-streamed "127.0.0.1:$PORT" $((16 << 20)) $(( LARGE_REPS > 3 ? 3 : LARGE_REPS )) $raw
    stop_server
  done
done
unset BENCH_TLS
fi

# Section 2 under load: one client's sequential 64-byte round trips while a second load
# generator process (also on CPU 1) keeps 100 connections × 16 in flight of echo-many going
# against the same server. The round trips stop after RTT_N or LOAD_SECS − 1 seconds, whichever
# comes first, so that the load outlasts them; the load's own msgs/s is recorded beside them.
if part under-load; then
section "2. round trip under load (100 connections of echo-many)"
for s in $SERVERS $LOOP_SERVERS $UWS_ECHO; do
  start_server "$s" echo
  addr=127.0.0.1:$PORT
  raw=$(raw_flag "$s")
  for _ in $(seq "$REPS"); do
    : >"$OUT/load.log"
    timeout $((LOAD_SECS + 60)) "${PIN_LOAD[@]}" "$BIN/loadgen" echo-many "$addr" 100 16 64 "$LOAD_SECS" $raw --ready \
      >"$OUT/load.json" 2>"$OUT/load.log" &
    load_pid=$!
    for _ in $(seq 600); do grep -q ready "$OUT/load.log" 2>/dev/null && break; sleep 0.05; done
    json=
    if grep -q ready "$OUT/load.log" \
      && json=$(timeout 120 "${PIN_LOAD[@]}" "$BIN/loadgen" rtt "$addr" "$RTT_N" 64 binary $((LOAD_SECS - 1)) $raw 2>"$OUT/last-error.log" | tail -1) \
      && [ -n "$json" ] && kill -0 "$load_pid" 2>/dev/null && wait "$load_pid"; then
      load=$(grep -o '"msgs_per_s": [0-9]*' "$OUT/load.json" | grep -o '[0-9]*$')
      record rtt-under-load "$s" "64 B binary, 100×16×64B echo-many" "${json%\}}, \"load_msgs_per_s\": ${load:-0}}"
    else
      echo "   rtt-under-load/$s failed: $(tail -1 "$OUT/last-error.log") $(tail -1 "$OUT/load.log")" >&2
      record rtt-under-load "$s" "64 B binary, 100×16×64B echo-many" '{"failed": true}'
      FAILURES=$((FAILURES + 1))
      kill "$load_pid" 2>/dev/null || true
      wait "$load_pid" 2>/dev/null || true
    fi
  done
  stop_server
done
fi

if part core; then

# Connection churn last: it leaves the kernel's tables fuller than any other scenario. Three ways
# in: ws:// (TCP_NODELAY on, every system's default), ws:// with Nagle's algorithm left on, and
# wss:// (TLS 1.3, a self-signed certificate the load generator trusts). The servers and the load
# generator read BENCH_NODELAY and BENCH_TLS. picows has no way to turn TCP_NODELAY off before its
# handshake (asyncio sets it on every TCP socket), so it sits that variant out.
for variant in ws nodelay-off wss; do
  case "$variant" in
    ws) label=""; export BENCH_NODELAY=1; unset BENCH_TLS ;;
    nodelay-off) label=", no TCP_NODELAY"; export BENCH_NODELAY=0; unset BENCH_TLS ;;
    wss) label=", wss"; export BENCH_NODELAY=1 BENCH_TLS="$OUT/tls" ;;
  esac
  section "3. connect over $variant"
  for s in $SERVERS $LOOP_SERVERS $([ "$variant" = ws ] && echo "$UWS_ECHO"); do
    [ "$variant" = nodelay-off ] && [ "$s" = picows ] && continue
    start_server "$s" "$(connect_mode "$s")"
    raw=$(raw_flag "$s")
    run connect "$s" "sequential$label" "$BIN/loadgen" connect "127.0.0.1:$PORT" "$CONN_N" $raw
    run connect-parallel "$s" "16 loops$label" "$BIN/loadgen" connect-parallel "127.0.0.1:$PORT" "$CONN_SECS" 16 $raw
    if [ "$s" = raw ]; then
      # The floor of a WebSocket connect: the same two waits for the server (upgrade, close) on
      # raw TCP, one 64-byte request and its echo before the close.
      run connect raw-x "sequential$label" "$BIN/loadgen" connect "127.0.0.1:$PORT" "$CONN_N" --raw --exchange
      run connect-parallel raw-x "16 loops$label" "$BIN/loadgen" connect-parallel "127.0.0.1:$PORT" "$CONN_SECS" 16 --raw --exchange
    fi
    stop_server
  done
done
unset BENCH_NODELAY BENCH_TLS

memory() { # system mode connections label
  local s=$1 conns=$3
  start_server "$s" "$2"
  local before after idle_pid
  before=$(awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status")
  : >"$OUT/idle.log" # (see start_server)
  "${PIN_LOAD[@]}" "$BIN/loadgen" idle "127.0.0.1:$PORT" "$conns" 3 >"$OUT/idle.log" 2>&1 &
  idle_pid=$!
  for _ in $(seq 600); do grep -q ready "$OUT/idle.log" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  after=$(awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status")
  if wait "$idle_pid"; then
    record memory "$s" "$4" "{\"rss_kib\": $after, \"base_kib\": $before, \"per_conn_kib\": $(( (after - before) / conns ))}"
  else
    echo "   memory/$s/$4 failed: $(tail -1 "$OUT/idle.log")" >&2
    record memory "$s" "$4" '{"failed": true}'
    FAILURES=$((FAILURES + 1))
  fi
  stop_server
}
# Server RSS growth per idle socket held by `h2bench idle` (h1: a TCP connection each; h2: a
# stream each on one connection).
memory_with() { # system h2bench idle version conns variant
  local system=$1 conns=$5 variant=$6
  start_server sockeye echo
  local before after idle_pid
  before=$(awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status")
  : >"$OUT/idle.log" # (see start_server)
  "${PIN_LOAD[@]}" "$2" "$3" "$4" "127.0.0.1:$PORT" "$conns" 3 >"$OUT/idle.log" 2>&1 &
  idle_pid=$!
  for _ in $(seq 600); do grep -q ready "$OUT/idle.log" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  after=$(awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status")
  local label="$conns idle$([ "$variant" = wss ] && echo ", wss")"
  if wait "$idle_pid"; then
    record h2-memory "$system" "$label" "{\"per_conn_kib\": $(awk -v a="$after" -v b="$before" -v n="$conns" 'BEGIN {printf "%.2f", (a - b) / n}')}"
  else
    echo "   h2-memory/$system/$label failed: $(tail -1 "$OUT/idle.log")" >&2
    record h2-memory "$system" "$label" '{"failed": true}'
    FAILURES=$((FAILURES + 1))
  fi
  stop_server
}
section "6. memory: server RSS with $IDLE idle connections (ws:// and wss://), and $DEFLATE_IDLE with permessage-deflate"
for s in sockeye $LOOP_SERVERS tungstenite fastwebsockets tokio-websockets node picows; do
  memory "$s" echo "$IDLE" "$IDLE idle"
done
# The same over TLS 1.3 (each server's TLS library: rustls for the Rust servers, OpenSSL for
# Node and picows), with the certificate of section 3.
export BENCH_TLS="$OUT/tls"
for s in sockeye tungstenite fastwebsockets tokio-websockets node picows; do
  memory "$s" echo "$IDLE" "$IDLE idle, wss"
done
unset BENCH_TLS
# One compressed message each first, so that compression state exists (it is allocated lazily).
# Of the peers only Node ws has permessage-deflate.
export BENCH_DEFLATE=1
for s in sockeye sockeye-loop node; do
  memory "$s" deflate "$DEFLATE_IDLE" "$DEFLATE_IDLE idle, permessage-deflate"
done
# Sockeye's states pooled (the default) or dedicated to each connection (DeflateConfig::pool None).
BENCH_DEFLATE_POOL=0 memory sockeye deflate "$DEFLATE_IDLE" "$DEFLATE_IDLE idle, permessage-deflate, dedicated states"
unset BENCH_DEFLATE

section "7. compressed: permessage-deflate push and pipelined echo, ~1 KiB JSON (Sockeye's client for both)"
for s in sockeye node; do
  start_server "$s" deflate-push "$DEFLATE_PUSH_N"
  run compressed "$s" "push $DEFLATE_PUSH_N × ~1.2 KiB JSON" "$BIN/bench-client" compressed-push "127.0.0.1:$PORT" "$DEFLATE_PUSH_N"
  stop_server
  start_server "$s" deflate
  run compressed "$s" "echo, 16 in flight, ~1 KiB JSON" "$BIN/bench-client" compressed-echo "127.0.0.1:$PORT" "$SECS"
  stop_server
done
export BENCH_DEFLATE_POOL=0
start_server sockeye deflate-push "$DEFLATE_PUSH_N"
run compressed sockeye "push $DEFLATE_PUSH_N × ~1.2 KiB JSON, dedicated states" "$BIN/bench-client" compressed-push "127.0.0.1:$PORT" "$DEFLATE_PUSH_N"
stop_server
start_server sockeye deflate
run compressed sockeye "echo, 16 in flight, ~1 KiB JSON, dedicated states" "$BIN/bench-client" compressed-echo "127.0.0.1:$PORT" "$SECS"
stop_server
unset BENCH_DEFLATE_POOL

section "10. WebSockets over HTTP/2 (RFC 8441) vs HTTP/1.1: Sockeye's client and server on both ends"
for variant in ws wss; do
  if [ "$variant" = wss ]; then export BENCH_TLS="$OUT/tls"; label=", wss"; else unset BENCH_TLS; label=""; fi
  start_server sockeye echo
  for v in h1 h2; do
    run h2-connect "sockeye-$v" "new socket$label" "$BIN/h2bench" connect "$v" "127.0.0.1:$PORT" "$CONN_N"
    run h2-rtt "sockeye-$v" "64 B$label" "$BIN/h2bench" rtt "$v" "127.0.0.1:$PORT" "$RTT_N" 64
    run h2-echo-many "sockeye-$v" "100×16×64B$label" "$BIN/h2bench" echo-many "$v" "127.0.0.1:$PORT" 100 16 64 "$SECS"
  done
  stop_server
  for v in h1 h2; do
    memory_with "sockeye-$v" "$BIN/h2bench" idle "$v" "$IDLE" "$variant"
  done
done
unset BENCH_TLS

fi # part core (sections 1-7, 10)

if part instructions; then
section "8. micro-benchmarks: instructions per operation (callgrind)"
if command -v valgrind >/dev/null 2>&1; then
  for op in mask parse utf8 engine deflate deflate-dedicated deflate-many deflate-many-dedicated; do
    base=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN/microbench" "$op" 0 2>&1 | awk '/Collected/ {print $4}')
    full=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN/microbench" "$op" 1 2>&1 | awk '/Collected/ {print $4}')
    unit=$("$BIN/microbench" "$op" describe)
    record micro sockeye "$op" "{\"instructions\": $((full - base)), \"unit\": \"$unit\"}"
  done
else
  echo "   valgrind could not be installed: no instruction counts" >&2
  FAILURES=$((FAILURES + 1))
fi

# Wall-clock figures on a shared VM move by ±20% between runs; instruction counts do not. Each
# figure below is the difference between two runs of different sizes under callgrind, divided by
# the difference in units, so start-up and handshakes cancel out.
cg_server() { # system mode n scenario loadgen-args-after-addr... → instructions of the whole run
  local system=$1 mode=$2 n=$3 scenario=$4 log=$OUT/callgrind-server.log pid; shift 4
  PORT=$((PORT + 1))
  : >"$log" # (see start_server)
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN/bench-server" "$system" "$mode" "$PORT" "$n" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 400); do grep -q ready "$log" 2>/dev/null && break; sleep 0.05; done
  timeout 120 "$BIN/loadgen" "$scenario" "127.0.0.1:$PORT" "$@" $(raw_flag "$system") >/dev/null 2>&1 || true
  sleep 0.3
  kill -TERM "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  awk '/Collected/ {gsub(",", "", $4); print $4}' "$log"
}
cg_client() { # system n → instructions of bench-client receiving n pushed messages
  start_server encoded push "$2"
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN/bench-client" "$1" "127.0.0.1:$PORT" "$2" 2>&1 \
    | awk '/Collected/ {gsub(",", "", $4); print $4}'
  stop_server
}
per_unit() { # system operation small large small-count large-count
  local a=$5 b=$6
  if [ -n "$a" ] && [ -n "$b" ]; then
    record instructions "$1" "$2" "{\"per_unit\": $(( (b - a) / ($4 - $3) ))}"
  else
    echo "   instructions/$1/$2 failed" >&2
    record instructions "$1" "$2" '{"failed": true}'
    FAILURES=$((FAILURES + 1))
  fi
}
section "8b. instructions per operation, side by side (callgrind)"
if command -v valgrind >/dev/null 2>&1; then
  [ "$SMOKE" = 1 ] && CG=(5000 10000 50 100 20 40) || CG=(50000 100000 500 1000 100 200)
  for s in raw sockeye tungstenite fastwebsockets tokio-websockets; do
    per_unit "$s" "push, server, per message" "${CG[0]}" "${CG[1]}" \
      "$(cg_server "$s" push "${CG[0]}" push "${CG[0]}")" "$(cg_server "$s" push "${CG[1]}" push "${CG[1]}")"
    if [ "$s" != raw ]; then
      per_unit "$s" "push, client, per message" "${CG[0]}" "${CG[1]}" "$(cg_client "$s" "${CG[0]}")" "$(cg_client "$s" "${CG[1]}")"
    fi
    per_unit "$s" "round trip 64 B text, server, per echo" "${CG[2]}" "${CG[3]}" \
      "$(cg_server "$s" echo 0 rtt "${CG[2]}" 64 text)" "$(cg_server "$s" echo 0 rtt "${CG[3]}" 64 text)"
    per_unit "$s" "connect + handshake + close, server, per connection" "${CG[4]}" "${CG[5]}" \
      "$(cg_server "$s" "$(connect_mode "$s")" 0 connect "${CG[4]}")" \
      "$(cg_server "$s" "$(connect_mode "$s")" 0 connect "${CG[5]}")"
  done
  # Like for like: fastwebsockets has no keepalive, so no timer. Without a timer on either side
  # (Sockeye's keepalive off), then with one pending on both (fastwebsockets' server holding one
  # tokio timer, as a server with any timeout does): tokio's time driver reads the clock and
  # turns the deadline into a timeout at every park while a timer is pending.
  for s in sockeye fastwebsockets; do
    [ "$s" = sockeye ] && export BENCH_KEEPALIVE=0
    per_unit "$s" "round trip 64 B text, server, per echo, no timer" "${CG[2]}" "${CG[3]}" \
      "$(cg_server "$s" echo 0 rtt "${CG[2]}" 64 text)" "$(cg_server "$s" echo 0 rtt "${CG[3]}" 64 text)"
    unset BENCH_KEEPALIVE
    [ "$s" = fastwebsockets ] && export BENCH_TIMER=1
    per_unit "$s" "round trip 64 B text, server, per echo, one timer pending" "${CG[2]}" "${CG[3]}" \
      "$(cg_server "$s" echo 0 rtt "${CG[2]}" 64 text)" "$(cg_server "$s" echo 0 rtt "${CG[3]}" 64 text)"
    unset BENCH_TIMER
  done
  # Every core (issue 31 §4; bench/README.md, "Every core"): the same echo on tokio's
  # work-stealing runtime with 1 and 2 workers and one listener, and thread per core, 2 threads
  # each with a current-thread runtime and its own SO_REUSEPORT listener. One connection lives on
  # one thread, so the difference is what each model costs per message, not a parallel speed-up.
  for layout in multi:1 multi:2 reuseport:2; do
    export BENCH_RUNTIME=$layout
    per_unit sockeye "round trip 64 B text, server, per echo, BENCH_RUNTIME=$layout" "${CG[2]}" "${CG[3]}" \
      "$(cg_server sockeye echo 0 rtt "${CG[2]}" 64 text)" "$(cg_server sockeye echo 0 rtt "${CG[3]}" 64 text)"
  done
  unset BENCH_RUNTIME
fi

fi # part instructions

# Sections 12 and 13: uWebSockets' own load generators against single-threaded servers (server on
# CPU 0, load generator on CPU 1). Each prints a sample every 4 seconds; the first (the connection
# ramp) is dropped and the median of the next UWS_SAMPLES is recorded, with the share of its core
# the server used over exactly those samples (uws_sample.py): a server below ~100% means the load
# generator, not the server, was measured.
[ "$SMOKE" = 1 ] && UWS_SAMPLES=1 || UWS_SAMPLES=3
uws_sample() { # scenario system params key pattern program args... (the server is SERVER_PID)
  local scenario=$1 system=$2 params=$3 key=$4 pattern=$5; shift 5
  REPS=1 run "$scenario" "$system" "$params" python3 "$BENCH/uws_sample.py" "$SERVER_PID" "$key" "$pattern" "$UWS_SAMPLES" -- "$@"
}
if part load-test; then
section "12. uWebSockets' load_test: one message in flight per connection, echoed"
if [ -z "$UWS_BIN" ]; then
  echo "   $UWS_NOT_RUN"
  record uws-status uws load-test "{\"not_run\": \"$UWS_NOT_RUN\"}"
else
  # Connections × payload (load_test's binary message of 'T's; with permessage-deflate a
  # pre-compressed JSON message, echoed uncompressed). The full run has every row; the smoke the
  # first only.
  [ "$SMOKE" = 1 ] && LT_ROWS=("100 20") || LT_ROWS=("100 20" "500 20" "100 16384")
  # Rounds: this machine's throughput moves between states that last minutes and shift every
  # server alike by up to ±20%, so one pass puts servers measured minutes apart side by side.
  # Each round runs every server once, back to back, in the opposite order of the round before;
  # report.py pairs the servers within a round and prints the median of those ratios. Two samples
  # a round keep the section near the length of one pass of three.
  [ "$SMOKE" = 1 ] && LT_ROUNDS=1 || LT_ROUNDS=3
  lt_samples=$UWS_SAMPLES; [ "$SMOKE" = 1 ] || lt_samples=2
  # Sockeye: the bench's README-style server (Server::serve, current-thread runtime); ws-tool:
  # `ws echo_server` (the own loop, its default), ws-tool-tokio: `--runtime tokio`; the peers'
  # echo servers as each documents.
  LT_SERVERS="uws sockeye sockeye-loop sockeye-loop-epoll ws-tool ws-tool-tokio tokio-websockets fastwebsockets tungstenite"
  # permessage-deflate: only the systems that have it (Sockeye's server with its default
  # compression config, the ws tool's default, uWS's dedicated compressor and decompressor).
  LT_DEFLATE_SERVERS="uws sockeye sockeye-loop ws-tool"
  reversed() { printf '%s\n' $1 | tac | tr '\n' ' '; }
  for round in $(seq "$LT_ROUNDS"); do
    order=$LT_SERVERS deflate_order=$LT_DEFLATE_SERVERS
    [ $((round % 2)) = 0 ] && order=$(reversed "$order") deflate_order=$(reversed "$deflate_order")
    echo "   round $round of $LT_ROUNDS"
    for s in $order; do
      start_server "$s" echo
      for row in "${LT_ROWS[@]}"; do
        set -- $row
        label="$1 × $([ "$2" = 16384 ] && echo "16 KiB" || echo "$2 B")"
        UWS_SAMPLES=$lt_samples uws_sample load-test "$s" "$label" msgs_per_s 'Msg/sec: ([0-9.]+)' "$UWS_BIN/load_test" "$1" 127.0.0.1 "$PORT" 0 0 "$2"
      done
      stop_server
    done
    if [ "$SMOKE" = 0 ]; then
      for s in $deflate_order; do
        start_server "$s" deflate
        UWS_SAMPLES=$lt_samples uws_sample load-test "$s" "100 × 20 B, permessage-deflate" msgs_per_s 'Msg/sec: ([0-9.]+)' "$UWS_BIN/load_test" 100 127.0.0.1 "$PORT" 0 1 20
        stop_server
      done
    fi
  done
fi
fi # part load-test

if part broadcast-test; then
section "13. uWebSockets' broadcast_test: each iteration every client sends one message, published to all"
if [ -z "$UWS_BIN" ]; then
  echo "   $UWS_NOT_RUN"
  record uws-status uws broadcast-test "{\"not_run\": \"$UWS_NOT_RUN\"}"
else
  # uWS topics (every client subscribes to "b", the handler calls app->publish) against Sockeye's
  # in-process hub written the same way (broadcast-server) and the own loop's topics
  # (bench-server sockeye-loop-broadcast). broadcast_test counts the bytes every
  # client receives and starts the next iteration only once each has all N echoes: a lost message
  # stops the iterations (a 0 in the table).
  [ "$SMOKE" = 1 ] && BT_CLIENTS="100" || BT_CLIENTS="100 500"
  for s in uws sockeye sockeye-loop; do
    start_server "$s-broadcast" echo
    for n in $BT_CLIENTS; do
      uws_sample broadcast-test "$s" "$n clients" iterations_per_s 'Iterations/second \([0-9]+ clients\): ([0-9.]+)' \
        "$UWS_BIN/broadcast_test" "$n" 127.0.0.1 "$PORT" 0
    done
    stop_server
  done
fi
fi # part broadcast-test

if part pubsub; then
  source "$BENCH/pubsub.sh"
fi

section "report"
python3 report.py "$RESULTS" "$([ "$SMOKE" = 1 ] && echo smoke || echo "${ONLY:-full}")"
if [ "$FAILURES" -gt 0 ]; then
  echo "bench: $FAILURES runs failed" >&2
  exit 1
fi
