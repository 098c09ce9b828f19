#!/usr/bin/env bash
# Runs every test of the project from nothing: formatting and lints, unit, property, doc and
# loopback tests, then the Autobahn|Testsuite in both roles (installing wstest on first use).
# Usage: bash scripts/test.sh        (CI runs exactly this through .ci/run)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
step() { printf '\n==> %s\n' "$*"; }
START=$SECONDS

step "rustfmt"
cargo fmt --all --check
step "clippy (warnings are errors)"
cargo clippy --workspace --all-targets --quiet -- -D warnings
step "unit, property, doc and loopback tests"
cargo test --workspace
step "Autobahn|Testsuite, both roles at once (wstest is single-threaded Python; this uses both cores)"
bash conformance/install-wstest.sh
cargo build --release --quiet -p sockeye-conformance
mkdir -p target/autobahn
bash conformance/run.sh server --no-build >target/autobahn/run-server.out 2>&1 &
server=$!
bash conformance/run.sh client --no-build >target/autobahn/run-client.out 2>&1 &
client=$!
server_rc=0 client_rc=0
wait "$server" || server_rc=$?
wait "$client" || client_rc=$?
step "Autobahn|Testsuite: Sockeye as a server"
cat target/autobahn/run-server.out
step "Autobahn|Testsuite: Sockeye as a client"
cat target/autobahn/run-client.out
if [ "$server_rc" != 0 ] || [ "$client_rc" != 0 ]; then
  echo "Autobahn conformance failed (server: exit $server_rc, client: exit $client_rc)" >&2
  exit 1
fi
step "all tests passed in $((SECONDS - START)) s"
