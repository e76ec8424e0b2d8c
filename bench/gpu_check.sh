#!/usr/bin/env bash
# gpu_check.sh — the device checks for a machine with an NVIDIA GPU, in one run: build with the CUDA
# backend, run the CUDA test suites (op-registry parity, kernels, ten-step training parity, CLI with
# --device cuda, and the emulated kernels at small and production tile sizes), then the throughput of
# bench_train beside the PyTorch reference (bench/reference_gpt.py, eager and bf16 autocast) for the
# compare model and a GPT-2-small-sized model, and a summary to paste into an issue.
#   OUT=/some/dir bench/gpu_check.sh     # logs go to $OUT (default ./gpu-check)
#   BUILD_DIR=build bench/gpu_check.sh   # reuse a configured build tree (default build-gpu, sm_90)
# Each stage has a time limit (build 300 s, tests 180 s, each throughput run 60 s) so that the whole
# check ends within 8 minutes on one GPU. Without a GPU the script still builds and runs the tests
# (the GPU tests report SKIPPED, the emulated ones run) and reports the GPU stages as SKIPPED.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-check}"
build="${BUILD_DIR:-build-gpu}"
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"
summary="$out/summary.md"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

gpu=0
if nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1; then
  gpu=1
  nvidia-smi >> "$out/nvidia-smi.txt" 2>&1
fi
say "## posgrad gpu_check ($(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%FT%TZ))"
say "- GPU: $( ((gpu)) && head -1 "$out/nvidia-smi.txt" || echo 'none found (GPU stages SKIPPED)')"

start=$SECONDS
if [[ ! -f $build/CMakeCache.txt ]]; then
  timeout 60 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPOSGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    > "$out/configure.log" 2>&1 || { say "- configure: FAILED (see configure.log)"; tail -20 "$out/configure.log"; exit 1; }
fi
if timeout 300 cmake --build "$build" -j"$(nproc)" > "$out/build.log" 2>&1; then
  say "- build: ok ($((SECONDS - start)) s)"
else
  say "- build: FAILED or over 300 s (see build.log)"
  tail -30 "$out/build.log"
  exit 1
fi

start=$SECONDS
# The real CUDA and NCCL tests; their emulated-device twins (emulated_device.*) ran where CI ran, not needed here.
timeout 180 ctest --test-dir "$build" -j4 --output-on-failure -R 'Cuda|CudaMatchesCpu|Nccl' -E '^emulated_device[.]' \
  > "$out/cuda-tests.log" 2>&1
tests_rc=$?
say "- CUDA tests ($((SECONDS - start)) s, exit $tests_rc): $(grep -E 'tests passed|tests failed' "$out/cuda-tests.log" | tail -1)"
say "  - skipped: $(grep -c '(Skipped)' "$out/cuda-tests.log"); failed: $(grep -c '(Failed)' "$out/cuda-tests.log")"
grep '(Failed)' "$out/cuda-tests.log" | sed 's/^/    /' | tee -a "$summary"

if ((gpu)); then
  say "- training step, tokens/s (10 steps after 2; posgrad fp32 and bf16 | PyTorch eager fp32 | PyTorch bf16 autocast):"
  for size in compare gpt2; do
    timeout 60 "./$build/bench/bench_train" --size "$size" --device cuda --steps 10 > "$out/bench_train_$size.txt" 2>&1
    timeout 60 "./$build/bench/bench_train" --size "$size" --device cuda --steps 10 --precision bf16 \
      > "$out/bench_train_${size}_bf16.txt" 2>&1
    for mode in eager bf16; do
      timeout 60 python3 bench/reference_gpt.py --size "$size" --device cuda --steps 10 --mode "$mode" \
        > "$out/reference_${size}_$mode.txt" 2>&1
    done
    say "  - $size:"
    awk '!/^#/ && $1 != "method" && NF == 4 {printf "    - posgrad %s: %s tok/s\n", $1, $3}' "$out/bench_train_$size.txt" |
      tee -a "$summary"
    awk '!/^#/ && $1 != "method" && NF == 4 {printf "    - posgrad bf16 %s: %s tok/s\n", $1, $3}' \
      "$out/bench_train_${size}_bf16.txt" | tee -a "$summary"
    for mode in eager bf16; do
      awk -v m="$mode" '!/^#/ && $1 != "method" && NF == 4 {printf "    - PyTorch %s %s: %s tok/s\n", m, $1, $3}' \
        "$out/reference_${size}_$mode.txt" | tee -a "$summary"
    done
  done
else
  say "- training step on the GPU: SKIPPED (no GPU)"
fi
echo "summary: $summary"
