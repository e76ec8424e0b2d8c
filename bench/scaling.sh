#!/usr/bin/env bash
# scaling.sh — data-parallel scaling on this machine: bench_dist alone (N = 1, with the default
# threads and with one thread) and under `mpirun -np 2` (N = 2, cores / 2 threads each), in turn for
# ROUNDS rounds (the machine may be shared: the spread over rounds says how much), nanoGPT's CPU model
# by default. Prints every round, then min / max of tokens/s per configuration and of the all-reduce's
# share of a step (time inside DataParallel::reduce, waiting for the slower rank included) and of the
# all-reduce alone on a buffer of the model's size (ranks started together). Not in CI.
#
#   bench/scaling.sh [ROUNDS] [extra bench_dist options...]
#
# ROUNDS: a positive integer, 3 by default. The extra options go to every bench_dist run (see
# bench_dist --help), except --threads: the script sets the threads of each configuration itself and
# refuses it. Usage errors exit 2.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"  # for --help, from any directory
cd "$(dirname "$0")/.."
for arg in "$@"; do
  if [[ $arg == -h || $arg == --help ]]; then
    sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$self"
    exit 0
  fi
done
rounds=3
if [[ $# -gt 0 && $1 != -* || ${1:-} =~ ^-[0-9] ]]; then  # ROUNDS given (a negative number too, to refuse it)
  rounds=$1
  shift
fi
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "scaling: ROUNDS must be a positive integer, got '$rounds' (see --help)" >&2; exit 2; }
for arg in "$@"; do
  if [[ $arg == --threads || $arg == --threads=* ]]; then
    echo "scaling: --threads is set by the script for each configuration (default threads, 1 thread, cores / 2 per process); leave it out" >&2
    exit 2
  fi
done
bin=./build/bench/bench_dist
[[ -x $bin ]] || { echo "scaling: $bin is missing (build the bench_dist target with MPI found)" >&2; exit 2; }
# As root, Open MPI needs these; two processes may oversubscribe a 2-core machine.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 1; r <= rounds; r++)); do
  "$bin" "$@" | tee -a "$out"
  "$bin" --threads 1 "$@" | tee -a "$out"
  mpirun -np 2 --oversubscribe --bind-to none "$bin" "$@" | tee -a "$out"
done
for key in $(sed 's/^processes=\([0-9]*\) threads\/process=\([0-9]*\).*/\1:\2/' "$out" | sort -u); do
  n=${key%%:*}; t=${key##*:}
  grep "^processes=$n threads/process=$t " "$out" | awk -v n="${n}" -v t="$t" '{
      for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      x = v["tokens/s"] + 0; s = v["allreduce_share"] + 0; a = v["allreduce_alone_ms"] + 0
      if (NR == 1 || a < amin) amin = a; if (NR == 1 || a > amax) amax = a
      if (NR == 1 || x < xmin) xmin = x; if (NR == 1 || x > xmax) xmax = x
      if (NR == 1 || s < smin) smin = s; if (NR == 1 || s > smax) smax = s
    } END { printf "N=%d x %d threads: tokens/s min %.0f max %.0f over %d rounds; all-reduce share of a step min %.1f%% max %.1f%%; all-reduce alone %.2f .. %.2f ms\n",
            n, t, xmin, xmax, NR, smin, smax, amin, amax }'
done
