// length_suite.cpp — see length_suite.h.
#include "compare/studies/suite/length_suite.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "autograd/node.h"
#include "compare/method.h"
#include "compare/rows.h"
#include "data/length_tasks.h"
#include "train/finetune.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace posgrad::train {

std::string suite_row(const std::string& method, bool randomized) { return Row{method, "", 0, randomized}.name(); }

namespace {

// A small encoding of `method`, to ask what it supports.
std::shared_ptr<nn::PositionEncoding> probe_encoding(const std::string& method) {
  nn::GPTConfig g0;
  apply_method(g0, method);
  nn::PosEncConfig c = g0.pos;
  c.n_embd = 8;
  c.n_head = 2;
  c.n_layer = 1;
  c.block_size = 8;
  Generator g(0);
  return nn::make_position_encoding(c, g);
}

}  // namespace

bool suite_supports_randomized(const std::string& method) { return probe_encoding(method)->supports_position_ids(); }

// A partial Fisher–Yates shuffle of 0..L-1 drawn from `g`, its first T entries, sorted.
std::vector<int64_t> random_positions(int64_t T, int64_t L, Generator& g) {
  POSGRAD_CHECK(T <= L, ValueError, "randomized positions: ", T, " tokens need at least as many positions, got ", L);
  std::vector<int64_t> p(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) p[i] = i;
  for (int64_t i = 0; i < T; ++i) {
    const int64_t j = i + static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(L - i));
    std::swap(p[i], p[j]);
  }
  p.resize(static_cast<size_t>(T));
  std::sort(p.begin(), p.end());
  return p;
}

double finetune_length_model(nn::GPT& model, const FinetuneSpec& spec, Device dev, bool randomized, int64_t block_size,
                             Generator& pos_gen, const std::function<data::LengthBatch()>& next) {
  nn::PositionEncoding& pe = model.position_encoding();
  struct ClearPositions {
    nn::PositionEncoding& pe;
    ~ClearPositions() { pe.clear_position_ids(); }
  } clear{pe};
  return finetune(model, spec, dev,
                  [&](int64_t) {
                    data::LengthBatch b = next();
                    if (randomized) pe.set_position_ids(random_positions(b.x.size(1), block_size, pos_gen));
                    return std::make_pair(b.x, b.y);
                  })
      .final_loss;
}

nlohmann::json suite_to_json(const std::vector<SuiteTaskResult>& s) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& r : s) {
    nlohmann::json b = nlohmann::json::array();
    for (const auto& k : r.buckets)
      b.push_back({{"lo", k.lo},
                   {"hi", k.hi},
                   {"examples", k.examples},
                   {"sequence_accuracy", k.sequence_accuracy},
                   {"token_accuracy", k.token_accuracy}});
    a.push_back({{"task", r.task},
                 {"randomized", r.randomized},
                 {"final_loss", r.final_loss},
                 {"seconds", r.seconds},
                 {"buckets", b}});
  }
  return a;
}

