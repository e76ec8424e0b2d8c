// data_parallel.cpp — see data_parallel.h.
#include "train/data_parallel.h"

#include <chrono>
#include <cstring>

#include "tensor/storage.h"
#include "train/interrupt.h"

namespace posgrad::train {

DataParallel::DataParallel(dist::Communicator& comm, int64_t global_batch) : comm_(comm), global_(global_batch) {
  const int64_t n = comm.size(), r = comm.rank();
  POSGRAD_CHECK(global_batch >= n, UsageError, "--batch-size ", global_batch, " is smaller than the ", n,
                " processes that share it (each needs at least one row): raise --batch-size or start fewer processes");
  first_ = r * global_batch / n;
  rows_ = (r + 1) * global_batch / n - first_;
}

std::pair<Tensor, Tensor> DataParallel::slice(const std::pair<Tensor, Tensor>& batch) const {
  const auto& [x, y] = batch;
  POSGRAD_CHECK(x.dim() == 2 && x.size(0) == global_ && y.shape() == x.shape(), ValueError,
                "data-parallel slice: expected x and y of ", global_, " rows, got ", x.str(), " and ", y.str());
  if (rows_ == global_) return batch;
  return {x.narrow(0, first_, rows_).contiguous(), y.narrow(0, first_, rows_).contiguous()};
}

namespace {

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t n) {
  if (dst_dev.is_cpu() && src_dev.is_cpu())
    std::memcpy(dst, src, n);
  else
    backend(DeviceType::CUDA).copy(dst, dst_dev, src, src_dev, n);
}

}  // namespace

double DataParallel::reduce(const std::vector<Tensor>& params, double weighted_loss) {
  const auto t0 = std::chrono::steady_clock::now();
  // One flat buffer per dtype (all parameters of a model share its device).
  for (DType dt : {DType::Float32, DType::Float64}) {
    std::vector<Tensor> grads;
    int64_t total = 0;
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (!g.defined() || g.dtype() != dt) continue;
      grads.push_back(g.contiguous());
      total += g.numel();
    }
    if (grads.empty()) continue;
    const Device dev = grads.front().device();
    Tensor flat = Tensor::empty({total}, dt, dev);  // (total,)
    const size_t es = dtype_size(dt);
    int64_t off = 0;
    for (const Tensor& g : grads) {
      POSGRAD_CHECK(g.device() == dev, DeviceError, "data-parallel gradients on two devices (", dev.str(), ", ",
                    g.device().str(), ")");
      copy_bytes(static_cast<char*>(flat.raw_data()) + off * es, dev, g.raw_data(), dev, g.numel() * es);
      off += g.numel();
    }
    comm_.all_reduce_sum(flat);
    off = 0;
    for (Tensor p : params) {
      Tensor g = p.grad();
      if (!g.defined() || g.dtype() != dt) continue;
      p.set_grad(flat.narrow(0, off, g.numel()).view(g.shape()));
      off += g.numel();
    }
  }
  // (weighted loss, interrupt requested) summed over the ranks.
  Tensor scalars = Tensor::from_vector({weighted_loss, interrupt_requested() ? 1.0 : 0.0}, {2}, DType::Float64);
  comm_.all_reduce_sum(scalars);
  const std::vector<double> s = scalars.to_vector();
  interrupt_seen_ = s[1] > 0;
  reduce_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s[0];
}

}  // namespace posgrad::train
