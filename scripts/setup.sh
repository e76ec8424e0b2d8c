#!/usr/bin/env bash
# setup.sh — installs posgrad's Debian dependencies, extracts the offline default corpus (the King
# James Bible from Debian's bible-kjv package) and configures + builds a Release build in ./build.
# Safe to re-run: installed packages, the extracted corpus and the build are reused.
#
#   ./scripts/setup.sh                 # everything
#   POSGRAD_CUDA=OFF ./scripts/setup.sh  # build without the CUDA backend (default AUTO: on where nvcc exists)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config libomp-dev libspdlog-dev libgtest-dev libgmock-dev libbenchmark-dev
          nlohmann-json3-dev libcli11-dev gnuplot-nox bible-kjv libopenblas-dev python3 openmpi-bin libopenmpi-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all Debian packages present"
fi

./scripts/extract_kjv.sh

# nvcc is preinstalled on the development and CI machines but may not be on PATH.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPOSGRAD_CUDA="${POSGRAD_CUDA:-AUTO}"
cmake --build build -j"$(nproc)"
echo "setup: done — the posgrad tool is ./build/posgrad"
