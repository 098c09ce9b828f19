#!/usr/bin/env bash
# Builds the cargo-fuzz targets and runs each for a bounded time, two at a time, then prints a
# table of executions, coverage and crashes per target. Exits non-zero if any target crashed.
#
#   bash fuzz/run.sh                 # every target for 600 s (the issue's "10 minutes clean")
#   bash fuzz/run.sh 20              # every target for 20 s (what CI runs)
#   bash fuzz/run.sh 60 inflate      # one target
#   bash fuzz/run.sh --build-only    # build every target and stop (the test command builds them
#                                    # at low priority beside the unit tests, then runs them)
#
# Installs cargo-fuzz on first use. libFuzzer's instrumentation needs a nightly compiler: the
# rustup `nightly` toolchain when there is one, else the stable compiler with RUSTC_BOOTSTRAP=1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
BUILD_ONLY=0
if [ "${1:-}" = --build-only ]; then BUILD_ONLY=1; shift; fi
SECONDS_EACH="${1:-600}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(frame_header handshake_request handshake_response inflate connection pubsub_request)
fi
JOBS="${FUZZ_JOBS:-2}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz"
  cargo install cargo-fuzz --locked --version 0.13.2
fi
if rustup run nightly rustc --version >/dev/null 2>&1; then
  FUZZ=(cargo +nightly fuzz)
else
  export RUSTC_BOOTSTRAP=1
  FUZZ=(cargo fuzz)
fi

python3 seeds.py
echo "==> building fuzz targets with ${FUZZ[*]}"
"${FUZZ[@]}" build
[ "$BUILD_ONLY" = 1 ] && exit 0

mkdir -p logs
run_one() { # target
  local t="$1"
  mkdir -p "corpus/$t" "artifacts/$t"
  # Inputs that once crashed (committed) are replayed as a second, read-only corpus.
  local extra=()
  [ -d "regressions/$t" ] && extra=("regressions/$t")
  # -timeout: an input that takes 10 s is a hang; -rss_limit_mb: a leak or a bomb is a crash.
  "${FUZZ[@]}" run "$t" "corpus/$t" "${extra[@]}" -- -max_total_time="$SECONDS_EACH" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 >"logs/$t.log" 2>&1
}
pids=()
status=()
for t in "${TARGETS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  echo "==> fuzzing $t for ${SECONDS_EACH} s"
  run_one "$t" &
  pids+=($!)
done
failed=0
for i in "${!TARGETS[@]}"; do
  if wait "${pids[$i]}"; then status[$i]=clean; else status[$i]=CRASH; failed=1; fi
done

printf '\n%-20s %8s %12s %10s %8s %8s %s\n' target seconds execs execs/s cov ft result
for i in "${!TARGETS[@]}"; do
  t="${TARGETS[$i]}"
  log="logs/$t.log"
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  rate=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo "?")
  ft=$(grep -oE 'ft: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+' || echo "?")
  printf '%-20s %8s %12s %10s %8s %8s %s\n' "$t" "$SECONDS_EACH" "$execs" "$rate" "$cov" "$ft" "${status[$i]}"
  if [ "${status[$i]}" != clean ]; then
    echo "---- $log (tail) ----"
    tail -40 "$log"
  fi
done
exit "$failed"
