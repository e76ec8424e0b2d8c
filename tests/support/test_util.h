// test_util.h — shared helpers for the GoogleTest suites.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tensor/storage.h"

// Marks a CUDA test SKIPPED (not passed) when no GPU is present.
#define POSGRAD_REQUIRE_CUDA()                                               \
  do {                                                                        \
    if (!::posgrad::cuda_available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

namespace posgrad::test {

// The directory of shared data (tinyshakespeare.txt), from POSGRAD_DATA_DIR, or "" when unset.
inline std::string data_dir() {
  const char* d = std::getenv("POSGRAD_DATA_DIR");
  return d ? d : "";
}

}  // namespace posgrad::test
