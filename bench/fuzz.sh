#!/usr/bin/env bash
# fuzz.sh — fuzzes posgrad's loaders with libFuzzer: bench/fuzz.sh TARGET|all SECONDS
#   TARGET: safetensors | checkpoint | config | tokenizer | results | encoder_checkpoint
#   (tests/fuzz/fuzz_<TARGET>.cpp), or all
#   (one after the other; run two invocations side by side to use two cores).
# Configures and builds a separate clang tree (build-fuzz, or $POSGRAD_FUZZ_BUILD) with
# POSGRAD_FUZZ=ON: everything instrumented for libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer (UB is fatal). Each target then runs for SECONDS, starting from the
# committed seed corpus tests/fuzz/corpus/<target> (read only) plus the inputs found by earlier
# runs in <build>/fuzz-out/<target>/corpus. A crash, sanitizer report, uncaught exception other
# than posgrad::Error, leak, timeout (over 10 s for one input) or allocation over 2 GiB stops
# the run and is written to <build>/fuzz-out/<target>/crashes/. Prints per target: executions,
# seconds, new crash files. Exit status 1 when any target left a new crash file.
#
# A crash input is replayed with `<build>/fuzz_<target> <file>`; once fixed, copy it into
# tests/fuzz/corpus/<target>/ so that test_fuzz_corpus replays it in every build.
# Not here: corpus minimisation (run the binary with -merge=1 by hand) or fork/parallel modes.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${POSGRAD_FUZZ_BUILD:-$ROOT/build-fuzz}
OUT=$BUILD/fuzz-out
TARGETS=(safetensors checkpoint config tokenizer results encoder_checkpoint)

usage() {
  echo "usage: bench/fuzz.sh TARGET|all SECONDS   (TARGET: ${TARGETS[*]})" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
[[ $2 =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive integer, got '$2'" >&2; exit 2; }
SECONDS_PER_TARGET=$2
if [[ $1 == all ]]; then
  run=("${TARGETS[@]}")
else
  found=0
  for t in "${TARGETS[@]}"; do [[ $t == "$1" ]] && found=1; done
  [[ $found == 1 ]] || { echo "fuzz.sh: unknown target '$1' (choices: ${TARGETS[*]} all)" >&2; exit 2; }
  run=("$1")
fi

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang)" >&2; exit 2; }

# Inputs above these sizes are not generated; each covers the largest seed with room to grow.
max_len() {
  case $1 in
    safetensors | checkpoint | encoder_checkpoint) echo 16384 ;;
    results) echo 65536 ;;
    config) echo 8192 ;;
    tokenizer) echo 4096 ;;
  esac
}

if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPOSGRAD_CUDA=OFF \
    -DPOSGRAD_BUILD_BENCH=OFF -DPOSGRAD_FUZZ=ON >/dev/null
fi
targets=()
for t in "${run[@]}"; do targets+=(--target "fuzz_$t"); done
cmake --build "$BUILD" -j"$(nproc)" "${targets[@]}"

status=0
summary=()
for t in "${run[@]}"; do
  dir=$OUT/$t
  mkdir -p "$dir/corpus" "$dir/crashes"
  touch "$dir/.start"
  log=$dir/log-$(date +%Y%m%d-%H%M%S).txt
  echo "== fuzz_$t for ${SECONDS_PER_TARGET}s (log: $log)"
  set +e
  "$BUILD/fuzz_$t" "$dir/corpus" "$ROOT/tests/fuzz/corpus/$t" -max_total_time="$SECONDS_PER_TARGET" \
    -max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/crashes/" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$' || true)
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*' || true)
  [[ -n $execs ]] || execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#' || true)
  crashes=$(find "$dir/crashes" -type f -newer "$dir/.start" | wc -l)
  [[ $crashes -eq 0 && $rc -ne 0 ]] && crashes="? (exit $rc, see log)"
  line="$t: executions ${execs:-?}, seconds ${secs:-${SECONDS_PER_TARGET}+}, new crashes $crashes"
  if [[ $crashes != 0 ]]; then
    status=1
    line+=" -> $(find "$dir/crashes" -type f -newer "$dir/.start" | head -3 | tr '\n' ' ')"
    grep -m3 -E 'ERROR: |runtime error|uncaught|Finding|terminate' "$log" | sed 's/^/    /' || true
  fi
  summary+=("$line")
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
