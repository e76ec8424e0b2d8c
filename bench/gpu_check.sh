#!/usr/bin/env bash
# gpu_check.sh — the device checks for a machine with an NVIDIA GPU, in one run: build with the CUDA
# backend, run the CUDA test suites (op-registry parity, kernels, ten-step training parity, CLI with
# --device cuda), then the throughput table of bench_train beside the PyTorch reference
# (bench/reference_gpt.py) for the compare model and a GPT-2-small-sized model.
#   OUT=/some/dir bench/gpu_check.sh     # logs go to $OUT (default ./gpu-check)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-check}"
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"
nvidia-smi 2>&1 | tee "$out/nvidia-smi.txt" | head -15
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DPOSGRAD_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$out/configure.log" 2>&1 &&
  cmake --build build-gpu -j"$(nproc)" >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
ctest --test-dir build-gpu -j4 --output-on-failure -R 'Cuda|CudaMatchesCpu' 2>&1 | tee "$out/cuda-tests.log" | tail -25
for size in compare gpt2; do
  ./build-gpu/bench/bench_train --size "$size" --device cuda --steps 10 2>&1 | tee "$out/bench_train_$size.txt"
  python3 bench/reference_gpt.py --size "$size" --device cuda --steps 10 2>&1 | tee "$out/reference_$size.txt"
done
