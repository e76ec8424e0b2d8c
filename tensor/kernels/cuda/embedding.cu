// embedding.cu — table lookup y[n] = table[idx[n]] and its backward, a scatter-add, on the GPU;
// the CUDA twins of cpu/embedding.cpp. Ids are validated here, not on the host (that would read them
// back at every call): an id out of range is reported through index_fault() (common.cuh) and its row
// of y is NaN; the backward skips it.
//
// Deterministic backward without atomics: thread (column c, vocabulary chunk k) walks ALL rows n in
// order 0..N-1 and adds dy[n, c] into dtable[idx[n], c] only when idx[n] falls in chunk k. Every
// dtable element is owned by exactly one thread and receives its contributions in increasing n —
// the CPU's order, so the result is bit-identical to the CPU's. The chunks (grid y) only add
// parallelism: each thread still reads all N ids, but those loads are warp-uniform broadcasts.
#include "tensor/kernels/cuda/common.cuh"

namespace posgrad::kernels::cuda {

using namespace posgrad::cuda;

namespace {

constexpr int kColBlock = 128, kMaxVocabChunks = 64;

template <typename T>
__global__ void embedding_forward_kernel(T* y, const int64_t* idx, const T* table, int64_t N, int64_t V, int64_t C,
                                         IndexFault* fault) {
  POSGRAD_GRID_STRIDE(j, N * C) {
    const int64_t n = j / C, c = j % C;
    const int64_t v = idx[n];
    if (v < 0 || v >= V) {
      if (c == 0) report_index_fault(fault, kEmbeddingId, n, v, V);
      y[j] = static_cast<T>(NAN);
      continue;
    }
    y[j] = table[v * C + c];
  }
}

template <typename T>
__global__ void embedding_backward_kernel(T* dtable, const T* dy, const int64_t* idx, int64_t N, int64_t V, int64_t C,
                                          int64_t chunk) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t v_lo = static_cast<int64_t>(blockIdx.y) * chunk;
  const int64_t v_hi = v_lo + chunk < V ? v_lo + chunk : V;
  if (c >= C) return;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t v = idx[n];
    if (v >= v_lo && v < v_hi) dtable[v * C + c] += dy[n * C + c];
  }
}

}  // namespace

template <typename T>
void embedding_forward(T* y, const int64_t* idx, const T* table, int64_t N, int64_t V, int64_t C) {
  if (N <= 0 || C <= 0) return;
  launch("embedding_forward", embedding_forward_kernel<T>, grid_for(N * C, kBlock), kBlock, 0, y, idx, table, N, V, C,
         index_fault());
}

template <typename T>
void embedding_backward(T* dtable, const T* dy, const int64_t* idx, int64_t N, int64_t V, int64_t C) {
  if (N <= 0 || C <= 0 || V <= 0) return;
  const int64_t col_blocks = (C + kColBlock - 1) / kColBlock;
  POSGRAD_CHECK(col_blocks <= 0x7fffffff, ValueError, "embedding_backward: C = ", C, " too large");
  const int64_t chunks = V < kMaxVocabChunks ? V : kMaxVocabChunks;
  const int64_t chunk = (V + chunks - 1) / chunks;
  launch("embedding_backward", embedding_backward_kernel<T>,
         dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks)), kColBlock, 0, dtable, dy, idx, N, V, C,
         chunk);
}

#define INST(T)                                                                                \
  template void embedding_forward<T>(T*, const int64_t*, const T*, int64_t, int64_t, int64_t); \
  template void embedding_backward<T>(T*, const T*, const int64_t*, int64_t, int64_t, int64_t);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cuda
