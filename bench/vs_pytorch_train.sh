#!/usr/bin/env bash
# vs_pytorch_train.sh — end to end: `posgrad train --preset nanogpt-shakespeare` against the same
# run in PyTorch eager (bench/reference_train.py), alternately, with the same thread count. Prints
# per round the wall time of each (process start to exit, corpus loading and evaluations
# included), the final validation loss of each, and the ratio PyTorch time / posgrad time; then
# the medians. Not part of CI (it needs PyTorch: creates .venv-torch like vs_pytorch.sh).
#
# Usage: bench/vs_pytorch_train.sh [--rounds 2] [--threads N] [--iters 2000] [--build build]
# TinyShakespeare is read from $POSGRAD_DATA_DIR, else ../shared/data.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"  # for --help, from any directory
caller=$PWD  # relative paths given by the caller are theirs, not the repository root's
cd "$(dirname "$0")/.."

rounds=2
threads=$(nproc)
iters=2000
build=build
while [[ $# -gt 0 ]]; do
  if [[ $1 =~ ^--(rounds|threads|iters|build)$ && $# -lt 2 ]]; then
    echo "vs_pytorch_train.sh: $1 needs a value (see --help)" >&2
    exit 2
  fi
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --build) build=$2; [[ $build == /* ]] || build=$caller/$build; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$self"; exit 0 ;;
    *) echo "vs_pytorch_train.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for v in rounds threads iters; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "vs_pytorch_train.sh: --$v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
posgrad=$build/posgrad
[[ -x $posgrad ]] || { echo "vs_pytorch_train.sh: $posgrad is missing: run ./scripts/setup.sh first" >&2; exit 2; }
data_dir=${POSGRAD_DATA_DIR:-../shared/data}
[[ -z ${POSGRAD_DATA_DIR:-} || $data_dir == /* ]] || data_dir=$caller/$data_dir
[[ -z ${POSGRAD_DATA_DIR:-} ]] || export POSGRAD_DATA_DIR=$data_dir  # the same file for posgrad
corpus=$data_dir/tinyshakespeare.txt
[[ -r $corpus ]] || { echo "vs_pytorch_train.sh: cannot read $corpus (set POSGRAD_DATA_DIR)" >&2; exit 2; }

venv=.venv-torch
if [[ ! -x $venv/bin/python ]]; then
  echo "# creating $venv with PyTorch (CPU wheel) from PyPI" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --index-url https://download.pytorch.org/whl/cpu torch ||
    "$venv/bin/pip" install --quiet torch
fi
py=$venv/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=$threads
# Without numpy in the venv, importing torch warns "Failed to initialize NumPy"; nothing here uses numpy.
export PYTHONWARNINGS="ignore:Failed to initialize NumPy:UserWarning${PYTHONWARNINGS:+,$PYTHONWARNINGS}"

echo "# $(date -u +%FT%TZ)  threads=$threads  rounds=$rounds  iters=$iters  torch=$("$py" -c 'import torch; print(torch.__version__)')"
echo "| round | posgrad s | posgrad val loss | PyTorch s | PyTorch val loss | PyTorch s / posgrad s |"
echo "|---:|---:|---:|---:|---:|---:|"
ratios=()
for ((r = 1; r <= rounds; r++)); do
  t0=$(date +%s.%N)
  # posgrad with its default thread setting (at most OMP_NUM_THREADS; it follows the load)
  "$posgrad" train --preset nanogpt-shakespeare --max-iters "$iters" --out-dir "$tmp/run$r" \
    --log-interval 1000 > "$tmp/posgrad.$r.log" 2>&1
  t1=$(date +%s.%N)
  pg_s=$(echo "$t1 - $t0" | bc -l)
  pg_loss=$(grep '"val_loss"' "$tmp/run$r/metrics.jsonl" | tail -1 | sed 's/.*"val_loss":\([0-9.eE+-]*\).*/\1/')
  t0=$(date +%s.%N)
  "$py" bench/reference_train.py --corpus "$corpus" --threads "$threads" --iters "$iters" > "$tmp/torch.$r.log"
  t1=$(date +%s.%N)
  pt_s=$(echo "$t1 - $t0" | bc -l)
  pt_loss=$(sed 's/.*final_val_loss=\([0-9.]*\).*/\1/' "$tmp/torch.$r.log")
  ratio=$(echo "$pt_s / $pg_s" | bc -l)
  ratios+=("$ratio")
  printf "| %d | %.1f | %.4f | %.1f | %.4f | %.2f |\n" "$r" "$pg_s" "$pg_loss" "$pt_s" "$pt_loss" "$ratio"
done
printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2;
  printf "median ratio=%.2f (min %.2f, max %.2f)\n", m, a[1], a[NR]}'
