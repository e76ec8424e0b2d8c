#!/usr/bin/env bash
# vs_pytorch.sh — posgrad against PyTorch on this CPU, per model size and position encoding:
# tokens/s of a whole training step (forward, backward, clip, AdamW) of the same GPT, measured
# alternately (each encoding in posgrad, then at once in each PyTorch mode; round after round) with
# the same thread count, and the ratios posgrad / PyTorch: posgrad fp32 against PyTorch eager and
# torch.compile, posgrad --precision bf16 against torch.autocast("cpu", dtype=torch.bfloat16) (eager,
# and compiled with bf16-compile); then posgrad's fp32 model FLOP utilisation (MFU): model FLOPs per
# second over the FP32 FMA peak measured on this machine in the same sitting (bench_gemm's FMA-chain measurement).
#
# Not part of CI (it needs PyTorch). Creates .venv-torch with PyTorch from PyPI if missing.
#
# Usage: bench/vs_pytorch.sh [--sizes compare,nanogpt,cpu[,gpt2]] [--methods none,rope,...] [--rounds 3]
#                            [--steps 10] [--threads N] [--build build] [--load]
#                            [--modes eager,compile,bf16[,bf16-compile]]
# Output: one table per size: method | posgrad fp32 tok/s | per fp32 mode: PyTorch tok/s, ratio=
# (median over rounds, with min-max) | posgrad bf16 tok/s | per bf16 mode: PyTorch tok/s, ratio= |
# MFU. Model FLOPs per token: 6 N (N = all parameters: the tied LM head is a matmul; forward and
# backward) + 12 L T C (attention scores and values, the causal half counted in full), plus the
# products an encoding adds to the model's own (DeBERTa's c2p / p2c and its relative-table
# projections, FIRE's MLP, ...): its matrix-product FLOPs per token minus those of `none` at the same
# size, both counted by bench_train (kernels::matmul_work) in the fp32 run.
# torch.compile compiles during the 2 warm-up steps, which are not timed.
# Pairing: each round measures one encoding at a time, posgrad's process and then PyTorch's for each
# mode, so that a ratio compares two measurements taken a few seconds apart (with one process per
# library running every encoding, until 2026-12, they lay 10-25 s apart). The 2-core development VM
# has phases in which both libraries' steps take ~1.3x as long (memory-bound work up to 2.5x; the
# cores' own speed unchanged), changing within seconds as well as minutes: single rounds still ranged
# 1.13-2.06x for `none` in a 9-round sitting, so read the medians over rounds.
# Round r runs the encodings in the given order rotated by r - 1: on a 2-core Zen 3 the first encoding
# of a process started right after a torch.compile process ran 5-40% slow (a ramp over its first
# 1.5 s; none after an eager process or an idle machine, and no process of PyTorch's was left
# running; not seen on the Zen 4 VM in 2026-12), so a fixed order charged it to the same encoding in
# every round. Rotated, it falls on a different encoding each round, and the medians over 3 or more
# rounds leave it out.
# --load: graceful under load instead (fp32, eager). Each round measures both quiet, then both again
# while a busy loop keeps one core busy, and prints loaded / quiet per round for each (a fair share
# is 0.5 on two cores). posgrad runs with its default thread setting (it follows the load,
# train/threads.h), PyTorch with --threads; both get 3x the steps (at least 30) so that the loaded
# part lasts.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"  # for --help, from any directory
caller=$PWD  # relative paths given by the caller are theirs, not the repository root's
cd "$(dirname "$0")/.."

