#!/usr/bin/env bash
# test.sh — runs the whole test suite through CTest (after ./scripts/setup.sh has built ./build).
# Tests needing a GPU report SKIPPED where none is present. Shared data (tinyshakespeare.txt) is read
# from $POSGRAD_DATA_DIR, by default ../shared/data beside the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -d build ]] || { echo "test: ./build is missing — run ./scripts/setup.sh first" >&2; exit 2; }
cmake --build build -j"$(nproc)"
ctest --test-dir build -j"$(nproc)" --output-on-failure --timeout 600 "$@"
