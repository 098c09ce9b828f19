#!/usr/bin/env bash
# Builds the uWebSockets peer of the bench from a checkout of its sources (see bench/README.md,
# "uWebSockets"): the echo server (echo.cpp: uWS's examples/EchoServer.cpp with a port argument),
# the topic server (broadcast.cpp: every client subscribes to "b", each message is published to
# "b"), and uWS's own load generators benchmarks/load_test.c and benchmarks/broadcast_test.c.
#
#   bash bench/peers/uws/build.sh OUT_DIR
#
#   UWS_DIR       a checkout of github.com/uNetworking/uWebSockets (required)
#   USOCKETS_DIR  a checkout of github.com/uNetworking/uSockets (default: $UWS_DIR/uSockets, the
#                 submodule a `git clone --recursive` fills)
#   UWS_MARCH     the -march of the build (default: native, as uWS's authors build it)
#
# Cached: nothing is rebuilt while every binary in OUT_DIR is newer than every source it is built
# from (this script, the two .cpp files, and the .c/.h/.cpp files of both checkouts). Without SSL
# (-DLIBUS_NO_SSL: the bench's uWS rows are ws:// only), with zlib (permessage-deflate).
# Needs gcc and g++ (C++20) and zlib's headers (zlib1g-dev).
set -euo pipefail
out=${1:?usage: build.sh OUT_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${UWS_DIR:?UWS_DIR must name a checkout of uNetworking/uWebSockets}"
uws=$(cd "$UWS_DIR" && pwd)
us=$(cd "${USOCKETS_DIR:-$uws/uSockets}" && pwd)
for need in "$uws/src/App.h" "$uws/benchmarks/load_test.c" "$us/src/libusockets.h"; do
  [ -f "$need" ] || { echo "uws build: $need is missing: UWS_DIR must be a uWebSockets checkout and USOCKETS_DIR (default \$UWS_DIR/uSockets) a uSockets checkout" >&2; exit 1; }
done
march=${UWS_MARCH:-native}
what="uWebSockets $(git -C "$uws" rev-parse --short HEAD 2>/dev/null || echo '?'), uSockets $(git -C "$us" rev-parse --short HEAD 2>/dev/null || echo '?'), -march=$march"
programs=(uws_echo uws_broadcast load_test broadcast_test)

mkdir -p "$out"
stale=0
for p in "${programs[@]}"; do
  if [ ! -x "$out/$p" ] || [ -n "$(find "$here" "$uws/src" "$uws/benchmarks" "$us/src" -newer "$out/$p" \
      \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.sh' \) -print -quit)" ]; then
    stale=1
  fi
done
if [ "$stale" = 0 ]; then
  echo "uws build: $out is up to date ($what)"
  exit 0
fi

obj=$(mktemp -d)
trap 'rm -rf "$obj"' EXIT
flags=(-O3 -flto -march="$march" -DLIBUS_NO_SSL -I"$us/src")
(cd "$obj" && gcc -std=c11 "${flags[@]}" -c "$us"/src/*.c "$us"/src/eventing/*.c "$us"/src/crypto/*.c)
for t in load_test broadcast_test; do
  gcc "${flags[@]}" "$uws/benchmarks/$t.c" "$obj"/*.o -lz -o "$out/$t"
done
g++ -std=c++20 "${flags[@]}" -I"$uws/src" "$here/echo.cpp" "$obj"/*.o -lz -o "$out/uws_echo"
g++ -std=c++20 "${flags[@]}" -I"$uws/src" "$here/broadcast.cpp" "$obj"/*.o -lz -o "$out/uws_broadcast"
echo "uws build: built into $out ($what)"
