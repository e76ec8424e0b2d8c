// philox.h — Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
// header-only so that CPU and CUDA kernels compute bit-identical streams.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define POSGRAD_HD __host__ __device__ __forceinline__
#else
#define POSGRAD_HD inline
#endif

namespace posgrad {

struct Philox4 {
  uint32_t v[4];
};

// 4 x 32 random bits for a 64-bit counter under a 64-bit key.
POSGRAD_HD Philox4 philox4x32(uint64_t counter, uint64_t key) {
  // Multipliers and Weyl key increments from the paper (Table 2).
  const uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  const uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from 32 random bits, 24-bit resolution so it is exact in float.
POSGRAD_HD double u32_to_unit(uint32_t x) { return (x >> 8) * (1.0 / 16777216.0); }

}  // namespace posgrad
