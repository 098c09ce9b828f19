# Section 11 of bench/run.sh (sourced by it): pub/sub fan-out. Uses run.sh's BIN, OUT, SMOKE,
# REPS, PIN_SERVER, PIN_LOAD, PORT, record and run.
#
# Systems: Sockeye (`pubsub-server sockeye`: a sockeye-pubsub Hub, a Session per connection as in
# `ws broadcast_server`: what users get), the same sockets with no pub/sub layer (`pubsub-server raw`:
# pre-encoded frame bytes through a tokio broadcast channel: the ceiling), Node `ws` looping over
# its clients (peers/node-ws/pubsub.mjs) and Socket.IO (peers/socketio/server.mjs; across nodes
# with @socket.io/redis-adapter). Across nodes, the `ws` tool's two servers too, as users run
# them: `ws broadcast_server` (the plain relay: the URL path is the topic, frames relayed as
# they are) and `ws pubsub_server` (the JSON protocol for web clients: a subscribe request, each
# message in a JSON frame with its position; pubsub-load's `json` mode). The load generator
# (`pubsub-load`) holds every subscriber and the publisher in one thread on CPU 1.
#
# One process: servers on CPU 0. Across nodes: three server processes and the backplane's server
# (redis-server, nats-server) share CPU 0; subscribers are spread over the three nodes, the
# publisher is on the first.

(cd peers/socketio && { [ -d node_modules/socket.io ] || npm ci --no-audit --no-fund --loglevel=error; })
# Idempotent; also puts a nats-server of 2.10 or later first where the system's is older.
bash ../scripts/install-backplanes.sh || echo "   redis-server/nats-server missing: the across-nodes rows will fail" >&2
NATS_SERVER=$( { [ -x /usr/local/bin/nats-server ] && echo /usr/local/bin/nats-server; } || command -v nats-server || echo /usr/sbin/nats-server)

if [ "$SMOKE" = 1 ]; then
  PS_SUBS="200"; PS_MAX_MSGS=500; PS_SECS=3; PS_PACED_SECS=1; PS_NODE_SUBS=150; PS_NODE_MSGS=300; PS_IDLE=1000
else
  PS_SUBS="1000 10000"; PS_MAX_MSGS=3000; PS_SECS=10; PS_PACED_SECS=3; PS_NODE_SUBS=1000; PS_NODE_MSGS=2000; PS_IDLE=10000
fi
# PS_ROWS=a,b,… (empty: all) runs only those rows: the one-process and memory rows by system
# (raw, sockeye, node, socketio; sockeye-nosub, sockeye-split), the across-nodes rows by variant
# (sockeye-redis, sockeye-redis-cluster, …), e.g. to compare two backplanes before and after a
# change: PS_ROWS=sockeye-redis,sockeye-redis-cluster bash bench/run.sh --smoke --only=pubsub
ps_row() { [ -z "${PS_ROWS:-}" ] || [[ ",$PS_ROWS," == *",$1,"* ]]; }
# The paced runs aim at 100,000 deliveries/s in all: 1,000 subscribers × 100 msgs/s, 10,000 × 10.
paced_rate() { echo $(( 100000 / $1 )); }
# The as-fast-as-possible runs send PS_MAX_MSGS messages to 1,000 subscribers (fewer to more
# subscribers: about 3 million deliveries at most), or stop after PS_SECS.
max_msgs() { local m=$(( PS_MAX_MSGS * 1000 / $1 )); echo $(( m < 100 ? 100 : (m > PS_MAX_MSGS ? PS_MAX_MSGS : m) )); }

