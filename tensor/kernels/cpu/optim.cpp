// optim.cpp — elementwise parameter updates of AdamW and SGD on the CPU (p, g, m, v, buf all (n)).
// Not here: step counting, bias-correction factors, learning-rate schedules, parameter groups
// (train/optim.cpp computes those; AdamW and the gradient norm call the multi-tensor forms with all CPU
// parameters at once, SGD calls sgd_step per tensor).
//
// Update rules follow PyTorch's torch.optim.AdamW / torch.optim.SGD documentation (the
// "Algorithm" boxes), with the same order of floating-point operations so that results track
// PyTorch closely:
//   AdamW (Loshchilov & Hutter 2019, Alg. 2; decoupled weight decay):
//     p <- p * (1 - lr * wd)
//     m <- beta1 * m + (1 - beta1) * g
//     v <- beta2 * v + (1 - beta2) * g^2
//     p <- p - (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)      bc_i = 1 - beta_i^t
//   SGD (dampening 0, no Nesterov; coupled L2 decay):
//     g <- g + wd * p
//     buf <- momentum * buf + g        (buf starts at 0, so the first step gives buf = g)
//     p <- p - lr * buf                (p <- p - lr * g when momentum == 0; buf may then be null)
// Elements are independent: any split of them over threads is bit-identical for any thread count.
//
// The multi-tensor forms (adamw_step_multi, sum_squares_multi) run a whole model's parameters in one
// thread team: a small model's tensors are each below the size at which a team pays off, so one call
// per tensor left the second core idle. They give each element, and each sum of squares, the bits of
// the one-tensor kernels.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tensor/kernels/cpu/parallel.h"
#include "tensor/kernels/cpu/row_kernels.h"
#include "tensor/kernels/cpu/vec_kernels.h"
#include "tensor/kernels/kernels.h"

namespace posgrad::kernels::cpu {

namespace {
constexpr int64_t kParallelMin = 1 << 15;  // elements

// The AdamW update of elements [b, e) of one tensor, in the order of operations listed above.
template <typename T>
inline void adamw_range(T* p, T* m, T* v, const T* g, int64_t b, int64_t e, T lr, T beta1, T beta2, T eps,
                        T weight_decay, T bias_correction1, T bias_correction2) {
  const T decay = T(1) - lr * weight_decay;
  const T step_size = lr / bias_correction1;
  const T bc2_sqrt = std::sqrt(bias_correction2);
  const T one_m_b1 = T(1) - beta1, one_m_b2 = T(1) - beta2;
  if constexpr (std::is_same_v<T, float>)  // vectorised for the CPU's instruction set (vec_kernels.h)
    adamw_update_f32(p + b, m + b, v + b, g + b, e - b, beta1, beta2, one_m_b1, one_m_b2, decay, step_size, bc2_sqrt,
                     eps);
  else
    row_kernels::adamw_update<T>(p + b, m + b, v + b, g + b, e - b, beta1, beta2, one_m_b1, one_m_b2, decay, step_size,
                                 bc2_sqrt, eps);
}

// Calls f(i, begin, end) for each piece of tensor i within elements [lo, hi) of the tensors laid end to
// end (size(i) elements each).
template <typename Size, typename F>
void for_range(Size size, int64_t count, int64_t lo, int64_t hi, F f) {
  int64_t base = 0;
  for (int64_t i = 0; i < count && base < hi; base += size(i), ++i) {
    const int64_t b = std::max(lo, base), e = std::min(hi, base + size(i));
    if (b < e) f(i, b - base, e - base);
  }
}

// sum_squares splits x into kSquareParts fixed parts, each summed front to back in double, then adds
// the parts in order: the bits do not depend on the thread count.
constexpr int64_t kSquareParts = 64;

// Part `part` of an n-element tensor: [begin, end).
inline void square_part(int64_t n, int64_t part, int64_t& begin, int64_t& end) {
  const int64_t block = (n + kSquareParts - 1) / kSquareParts;
  begin = std::min(n, part * block);
  end = std::min(n, (part + 1) * block);
}

// Sums of squares of `count` parts (x[j][0..len[j]) each) into out[j]. Each part is one chain of
// double additions, whose latency (not the arithmetic) bounds a lone chain; four parts advance side by
// side so that four chains are in flight. Each part's additions keep their order.
template <typename T>
void square_parts(double* out, const T* const* x, const int64_t* len, int64_t count) {
  int64_t j = 0;
  for (; j + 4 <= count; j += 4) {
    const T *x0 = x[j], *x1 = x[j + 1], *x2 = x[j + 2], *x3 = x[j + 3];
    const int64_t common = std::min(std::min(len[j], len[j + 1]), std::min(len[j + 2], len[j + 3]));
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t i = 0; i < common; ++i) {
      s0 += double(x0[i]) * double(x0[i]);
      s1 += double(x1[i]) * double(x1[i]);
      s2 += double(x2[i]) * double(x2[i]);
      s3 += double(x3[i]) * double(x3[i]);
    }
    double s[4] = {s0, s1, s2, s3};
    for (int q = 0; q < 4; ++q) {
      const T* xq = x[j + q];
      for (int64_t i = common; i < len[j + q]; ++i) s[q] += double(xq[i]) * double(xq[i]);
      out[j + q] = s[q];
    }
  }
  for (; j < count; ++j) {
    double s = 0;
    for (int64_t i = 0; i < len[j]; ++i) s += double(x[j][i]) * double(x[j][i]);
    out[j] = s;
  }
}
}  // namespace

