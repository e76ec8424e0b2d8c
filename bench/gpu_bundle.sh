#!/usr/bin/env bash
# gpu_bundle.sh — packs a CUDA build made on this machine for a GPU machine that has the CUDA driver,
# cuBLAS, NCCL and PyTorch but not the Debian -dev packages posgrad builds against (spdlog, CLI11,
# GoogleTest): the CUDA test binaries, the posgrad tool and bench_train, the shared libraries they
# need that are neither glibc nor the big CUDA libraries (cuBLAS, cuBLASLt, NCCL, which the GPU
# machine has and bench/gpu_check.sh finds there), and the shared corpus.
#   bench/gpu_bundle.sh                  # configures + builds build-gpu (sm_90, MPI off), fills .gpu-bundle
#   BUILD_DIR=b ARCH=80 BUNDLE=d bench/gpu_bundle.sh
# Then, on the GPU machine, from the checkout's root: BUNDLE=.gpu-bundle bench/gpu_check.sh
# MPI is off in this build: a bundled Open MPI would need its plugins and launcher too.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${BUILD_DIR:-build-gpu}"
arch="${ARCH:-90}"
bundle="${BUNDLE:-.gpu-bundle}"
export PATH="/usr/local/cuda/bin:$PATH"
targets=(test_cuda test_cuda_train test_op_registry test_nccl posgrad_cli bench_train)

if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPOSGRAD_CUDA=ON -DPOSGRAD_MPI=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$arch"
fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/data"
bins=("$build/test_cuda" "$build/test_cuda_train" "$build/test_op_registry" "$build/test_nccl" "$build/posgrad"
      "$build/bench/bench_train")
for b in "${bins[@]}"; do
  [[ -x $b ]] || { echo "gpu_bundle: $b was not built" >&2; exit 1; }
  cp "$b" "$bundle/bin/"
  strip --strip-debug "$bundle/bin/$(basename "$b")"
done
# Shared libraries: everything ldd resolves except glibc's own and the CUDA driver and big CUDA
# libraries, which must come from the GPU machine (they match its driver).
skip='^(libc|libm|libpthread|libdl|librt|ld-linux-x86-64|linux-vdso|libcuda|libcublas|libcublasLt|libnccl)\.so'
for b in "$bundle"/bin/*; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ $name =~ $skip ]] && continue
  cp -L "$path" "$bundle/lib/$name"
done
data="${POSGRAD_DATA_DIR:-../shared/data}"
[[ -f $data/tinyshakespeare.txt ]] && cp "$data/tinyshakespeare.txt" "$bundle/data/"
echo "$(git rev-parse --short HEAD)$(git diff --quiet || echo '+uncommitted')" > "$bundle/commit"
du -sh "$bundle"
ls "$bundle/lib"
