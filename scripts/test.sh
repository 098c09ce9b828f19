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
step "Autobahn|Testsuite: Sockeye as a server"
cargo build --release --quiet -p sockeye-conformance
bash conformance/run.sh server --no-build
step "Autobahn|Testsuite: Sockeye as a client"
bash conformance/run.sh client --no-build
step "all tests passed in $((SECONDS - START)) s"