PS_PIDS=()
ps_stop_all() {
  local pid
  for pid in "${PS_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PS_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  PS_PIDS=()
}
trap 'stop_server; ps_stop_all' EXIT
ps_wait_ready() { # log what
  for _ in $(seq 200); do grep -q "${3:-ready}" "$1" 2>/dev/null && return 0; sleep 0.05; done
  echo "   $2 did not start" >&2; cat "$1" >&2; return 1
}
ps_start() { # system port [backplane-url]: starts one pub/sub server (a node) on CPU 0
  local system=$1 port=$2 url=${3:-} log=$OUT/pubsub-$1-$2.log ready=ready
  : >"$log"
  case "$system" in
    node) "${PIN_SERVER[@]}" node peers/node-ws/pubsub.mjs "$port" >"$log" 2>&1 & ;;
    socketio) "${PIN_SERVER[@]}" node peers/socketio/server.mjs "$port" $url >"$log" 2>&1 & ;;
    ws-broadcast | ws-pubsub)
      # pubsub_server's bounds on hostile clients would refuse the load itself (its subscribers
      # all come from 127.0.0.1, its one publisher sends thousands a second): lifted.
      local lifted=()
      [ "$system" = ws-pubsub ] && lifted=(--max-connections 1000000 --max-connections-per-address 1000000 --max-publish-rate 0 --max-publish-topics 0)
      "${PIN_SERVER[@]}" "$BIN/ws" "${system#ws-}_server" -q --port "$port" ${url:+--backplane "$url"} "${lifted[@]}" >"$log" 2>&1 &
      ready="listening on" ;;
    *) "${PIN_SERVER[@]}" "$BIN/pubsub-server" "$system" "$port" ${url:-memory:} >"$log" 2>&1 & ;;
  esac
  PS_PIDS+=($!)
  ps_wait_ready "$log" "the $system server on $port" "$ready"
}
bp_start() { # redis|nats|nats-js|redis-cluster|nats-cluster → sets BP_URL; the servers run on CPU 0
  PORT=$((PORT + 1))
  local dir log
  dir=$(mktemp -d "$OUT/backplane.XXXXXX")
  log=$dir/log
  case "$1" in
    redis-cluster) bp_redis_cluster "$dir"; return ;;
    nats-cluster) bp_nats_cluster "$dir"; return ;;
    redis) "${PIN_SERVER[@]}" redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$log" 2>&1 &
           BP_URL=redis://127.0.0.1:$PORT ;;
    nats) "${PIN_SERVER[@]}" "$NATS_SERVER" -a 127.0.0.1 -p "$PORT" >"$log" 2>&1 & BP_URL=nats://127.0.0.1:$PORT ;;
    nats-js) "${PIN_SERVER[@]}" "$NATS_SERVER" -a 127.0.0.1 -p "$PORT" -js -sd "$dir" >"$log" 2>&1 & BP_URL=nats://127.0.0.1:$PORT ;;
  esac
  PS_PIDS+=($!)
  ps_wait_ready "$log" "$1" "$([ "$1" = redis ] && echo 'Ready to accept' || echo 'Server is ready')"
}

# A Redis Cluster of 3 primaries and 3 replicas (sharded pub/sub), as tests/distributed.rs builds
# it: ports PORT+1.., cluster bus ports 10000 above (Redis's default).
bp_redis_cluster() { # dir
  local addrs=() i port
  for i in 1 2 3 4 5 6; do
    port=$((PORT + i)); mkdir -p "$1/$port"
    "${PIN_SERVER[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --cluster-enabled yes --cluster-node-timeout 1000 --dir "$1/$port" >"$1/$port.log" 2>&1 &
    PS_PIDS+=($!)
    ps_wait_ready "$1/$port.log" "redis-server $port" 'Ready to accept' || return 1
    addrs+=("127.0.0.1:$port")
  done
  PORT=$((PORT + 6))
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$1/create.log" 2>&1 \
    || { cat "$1/create.log" >&2; return 1; }
  for _ in $(seq 200); do
    redis-cli -p "${addrs[0]#*:}" cluster info 2>/dev/null | grep -q cluster_state:ok && break; sleep 0.05
  done
  BP_URL=redis+cluster://$(IFS=,; echo "${addrs[*]}")
}
# A NATS cluster of 3 servers with routes and JetStream (the stream replicated on all 3), ready
# once every server's /healthz answers 200 (a JetStream leader is elected).
bp_nats_cluster() { # dir
  local addrs=() routes="" i port
  for i in 1 2 3; do routes=${routes:+$routes,}nats-route://127.0.0.1:$((PORT + 10 + i)); done
  for i in 1 2 3; do
    port=$((PORT + i)); mkdir -p "$1/$port"
    "${PIN_SERVER[@]}" "$NATS_SERVER" -a 127.0.0.1 -p "$port" -js -sd "$1/$port" --server_name "n$i" \
      --cluster_name sockeye --cluster "nats://127.0.0.1:$((PORT + 10 + i))" --routes "$routes" \
      -m $((PORT + 20 + i)) >"$1/$port.log" 2>&1 &
    PS_PIDS+=($!)
    addrs+=("127.0.0.1:$port")
  done
  for i in 1 2 3; do
    for _ in $(seq 300); do
      { exec 3<>/dev/tcp/127.0.0.1/$((PORT + 20 + i)) && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 \
        && head -1 <&3 | grep -q 200; } 2>/dev/null && { exec 3<&-; break; }
      exec 3<&- 2>/dev/null; sleep 0.1
    done
  done
  PORT=$((PORT + 23))
  BP_URL=nats://$(IFS=,; echo "${addrs[*]}")
}

