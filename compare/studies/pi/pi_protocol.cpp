// pi_protocol.cpp — see pi_protocol.h.
#include "compare/studies/pi/pi_protocol.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "compare/method.h"
#include "compare/rows.h"
#include "compare/studies/lm/lm.h"
#include "train/evaluate.h"
#include "train/finetune.h"
#include "train/optim.h"
#include "train/options.h"
#include "train/trainer.h"

namespace posgrad::train {

std::string pi_row_name(const std::string& method, const std::string& scaling, int64_t multiplier) {
  return Row{method, scaling == "none" ? "" : "+" + scaling, multiplier, false}.name();
}

namespace {

// Micro-batch of the fine-tuning at M·L: as many tokens per step as a training step (at least one window).
int64_t pi_batch(const CompareConfig& cfg, int64_t M) { return std::max<int64_t>(1, cfg.base.batch_size / M); }

// The trained model with `scaling` at factor M, on dev, in training mode. The generators of the
// initialisation (overwritten by the trained weights) and of dropout live beside the model.
struct Tuned {
  std::unique_ptr<Generator> init, dropout;
  std::unique_ptr<nn::GPT> model;
};

Tuned scaled_copy(const nn::GPT& trained, const std::string& scaling, int64_t M, uint64_t seed, Device dev) {
  nn::GPTConfig c = trained.config();  // block_size stays L: YaRN's L0 and the evaluation lengths
  if (scaling == "drope") {
    c.pos.kind = "none";  // DroPE: the rotary embedding dropped; RoPE has no parameters, so the weights carry over
  } else {
    c.pos.set("rope_scaling", scaling);
    c.pos.set("rope_scaling_factor", scaling == "none" ? 1.0 : static_cast<double>(M));
  }
  Tuned t;
  t.init = std::make_unique<Generator>(0);
  t.dropout = std::make_unique<Generator>(seed ^ 0x9170dull ^ (static_cast<uint64_t>(M) << 32));
  t.model = std::make_unique<nn::GPT>(c, *t.init, *t.dropout);
  t.model->to(dev);
  t.model->load_state_dict(trained.state_dict());
  t.model->train();
  return t;
}

// The seed of the fine-tuning's batch sampler at multiplier M. Derived by its own arithmetic, not
// stream() (train/seeds.h), because every number of the protocol depends on it; kept as it is until
// the comparison's seeds change all at once.
uint64_t pi_sampler_seed(uint64_t seed, int64_t M) {
  return seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(M) * 1000003u + 17u;
}

}  // namespace

std::string pi_refusal(const CompareConfig& cfg, const std::string& method) {
  if (!takes_rope_scaling(method)) return "its encoding takes no RoPE scaling";
  const nn::PosEncConfig own = method_pos_config(cfg, method);
  if (own.options.text("rope_scaling") != "none")
    return "it is scaled already (rope_scaling " + own.options.text("rope_scaling") +
           "); the protocol scales an unscaled model";
  for (int64_t M : cfg.of<PiSettings>().multipliers)
    for (const auto& scaling : cfg.of<PiSettings>().scalings) {
      nn::PosEncConfig pc = own;
      pc.set("rope_scaling", scaling);
      pc.set("rope_scaling_factor", scaling == "none" ? 1.0 : static_cast<double>(M));
      try {
        pc.validate();
      } catch (const ValueError& e) {
        return "--pi-scalings " + scaling + " at --pi-multipliers " + std::to_string(M) + ": " + e.what();
      }
    }
  return "";
}

std::vector<std::string> pi_methods(const CompareConfig& cfg) {
  std::vector<std::string> out;
  for (const auto& m : rope_scaling_methods(cfg))
    if (pi_refusal(cfg, m).empty()) out.push_back(m);
  return out;
}

void validate_pi(const CompareConfig& cfg) {
  auto unique = [](auto v) {
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) == v.end();
  };
  POSGRAD_CHECK(unique(cfg.of<PiSettings>().multipliers), UsageError,
                "--pi-multipliers lists a multiplier twice (each length is fine-tuned once)");
  POSGRAD_CHECK(unique(cfg.of<PiSettings>().scalings), UsageError,
                "--pi-scalings lists a scaling twice (each is fine-tuned once)");
  if (cfg.of<PiSettings>().iters == 0) return;
  // A plain method the protocol cannot scale as configured is refused (the options are wrong for it); a
  // method variant with settings that exclude a scaling (p-RoPE defines only linear) is left out of
  // the protocol, and the report says why.
  for (const auto& m : rope_scaling_methods(cfg))
    if (!is_variant(m))
      if (const std::string why = pi_refusal(cfg, m); !why.empty())
        throw UsageError(why + " (the " + m + " models; --pi-iters 0 turns the protocol off)");
  const std::vector<std::string> methods = pi_methods(cfg);
  if (methods.empty()) return;
  // A fine-tuned row is judged at its own length, which the evaluation must include: refused here,
  // not after the fine-tuning as an "inconclusive" verdict.
  std::string eval_list;
  for (int64_t m : cfg.eval_multipliers) eval_list += (eval_list.empty() ? "" : ",") + std::to_string(m);
  for (int64_t M : cfg.of<PiSettings>().multipliers)
    POSGRAD_CHECK(std::find(cfg.eval_multipliers.begin(), cfg.eval_multipliers.end(), M) != cfg.eval_multipliers.end(),
                  UsageError, "--pi-multipliers ", M, " is not among --eval-multipliers (", eval_list,
                  "): each fine-tuned length is judged at that length; "
                  "add it to --eval-multipliers or drop it from --pi-multipliers");
  const int64_t L = cfg.base.model.block_size;
  const int64_t longest = *std::max_element(cfg.eval_multipliers.begin(), cfg.eval_multipliers.end()) * L;
  for (const auto& method : methods)
    for (int64_t M : cfg.of<PiSettings>().multipliers) {
      TrainConfig b = cfg.base;
      b.model = method_model(cfg.base.model, method);
      b.model.block_size = M * L;
      b.batch_size = pi_batch(cfg, M);
      check_memory(b, longest);
    }
}

