// bench_dist.cpp — data-parallel training throughput: started alone or by `mpirun -np N`, it trains
// the GPT (nanoGPT's CPU baseline by default: 4 layers, 4 heads, 128 wide, context 64, global batch
// 12) with the one training step (train/trainer.h) split over the N processes (train/data_parallel.h),
// and rank 0 prints the global tokens/s, ms per step and the share of a step spent in the gradient
// all-reduce (the gather and the rank-ordered sum, waiting for the slower rank included; 0 for one
// process, which does not call it), then the median time of the all-reduce alone on a buffer of the
// model's size with every rank starting together.
// Each process runs cores / N OpenMP threads unless --threads says otherwise. Random tokens, the same
// global batch on every rank. bench/scaling.sh alternates N = 1 and N = 2 over a few rounds.
#include <CLI/CLI.hpp>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <new>

#include "dist/communicator.h"
#include "train/data_parallel.h"
#include "train/options.h"
#include "train/trainer.h"

using namespace posgrad;

int main(int argc, char** argv) {
  try {
    dist::init_world(&argc, &argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_dist: error: %s\n", e.what());
    return 2;
  }
  dist::Communicator& w = dist::world();
  CLI::App app{"posgrad data-parallel training throughput (run it with mpirun -np N)"};
  std::string pos = "rope";
  int64_t steps = 20, warmup = 3, batch = 12, threads = 0, layers = 4, width = 128, context = 64;
  app.add_option("--pos", pos, "Position encoding (one registered kind)")
      ->check(CLI::IsMember(nn::position_encoding_kinds()))
      ->capture_default_str();
  app.add_option("--steps", steps, "Timed steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--batch", batch, "Global batch (sequences per step, over all processes)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  app.add_option("--layers", layers, "Layers")->check(CLI::Range(int64_t{1}, int64_t{64}))->capture_default_str();
  app.add_option("--width", width, "Embedding width (4 heads)")
      ->check(CLI::Range(int64_t{4}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--context", context, "Context length")
      ->check(CLI::Range(int64_t{1}, int64_t{8192}))
      ->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads per process (0: cores / processes)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e) == 0 ? 0 : 2;
    dist::finalize_world();
    return status;
  }
  // The checks every rank makes alike before any MPI work, so that each exits on its own: a usage
  // error (exit 2), or a job that would not fit this machine's memory (exit 1).
  nn::GPTConfig mc;
  mc.vocab_size = 65;
  mc.n_layer = layers, mc.n_head = 4, mc.n_embd = width, mc.block_size = context;
  mc.pos.kind = pos;
  int status = 0;
  try {
    try {
      mc.validate();
    } catch (const ValueError& e) {  // the model's names for the sizes: say which options set them
      throw UsageError("--pos " + pos + " with --width " + std::to_string(width) + " (4 heads): " + e.what());
    }
    if (batch < w.size())
      throw UsageError("--batch " + std::to_string(batch) + " is smaller than the " + std::to_string(w.size()) +
                       " processes that share it (each needs at least one row): raise --batch or start fewer "
                       "processes");
    // train::estimate_memory, the estimate `posgrad train` checks, for one process's share of the batch,
    // times the processes on this node.
    train::TrainConfig tc;
    tc.model = mc;
    tc.batch_size = (batch + w.size() - 1) / w.size();
    const long double need = train::estimate_memory(tc, context).total() * w.local_size();
    const uint64_t have = train::physical_memory_bytes();
    if (have > 0 && need > static_cast<long double>(have))
      throw OutOfMemoryError("out of memory: --layers " + std::to_string(layers) + " x --width " +
                             std::to_string(width) + " with --batch " + std::to_string(batch) + " x --context " +
                             std::to_string(context) + " over " + std::to_string(w.local_size()) +
                             " process(es) on this machine needs an estimated " + train::format_bytes(need) +
                             " but the machine has " + train::format_bytes(have) + "; reduce the largest of these");
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_dist: error: %s\n", e.what());
    status = dynamic_cast<const ValueError*>(&e) != nullptr ? 2 : 1;  // options (usage), or memory
  }
  if (status != 0) {
    dist::finalize_world();
    return status;
  }
  try {
    if (threads > 0) omp_set_num_threads(static_cast<int>(threads));
    Generator init(1), drop(2), data(3);
    nn::GPT model(mc, init, drop);
    train::AdamW opt(train::decay_groups(model.named_parameters(), 0.1), train::AdamWOptions(1e-4));
    const train::LRSchedule sched{1e-4, 1e-5, 0, warmup + steps, false};
    std::unique_ptr<train::DataParallel> dp;
    if (w.size() > 1) dp = std::make_unique<train::DataParallel>(w, batch);
    auto next = [&] {
      std::vector<int64_t> xs(static_cast<size_t>(batch * context)), ys(xs.size());
      for (auto& v : xs) v = static_cast<int64_t>(data.next_u64() % 65);
      for (auto& v : ys) v = static_cast<int64_t>(data.next_u64() % 65);
      return std::make_pair(Tensor::from_ints(xs, {batch, context}), Tensor::from_ints(ys, {batch, context}));
    };
    std::vector<double> ms;
    double reduce_s = 0, total_s = 0;
    for (int64_t s = 0; s < warmup + steps; ++s) {
      if (dp) dp->reset_reduce_seconds();
      const auto st = train::training_step(model, opt, sched, s, 1, 1.0, Device::cpu(), next, dp.get());
      if (s < warmup) continue;
      ms.push_back(1e3 * st.seconds);
      total_s += st.seconds;
      if (dp) reduce_s += dp->reduce_seconds();
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    // The all-reduce alone on a buffer of the model's size, every rank starting together (after a
    // barrier): its cost without the wait for a slower rank that the share above includes.
    double alone_ms = 0;
    {
      Tensor flat = Tensor::zeros({model.num_parameters()});
      std::vector<double> t;
      for (int r = 0; r < 5; ++r) {
        w.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        w.all_reduce_sum(flat);
        t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(t.begin(), t.end());
      alone_ms = t[t.size() / 2];
    }
    // Rank 0 reports; the steps are synchronous, so its times are the job's.
    if (w.is_root())
      std::printf(
          "processes=%d threads/process=%d layers=%ld width=%ld context=%ld global_batch=%ld params=%ld "
          "tokens/s=%.0f ms/step=%.2f allreduce_share=%.1f%% allreduce_alone_ms=%.2f\n",
          w.size(), omp_get_max_threads(), long(layers), long(width), long(context), long(batch),
          long(model.num_parameters()), 1000.0 * static_cast<double>(batch * context) / med, med,
          100.0 * reduce_s / total_s, alone_ms);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_dist: error: %s\n", e.what());
    status = 1;
    dist::abort_world(status);
  } catch (const std::bad_alloc&) {  // a host allocation outside the tensor allocator (the token batches)
    std::fprintf(stderr, "bench_dist: error: out of memory (--batch %ld x --context %ld tokens per step)\n",
                 long(batch), long(context));
    status = 1;
    dist::abort_world(status);
  }
  dist::finalize_world();
  return status;
}