section "11. pub/sub fan-out: one process (${PS_SUBS// /, } subscribers), three nodes, memory per subscription"
for subs in $PS_SUBS; do
  rate=$(paced_rate "$subs"); msgs=$(max_msgs "$subs")
  for s in raw sockeye node socketio; do
    ps_row "$s" || continue
    PORT=$((PORT + 1))
    ps_start "$s" "$PORT" || { FAILURES=$((FAILURES + 1)); ps_stop_all; continue; }
    proto=$([ "$s" = socketio ] && echo socketio || echo ws)
    run pubsub-fanout "$s" "$subs subs, as fast as possible" "$BIN/pubsub-load" fanout "$proto" "127.0.0.1:$PORT" "$subs" "$msgs" 0 "$PS_SECS"
    run pubsub-fanout "$s" "$subs subs × $rate msgs/s" "$BIN/pubsub-load" fanout "$proto" "127.0.0.1:$PORT" "$subs" $(( rate * PS_PACED_SECS )) "$rate" "$PS_PACED_SECS"
    ps_stop_all
  done
done

# Across nodes: three server processes on one backplane.
subs=$PS_NODE_SUBS; rate=$(paced_rate "$subs")
# The cluster rows (issue 29): the same three nodes over a Redis Cluster (sharded pub/sub) and a
# 3-server NATS cluster (JetStream, R3), beside the single-server rows. The web protocol's rows
# (issue 30): `ws pubsub_server` against `ws broadcast_server`, both over one Redis.
for variant in sockeye-redis sockeye-redis-cluster sockeye-nats sockeye-nats-js sockeye-nats-cluster \
    ws-broadcast-redis ws-pubsub-redis socketio-redis; do
  ps_row "$variant" || continue
  case "$variant" in
    sockeye-redis | socketio-redis | ws-broadcast-redis | ws-pubsub-redis) backplane=redis ;;
    sockeye-redis-cluster) backplane=redis-cluster ;;
    sockeye-nats) backplane=nats ;;
    sockeye-nats-js) backplane=nats-js ;;
    sockeye-nats-cluster) backplane=nats-cluster ;;
  esac
  case "$variant" in
    ws-*) system=${variant%-redis} ;;
    *) system=${variant%%-*} ;;
  esac
  bp_start "$backplane" || { FAILURES=$((FAILURES + 1)); ps_stop_all; continue; }
  addrs=
  ok=1
  for _ in 1 2 3; do
    PORT=$((PORT + 1))
    ps_start "$system" "$PORT" "$BP_URL" || ok=0
    addrs=${addrs:+$addrs,}127.0.0.1:$PORT
  done
  if [ "$ok" = 1 ]; then
    case "$system" in socketio) proto=socketio ;; ws-pubsub) proto=json ;; *) proto=ws ;; esac
    run pubsub-nodes "$variant" "3 nodes, $subs subs × $rate msgs/s" "$BIN/pubsub-load" fanout "$proto" "$addrs" "$subs" $(( rate * PS_PACED_SECS )) "$rate" "$PS_PACED_SECS"
    run pubsub-nodes "$variant" "3 nodes, $subs subs, as fast as possible" "$BIN/pubsub-load" fanout "$proto" "$addrs" "$subs" "$PS_NODE_MSGS" 0 "$PS_SECS"
  else
    FAILURES=$((FAILURES + 1))
  fi
  ps_stop_all
  rm -rf "$OUT"/backplane.*
done

# Memory per subscription: the Sockeye server's RSS growth per idle connection, subscribed (a
# Session each: the split connection and a Subscriber, one task) and not (`sockeye-nosub`: the same server, connections
# only read; `sockeye-split`: split into reading and writing halves, not subscribed).
for s in sockeye-nosub sockeye-split sockeye; do
  ps_row "$s" || continue
  PORT=$((PORT + 1))
  ps_start "$s" "$PORT" || { FAILURES=$((FAILURES + 1)); ps_stop_all; continue; }
  pid=${PS_PIDS[0]}
  before=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
  : >"$OUT/idle.log"
  "${PIN_LOAD[@]}" timeout 120 "$BIN/loadgen" idle "127.0.0.1:$PORT" "$PS_IDLE" 3 >"$OUT/idle.log" 2>&1 &
  idle_pid=$!
  for _ in $(seq 600); do grep -q ready "$OUT/idle.log" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  after=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")
  case "$s" in
    sockeye) label="$PS_IDLE idle, subscribed (a Session: split, Subscriber)" ;;
    sockeye-split) label="$PS_IDLE idle, split into reader and writer, not subscribed" ;;
    *) label="$PS_IDLE idle, not subscribed" ;;
  esac
  if wait "$idle_pid"; then
    record pubsub-memory sockeye "$label" "{\"rss_kib\": $after, \"base_kib\": $before, \"per_conn_kib\": $(awk -v a="$after" -v b="$before" -v n="$PS_IDLE" 'BEGIN {printf "%.3f", (a - b) / n}')}"
  else
    echo "   pubsub-memory/$s failed: $(tail -1 "$OUT/idle.log")" >&2
    record pubsub-memory sockeye "$label" '{"failed": true}'
    FAILURES=$((FAILURES + 1))
  fi
  ps_stop_all
done
