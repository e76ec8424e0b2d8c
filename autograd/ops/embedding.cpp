// embedding.cpp — embedding(table, idx): row lookup as an autograd Function. The ids are
// validated here once, on the host (copied there if they live on a GPU), so that a bad id is an
// IndexError naming the id, the vocabulary size and its position instead of an out-of-bounds read
// in the kernel. The backward is the deterministic scatter-add kernel; idx gets no gradient.
// Not here: padding_idx, max_norm, sparse gradients.
#include <sstream>

#include "autograd/ops.h"
#include "tensor/kernels/kernels.h"

namespace posgrad {

namespace {

// "(1, 4)": the multi-index of flat position `flat` in `shape`.
std::string position_str(const Shape& shape, int64_t flat) {
  Shape idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return shape_str(idx);
}

struct EmbeddingFn : Function<EmbeddingFn> {
  static constexpr const char* kName = "embedding";
  struct Saved {
    Tensor idx;
    int64_t V = 0, C = 0;
  };  // idx (N) contiguous

  // table (V, C), idx (...) -> (..., C)
  static Tensor forward(Context<Saved>& ctx, const Tensor& table, const Tensor& idx) {
    POSGRAD_CHECK(is_floating(table.dtype()), DTypeError, "embedding: table must be floating, got ", table.str());
    POSGRAD_CHECK(table.dim() == 2, ShapeError, "embedding: table must be (V, C), got ", shape_str(table.shape()));
    POSGRAD_CHECK(idx.dtype() == DType::Int64, DTypeError, "embedding: ids must be int64, got ", idx.str());
    POSGRAD_CHECK(idx.device() == table.device(), DeviceError, "embedding: ids on ", idx.device().str(),
                  " but table on ", table.device().str());
    const int64_t V = table.size(0), C = table.size(1), N = idx.numel();
    Tensor ic = idx.contiguous();
    // On the CPU the ids are checked here; on a GPU the kernel checks them (reading them back would
    // cost a synchronisation per call) and a bad id is raised at the next synchronisation.
    if (ic.device().is_cpu()) {
      const int64_t* p = ic.data<int64_t>();
      for (int64_t n = 0; n < N; ++n)
        POSGRAD_CHECK(p[n] >= 0 && p[n] < V, IndexError, "embedding: id ", p[n], " at position ",
                      position_str(idx.shape(), n), " of ids ", shape_str(idx.shape()),
                      " is out of range for vocab size ", V);
    }
    Tensor tc = table.contiguous();
    Shape out = idx.shape();
    out.push_back(C);
    Tensor y = Tensor::empty(out, table.dtype(), table.device());
    if (N > 0 && C > 0)
      dispatch_floating(table.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        POSGRAD_KERNEL(table.device(), embedding_forward<T>, y.data<T>(), ic.data<int64_t>(), tc.data<T>(), N, V, C);
      });
    ctx.saved = {save_tensor(ic), V, C};
    return y;
  }

  static TensorList backward(Context<Saved>& ctx, const TensorList& grads) {
    const auto& s = ctx.saved;
    Tensor dy = grads[0].contiguous();  // (..., C)
    Tensor dtable = Tensor::zeros({s.V, s.C}, dy.dtype(), dy.device());
    const int64_t N = s.idx.numel();
    if (N > 0 && s.C > 0)
      dispatch_floating(dy.dtype(), kName, [&](auto tag) {
        using T = decltype(tag);
        POSGRAD_KERNEL(dy.device(), embedding_backward<T>, dtable.data<T>(), dy.data<T>(), s.idx.data<int64_t>(), N,
                       s.V, s.C);
      });
    return {dtable, Tensor()};
  }
};

}  // namespace

Tensor embedding(const Tensor& table, const Tensor& idx) { return EmbeddingFn::apply(table, idx); }

}  // namespace posgrad
