#!/usr/bin/env bash
# Installs the servers that the pub/sub backplane tests run against, from Debian's packages:
# redis-server (Redis 7: pub/sub, sharded pub/sub, Streams), redis-cli (the failure tests build
# a Redis Cluster with `redis-cli --cluster create` and drive failovers with it) and nats-server
# (NATS 2.9 with JetStream, clustered with routes). Idempotent: does nothing when all are there. The tests start their own instances
# on free loopback ports, in temporary directories, and stop them (by PID) after; nothing here
# starts a service.
# Usage: bash scripts/install-backplanes.sh
set -euo pipefail
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
need=()
have redis-server || need+=(redis-server)
have redis-cli || need+=(redis-tools)
have nats-server || need+=(nats-server)
# Checks what is installed, once it is: a Redis older than 7 has no sharded pub/sub.
check_versions() {
  local v
  v=$(redis-server --version 2>/dev/null | sed -n 's/.* v=\([0-9]*\)\..*/\1/p')
  if [ -n "$v" ] && [ "$v" -lt 7 ]; then
    echo "install-backplanes: redis-server $v.x found; Redis 7 or later is needed (sharded pub/sub)" >&2
    return 1
  fi
}
if [ ${#need[@]} -eq 0 ]; then
  check_versions
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "install-backplanes: ${need[*]} missing; run as root, or: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
echo "==> apt-get install ${need[*]}"
# Services are not started by the packages' scripts: the tests start their own instances.
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}
# A package whose post-install script started the system service: stop it, so that only the
# tests' own instances run (they never use the default ports anyway).
for unit in redis-server nats-server; do
  if command -v service >/dev/null 2>&1; then service "$unit" stop >/dev/null 2>&1 || true; fi
done
check_versions
