#!/usr/bin/env bash
# Installs the servers that the pub/sub backplane tests run against, from Debian's packages:
# redis-server (Redis 7: pub/sub, sharded pub/sub, Streams), redis-cli (the failure tests build
# a Redis Cluster with `redis-cli --cluster create` and drive failovers with it) and nats-server
# (NATS 2.10 or later with JetStream, clustered with routes). Idempotent: does nothing when all
# are there. The tests start their own instances on free loopback ports, in temporary
# directories, and stop them (by PID) after; nothing here starts a service.
#
# nats-server: Debian 12 ships 2.9.10, whose JetStream consumers skip publications still in the
# stream (issue 39's checker, NATS JetStream, seed 1: two nodes' consumers of one topic both went
# from sequence 3063 to 3089 while 3064-3088 were kept, acknowledged and within the topic's
# limit; a second run skipped 2064-2088; never with 2.10). Where the system's is older than 2.10,
# Debian 13's package is downloaded with a private apt state directory (the system's apt
# sources and dpkg database are not touched), unpacked with `dpkg -x` under
# /usr/local/lib/sockeye-nats-server, and linked as /usr/local/bin/nats-server, which the tests,
# interop/run.sh and bench/pubsub.sh use first.
# Env: BACKPLANES_DEBIAN_MIRROR overrides the mirror.
# Usage: bash scripts/install-backplanes.sh
set -euo pipefail
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/bin/$1" ]; }
NATS_LOCAL=/usr/local/bin/nats-server
NATS_PREFIX=/usr/local/lib/sockeye-nats-server
# The major.minor of a nats-server binary (2.9, 2.10, ...); empty if it does not run.
nats_version() { "$1" --version 2>/dev/null | sed -n 's/^nats-server: v\([0-9]*\.[0-9]*\).*/\1/p'; }
# Whether a nats-server binary is 2.10 or later.
nats_recent() {
  local v
  v=$(nats_version "$1")
  [ -n "$v" ] && [ "${v%%.*}" -ge 2 ] && { [ "${v%%.*}" -gt 2 ] || [ "${v#*.}" -ge 10 ]; }
}
need=()
have redis-server || need+=(redis-server)
have redis-cli || need+=(redis-tools)
# Installs Debian 13's nats-server under NATS_PREFIX when none of 2.10 or later is installed.
install_recent_nats() {
  local system
  system=$(command -v nats-server 2>/dev/null || echo /usr/sbin/nats-server)
  if nats_recent "$NATS_LOCAL" || { [ -x "$system" ] && nats_recent "$system"; }; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "install-backplanes: no nats-server 2.10 or later (2.9's JetStream consumers skip publications); run as root to install Debian 13's under $NATS_PREFIX, or install one as /usr/local/bin/nats-server" >&2
    return 1
  fi
  local mirror="${BACKPLANES_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  local arch keyring work
  arch=$(dpkg --print-architecture)
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  if [ ! -r "$keyring" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debian-archive-keyring >/dev/null 2>&1 || {
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debian-archive-keyring >/dev/null
    }
  fi
  local found="none"
  [ -x "$system" ] && found="$(nats_version "$system")"
  echo "==> nats-server 2.10 or later needed (found: $found): downloading Debian 13's into $NATS_PREFIX"
  work=$(mktemp -d /tmp/sockeye-nats.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" RETURN
  mkdir -p "$work/apt/lists/partial" "$work/apt/cache/archives/partial" "$work/deb"
  echo "deb [arch=$arch signed-by=$keyring] $mirror trixie main" >"$work/apt/sources.list"
  local aptopts=(-q -o Dir::Etc::sourcelist="$work/apt/sources.list" -o Dir::Etc::sourceparts=/dev/null
    -o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt/cache" -o APT::Sandbox::User=root)
  apt-get "${aptopts[@]}" update >/dev/null
  (cd "$work/deb" && apt-get "${aptopts[@]}" download nats-server >/dev/null)
  dpkg -x "$work"/deb/nats-server_*.deb "$work/root"
  rm -rf "$NATS_PREFIX"
  mkdir -p "$NATS_PREFIX" /usr/local/bin
  install -m 755 "$work/root/usr/sbin/nats-server" "$NATS_PREFIX/nats-server"
  echo "made by sockeye scripts/install-backplanes.sh (Debian 13's nats-server); safe to delete with $NATS_LOCAL" >"$NATS_PREFIX/README"
  ln -sf "$NATS_PREFIX/nats-server" "$NATS_LOCAL"
  nats_recent "$NATS_LOCAL" || { echo "install-backplanes: the unpacked nats-server does not run" >&2; return 1; }
  echo "==> $("$NATS_LOCAL" --version) at $NATS_LOCAL"
}
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
  install_recent_nats
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
install_recent_nats