sizes=compare,nanogpt,cpu
methods=""
methods_given=0
rounds=3
steps=10
threads=$(nproc)
build=build
load=0
modes=eager,compile,bf16
modes_given=0
while [[ $# -gt 0 ]]; do
  if [[ $1 =~ ^--(sizes|methods|rounds|steps|threads|build|modes)$ && $# -lt 2 ]]; then
    echo "vs_pytorch.sh: $1 needs a value (see --help)" >&2
    exit 2
  fi
  case "$1" in
    --sizes) sizes=$2; shift 2 ;;
    --methods) methods=$2; methods_given=1; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build) build=$2; [[ $build == /* ]] || build=$caller/$build; shift 2 ;;
    --modes) modes=$2; modes_given=1; shift 2 ;;
    --load) load=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$self"; exit 0 ;;
    *) echo "vs_pytorch.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# Lists: no empty list, no empty item (`read -a` would drop a trailing one silently).
for v in sizes methods modes; do
  [[ $v == methods && $methods_given == 0 ]] && continue  # unset: every registered encoding
  list=${!v}
  [[ -n $list ]] || { echo "vs_pytorch.sh: --$v is empty" >&2; exit 2; }
  [[ $list != ,* && $list != *, && $list != *,,* ]] ||
    { echo "vs_pytorch.sh: --$v has an empty item in '$list'" >&2; exit 2; }
  dup=$(tr , '\n' <<< "$list" | sort | uniq -d | head -1)
  [[ -z $dup ]] || { echo "vs_pytorch.sh: --$v names '$dup' twice in '$list'" >&2; exit 2; }
done
((load && modes_given)) &&
  { echo "vs_pytorch.sh: --load measures fp32 against PyTorch eager only; it takes no --modes" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "vs_pytorch.sh: --rounds must be a positive integer, got '$rounds'" >&2; exit 2; }
[[ "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "vs_pytorch.sh: --steps must be a positive integer, got '$steps'" >&2; exit 2; }
IFS=, read -ra mode_list <<< "$modes"
for mode in "${mode_list[@]}"; do
  [[ $mode =~ ^(eager|compile|bf16|bf16-compile)$ ]] ||
    { echo "vs_pytorch.sh: --modes takes eager, compile, bf16, bf16-compile; got '$mode'" >&2; exit 2; }
done
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || { echo "vs_pytorch.sh: --threads must be a positive integer, got '$threads'" >&2; exit 2; }

bench_train=$build/bench/bench_train
bench_gemm=$build/bench/bench_gemm
[[ -x $bench_train ]] || { echo "vs_pytorch.sh: $bench_train is missing: run ./scripts/setup.sh first" >&2; exit 2; }
# Check the sizes and encodings with bench_train itself before measuring anything (usage errors: 2).
IFS=, read -ra size_check <<< "$sizes"
for size in "${size_check[@]}"; do
  "$bench_train" --size "$size" --methods "${methods:-none}" --steps 1 --warmup 0 --batch 1 > /dev/null || exit 2
done
if [[ -z $methods ]]; then  # every registered encoding, as bench_train lists them
  methods=$("$bench_train" --help | sed -n 's/.*--methods TEXT=\([^ ]*\).*/\1/p')
fi

venv=.venv-torch
if [[ ! -x $venv/bin/python ]]; then
  echo "# creating $venv with PyTorch (CPU wheel) from PyPI" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --index-url https://download.pytorch.org/whl/cpu torch ||
    "$venv/bin/pip" install --quiet torch
fi
py=$venv/bin/python

export OMP_NUM_THREADS=$threads
# Without numpy in the venv, importing torch warns "Failed to initialize NumPy"; nothing here uses numpy.
export PYTHONWARNINGS="ignore:Failed to initialize NumPy:UserWarning${PYTHONWARNINGS:+,$PYTHONWARNINGS}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# FP32 FMA peak of this machine at this thread count (GFLOP/s), as bench_gemm measures it before and
# after its table (independent FMA chains on every thread; the shape it times in between does not
# matter here). A peak is a maximum: the machine's noise only lowers a measurement (one taken right
# after a torch.compile process read 126.7 against 204.7 in the same hour, and put the MFU at 126%), so
# it is measured at the start and again before each size's table, and the MFU uses the highest so far.
peak=""
measured=""
measure_peak() {  # sets $measured to this measurement's two figures and $peak to the highest so far
  measured=""
  [[ -x $bench_gemm ]] || return 0
  local p
  measured=$("$bench_gemm" --shapes 256x256x256 --reps 1 --threads "$threads" 2>/dev/null |
    sed -n 's/^# FP32 FMA peak measured \(before\|after\) the table.*: \([0-9.]*\) GFLOP\/s.*$/\2/p' | tr '\n' ' ')
  measured=${measured% }
  for p in $measured; do
    if [[ -z $peak ]] || awk -v a="$p" -v b="$peak" 'BEGIN { exit !(a > b) }'; then peak=$p; fi
  done
}
measure_peak
echo "# $(date -u +%FT%TZ)  threads=$threads  rounds=$rounds  steps=$steps  torch=$("$py" -c 'import torch; print(torch.__version__)')  FP32 FMA peak=${peak:-unknown} GFLOP/s (measured: ${measured:-none})"

IFS=, read -ra size_list <<< "$sizes"

run_torch() {  # size steps warmup mode methods > file
  "$py" -c "import torch; torch.set_num_threads($threads); import runpy, sys; sys.argv=['reference_gpt.py', '--size', '$1', '--device', 'cpu', '--methods', '$5', '--steps', '$2', '--warmup', '$3', '--mode', '$4']; runpy.run_path('bench/reference_gpt.py', run_name='__main__')"
}

IFS=, read -ra method_list <<< "$methods"
rotated() {  # the method list rotated left by $1, comma-separated
  local out=() i n=${#method_list[@]}
  for ((i = 0; i < n; i++)); do out+=("${method_list[$(((i + $1) % n))]}"); done
  (IFS=,; echo "${out[*]}")
}

if ((load)); then
  lsteps=$((steps * 3 < 30 ? 30 : steps * 3))
  busy_pid=""
  trap 'rm -rf "$tmp"; [[ -n $busy_pid ]] && kill "$busy_pid" 2>/dev/null' EXIT
  for size in "${size_list[@]}"; do
    for ((r = 1; r <= rounds; r++)); do
      # posgrad: its default threads (0: following the load), at most OMP_NUM_THREADS.
      order=$(rotated $((r - 1)))
      "$bench_train" --size "$size" --methods "$order" --steps "$lsteps" --warmup 5 > "$tmp/q.posgrad.$size.$r"
      run_torch "$size" "$lsteps" 5 eager "$order" > "$tmp/q.torch.$size.$r"
      (while :; do :; done) &
      busy_pid=$!
      "$bench_train" --size "$size" --methods "$order" --steps "$lsteps" --warmup 5 > "$tmp/l.posgrad.$size.$r"
      run_torch "$size" "$lsteps" 5 eager "$order" > "$tmp/l.torch.$size.$r"
      kill "$busy_pid"; wait "$busy_pid" 2>/dev/null || true; busy_pid=""
    done
    "$py" - "$tmp" "$size" "$rounds" <<'PY'
import sys
tmp, size, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
def read(path):
    out = {}
    for line in open(path):
        f = line.split()
        if not line.startswith('#') and len(f) == 4 and f[0] != 'method':
            out[f[0]] = float(f[2])
    return out
print(f"\n## size={size}: loaded / quiet tokens/s per round (a busy loop on one core; fair share 0.5)")
print("| method | posgrad quiet tok/s | posgrad loaded/quiet per round | PyTorch quiet tok/s | PyTorch loaded/quiet per round |")
print("|---|---:|---|---:|---|")
for m in read(f"{tmp}/q.posgrad.{size}.1"):
    cells = []
    for who in ("posgrad", "torch"):
        q = [read(f"{tmp}/q.{who}.{size}.{r}").get(m) for r in range(1, rounds + 1)]
        l = [read(f"{tmp}/l.{who}.{size}.{r}").get(m) for r in range(1, rounds + 1)]
        if None in q or None in l:
            cells += ["n/a", "n/a"]; continue
        cells += [f"{sorted(q)[len(q) // 2]:.0f}", " ".join(f"{b / a:.2f}" for a, b in zip(q, l)) + f" (min {min(b / a for a, b in zip(q, l)):.2f})"]
    print(f"| {m} | " + " | ".join(cells) + " |")
PY
  done
  exit 0
fi

for size in "${size_list[@]}"; do
  # The products of the encoding-free model, for the MFU's encoding term (one untimed step).
  "$bench_train" --size "$size" --methods none --steps 1 --warmup 0 > "$tmp/posgrad.none.$size"
  for ((r = 1; r <= rounds; r++)); do
    IFS=, read -ra order <<< "$(rotated $((r - 1)))"
    for method in "${order[@]}"; do  # one encoding at a time in every library (Pairing above)
      "$bench_train" --size "$size" --methods "$method" --steps "$steps" --warmup 2 >> "$tmp/posgrad.fp32.$size.$r"
      bf16_done=0
      for mode in "${mode_list[@]}"; do
        if [[ $mode == bf16* ]] && ((!bf16_done)); then
          "$bench_train" --size "$size" --methods "$method" --steps "$steps" --warmup 2 --precision bf16 \
            >> "$tmp/posgrad.bf16.$size.$r"
          bf16_done=1
        fi
        run_torch "$size" "$steps" 2 "$mode" "$method" >> "$tmp/torch.$mode.$size.$r"
      done
    done
  done
  measure_peak
  echo "# FP32 FMA peak measured again before the $size table: ${measured:-none}; the MFU uses the highest so far, ${peak:-unknown} GFLOP/s"
  "$py" - "$tmp" "$size" "$rounds" "${peak:-0}" "$modes" <<'PY'
import re, statistics, sys
tmp, size, rounds, peak, modes = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5].split(",")
def read(path):
    out, meta = {}, {}
    try:
        lines = open(path).read().splitlines()
    except FileNotFoundError:
        return out, meta
    for line in lines:
        if line.startswith('#'):
            work = re.match(r"# (\S+): matrix products \S+ GFLOP per step, (\S+) MFLOP per token", line)
            if work:
                meta.setdefault("products", {})[work.group(1)] = float(work.group(2)) * 1e6
                continue
            meta.update(dict(kv.split('=', 1) for kv in line[1:].replace(',', ' ').split() if '=' in kv))
            continue
        f = line.split()
        if len(f) == 4 and f[0] != 'method':
            out[f[0]] = (int(f[1]), float(f[2]))
    return out, meta
def runs(who):
    return [read(f"{tmp}/{who}.{size}.{r}")[0] for r in range(1, rounds + 1)]
pg = {"fp32": runs("posgrad.fp32"), "bf16": runs("posgrad.bf16")}
pt = {m: runs(f"torch.{m}") for m in modes}
meta = read(f"{tmp}/posgrad.fp32.{size}.1")[1]
L, C, T = int(meta['layers']), int(meta['width']), int(meta['context'])
products = meta.get("products", {})
products_none = read(f"{tmp}/posgrad.none.{size}")[1].get("products", {}).get("none")
print(f"\n## size={size}: {meta['layers']} layers x {meta['width']} wide, context {meta['context']}, batch {meta['batch']}")
# The caption names the modes that ran, in the order given.
names = {"eager": "PyTorch eager", "compile": "torch.compile", "bf16": "torch.autocast bf16 (eager)",
         "bf16-compile": "torch.autocast bf16 (compiled)"}
against = []
fp32_modes = [names[m] for m in modes if not m.startswith("bf16")]
bf16_modes = [names[m] for m in modes if m.startswith("bf16")]
if fp32_modes:
    against.append("posgrad fp32 against " + " / ".join(fp32_modes) + " (fp32)")
if bf16_modes:
    against.append("posgrad --precision bf16 against " + " / ".join(bf16_modes))
print("; ".join(against) + ". ratio = posgrad tok/s / PyTorch tok/s, median over rounds (min-max); MFU: model "
      "FLOPs per second over the FP32 FMA peak, model FLOPs per token 6N + 12LTC + the products the encoding adds "
      "to none's (measured; shown after the MFU where not 0).")
head = ["method", "posgrad fp32 tok/s"]
for m in modes:
    if not m.startswith("bf16"):
        head += [f"torch {m}", f"ratio vs {m}"]
if any(m.startswith("bf16") for m in modes):
    head += ["posgrad bf16 tok/s"]
    for m in modes:
        if m.startswith("bf16"):
            head += [f"torch {m}", f"ratio vs {m}"]
head += ["posgrad fp32 MFU"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
def cell(prec, mode, m):
    a = [p[m][1] for p in pg[prec] if m in p]
    b = [t[m][1] for t in pt[mode] if m in t]
    if not a or not b:
        return ["n/a", "n/a"]
    ratios = [x / y for x, y in zip(a, b)]
    return [f"{statistics.median(b):.0f}", f"ratio={statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"]
for m in pg["fp32"][0]:
    a = [p[m][1] for p in pg["fp32"] if m in p]
    row = [m, f"{statistics.median(a):.0f}"]
    for mode in modes:
        if not mode.startswith("bf16"):
            row += cell("fp32", mode, m)
    if any(x.startswith("bf16") for x in modes):
        b16 = [p[m][1] for p in pg["bf16"] if m in p]
        row += [f"{statistics.median(b16):.0f}" if b16 else "n/a"]
        for mode in modes:
            if mode.startswith("bf16"):
                row += cell("bf16", mode, m)
    params = pg["fp32"][0][m][0]
    flops_per_token = 6 * params + 12 * L * T * C  # params include the embeddings: an upper bound
    added = 0.0  # the encoding's own products (DeBERTa's c2p / p2c, ...), measured against none's
    if m in products and products_none is not None:
        added = max(0.0, products[m] - products_none)
    flops_per_token += added
    mfu = f"{100 * statistics.median(a) * flops_per_token / (peak * 1e9):.1f}%" if peak > 0 else "n/a"
    if added > 0:
        mfu += f" (+{added / 1e6:.2f} MFLOP/token)"
    row += [mfu]
    print("| " + " | ".join(row) + " |")
PY
done
