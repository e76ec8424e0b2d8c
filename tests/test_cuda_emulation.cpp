// test_cuda_emulation.cpp — the emulated CUDA execution model (tests/support/cuda_emulation.h) sees
// what a GPU would show: launches beyond the device limits are refused, a block's dynamic shared
// memory starts as NaN (undefined on the GPU), and blocks run in a seeded shuffled order (so a kernel
// whose blocks depend on each other's order fails).
// The kernels themselves are checked through it in test_cuda.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "support/cuda_emulation.h"

namespace {

void skip_without_emulation() {
  if (!emu::emulation_supported()) GTEST_SKIP() << "CUDA emulation is not supported under AddressSanitizer";
}

TEST(CudaEmulation, LaunchesBeyondTheDeviceLimitsAreRefused) {
  skip_without_emulation();
  const auto nothing = [] {};
  EXPECT_THROW(emu::launch_for_test({1}, {1025}, 0, nothing), emu::LaunchLimit);
  EXPECT_THROW(emu::launch_for_test({1}, {32, 32, 2}, 0, nothing), emu::LaunchLimit);  // 2048 threads
  EXPECT_THROW(emu::launch_for_test({1}, {1, 1, 65}, 0, nothing), emu::LaunchLimit);
  EXPECT_THROW(emu::launch_for_test({1, 65536}, {1}, 0, nothing), emu::LaunchLimit);
  EXPECT_THROW(emu::launch_for_test({1, 1, 65536}, {1}, 0, nothing), emu::LaunchLimit);
  EXPECT_THROW(emu::launch_for_test({1}, {32}, 48 * 1024 + 1, nothing), emu::LaunchLimit);
  int runs = 0;
  EXPECT_NO_THROW(emu::launch_for_test({2, 65535}, {1}, 48 * 1024, [&] { ++runs; }));  // at the limits
  EXPECT_EQ(runs, 2 * 65535);
  runs = 0;
  EXPECT_NO_THROW(emu::launch_for_test({1}, {1024}, 0, [&] { ++runs; }));
  EXPECT_EQ(runs, 1024);
}

// Every block sees NaN where it has not written, even where an earlier block wrote.
TEST(CudaEmulation, DynamicSharedMemoryStartsAsNaNInEveryBlock) {
  skip_without_emulation();
  constexpr unsigned kThreads = 64, kBlocks = 3;
  std::vector<float> first_read(kThreads * kBlocks, 0.0f), after_write(kThreads * kBlocks, 0.0f);
  emu::launch_for_test({kBlocks}, {kThreads}, kThreads * sizeof(float), [&] {
    const emu::TestThread t = emu::this_thread();
    float* smem = reinterpret_cast<float*>(t.smem);
    const size_t i = t.block.x * kThreads + t.thread.x;
    first_read[i] = smem[t.thread.x];
    emu::sync_threads_for_test();
    smem[t.thread.x] = 2.0f * static_cast<float>(t.thread.x);
    emu::sync_threads_for_test();
    after_write[i] = smem[(t.thread.x + 1) % kThreads];
  });
  for (size_t i = 0; i < first_read.size(); ++i) {
    EXPECT_TRUE(std::isnan(first_read[i])) << "thread " << i << " read " << first_read[i] << " before any write";
    EXPECT_EQ(after_write[i], 2.0f * static_cast<float>((i % kThreads + 1) % kThreads));
  }
}

// The blocks of a launch run in a shuffled order: a permutation of the grid, not the index order, and a
// different one for the next launch; a chain where block b reads what block b - 1 wrote breaks.
TEST(CudaEmulation, BlocksRunInAShuffledOrderSoInterBlockDependenceFails) {
  skip_without_emulation();
  constexpr unsigned kBlocks = 64;
  const auto order = [&] {
    std::vector<unsigned> seen;
    emu::launch_for_test({kBlocks}, {1}, 0, [&] { seen.push_back(emu::this_thread().block.x); });
    return seen;
  };
  const std::vector<unsigned> a = order(), b = order();
  std::vector<unsigned> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<unsigned> identity(kBlocks);
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_EQ(sorted, identity) << "every block runs exactly once";
  EXPECT_NE(a, identity) << "blocks ran in index order";
  EXPECT_NE(a, b) << "two launches ran their blocks in the same order";

  // out[b] = out[b - 1] + 1 is right only when the blocks run in index order.
  std::vector<int> out(kBlocks, -1);
  emu::launch_for_test({kBlocks}, {1}, 0, [&] {
    const unsigned blk = emu::this_thread().block.x;
    out[blk] = blk == 0 ? 0 : out[blk - 1] + 1;
  });
  std::vector<int> chain(kBlocks);
  std::iota(chain.begin(), chain.end(), 0);
  EXPECT_NE(out, chain) << "an order-dependent kernel passed";
}

}  // namespace