template <typename T>
void adamw_step(T* p, T* m, T* v, const T* g, int64_t n, T lr, T beta1, T beta2, T eps, T weight_decay,
                T bias_correction1, T bias_correction2) {
  const AdamWTensor<T> one{p, m, v, g, n, weight_decay};
  adamw_step_multi(&one, 1, lr, beta1, beta2, eps, bias_correction1, bias_correction2);
}

template <typename T>
void adamw_step_multi(const AdamWTensor<T>* tensors, int64_t count, T lr, T beta1, T beta2, T eps, T bias_correction1,
                      T bias_correction2) {
  int64_t total = 0;
  for (int64_t i = 0; i < count; ++i) total += tensors[i].n;
  // Static shares of the elements with stealing (parallel.h), in chunks of at least 16384 elements
  // starting at multiples of 16 of the concatenation.
  parallel_chunks(
      total, 16384, kParallelMin,
      [&](int64_t lo, int64_t hi) {
        for_range([&](int64_t i) { return tensors[i].n; }, count, lo, hi,
                  [&](int64_t i, int64_t b, int64_t e) {
                    const AdamWTensor<T>& a = tensors[i];
                    adamw_range(a.p, a.m, a.v, a.g, b, e, lr, beta1, beta2, eps, a.weight_decay, bias_correction1,
                                bias_correction2);
                  });
      },
      16);
}

template <typename T>
void sum_squares_multi(double* out, const T* const* xs, const int64_t* ns, int64_t count) {
  // Every part of every tensor, laid end to end; a thread takes a contiguous run of parts holding about
  // its share of the elements.
  const int64_t parts = count * kSquareParts;
  std::vector<const T*> px(static_cast<size_t>(parts));
  std::vector<int64_t> plen(static_cast<size_t>(parts)), pstart(static_cast<size_t>(parts) + 1, 0);
  for (int64_t i = 0; i < count; ++i)
    for (int64_t q = 0; q < kSquareParts; ++q) {
      int64_t b, e;
      square_part(ns[i], q, b, e);
      const int64_t j = i * kSquareParts + q;
      px[j] = xs[i] + b;
      plen[j] = e - b;
      pstart[j + 1] = pstart[j] + plen[j];
    }
  std::vector<double> psum(static_cast<size_t>(parts), 0.0);
  const int64_t total = pstart[parts];
  auto run = [&](int t, int nt) {
    // Parts whose first element falls in this thread's share of the elements.
    const int64_t lo = total * t / nt, hi = total * (t + 1) / nt;
    const int64_t j0 = std::lower_bound(pstart.begin(), pstart.end() - 1, lo) - pstart.begin();
    const int64_t j1 = t + 1 == nt ? parts : std::lower_bound(pstart.begin(), pstart.end() - 1, hi) - pstart.begin();
    if (j1 > j0) square_parts(psum.data() + j0, px.data() + j0, plen.data() + j0, j1 - j0);
  };
  if (total <= 2 * kParallelMin || omp_in_parallel()) {
    run(0, 1);
  } else {
#pragma omp parallel
    run(omp_get_thread_num(), omp_get_num_threads());
  }
  for (int64_t i = 0; i < count; ++i) {
    double s = 0;
    for (int64_t q = 0; q < kSquareParts; ++q) s += psum[i * kSquareParts + q];
    out[i] = s;
  }
}

template <typename T>
void sgd_step(T* p, T* buf, const T* g, int64_t n, T lr, T momentum, T weight_decay) {
  if (momentum != T(0)) {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      const T gi = g[i] + weight_decay * p[i];
      const T b = momentum * buf[i] + gi;
      buf[i] = b;
      p[i] -= lr * b;
    }
  } else {
#pragma omp parallel for simd schedule(static) if (n > kParallelMin)
    for (int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + weight_decay * p[i]);
  }
}

#define INST(T)                                                                          \
  template void adamw_step<T>(T*, T*, T*, const T*, int64_t, T, T, T, T, T, T, T);       \
  template void adamw_step_multi<T>(const AdamWTensor<T>*, int64_t, T, T, T, T, T, T);   \
  template void sum_squares_multi<T>(double*, const T* const*, const int64_t*, int64_t); \
  template void sgd_step<T>(T*, T*, const T*, int64_t, T, T, T);
INST(float)
INST(double)
#undef INST

}  // namespace posgrad::kernels::cpu
