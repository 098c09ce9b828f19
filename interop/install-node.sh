#!/usr/bin/env bash
# Installs interop/node's packages (Node's `ws` and `playwright-core`, from package-lock.json),
# idempotently: `npm ci` when either is missing. Used by interop/install.sh, by the test command
# before the Rust tests (the chaos checker's web variant runs a `ws` client,
# crates/sockeye-pubsub/tests/chaos/web_clients.mjs) and by scripts/chaos.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/node"
if [ ! -d node_modules/ws ] || [ ! -d node_modules/playwright-core ]; then
  echo "==> npm ci (ws, playwright-core)"
  npm ci --no-audit --no-fund --loglevel=error
fi