void check_pi_data(const CompareConfig& cfg, int64_t L, const data::TokenSpan& train_split) {
  if (cfg.of<PiSettings>().iters == 0) return;
  for (int64_t M : cfg.of<PiSettings>().multipliers)
    POSGRAD_CHECK(train_split.size() >= M * L + 1, ValueError, "position interpolation at ", M,
                  "x needs a training split of at least ", M * L + 1, " tokens (windows of ", M, " x ", L,
                  "), it holds ", train_split.size(), " (--pi-multipliers x --block-size; use a longer --corpus)");
}

std::vector<PiResult> run_pi_protocol(const nn::GPT& trained, const std::string& method,
                                      const data::TokenSpan& train_split, const data::TokenSpan& val,
                                      const CompareConfig& cfg, uint64_t seed, Device dev, const PiCallback& on_row) {
  if (method_kind(method) != trained.config().pos.kind)
    throw std::logic_error("run_pi_protocol: '" + method + "' is not the method of a " + trained.config().pos.kind +
                           " model");
  POSGRAD_CHECK(takes_rope_scaling(method), UsageError,
                "the position-interpolation protocol fine-tunes models whose encoding takes a RoPE scaling (",
                "rope_scaling), got '", method, "'");
  std::vector<PiResult> out;
  if (cfg.of<PiSettings>().iters == 0) return out;
  const int64_t L = trained.config().block_size;
  const TrainConfig& base = cfg.base;
  check_pi_data(cfg, L, train_split);
  // The scaled rows at each M, then DroPE's at 1x.
  std::vector<std::pair<int64_t, std::string>> jobs;
  for (int64_t M : cfg.of<PiSettings>().multipliers)
    for (const auto& scaling : cfg.of<PiSettings>().scalings) jobs.emplace_back(M, scaling);
  if (cfg.of<PiSettings>().drope) jobs.emplace_back(1, "drope");
  for (const auto& [M, scaling] : jobs) {
    const int64_t ctx = M * L;
    {
      const std::string row = pi_row_name(method, scaling, M);
      const auto t0 = std::chrono::steady_clock::now();
      Tuned t = scaled_copy(trained, scaling, M, seed, dev);
      nn::GPT& model = *t.model;
      PiResult r;
      r.scaling = scaling;
      r.multiplier = M;
      r.iters = cfg.of<PiSettings>().iters;
      r.batch = pi_batch(cfg, M);
      // One sampler per (seed, M): every scaling at this length is fine-tuned on the same batches.
      data::BatchSampler sampler(train_split, pi_sampler_seed(seed, M));
      spdlog::info("[{} seed {}] position interpolation: {} ({} steps of {} x {} tokens)", method, seed, row,
                   cfg.of<PiSettings>().iters, r.batch, ctx);
      // Chen et al. 2023 §3.1: a linear warm-up, then a constant rate; the pretraining's optimizer settings.
      FinetuneSpec spec;
      spec.label = "position interpolation (" + row + ", " + method + " seed " + std::to_string(seed) + ")";
      spec.iterations = cfg.of<PiSettings>().iters;
      spec.lr = cfg.of<PiSettings>().lr;
      spec.warmup = tenth_warmup(cfg.of<PiSettings>().iters);
      spec.schedule = FinetuneSchedule::constant;
      spec.beta1 = base.beta1;
      spec.beta2 = base.beta2;
      spec.weight_decay = base.weight_decay;
      spec.grad_clip = base.grad_clip;
      spec.grad_accum = base.grad_accum;
      spec.run_dir = cfg.out_dir;
      spec.on_interrupt =
          "on resume the unit keeps its trained model and the studies it finished before this one (<unit>/studies/), "
          "and runs this study and the ones after it again";
      const FinetuneResult f = finetune(model, spec, dev, [&](int64_t) { return sampler.next(r.batch, ctx); });
      r.first_loss = f.first_loss;
      r.final_loss = f.final_loss;
      r.lengths = evaluate_lengths(model, val, cfg, dev, nullptr);
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (on_row) on_row(row, model);
      out.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace posgrad::train
