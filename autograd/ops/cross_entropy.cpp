// cross_entropy.cpp — softmax cross-entropy of logits against integer targets as one fused
// autograd Function: cross_entropy (mean over the rows whose target is not ignore_index) and
// cross_entropy_rows (one loss per row, 0 for ignored rows). CPU targets are validated here, so an
// out-of-range target is an IndexError naming it instead of a bad read in the kernel; GPU targets
// are validated by the CUDA kernel and raised at the next synchronisation (nothing read back).
// The kernels (tensor/kernels/cpu/cross_entropy.cpp) save each row's log-sum-exp as the pair
// (row max, log of the shifted sum); the backward rebuilds softmax - onehot from the logits and
// that pair without materialising probabilities.
// Not here: label smoothing, class weights, soft targets.
//
// The mean over zero non-ignored rows is defined as 0 with a 0 gradient (PyTorch gives NaN): a
// batch made only of padding then contributes nothing instead of poisoning the parameters.
#include "autograd/ops.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

namespace {

struct CrossEntropyFn : Function<CrossEntropyFn> {
  static constexpr const char* kName = "cross_entropy";
  struct Saved {
    Tensor logits, targets, stats;  // logits (N, V) contiguous, targets (N), stats (N, 2)
    Shape logits_shape;
    int64_t ignore_index = -100, count = 0;  // count: non-ignored rows; -1: on the device (device_count)
    bool mean = true;
    Tensor device_count;  // (1) int64 on the GPU: the mean's count, never read back
  };

  // logits (..., V), targets (...) -> () when mean, else (...).
  static Tensor forward(Context<Saved>& ctx, const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                        bool mean) {
    POSGRAD_CHECK(is_floating(logits.dtype()), DTypeError, "cross_entropy: logits must be floating, got ",
                  logits.str());
    POSGRAD_CHECK(targets.dtype() == DType::Int64, DTypeError, "cross_entropy: targets must be int64, got ",
                  targets.str());
    POSGRAD_CHECK(targets.device() == logits.device(), DeviceError, "cross_entropy: targets on ",
                  targets.device().str(), " but logits on ", logits.device().str());
    POSGRAD_CHECK(logits.dim() >= 2, ShapeError, "cross_entropy: logits must be (N, V) or (B, T, V), got ",
                  shape_str(logits.shape()));
    const Shape row_shape(logits.shape().begin(), logits.shape().end() - 1);
    POSGRAD_CHECK(targets.shape() == row_shape, ShapeError, "cross_entropy: targets ", shape_str(targets.shape()),
                  " do not match logits ", shape_str(logits.shape()), " (expected targets ", shape_str(row_shape), ")");
    const int64_t V = logits.size(-1), N = shape_numel(row_shape);
    POSGRAD_CHECK(V > 0 || N == 0, ShapeError, "cross_entropy: empty class dim in logits ", shape_str(logits.shape()));
    Tensor tc = targets.contiguous();
    // On the CPU the targets are checked and counted here. On a GPU reading them back would cost a
    // synchronisation per call: the kernel checks them (a bad target is raised at the next
    // synchronisation) and the mean's count stays on the device (count < 0 below; device_count).
    const bool on_host = tc.device().is_cpu();
    int64_t count = on_host ? 0 : -1;
    Tensor device_count;
    if (on_host) {
      const int64_t* p = tc.data<int64_t>();
      for (int64_t n = 0; n < N; ++n) {
        if (p[n] == ignore_index) continue;
        POSGRAD_CHECK(p[n] >= 0 && p[n] < V, IndexError, "cross_entropy: target ", p[n], " at row ", n,
                      " is out of range for ", V, " classes (ignore_index is ", ignore_index, ")");
        ++count;
      }
    }
    Tensor lc = logits.contiguous();
    Tensor rows = Tensor::empty({N}, logits.dtype(), logits.device());
    Tensor stats = Tensor::empty({N, 2}, logits.dtype(), logits.device());
    Tensor out;
    dispatch_floating(logits.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      const Device dev = logits.device();
      if (N > 0)
        POSGRAD_KERNEL(dev, cross_entropy_forward<T>, rows.data<T>(), stats.data<T>(), lc.data<T>(), tc.data<int64_t>(),
                       N, V, ignore_index);
      if (!mean) {
        out = rows.view(row_shape);
        return;
      }
      // mean = (sum of row losses, in row order) / count; ignored rows hold 0.
      out = Tensor::zeros({}, logits.dtype(), dev);
      if (!on_host) {
        device_count = Tensor::zeros({1}, DType::Int64, dev);
        if (N > 0)
          POSGRAD_KERNEL(dev, cross_entropy_mean<T>, out.data<T>(), device_count.data<int64_t>(), rows.data<T>(),
                         tc.data<int64_t>(), N, ignore_index);
        return;
      }
      if (count == 0) return;
      POSGRAD_KERNEL(dev, sum_dim_forward<T>, out.data<T>(), rows.data<T>(), int64_t(1), N, int64_t(1));
      POSGRAD_KERNEL(dev, unary_forward<T>, out.data<T>(), out.data<T>(), int64_t(1), kernels::UnaryOp::MulScalar,
                     T(1.0 / static_cast<double>(count)));
    });
    ctx.saved = {save_tensor(lc), save_tensor(tc), stats, logits.shape(), ignore_index, count, mean, device_count};
    return out;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    const int64_t V = s.logits_shape.back(), N = V == 0 ? 0 : s.logits.numel() / V;
    Tensor dlogits = Tensor::zeros(s.logits_shape, s.logits.dtype(), s.logits.device());
    if (N == 0 || s.count == 0) return {dlogits, Tensor()};
    Tensor dloss;                              // (N)
    if (s.mean && s.device_count.defined()) {  // the count is on the device: so is the division
      dloss = Tensor::empty({N}, s.logits.dtype(), s.logits.device());
      Tensor g = grads[0].contiguous();
      dispatch_floating(s.logits.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        POSGRAD_KERNEL(s.logits.device(), cross_entropy_mean_backward<T>, dloss.data<T>(), g.data<T>(),
                       s.device_count.data<int64_t>(), N);
      });
    } else if (s.mean) {
      dloss = Tensor::full({N}, grads[0].item() / static_cast<double>(s.count), s.logits.dtype(), s.logits.device());
    } else {
      dloss = grads[0].contiguous();
    }
    dispatch_floating(s.logits.dtype(), kName, [&](auto tag) {
      using T = decltype(tag);
      POSGRAD_KERNEL(s.logits.device(), cross_entropy_backward<T>, dlogits.data<T>(), dloss.data<T>(),
                     s.logits.data<T>(), s.stats.data<T>(), s.targets.data<int64_t>(), N, V, s.ignore_index);
    });
    return {dlogits, Tensor()};
  }
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  return CrossEntropyFn::apply(logits, targets, ignore_index, true);
}

Tensor cross_entropy_rows(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  return CrossEntropyFn::apply(logits, targets, ignore_index, false);
}

}  // namespace posgrad
