// data_parallel.h — synchronous data-parallel training over a communicator (dist/communicator.h):
// N processes hold the same model and optimizer state; every global batch of B rows (drawn by every
// rank from the same-seeded sampler, so it is exactly the single-process batch) is cut into N
// contiguous slices, rank r taking rows [r·B/N, (r+1)·B/N); each rank's loss is weighted by its
// share of the rows, rows_r / B, so that the sum over ranks of the weighted slice means is the mean
// cross-entropy over the global batch; the gradients (and the weighted losses) are summed over the
// ranks before clipping, so every rank clips and steps on the same gradient (PyTorch's
// DistributedDataParallel does the same with an average of equal shares, Li et al. 2020, §3).
// The sums are the communicator's rank-ordered all_reduce_sum: two runs with the same N are
// bit-identical; runs with different N agree within float rounding (the global batch's mean is
// associated differently).
//
// Not here: overlap of the all-reduce with the backward pass (the gradients are summed once, after
// the last micro-batch), sharded optimizer state, dropout masks equal to the single-process ones
// (each rank draws its slice's masks from its own copy of the dropout generator, which starts in the
// same state on every rank; with dropout > 0 an N-rank run is a different run of the same model, and
// the checkpoint keeps rank 0's generator, so a resumed run with slices of unequal size need not
// repeat the uninterrupted one bit for bit).
#pragma once

#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "tensor/tensor.h"

namespace posgrad::train {

class DataParallel {
 public:
  // UsageError when global_batch < comm.size() (a rank would have no rows).
  DataParallel(dist::Communicator& comm, int64_t global_batch);

  dist::Communicator& comm() const { return comm_; }
  int64_t first_row() const { return first_; }
  int64_t rows() const { return rows_; }
  // rows() / global batch: this rank's weight on its slice's mean loss.
  double loss_weight() const { return static_cast<double>(rows_) / static_cast<double>(global_); }
  // This rank's rows of a global batch: x, y (B, T) -> (rows(), T). ValueError when B is not the
  // global batch this object was made for.
  std::pair<Tensor, Tensor> slice(const std::pair<Tensor, Tensor>& batch) const;
  // Tokens of the global batch, from the tokens of this rank's slices.
  int64_t global_tokens(int64_t local_tokens) const { return local_tokens / rows_ * global_; }

  // After backward: every parameter's gradient becomes the sum over ranks (packed per dtype into one
  // flat buffer, summed by one all_reduce_sum, and the gradients left as views into it), and
  // weighted_loss becomes its sum over ranks, which is returned. This rank's interrupt request
  // (SIGINT / SIGTERM) travels with the loss: interrupt_seen() is then the same on every rank, so
  // that all stop after the same step. Parameters without a gradient are skipped (the same ones on
  // every rank: the same model and graph).
  double reduce(const std::vector<Tensor>& params, double weighted_loss);
  bool interrupt_seen() const { return interrupt_seen_; }

  // Seconds spent in reduce() since the last reset (the all-reduce's share of a step, bench_train).
  double reduce_seconds() const { return reduce_seconds_; }
  void reset_reduce_seconds() { reduce_seconds_ = 0; }

 private:
  dist::Communicator& comm_;
  int64_t global_ = 0, first_ = 0, rows_ = 0;
  bool interrupt_seen_ = false;
  double reduce_seconds_ = 0;
};

}  // namespace posgrad::train
