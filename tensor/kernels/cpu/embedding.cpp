// embedding.cpp — table lookup y[n] = table[idx[n]] and its backward, a scatter-add, on the CPU.
// Not here: validation of the ids (autograd/ops/embedding.cpp checks them once, on the host, and
// raises IndexError; these kernels trust them), padding_idx, max_norm.
//
// Determinism of the backward: several rows n can share an id, so a parallel loop over rows
// would race on dtable[id]. Instead the columns are split into blocks across threads and every
// block walks the rows in order 0..N-1: each dtable element receives its contributions in the
// same order whatever the thread count, and no two threads ever touch the same element.
#include <algorithm>
#include <cstring>

#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements
constexpr int64_t kColBlock = 64;          // columns per backward block
}  // namespace

// y (N, C) = table (V, C) [idx (N)].
template <typename T>
void embedding_forward(T* y, const int64_t* idx, const T* table, int64_t N, int64_t /*V*/, int64_t C) {
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(static_cast<void*>(y + n * C), static_cast<const void*>(table + idx[n] * C), sizeof(T) * C);
}

// dtable (V, C) += scatter over rows of dy (N, C) by idx (N).
template <typename T>
void embedding_backward(T* dtable, const T* dy, const int64_t* idx, int64_t N, int64_t /*V*/, int64_t C) {
  const int64_t blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColBlock, w = std::min(kColBlock, C - c0);
    for (int64_t n = 0; n < N; ++n) {
      T* dst = dtable + idx[n] * C + c0;
      const T* src = dy + n * C + c0;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) dst[c] += src[c];
    }
  }
}

#define INST(T)                                                                                \
  template void embedding_forward<T>(T*, const int64_t*, const T*, int64_t, int64_t, int64_t); \
  template void embedding_backward<T>(T*, const T*, const int64_t*, int64_t, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
