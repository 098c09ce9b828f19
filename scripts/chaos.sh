#!/usr/bin/env bash
# Issue 39's fault-injection checker on long schedules: random seeds (or SEED again and again) on
# one engine for MINUTES (0: one run), each with 10 s of overlapping faults (the engine killed,
# nodes crashed, blackholed, partitioned; snapshots, cut append-only files, failovers, hung
# primaries, slot migrations, NATS servers killed, as the engine allows), then the heal and the
# check. CHAOS_HISTORY=FILE writes a failing run's whole history there. For any violation it
# prints the seed and, per violation, the shortest history that shows it; exits 1 then.
# The web variant: the engine's name with web- before it (web-redis, web-nats-jetstream, …): two
# nodes also serve the web face (ws pubsub_server's) and the third is `ws pubsub_server` itself,
# with subscribers in Node (the project's JavaScript client, and the ws package's raw socket) and
# publishers on the HTTP API and the socket besides the Rust ones (needs node; installs
# interop/node's ws: interop/install-node.sh).
# Usage: bash scripts/chaos.sh [web-]redis|redis-rdb|redis-aof|redis-replicated|redis-cluster|nats|nats-jetstream|nats-cluster MINUTES [SEED]
# Needs redis-server and nats-server (bash scripts/install-backplanes.sh). The fixed seeds run in
# the test command (crates/sockeye-pubsub/tests/chaos.rs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: bash scripts/chaos.sh [web-]redis|redis-rdb|redis-aof|redis-replicated|redis-cluster|nats|nats-jetstream|nats-cluster MINUTES [SEED]" >&2
  exit 2
fi
case "${1#web-}" in redis|redis-rdb|redis-aof|redis-replicated|redis-cluster|nats|nats-jetstream|nats-cluster) ;; *) echo "engine: one of redis, redis-rdb, redis-aof, redis-replicated, redis-cluster, nats, nats-jetstream, nats-cluster, each with web- before it or not; not $1" >&2; exit 2 ;; esac
# The web variant's third node is `ws pubsub_server` itself, a release build as operators run it.
case "$1" in web-*)
  bash interop/install-node.sh
  cargo build --release --quiet -p sockeye-cli
  export CHAOS_WS="$PWD/target/release/ws" ;;
esac
CHAOS_ENGINE="$1" CHAOS_MINUTES="$2" CHAOS_SEED="${3:-}" \
  cargo test --quiet -p sockeye-pubsub --all-features --test chaos chaos_long -- --ignored --nocapture
