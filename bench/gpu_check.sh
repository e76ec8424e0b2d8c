#!/usr/bin/env bash
# gpu_check.sh — the device checks for a machine with an NVIDIA GPU, in one run: the CUDA test suites
# (the backend's own tests, op-registry parity CPU vs CUDA, ten-step training parity, the CLI with
# --device cuda, NCCL with one rank), then the throughput of bench_train beside the PyTorch reference
# (bench/reference_gpt.py, eager and bf16 autocast) for the compare model and a GPT-2-small-sized
# model, and a summary to paste into an issue.
#   OUT=/some/dir bench/gpu_check.sh       # logs go to $OUT (default gpu-check in the checkout)
#   BUILD_DIR=build bench/gpu_check.sh     # build there (default build-gpu, sm_90) and run from there
#   BUNDLE=.gpu-bundle bench/gpu_check.sh  # run the binaries bench/gpu_bundle.sh packed elsewhere
#                                          # (for a GPU machine without spdlog, CLI11 or GoogleTest)
#   METHODS=none,rope bench/gpu_check.sh   # the encodings timed (default none,learned,t5,rope,alibi)
#   TESTS_ONLY=1 / BENCH_ONLY=1            # one half only
# BUNDLE, BUILD_DIR and OUT are read relative to the directory it is started from. It exits 1 when a
# test binary fails (or a bundle is missing or incomplete), after writing the summary.
# Each stage has a time limit (build 300 s, each test binary 240 s, run side by side; each throughput
# run 60 s) so that the whole check ends within 8 minutes on one GPU. Without a GPU the tests still
# run (the GPU cases report SKIPPED) and the GPU stages report SKIPPED.
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
root=$PWD
abs() { [[ $1 = /* ]] && echo "$1" || echo "$caller/$1"; }  # a path as the caller wrote it
out=$(abs "${OUT:-$root/gpu-check}")
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
methods="${METHODS:-none,learned,t5,rope,alibi}"
export PATH="/usr/local/cuda/bin:$PATH"
summary="$out/summary.md"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

gpu=0
if nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1; then
  gpu=1
  nvidia-smi >> "$out/nvidia-smi.txt" 2>&1
fi

if [[ -n ${BUNDLE:-} ]]; then
  bundle=$(abs "$BUNDLE")
  for t in test_cuda test_cuda_train test_op_registry test_nccl posgrad bench_train; do
    [[ -x $bundle/bin/$t ]] || {
      echo "gpu_check: $bundle/bin/$t is missing: make the bundle with bench/gpu_bundle.sh (BUNDLE=$BUNDLE)" >&2
      exit 1
    }
  done
  bin="$bundle/bin"
  bench="$bundle/bin"
  commit="$(cat "$bundle/commit" 2>/dev/null || echo unknown) (bundle)"
  # cuBLAS and NCCL come from this machine: the CUDA toolkit's folders or PyTorch's nvidia packages.
  # Only posgrad's programs get these folders (run_bin): PyTorch keeps its own libraries.
  libdirs="$bundle/lib"
  for lib in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    found=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt /usr/local/lib -name "$lib" 2>/dev/null | head -1)
    [[ -n $found && ":$libdirs:" != *":$(dirname "$found"):"* ]] && libdirs="$libdirs:$(dirname "$found")"
  done
  bundle_libs="$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [[ -f $bundle/data/tinyshakespeare.txt ]] && export POSGRAD_DATA_DIR="$bundle/data"
  export POSGRAD_BIN="$bin/posgrad"
else
  build=$(abs "${BUILD_DIR:-$root/build-gpu}")
  bundle_libs="${LD_LIBRARY_PATH:-}"
  bin="$build"
  bench="$build/bench"
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
fi
export POSGRAD_HOME="$out/home"
run_bin() { LD_LIBRARY_PATH="$bundle_libs" "$@"; }  # a posgrad program, with the bundle's libraries
failed=0

say "## posgrad gpu_check ($commit, $(date -u +%FT%TZ))"
say "- GPU: $( ((gpu)) && head -1 "$out/nvidia-smi.txt" || echo 'none found (GPU stages SKIPPED)')"

if [[ -z ${BUNDLE:-} ]]; then
  start=$SECONDS
  if [[ ! -f $build/CMakeCache.txt ]]; then
    timeout 60 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPOSGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      > "$out/configure.log" 2>&1 || { say "- configure: FAILED (see configure.log)"; tail -20 "$out/configure.log"; exit 1; }
  fi
  if timeout 300 cmake --build "$build" -j"$(nproc)" --target test_cuda test_cuda_train test_op_registry test_nccl \
    posgrad_cli bench_train > "$out/build.log" 2>&1; then
    say "- build: ok ($((SECONDS - start)) s)"
  else
    say "- build: FAILED or over 300 s (see build.log)"
    tail -30 "$out/build.log"
    exit 1
  fi
else
  missing=$(for b in "$bin"/*; do run_bin ldd "$b" | grep 'not found'; done | sort -u)
  if [[ -n $missing ]]; then
    say "- bundle: libraries not found: $(echo "$missing" | awk '{print $1}' | tr '\n' ' ')"
    failed=1
  else
    say "- bundle: every library resolves (LD_LIBRARY_PATH=$bundle_libs)"
  fi
fi

if [[ -z ${BENCH_ONLY:-} ]]; then
  start=$SECONDS
  # The real CUDA and NCCL tests, side by side (one GPU is enough for each); the CPU-only cases of
  # test_op_registry and the emulated kernels of test_cuda ran where CI ran.
  declare -A filter=([test_cuda]='CudaBackend.*' [test_cuda_train]='*' [test_op_registry]='*CudaMatchesCpu*' [test_nccl]='*')
  for t in test_cuda test_cuda_train test_op_registry test_nccl; do
    (cd "$out" && timeout 240 env LD_LIBRARY_PATH="$bundle_libs" "$bin/$t" --gtest_filter="${filter[$t]}" > "$out/$t.log" 2>&1
     echo $? > "$out/$t.rc") &
  done
  wait
  say "- CUDA tests ($((SECONDS - start)) s):"
  for t in test_cuda test_cuda_train test_op_registry test_nccl; do
    rc=$(cat "$out/$t.rc")
    note=""
    ((rc == 124)) && note=" (over 240 s)"
    ((rc != 0)) && failed=1
    say "  - $t: exit $rc$note; passed $(grep -oP '\[  PASSED  \] \K[0-9]+' "$out/$t.log" || echo 0), skipped $(grep -oP '\[  SKIPPED \] \K[0-9]+(?= test)' "$out/$t.log" || echo 0), failed $(grep -oP '\[  FAILED  \] \K[0-9]+(?= test)' "$out/$t.log" || echo 0)"
    grep -E '^\[  FAILED  \] [A-Za-z]' "$out/$t.log" | grep -v ' listed below' | sed 's/^/    - /' | sort -u |
      tee -a "$summary"
  done
fi

if [[ -n ${TESTS_ONLY:-} ]]; then
  :
elif ((gpu)); then
  say "- training step, tokens/s (10 steps after 2; posgrad fp32 and bf16 | PyTorch eager fp32 | PyTorch bf16 autocast):"
  for size in compare gpt2; do
    timeout 60 env LD_LIBRARY_PATH="$bundle_libs" "$bench/bench_train" --size "$size" --device cuda --steps 10 \
      --methods "$methods" > "$out/bench_train_$size.txt" 2>&1
    timeout 60 env LD_LIBRARY_PATH="$bundle_libs" "$bench/bench_train" --size "$size" --device cuda --steps 10 \
      --methods "$methods" --precision bf16 \
      > "$out/bench_train_${size}_bf16.txt" 2>&1
    for mode in eager bf16; do
      timeout 60 python3 bench/reference_gpt.py --size "$size" --device cuda --steps 10 --methods "$methods" \
        --mode "$mode" > "$out/reference_${size}_$mode.txt" 2>&1
    done
    say "  - $size:"
    for f in "bench_train_$size:posgrad fp32" "bench_train_${size}_bf16:posgrad bf16" \
             "reference_${size}_eager:PyTorch eager" "reference_${size}_bf16:PyTorch bf16"; do
      awk -v who="${f#*:}" '!/^#/ && $1 != "method" && NF == 4 {printf "    - %s %s: %s tok/s\n", who, $1, $3}' \
        "$out/${f%%:*}.txt" | tee -a "$summary"
    done
  done
else
  say "- training step on the GPU: SKIPPED (no GPU)"
fi
echo "summary: $summary"
exit "$failed"
