// libfuzzer_main.cpp — the libFuzzer entry of one fuzz executable; CMake compiles this file once per
// target with POSGRAD_FUZZ_ENTRY set to that target's entry function (see fuzz_targets.h). Built
// only with clang and POSGRAD_FUZZ=ON.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_targets.h"

#ifndef POSGRAD_FUZZ_ENTRY
#error "POSGRAD_FUZZ_ENTRY must name the entry function (fuzz_<target>)"
#endif

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  posgrad::fuzz::quiet_logging();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return posgrad::fuzz::POSGRAD_FUZZ_ENTRY(data, size);
}
