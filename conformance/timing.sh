#!/usr/bin/env bash
# conformance/timing.sh [--runs N]
#
# Autobahn 9.7.* and 9.8.* (1000 sequential echoes per case, text and binary, 0–4096 bytes) against
# Sockeye's echo server and a tokio-tungstenite echo server (latest from crates.io, built from
# bench/peers/tungstenite-echo, TLS through tokio-rustls), all in the same wstest run, over ws://
# and wss:// (a self-signed certificate made for the run). Prints a table per transport:
# case, data, payload, then per system the case duration, the derived mean per echo
# (duration / 1000) and the echo rate. With --runs N, N runs and the median of each case.
# The figures are mostly wstest's own Python cost; compare systems only within one run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    *) echo "usage: conformance/timing.sh [--runs N]" >&2; exit 2 ;;
  esac
done
CACHE="${SOCKEYE_CACHE:-$HOME/.cache/sockeye}"
OUT="$ROOT/target/autobahn/timing"
SOCKEYE_PORT=9202
PEER_PORT=9203
SOCKEYE_TLS_PORT=9204
PEER_TLS_PORT=9205
bash "$ROOT/conformance/install-wstest.sh" "$CACHE/wstest"
(cd "$ROOT" && cargo build --release --quiet -p sockeye-conformance)
(cd "$ROOT/bench/peers/tungstenite-echo" && cargo build --release --quiet)
mkdir -p "$OUT"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$OUT/key.pem" -out "$OUT/cert.pem" -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" >/dev/null 2>&1
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
"$ROOT/target/release/sockeye-autobahn-server" "127.0.0.1:$SOCKEYE_PORT" 2>/dev/null & PIDS+=($!)
"$ROOT/bench/peers/tungstenite-echo/target/release/tungstenite-echo" "127.0.0.1:$PEER_PORT" 2>/dev/null & PIDS+=($!)
"$ROOT/target/release/sockeye-autobahn-server" "127.0.0.1:$SOCKEYE_TLS_PORT" --tls "$OUT/cert.pem" "$OUT/key.pem" 2>/dev/null & PIDS+=($!)
"$ROOT/bench/peers/tungstenite-echo/target/release/tungstenite-echo" "127.0.0.1:$PEER_TLS_PORT" --tls "$OUT/cert.pem" "$OUT/key.pem" 2>/dev/null & PIDS+=($!)
sleep 0.5
cat >"$OUT/spec.json" <<JSON
{"options": {"failByDrop": false}, "outdir": "./reports",
 "servers": [{"agent": "sockeye", "url": "ws://127.0.0.1:$SOCKEYE_PORT"},
             {"agent": "tokio-tungstenite", "url": "ws://127.0.0.1:$PEER_PORT"},
             {"agent": "sockeye-wss", "url": "wss://127.0.0.1:$SOCKEYE_TLS_PORT"},
             {"agent": "tokio-tungstenite-wss", "url": "wss://127.0.0.1:$PEER_TLS_PORT"}],
 "cases": ["9.7.*", "9.8.*"], "exclude-cases": [], "exclude-agent-cases": {}}
JSON
for run in $(seq "$RUNS"); do
  rm -rf "$OUT/reports"
  (cd "$OUT" && timeout 600 "$CACHE/wstest/bin/wstest" -m fuzzingclient -s spec.json >"$OUT/wstest.log" 2>&1)
  cp "$OUT/reports/index.json" "$OUT/index-$run.json"
done
python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
reports = [json.load(open("%s/index-%d.json" % (out, r))) for r in range(1, runs + 1)]
sizes = [0, 16, 64, 256, 1024, 4096]
for transport, agents in (("ws://", ["sockeye", "tokio-tungstenite"]), ("wss://", ["sockeye-wss", "tokio-tungstenite-wss"])):
    print("\n%s\n" % transport)
    print("| case | data | payload |" + "".join(" %s ms | µs/echo | echo/s |" % a for a in agents))
    print("|" + "---|" * (3 + 3 * len(agents)))
    for sec, data in (("9.7", "text"), ("9.8", "binary")):
        for i, size in enumerate(sizes, 1):
            case = "%s.%d" % (sec, i)
            row = "| %s | %s | %d |" % (case, data, size)
            for a in agents:
                results = [r[a][case] for r in reports]
                bad = [x["behavior"] for x in results if x["behavior"] != "OK"]
                ms = statistics.median(x["duration"] for x in results)
                row += " %s | %.0f | %.0f |" % ("%d%s" % (ms, " (%s)" % bad[0] if bad else ""), ms, 1000 / (ms / 1000.0) if ms else 0)
            print(row)
print("\n(%d run%s%s; µs/echo = duration / 1000 echoes)" % (runs, "s" if runs > 1 else "", ", medians" if runs > 1 else ""))
PY
