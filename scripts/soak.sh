#!/usr/bin/env bash
# A bounded soak test over loopback: CONNECTIONS concurrent connections exchange checksummed
# messages of random sizes (fragmented, text and binary, some compressed), pings, closes and
# reconnects for SECONDS; the server process's RSS is sampled every 10 s.
#
#   bash scripts/soak.sh                  # 10,000 connections for 600 s (the issue's soak)
#   bash scripts/soak.sh 500 20           # what CI runs
#
# Fails if any message was lost or corrupted, any connection failed, the two sides' counts
# differ, or (in runs of 120 s and more) the server's RSS grew by more than 20% between the end
# of warm-up (a quarter of the run) and the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
CONNECTIONS="${1:-10000}"
DURATION="${2:-600}"
PORT="${SOAK_PORT:-9400}"
OUT=target/soak
mkdir -p "$OUT"

# Each process holds one descriptor per connection, plus a few.
need=$((CONNECTIONS + 256))
if [ "$(ulimit -n)" -lt "$need" ]; then
  if ! ulimit -n "$need" 2>/dev/null && ! { ulimit -Hn "$need" 2>/dev/null && ulimit -n "$need"; }; then
    echo "soak: $CONNECTIONS connections need $need file descriptors per process, but the limit" \
         "is $(ulimit -n) (hard $(ulimit -Hn)) and cannot be raised here; run as root or raise" \
         "the hard limit (limits.conf, systemd LimitNOFILE)" >&2
    exit 2
  fi
fi

cargo build --release --quiet -p sockeye-soak
BIN=target/release/sockeye-soak

"$BIN" server "127.0.0.1:$PORT" >"$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q listening "$OUT/server.log" 2>/dev/null && break; sleep 0.1; done

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$SERVER/status"; }
: >"$OUT/rss.tsv"
(
  start=$SECONDS
  while kill -0 "$SERVER" 2>/dev/null; do
    printf '%s\t%s\t%s\n' "$((SECONDS - start))" "$(rss_kib)" "$(ls "/proc/$SERVER/fd" 2>/dev/null | wc -l)" >>"$OUT/rss.tsv"
    sleep "${SOAK_SAMPLE:-10}"
  done
) &
SAMPLER=$!

echo "==> soak: $CONNECTIONS connections for $DURATION s on 127.0.0.1:$PORT"
client_rc=0
"$BIN" client "ws://127.0.0.1:$PORT/" "$CONNECTIONS" "$DURATION" 8 2>&1 | tee "$OUT/client.log" || client_rc=$?
end_rss=$(rss_kib)
kill -TERM "$SERVER"
wait "$SERVER" || true
kill "$SAMPLER" 2>/dev/null || true
trap - EXIT
cat "$OUT/server.log"

field() { grep -oE "^$1 .*" "$2" | tail -1 | grep -oE "$3=[0-9]+" | cut -d= -f2; }
client_msgs=$(field client "$OUT/client.log" messages || echo 0)
server_msgs=$(field server "$OUT/server.log" messages || echo 0)
server_bad=$(field server "$OUT/server.log" corrupted || echo 1)
# RSS after warm-up: the first sample at or after a quarter of the run.
warm=$(awk -v t="$((DURATION / 4))" '$1 >= t {print $2; exit}' "$OUT/rss.tsv")
warm=${warm:-$end_rss}
peak=$(awk 'BEGIN {m = 0} $2 > m {m = $2} END {print m}' "$OUT/rss.tsv")
fds=$(awk 'BEGIN {m = 0} $3 > m {m = $3} END {print m}' "$OUT/rss.tsv")
echo "==> server RSS: after warm-up ${warm} KiB, peak ${peak} KiB, at the end ${end_rss} KiB;" \
     "peak descriptors ${fds}; $(( end_rss / (CONNECTIONS > 0 ? CONNECTIONS : 1) )) KiB per connection at the end"
echo "==> messages verified: client ${client_msgs}, server ${server_msgs}; server saw ${server_bad} corrupted"

failed=0
[ "$client_rc" = 0 ] || { echo "soak: the client reported failures (exit $client_rc)" >&2; failed=1; }
[ "$server_bad" = 0 ] || { echo "soak: the server saw corrupted messages" >&2; failed=1; }
[ "$client_msgs" = "$server_msgs" ] || { echo "soak: the two sides' counts differ" >&2; failed=1; }
if [ "$DURATION" -lt 120 ]; then
  echo "==> RSS growth not judged: a run shorter than 120 s has no steady state"
elif [ "$end_rss" -gt $((warm * 6 / 5)) ]; then
  echo "soak: server RSS grew from ${warm} KiB to ${end_rss} KiB after warm-up" >&2
  failed=1
fi
[ "$failed" = 0 ] && echo "==> soak passed"
exit "$failed"