std::vector<SuiteTaskResult> suite_from_json(const nlohmann::json& j) {
  std::vector<SuiteTaskResult> out;
  for (const auto& e : j) {
    SuiteTaskResult r;
    r.task = e.at("task").get<std::string>();
    r.randomized = e.at("randomized").get<bool>();
    r.final_loss = e.at("final_loss").get<double>();
    r.seconds = e.at("seconds").get<double>();
    for (const auto& k : e.at("buckets")) {
      SuiteBucket b;
      b.lo = k.at("lo").get<int64_t>();
      b.hi = k.at("hi").get<int64_t>();
      b.examples = k.at("examples").get<int64_t>();
      b.sequence_accuracy = k.at("sequence_accuracy").get<double>();
      b.token_accuracy = k.at("token_accuracy").get<double>();
      r.buckets.push_back(b);
    }
    out.push_back(r);
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> suite_buckets(const CompareConfig& cfg) {
  std::vector<std::pair<int64_t, int64_t>> b;
  for (int64_t k = 1; k <= cfg.of<SuiteSettings>().max_multiplier; ++k)
    b.emplace_back((k - 1) * cfg.of<SuiteSettings>().length + 1, k * cfg.of<SuiteSettings>().length);
  return b;
}

void validate_randomized_methods(const std::string& flag, const std::vector<std::string>& listed,
                                 const CompareConfig& cfg) {
  // A listed method that is not among --methods is simply not run (the default lists three, and
  // --methods may name others); a listed encoding that cannot take position ids is an error.
  for (const auto& m : listed) {
    const auto pe = probe_encoding(m);
    POSGRAD_CHECK(pe->supports_position_ids(), UsageError, flag, ": '", m,
                  "' cannot be trained with randomized positions: it has no position information to randomize "
                  "(supported: every encoding with positions, e.g. sinusoidal, learned, rope, t5, alibi, kerple, "
                  "deberta)");
    const bool among = std::find(cfg.methods.begin(), cfg.methods.end(), m) != cfg.methods.end();
    POSGRAD_CHECK(!(among && pe->position_ids_in_attention() && cfg.base.device.rfind("cuda", 0) == 0), UsageError,
                  flag, ": '", m, "' with --device ", cfg.base.device,
                  ": its randomized positions enter the fused attention as per-token positions, which only the CPU "
                  "kernels implement; run it on the CPU or leave '",
                  m, "' out of ", flag);
  }
}

void validate_length_suite(const CompareConfig& cfg) {
  validate_randomized_methods("--suite-randomized", cfg.of<SuiteSettings>().randomized, cfg);
  for (const auto& t : cfg.of<SuiteSettings>().tasks) (void)data::make_length_task(t);
}

namespace {

// The model of one task: block_size = the longest test sequence.
nn::GPTConfig suite_model_config(const CompareConfig& cfg, const std::string& method, const data::LengthTask& task) {
  nn::GPTConfig mc;
  mc.vocab_size = task.vocab_size();
  mc.block_size = task.max_sequence_length(cfg.of<SuiteSettings>().max_multiplier * cfg.of<SuiteSettings>().length) -
                  1;  // inputs: all but the last
  mc.n_layer = cfg.of<TaskSettings>().n_layer;
  mc.n_head = cfg.of<TaskSettings>().n_head;
  mc.n_embd = cfg.of<TaskSettings>().n_embd;
  mc.pos = cfg.base.model.pos;
  mc.attention_sinks = cfg.base.model.attention_sinks;
  apply_method(mc, method);
  return mc;
}

// The generators of one (unit seed, task): initialisation, dropout, training examples and randomized
// positions. Derived by their own arithmetic, not stream() (train/seeds.h), because every number of
// the suite depends on them; kept as they are until the comparison's seeds change all at once.
struct SuiteSeeds {
  uint64_t init, dropout, data, positions;
};
SuiteSeeds suite_seeds(uint64_t seed, size_t task_index) {
  const uint64_t s = seed * 1000003ULL + task_index * 7919ULL;
  return {s, s ^ 0x5eedd0u, s + 1, s + 2};
}

SuiteTaskResult run_task(const CompareConfig& cfg, const std::string& method, uint64_t seed, Device dev,
                         const data::LengthTask& task, size_t task_index, bool randomized) {
  const auto t0 = std::chrono::steady_clock::now();
  SuiteTaskResult r;
  r.task = task.name();
  r.randomized = randomized;
  const nn::GPTConfig mc = suite_model_config(cfg, method, task);
  const SuiteSeeds seeds = suite_seeds(seed, task_index);
  Generator init(seeds.init), drop(seeds.dropout);
  nn::GPT model(mc, init, drop);
  model.to(dev);
  // Data and positions come from generators of their own, so the randomized row sees the same
  // examples as the plain one.
  Generator data_gen(seeds.data), pos_gen(seeds.positions);
  const FinetuneSpec spec = study_finetune_spec(
      "length suite (" + task.name() + ", " + suite_row(method, randomized) + " seed " + std::to_string(seed) + ")",
      cfg.of<SuiteSettings>().iters, cfg.of<SuiteSettings>().lr, cfg.out_dir);
  r.final_loss = finetune_length_model(model, spec, dev, randomized, mc.block_size, pos_gen, [&] {
    const int64_t n =
        1 + static_cast<int64_t>(data_gen.next_u64() % static_cast<uint64_t>(cfg.of<SuiteSettings>().length));
    return data::make_length_batch(task, std::vector<int64_t>(static_cast<size_t>(cfg.of<SuiteSettings>().batch), n),
                                   data_gen);
  });  // evaluation below: positions 0 .. T-1 (finetune left the model in eval mode)
  NoGradGuard ng;
  const auto buckets = suite_buckets(cfg);
  for (size_t k = 0; k < buckets.size(); ++k) {
    const auto [lo, hi] = buckets[k];
    // The test examples: the same for every method and seed (a generator of the task and bucket).
    Generator test_gen(0x7e57ULL + task_index * 1009ULL + k);
    std::map<int64_t, int64_t> per_length;  // input length -> examples
    for (int64_t i = 0; i < cfg.of<SuiteSettings>().examples; ++i) ++per_length[lo + i % (hi - lo + 1)];
    SuiteBucket b;
    b.lo = lo;
    b.hi = hi;
    for (const auto& [n, count] : per_length) {
      data::LengthBatch batch =
          data::make_length_batch(task, std::vector<int64_t>(static_cast<size_t>(count), n), test_gen);
      const Tensor logits = model.forward(batch.x.to(dev));  // (B, T, V)
      const data::LengthScore sc = data::score_length_logits(logits.to(Device::cpu()), batch.y);
      spdlog::debug("suite {} {} length {}: sequence accuracy {:.3f}, token accuracy {:.3f} ({} examples)", task.name(),
                    suite_row(method, randomized), n, sc.sequence_accuracy, sc.token_accuracy, count);
      b.sequence_accuracy += sc.sequence_accuracy * static_cast<double>(count);
      b.token_accuracy += sc.token_accuracy * static_cast<double>(count);
      b.examples += count;
    }
    b.sequence_accuracy /= static_cast<double>(b.examples);
    b.token_accuracy /= static_cast<double>(b.examples);
    r.buckets.push_back(b);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace

std::vector<SuiteTaskResult> run_length_suite(const CompareConfig& cfg, const std::string& method, uint64_t seed,
                                              Device dev) {
  std::vector<SuiteTaskResult> out;
  const bool with_randomized =
      std::find(cfg.of<SuiteSettings>().randomized.begin(), cfg.of<SuiteSettings>().randomized.end(), method) !=
      cfg.of<SuiteSettings>().randomized.end();
  if (cfg.of<SuiteSettings>().iters == 0) return out;
  for (size_t i = 0; i < cfg.of<SuiteSettings>().tasks.size(); ++i) {
    const auto task = data::make_length_task(cfg.of<SuiteSettings>().tasks[i]);
    // The task's index in the whole suite seeds it, so a task's numbers do not depend on which others run.
    const auto& all = data::length_task_names();
    const size_t index = static_cast<size_t>(std::find(all.begin(), all.end(), task->name()) - all.begin());
    for (bool randomized : {false, true}) {
      if (randomized && !with_randomized) continue;
      out.push_back(run_task(cfg, method, seed, dev, *task, index, randomized));
      const SuiteTaskResult& r = out.back();
      std::string acc;
      for (const auto& b : r.buckets) acc += fmt::format(" {:.2f}", b.sequence_accuracy);
      spdlog::info("[{} seed {}] suite {}: loss {:.3f}, sequence accuracy by bucket{} ({:.1f} s)",
                   suite_row(method, randomized), seed, r.task, r.final_loss, acc, r.seconds);
    }
  }
  return out;
}

}  // namespace posgrad::train
