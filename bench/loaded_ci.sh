#!/usr/bin/env bash
# CI on a loaded machine: `.ci/run` on fresh clones of this repository's HEAD, RUNS times in
# a row, beside two busy loops at normal priority (on a 2-core machine they take a core's
# worth each). Stops at the first failure. Each run's log is $OUT/loadedN.log; one line per
# run (commit, exit status, wall seconds, pytest's summary) goes to $OUT/summary.log.
#
#     bash bench/loaded_ci.sh            # 3 runs, logs in /tmp/loaded-ci
#     RUNS=1 OUT=/tmp/x bash bench/loaded_ci.sh
#
# Expect each run to take several times as long as on an idle machine.
set -u
RUNS=${RUNS:-3}
OUT=${OUT:-/tmp/loaded-ci}
REPO=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"

busy() { while :; do :; done; }
busy &
first=$!
busy &
second=$!
trap 'kill $first $second 2>/dev/null' EXIT

for run in $(seq 1 "$RUNS"); do
  clone="$OUT/clone-$run"
  rm -rf "$clone"
  git clone -q "$REPO" "$clone"
  start=$(date +%s)
  (cd "$clone" && CI=true bash .ci/run > "$OUT/loaded$run.log" 2>&1)
  status=$?
  summary=$(grep -E '^=+ .*(passed|failed|error).* in ' "$OUT/loaded$run.log" | tail -1)
  echo "run $run at $(git -C "$clone" rev-parse --short HEAD): exit $status," \
    "$(($(date +%s) - start)) s; $summary" >> "$OUT/summary.log"
  rm -rf "$clone/.venv-ci"
  [ "$status" -eq 0 ] || exit "$status"
done
