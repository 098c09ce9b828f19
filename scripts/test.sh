#!/usr/bin/env bash
# Runs every test of the project from nothing: formatting and lints, unit, property, doc and
# loopback tests, a short run of every fuzz target, of the soak and of every benchmark scenario,
# interop with real clients,
# servers and proxies, then the Autobahn|Testsuite in both roles (installing wstest, cargo-fuzz,
# Chromium, the proxies and the Node and Python packages on first use).
# Usage: bash scripts/test.sh          (CI runs exactly this through .ci/run)
#        bash scripts/test.sh --quick  (a contributor's inner loop: formatting, then the engine's,
#                                       the tokio layer's, the in-process pub/sub and the tool's
#                                       tests; no Autobahn, browsers, fuzzing, bench or backplane
#                                       servers, nothing installed. See CONTRIBUTING.md)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
START=$SECONDS
# Each step says when it began (seconds since the start), so a slow CI run shows where it went.
step() { printf '\n==> [%d s] %s\n' "$((SECONDS - START))" "$*"; }

if [ "${1:-}" = --quick ]; then
  step "rustfmt; imports run one way (no circle between the files of a crate); the layout ARCHITECTURE.md describes"
  cargo fmt --all --check
  python3 scripts/check-imports.py --self-test
  python3 scripts/check-imports.py
  python3 scripts/check-layout.py --self-test
  python3 scripts/check-layout.py
  # Every test target of a crate but those named (they need a redis-server or nats-server that
  # the full command installs), unit tests included; doc tests run in the full command.
  quick_tests() { # crate, test targets to leave out...
    local crate=$1 targets=() file name; shift
    for file in "crates/$crate"/tests/*.rs; do
      name=$(basename "$file" .rs)
      [[ " $* " == *" $name "* ]] || targets+=(--test "$name")
    done
    cargo test --quiet -p "$crate" --all-features --lib --bins "${targets[@]}"
  }
  step "engine: unit, property and two-engine tests (sockeye-proto)"
  quick_tests sockeye-proto
  step "tokio layer: loopback, TLS, HTTP/2, faults, limits, reconnect (sockeye)"
  quick_tests sockeye
  step "pub/sub over the in-process backplane (sockeye-pubsub; Redis and NATS: the full command)"
  quick_tests sockeye-pubsub redis nats failover distributed chaos
  step "the own loop, io_uring and epoll (sockeye-loop)"
  quick_tests sockeye-loop
  step "the ws tool (sockeye-cli; the Redis/NATS relay tests: the full command)"
  quick_tests sockeye-cli backplane
  step "quick tests passed in $((SECONDS - START)) s (the full command: bash scripts/test.sh)"
  exit 0
fi
[ $# -eq 0 ] || { echo "usage: bash scripts/test.sh [--quick]" >&2; exit 2; }

step "rustfmt; imports run one way (no circle between the files of a crate); the layout ARCHITECTURE.md describes"
cargo fmt --all --check
python3 scripts/check-imports.py --self-test
python3 scripts/check-imports.py
python3 scripts/check-layout.py --self-test
python3 scripts/check-layout.py
# The suite's release builds (the ws tool, the soak, the conformance testee, the benchmarks' smoke
# harness) skip LTO: the same code, checked the same way, built about a minute sooner (the
# harness: 126 s instead of 212 on a 2-core VM, 153 s instead of 223 within CI). bench/run.sh run
# on its own keeps the profile's thin LTO for the figures it records. (Building the release ws
# tool beside clippy and the debug build was tried too, and was ~90 s slower on 2 cores than one
# build after the other.)
export CARGO_PROFILE_RELEASE_LTO=false
step "clippy (warnings are errors), every feature, the default features and none"
cargo clippy --workspace --all-targets --all-features --quiet -- -D warnings
# Warnings are errors in the other feature sets too: code used only by a feature (the NATS
# backplane's task spawning) warned in the default build unseen, since a check only prints.
cargo clippy --quiet -p sockeye-pubsub -- -D warnings
cargo clippy --quiet -p sockeye --no-default-features -- -D warnings
cargo clippy --quiet -p sockeye-loop --no-default-features -- -D warnings
cargo clippy --quiet -p sockeye-pubsub --no-default-features -- -D warnings
# Each backplane alone: a module shared by two of them must not hide behind one's feature.
cargo clippy --quiet -p sockeye-pubsub --no-default-features --features nats -- -D warnings
cargo clippy --quiet -p sockeye-pubsub --no-default-features --features redis -- -D warnings
# ...and without them, pub/sub builds no TLS provider (it used to force sockeye's defaults).
if cargo tree --quiet -p sockeye-pubsub --no-default-features -e features | grep -i rustls; then
    echo "sockeye-pubsub without default features still builds rustls" >&2; exit 1
fi
step "docs build without warnings"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps --all-features -p sockeye-proto -p sockeye -p sockeye-pubsub -p sockeye-loop
step "unit, property, doc, loopback, fault and framework tests"
# The pub/sub backplane tests run real Redis and NATS servers (started and stopped by the tests,
# on free loopback ports).
bash scripts/install-backplanes.sh
# The chaos checker's web variant runs a client of Node's `ws` package (interop/node).
bash interop/install-node.sh
# The ws tool's signal tests flood the client under test from a release build (the debug one
# cannot push fast enough to keep a reader busy); the same build serves interop and Autobahn.
cargo build --release --quiet -p sockeye-cli
# The chaos checker's fixed seeds (~3 minutes, mostly waiting on faults and heals) run beside the
# other test binaries, which cargo runs one after another: its binary is built first and started
# on its own, and cargo skips its tests (no other test has "chaos" in its name).
export WS_FLOOD_BIN="$PWD/target/release/ws"
# The chaos checker's web variant runs that build as its third node (`ws pubsub_server`).
export CHAOS_WS="$PWD/target/release/ws"
cargo test --workspace --all-features --no-run --quiet
CHAOS_BIN=$(cargo test -p sockeye-pubsub --all-features --test chaos --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "chaos" and m.get("executable"):
        print(m["executable"])')
[ -x "$CHAOS_BIN" ] || { echo "the chaos test binary was not found" >&2; exit 1; }
# cargo runs a test binary in its package's directory; so does this.
(cd crates/sockeye-pubsub && exec "$CHAOS_BIN") >target/chaos-tests.out 2>&1 &
CHAOS_RUN=$!
CHAOS_RC=0
# The test binaries leave about one core idle (most of them wait on sockets, timers and servers):
# the fuzz targets build there meanwhile, at the lowest priority so that the tests keep the CPU
# they ask for (~110 s of both cores when built alone; fuzz/ is a workspace of its own, with its
# own target directory, so no build lock is shared with this one).
# In a process group of its own (setsid), so that a failure below stops all of it (cargo,
# rustc, the C++ of libFuzzer), not only its shell.
setsid nice -n 19 bash fuzz/run.sh --build-only >target/fuzz-build.out 2>&1 &
FUZZ_BUILD=$!
cargo test --workspace --all-features -- --skip chaos || {
  wait "$CHAOS_RUN" || true; cat target/chaos-tests.out; kill -- "-$FUZZ_BUILD" 2>/dev/null || true; exit 1; }
wait "$CHAOS_RUN" || CHAOS_RC=$?
cat target/chaos-tests.out
[ "$CHAOS_RC" = 0 ] || {
  echo "the chaos checker's fixed seeds failed (exit $CHAOS_RC)" >&2; kill -- "-$FUZZ_BUILD" 2>/dev/null || true; exit 1; }

step "fuzz targets: run each for 20 s (bash fuzz/run.sh for the 10-minute runs; built beside the tests above)"
FUZZ_BUILD_RC=0
wait "$FUZZ_BUILD" || FUZZ_BUILD_RC=$?
cat target/fuzz-build.out
[ "$FUZZ_BUILD_RC" = 0 ] || { echo "the fuzz targets did not build (exit $FUZZ_BUILD_RC)" >&2; exit 1; }
bash fuzz/run.sh 20
step "soak: 500 connections for 20 s (bash scripts/soak.sh for 10,000 connections, 10 minutes)"
bash scripts/soak.sh 500 20
step "Autobahn|Testsuite sections 1-10 through ws proxy_server (beside the benchmarks' smoke run)"
bash conformance/install-wstest.sh
mkdir -p target/autobahn
# About 15 s of wstest (one core at most); the smoke run's figures are not judged, so sharing the
# machine with it costs nothing.
bash conformance/proxy.sh --no-build >target/autobahn/run-proxy.out 2>&1 &
PROXY_RUN=$!
step "benchmarks: build the harness and peers, and a short run of every scenario (figures not judged)"
bash bench/run.sh --smoke
PROXY_RC=0
wait "$PROXY_RUN" || PROXY_RC=$?
cat target/autobahn/run-proxy.out
if [ "$PROXY_RC" != 0 ]; then
  echo "Autobahn through ws proxy_server failed (exit $PROXY_RC)" >&2
  exit 1
fi
# Both roles of one transport at once: wstest is single-threaded Python and this uses both cores.
autobahn_pair() { # name, run.sh options...
  local name="$1"; shift
  step "Autobahn|Testsuite $name: server and client roles at once"
  bash conformance/run.sh server --no-build "$@" >"target/autobahn/run-server-$name.out" 2>&1 &
  local server=$!
  bash conformance/run.sh client --no-build "$@" >"target/autobahn/run-client-$name.out" 2>&1 &
  local client=$!
  local server_rc=0 client_rc=0
  wait "$server" || server_rc=$?
  wait "$client" || client_rc=$?
  cat "target/autobahn/run-server-$name.out" "target/autobahn/run-client-$name.out"
  if [ "$server_rc" != 0 ] || [ "$client_rc" != 0 ]; then
    echo "Autobahn $name failed (server: exit $server_rc, client: exit $client_rc)" >&2
    exit 1
  fi
}

step "the JavaScript pub/sub client (clients/js): Node's test runner, no dependencies; its npm package packed, installed offline into a fresh project, imported by name"
node --test clients/js/test/

# The crates as crates.io would take them, in dependency order (path dependencies resolved through
# a local registry of the packages just made): manifests, READMEs, licences, included files.
# Without the build of each package (`cargo package` alone verifies them: 13 minutes on 2 cores).
# The tests are left out of the packages on purpose; cargo's warning for each is dropped.
step "packages: cargo package of the five published crates (sockeye-soak is not published)"
cargo package --workspace --exclude sockeye-soak --no-verify --allow-dirty --quiet 2>&1 \
  | { grep -v '^warning: ignoring test .* is not included in the published package$' || true; }

step "interop: Python websockets, Node ws, Chromium, Firefox (the pub/sub demo page on two nodes), tinyproxy and dante (installed on first use)"
bash interop/run.sh

bash conformance/install-wstest.sh
cargo build --release --quiet -p sockeye-conformance
mkdir -p target/autobahn
# Plain ws://: every case of sections 1-10 and of the compression subsections 12.1 (the default
# offer, JSON data) and 13.7 (several offers: window sizes and context takeover negotiated);
# of the other compression subsections (12.2-12.5: the same offer on binary, German, HTML and
# PDF data; 13.1-13.6: one parameter set each) the cases up to 32 KiB a message and the 128 KiB
# one, not the larger fragmented ones that repeat the sizes 12.1 and 13.7 run whole. wstest's
# Python takes ~12 minutes per role for all of sections 12 and 13 and ~5 for this; the whole
# suite is `conformance/run.sh server|client`, run by hand before a release.
# (wstest takes a pattern as a regular expression only when it has a `*`; others are case ids.)
WS_CASES='1.*,2.*,3.*,4.*,5.*,6.*,7.*,9.*,10.*,12.1.*,13.7.*'
for sub in 12.2 12.3 12.4 12.5 13.1 13.2 13.3 13.4 13.5 13.6; do
  for n in 1 2 3 4 5 6 7 8 10 11 12 13; do WS_CASES+=",$sub.$n"; done
done
autobahn_pair ws --cases "$WS_CASES"
# The other transports and the own loop run a sample: sections 1-10 whole, and of the
# compression sections 12.1 (the default offer) and 13.7 (several offers: window sizes and context
# takeover negotiated) the unfragmented messages of 16 B to 64 KiB and one fragmented case (8 KiB
# messages in 256-byte frames). Sections 12 and 13 drive the same engine whatever the transport,
# and the ws pass above runs them all; large and fragmented messages through each transport are
# section 9's and 5's. The rest of 12.1 and 13.7 (128 KiB messages, and 8 to 128 KiB in 256-byte
# frames) took ~70 s more per role and transport: with the own loop's pass added, it pushed CI
# past 45 minutes. Each transport's whole suite: conformance/run.sh server|client --http2 | --tls,
# conformance/run.sh server --runtime uring|epoll, by hand before a release.
SAMPLE='1.*,2.*,3.*,4.*,5.*,6.*,7.*,9.*,10.*'
for sub in 12.1 13.7; do
  for n in 1 2 3 4 5 6 7 8 9 11; do SAMPLE+=",$sub.$n"; done
done
# WebSockets over HTTP/2 (RFC 8441, h2c), through conformance/h2-bridge.mjs (wstest speaks only
# HTTP/1.1; the bridge translates the handshake and passes frames unchanged).
autobahn_pair h2 --http2 --cases "$SAMPLE"
# wss://.
autobahn_pair wss --tls --cases "$SAMPLE"
# Sockeye's own loop (crates/sockeye-loop) as the server, over ws:// and wss://, on io_uring
# wherever the kernel allows it (`auto`; epoll where it is refused) and on the epoll fallback
# forced: two runs at a time, one core each.
loop_pair() { # title, the case list, then the run.sh options of each run
  step "Autobahn|Testsuite with sockeye-loop as the server: $1"
  local cases="$2" a=() b=()
  read -ra a <<<"$3"
  read -ra b <<<"$4"
  bash conformance/run.sh server --no-build "${a[@]}" --cases "$cases" >target/autobahn/run-server-loop-a.out 2>&1 &
  local first=$!
  bash conformance/run.sh server --no-build "${b[@]}" --cases "$cases" >target/autobahn/run-server-loop-b.out 2>&1 &
  local second=$!
  local first_rc=0 second_rc=0
  wait "$first" || first_rc=$?
  wait "$second" || second_rc=$?
  cat target/autobahn/run-server-loop-a.out target/autobahn/run-server-loop-b.out
  if [ "$first_rc" != 0 ] || [ "$second_rc" != 0 ]; then
    echo "Autobahn on sockeye-loop failed ($3: exit $first_rc; $4: exit $second_rc)" >&2
    exit 1
  fi
}
loop_pair "ws:// on io_uring (or what the kernel allows), wss:// on epoll" "$SAMPLE" "--runtime auto" "--runtime epoll --tls"
grep -h "listening" target/autobahn/testee-server-loop-auto.log || true
# The other two combinations: the protocol's behaviour (sections 1-7 and 10), not again the large
# messages of section 9 and the compression sample, which the pass above runs through both
# runtimes and both schemes (and tests/loop.rs and tests/tls.rs echo to 16 MiB on each
# combination): the suite's time stays under 45 minutes (the whole pass added 64 s).
loop_pair "ws:// on epoll, wss:// on io_uring (or what the kernel allows), sections 1-7 and 10" \
  '1.*,2.*,3.*,4.*,5.*,6.*,7.*,10.*' "--runtime epoll" "--runtime auto --tls"
step "all tests passed in $((SECONDS - START)) s"
