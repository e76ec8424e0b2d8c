// cost.cpp — see cost.h.
#include "compare/studies/cost/cost.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <optional>

#include "autograd/ops.h"
#include "train/interrupt.h"
#include "train/threads.h"
#include "train/trainer.h"

namespace posgrad::train {

namespace {

struct Bench {
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<AdamW> opt;
  Generator init{1}, dropout{2}, data{3};
  int64_t batch = 1;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CostResult measure_cost(const CompareConfig& cfg) {
  // --threads holds here too, whether or not this process trained a unit before (a re-run that keeps
  // every unit trains none): a fixed count for every round, or the OpenMP default.
  std::optional<ThreadGovernor> threads;
  if (cfg.base.threads > 0) threads.emplace(cfg.base.threads);
  CostResult r;
  r.rounds = cfg.cost_rounds;
  r.threads = omp_get_max_threads();
  r.lengths = cfg.cost_lengths;
  const Device dev = Device::parse(cfg.base.device);
  const int64_t tokens = cfg.base.batch_size * cfg.base.model.block_size;
  std::map<std::pair<std::string, int64_t>, Bench> benches;
  for (int64_t T : cfg.cost_lengths)
    for (const auto& m : cfg.methods) {
      Bench& b = benches[{m, T}];
      nn::GPTConfig mc = cfg.base.model;
      mc.pos.kind = m;
      mc.block_size = T;
      mc.vocab_size = 256;
      mc.dropout = 0;
      b.model = std::make_unique<nn::GPT>(mc, b.init, b.dropout);
      b.model->to(dev);
      b.opt = std::make_unique<AdamW>(decay_groups(b.model->named_parameters(), cfg.base.weight_decay),
                                      AdamWOptions(cfg.base.lr).betas(cfg.base.beta1, cfg.base.beta2));
      b.batch = std::max<int64_t>(1, tokens / T);
      r.rows.push_back({m, "attention", T, b.batch, {}, 0, b.model->num_parameters()});
      r.rows.push_back({m, "step", T, b.batch, {}, 0, b.model->num_parameters()});
    }
  auto row = [&](const std::string& m, const std::string& what, int64_t T) -> CostRow& {
    for (auto& x : r.rows)
      if (x.method == m && x.what == what && x.T == T) return x;
    throw std::logic_error("cost row missing");
  };
  const LRSchedule constant{cfg.base.lr, cfg.base.lr, 0, 1, false};
  for (int64_t round = 0; round <= cfg.cost_rounds; ++round) {
    for (int64_t T : cfg.cost_lengths)
      for (const auto& m : cfg.methods) {
        if (interrupt_requested())
          throw Interrupted(std::string("interrupted by ") + signal_name(interrupt_signal()) +
                                " during the cost benchmark (it is measured again on resume)",
                            cfg.out_dir, round, interrupt_signal());
        Bench& b = benches.at({m, T});
        nn::GPT& model = *b.model;
        const int64_t C = model.config().n_embd;
        // One attention layer, forward + backward, on the output of the embedding.
        Tensor x = randn({b.batch, T, C}, b.data, DType::Float32, Device::cpu()).to(dev);
        x.set_requires_grad(true);
        const auto& block = (*model.blocks)[0];
        auto t0 = std::chrono::steady_clock::now();
        Tensor y = block.attn->forward(x, model.position_encoding(), 0, 0);
        sum(y).backward();
        (void)sum(x.grad()).item();  // completes queued device work before the clock stops
        const double attn = seconds_since(t0);
        model.zero_grad();
        // One training step.
        auto& bk = backend(dev.type);
        const size_t before = bk.current_bytes();
        bk.reset_peak();
        std::vector<int64_t> ids(static_cast<size_t>(b.batch * (T + 1)));
        for (auto& id : ids) id = static_cast<int64_t>(b.data.next_u64() % 256);
        Tensor seq = Tensor::from_ints(ids, {b.batch, T + 1});
        t0 = std::chrono::steady_clock::now();
        training_step(model, *b.opt, constant, 0, 1, cfg.base.grad_clip, dev,
                      [&] { return std::make_pair(seq.narrow(1, 0, T).contiguous(), seq.narrow(1, 1, T).contiguous()); });
        const double step = seconds_since(t0);
        const size_t peak = bk.peak_bytes();
        if (round == 0) continue;  // warm-up
        row(m, "attention", T).seconds.push_back(attn);
        CostRow& s = row(m, "step", T);
        s.seconds.push_back(step);
        s.peak_bytes = std::max<int64_t>(s.peak_bytes, static_cast<int64_t>(peak > before ? peak - before : 0));
      }
    if (round > 0) spdlog::info("cost benchmark: round {}/{} done", round, cfg.cost_rounds);
  }
  return r;
}

}  // namespace posgrad::train
