// compare.cpp — see compare.h. The report and the plots are written by report.cpp.
#include "train/compare.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/ops.h"
#include "data/synthetic.h"
#include "data/fileio.h"
#include "train/interrupt.h"
#include "train/options.h"
#include "train/presets.h"
#include "train/report.h"

namespace posgrad::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- presets ---------------------------------------------------------------------------------------

const std::vector<std::string>& compare_preset_names() {
  static const std::vector<std::string> n = {"quick", "full", "tiny"};
  return n;
}

CompareConfig compare_preset(const std::string& name) {
  CompareConfig c;
  c.base = train_preset("default");
  c.base.corpus = "kjv";
  c.base.log_interval = 25;
  if (name == "quick") {
    // nanoGPT's small CPU model, shorter: all seven methods finish in about 6 minutes on a quiet
    // 2-core machine (the budget is 15).
    set_model(c.base, 4, 4, 128, 64);
    set_run(c.base, 12, 1500, 100, 500);
    c.base.eval_windows = 32;
    c.base.log_interval = 50;
    c.eval_tokens = 8192;
    c.task_iters = 400;
    c.out_dir = "runs/compare-quick";
  } else if (name == "full") {
    // A few hours on a 2-core machine: nanoGPT-sized models at context 128, three seeds.
    set_model(c.base, 4, 4, 128, 128);
    set_run(c.base, 16, 6000, 100, 500);
    c.base.eval_windows = 64;
    c.seeds = {1, 2, 3};
    c.eval_tokens = 32768;
    c.task_iters = 1500;
    c.task_length = 12;
    c.task_n_layer = 3;
    c.task_examples = 128;
    c.out_dir = "runs/compare-full";
  } else if (name == "tiny") {
    // For tests: seconds, not minutes.
    set_model(c.base, 1, 2, 16, 16);
    set_run(c.base, 4, 6, 1, 6);
    c.base.eval_windows = 2;
    c.base.log_interval = 3;
    c.eval_multipliers = {1, 2, 4};
    c.eval_tokens = 128;
    c.per_position_multiplier = 2;
    c.task_iters = 4;
    c.task_length = 3;
    c.task_examples = 4;
    c.task_batch = 4;
    c.task_n_layer = 1;
    c.task_n_embd = 16;
    c.task_n_head = 2;
    c.task_multipliers = {1, 2};
    c.out_dir = "runs/compare-tiny";
  } else {
    unknown_name("compare preset", name, compare_preset_names());
  }
  return c;
}

void CompareConfig::validate() const {
  opt::check_all(compare_options(), *this);
  POSGRAD_CHECK(task_n_embd % task_n_head == 0, UsageError, "--task-n-embd (", task_n_embd,
                ") must be divisible by --task-n-head (", task_n_head, ")");
  const int64_t longest = *std::max_element(eval_multipliers.begin(), eval_multipliers.end()) * base.model.block_size;
  for (const auto& m : methods) {
    TrainConfig b = base;
    b.model.pos.kind = m;
    b.validate();
    check_memory(b, std::max(longest, per_position_multiplier * base.model.block_size));
  }
  // The synthetic task's model, trained on task_batch sequences of 2·task_length + 1 tokens and
  // scored at the longest task multiplier.
  TrainConfig task_model;
  task_model.model.n_layer = task_n_layer;
  task_model.model.n_head = task_n_head;
  task_model.model.n_embd = task_n_embd;
  task_model.model.block_size = 2 * task_length + 1;
  task_model.model.vocab_size = task_symbols + 2;
  task_model.batch_size = std::max(task_batch, task_examples);
  const int64_t longest_task = *std::max_element(task_multipliers.begin(), task_multipliers.end());
  check_memory(task_model, (2 * task_length + 1) * (longest_task + 1));
}

json CompareConfig::to_json() const { return opt::to_json(compare_options(), *this); }

// ---- one (method, seed) unit -----------------------------------------------------------------------

namespace {

json eval_json(const EvalResult& e) {
  return {{"context", e.context}, {"windows", e.windows}, {"loss", e.loss}, {"perplexity", e.perplexity},
          {"accuracy", e.accuracy}};
}

// Perplexity etc. at each multiple of the training length, on the same validation text.
json extrapolation(nn::GPT& model, const data::TokenSpan& val, const CompareConfig& cfg, Device dev) {
  json out = json::object();
  const int64_t block = model.config().block_size;
  const int64_t limit = model.position_encoding().max_length();
  for (int64_t m : cfg.eval_multipliers) {
    const int64_t ctx = m * block;
    if ((limit >= 0 && ctx > limit) || ctx + 1 > val.size()) {
      out[std::to_string(m)] = nullptr;  // n/a: beyond a learned table (or the split)
      continue;
    }
    out[std::to_string(m)] = eval_json(evaluate_tokens(model, val, ctx, std::max<int64_t>(1, cfg.eval_tokens / ctx), 0, dev));
  }
  return out;
}

// A copy of `model` whose RoPE uses an eval-time scaling (RoPE has no parameters to change).
std::unique_ptr<nn::GPT> rope_variant(const nn::GPT& model, const std::string& scaling, double factor) {
  nn::GPTConfig c = model.config();
  c.pos.set("rope_scaling", scaling);
  c.pos.set("rope_scaling_factor", factor);
  Generator g(0), d(0);
  auto m = std::make_unique<nn::GPT>(c, g, d);
  m->load_state_dict(model.state_dict());
  m->eval();
  return m;
}

json rope_scaled_rows(nn::GPT& model, const data::TokenSpan& val, const CompareConfig& cfg, Device dev) {
  json rows = json::object();
  const int64_t block = model.config().block_size;
  for (const std::string scaling : {"linear", "dynamic", "yarn"}) {
    json row = json::object();
    for (int64_t m : cfg.eval_multipliers) {
      const int64_t ctx = m * block;
      if (ctx + 1 > val.size()) {
        row[std::to_string(m)] = nullptr;
        continue;
      }
      // Linear and YaRN stretch by s = L / L_train; dynamic NTK grows its base with the current
      // length itself (s = 1 in its formula), so it is exactly the plain model up to L_train.
      const double factor = scaling == "dynamic" ? 1.0 : static_cast<double>(m);
      auto v = rope_variant(model, scaling, factor);
      row[std::to_string(m)] = eval_json(evaluate_tokens(*v, val, ctx, std::max<int64_t>(1, cfg.eval_tokens / ctx), 0, dev));
    }
    rows["rope+" + scaling] = row;
  }
  return rows;
}

// Greedy decoding of the synthetic task's answers, scored by exact match and token F1.
data::SyntheticScore synthetic_eval(nn::GPT& model, data::SyntheticTaskGenerator& gen, int64_t examples, int64_t length,
                                    Device dev) {
  NoGradGuard no_grad;
  model.eval();
  data::SyntheticBatch b = gen.next(examples, length);
  std::vector<int64_t> seq = b.prompt.to_int_vector();
  int64_t T = b.prompt.size(1);
  for (int64_t t = 0; t < length; ++t) {
    Tensor x = Tensor::from_ints(seq, {examples, T}).to(dev);
    Tensor logits = model.forward(x).narrow(1, T - 1, 1);
    std::vector<int64_t> next = max(logits, -1).second.to_int_vector();
    std::vector<int64_t> grown;
    grown.reserve(seq.size() + examples);
    for (int64_t i = 0; i < examples; ++i) {
      grown.insert(grown.end(), seq.begin() + i * T, seq.begin() + (i + 1) * T);
      grown.push_back(next[i]);
    }
    seq.swap(grown);
    ++T;
  }
  Tensor all = Tensor::from_ints(seq, {examples, T});
  return data::score_predictions(all.narrow(1, T - length, length).contiguous(), b.target);
}

json synthetic_task(const CompareConfig& cfg, const std::string& method, uint64_t seed, Device dev) {
  const auto task = data::parse_synthetic_task(cfg.task);
  const int64_t L = cfg.task_length;
  nn::GPTConfig mc;
  mc.vocab_size = cfg.task_symbols + 2;
  mc.block_size = 2 * L + 1;  // the training sequence length: a learned table cannot go beyond it
  mc.n_layer = cfg.task_n_layer;
  mc.n_head = cfg.task_n_head;
  mc.n_embd = cfg.task_n_embd;
  mc.pos = cfg.base.model.pos;
  mc.pos.kind = method;
  Generator init(seed), drop(seed ^ 0x5eedd0u);
  nn::GPT model(mc, init, drop);
  model.to(dev);
  AdamW opt(decay_groups(model.named_parameters(), 0.0), AdamWOptions(2e-3).betas(0.9, 0.98));
  LRSchedule sched{2e-3, 2e-4, std::max<int64_t>(1, cfg.task_iters / 10), cfg.task_iters, true};
  data::SyntheticTaskGenerator train_gen(task, cfg.task_symbols, seed * 7919 + 1);
  double last_loss = 0;
  for (int64_t it = 0; it < cfg.task_iters; ++it) {
    model.train();
    opt.set_lr(sched.at(it));
    opt.zero_grad();
    data::SyntheticBatch b = train_gen.next(cfg.task_batch, L);
    Tensor loss = cross_entropy(model.forward(b.x.to(dev)), b.y.to(dev));
    last_loss = loss.item();
    if (!std::isfinite(last_loss))
      throw NonFiniteLoss(detail::concat("synthetic task: loss is ", last_loss, " at step ", it, " (", method, ")"));
    if (interrupt_requested())
      throw Interrupted(detail::concat("interrupted by ", signal_name(interrupt_signal()), " during the synthetic task of ",
                                       method, " seed ", seed, " (it restarts on resume; it takes seconds)"),
                        cfg.out_dir, it, interrupt_signal());
    loss.backward();
    clip_grad_norm(model.parameters(), 1.0);
    opt.step();
  }
  json out = {{"task", cfg.task}, {"train_length", L}, {"final_train_loss", last_loss}, {"scores", json::object()}};
  const int64_t limit = model.position_encoding().max_length();
  for (int64_t m : cfg.task_multipliers) {
    const int64_t len = m * L;
    if (limit >= 0 && 2 * len + 1 > limit) {
      out["scores"][std::to_string(m)] = nullptr;
      continue;
    }
    data::SyntheticTaskGenerator test_gen(task, cfg.task_symbols, 1000003 + static_cast<uint64_t>(m));
    data::SyntheticScore s = synthetic_eval(model, test_gen, cfg.task_examples, len, dev);
    out["scores"][std::to_string(m)] = {{"exact_match", s.exact_match}, {"token_f1", s.token_f1},
                                        {"token_accuracy", s.token_accuracy}};
  }
  return out;
}

// A JSON file this experiment wrote; a damaged one is an IoError naming it (delete it to redo the unit).
json read_json_file(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::exception& e) {
    throw IoError("'" + path + "' is not valid JSON (" + e.what() + "); delete it to measure that unit again");
  }
}

json read_metrics(const std::string& path) {
  json curve = json::array(), val = json::array();
  std::vector<double> tps;
  std::istringstream in(read_file(path));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw IoError("'" + path + "' has a line that is not valid JSON (" + e.what() + ")");
    }
    if (j.contains("train_loss")) {
      curve.push_back({j["step"], j["train_loss"]});
      if (j.contains("tokens_per_s") && j["step"].get<int64_t>() > 1) tps.push_back(j["tokens_per_s"]);
    }
    if (j.contains("val_loss")) val.push_back({j["step"], j["val_loss"]});
  }
  double median = 0;
  if (!tps.empty()) {
    std::sort(tps.begin(), tps.end());
    median = tps[tps.size() / 2];
  }
  return {{"train_curve", curve}, {"val_curve", val}, {"tokens_per_s", median}};
}

json run_unit(const CompareConfig& cfg, const std::string& method, uint64_t seed) {
  const std::string dir = cfg.out_dir + "/" + method + "/seed" + std::to_string(seed);
  const std::string result_path = dir + "/result.json";
  if (fs::exists(result_path)) {
    spdlog::info("[{} seed {}] finished earlier — skipping", method, seed);
    return read_json_file(result_path);
  }
  TrainConfig tc = cfg.base;
  tc.model.pos.kind = method;
  tc.seed = seed;
  tc.out_dir = dir;
  const bool resume = fs::exists(dir + "/checkpoint/state.json");
  Device dev = Device::parse(tc.device);
  backend(dev.type).reset_peak();
  const size_t before = backend(dev.type).current_bytes();
  auto t0 = std::chrono::steady_clock::now();
  Trainer t(tc, resume);
  spdlog::info("[{} seed {}] training{}", method, seed, resume ? " (resumed)" : "");
  t.run();
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double peak_mb = static_cast<double>(backend(dev.type).peak_bytes() - std::min(before, backend(dev.type).peak_bytes())) / (1 << 20);

  nn::GPT& model = t.model();
  model.eval();
  json r = {{"method", method}, {"seed", seed}, {"parameters", model.num_parameters()}};
  json m = read_metrics(dir + "/metrics.jsonl");
  r["train_curve"] = m["train_curve"];
  r["val_curve"] = m["val_curve"];
  const int64_t block = tc.model.block_size;
  const double tps = m["tokens_per_s"].get<double>();
  r["timing"] = {{"tokens_per_s", tps},
                 {"step_ms", tps > 0 ? 1000.0 * static_cast<double>(tc.batch_size * tc.grad_accum * block) / tps : 0.0},
                 {"peak_mb", peak_mb},
                 {"train_seconds", train_s},
                 {"resumed", resume}};
  spdlog::info("[{} seed {}] evaluating", method, seed);
  const data::TokenSpan& val = t.dataset().val();
  r["val"] = eval_json(evaluate_tokens(model, val, block, std::max<int64_t>(1, cfg.eval_tokens / block), 0, dev));
  r["extrapolation"] = extrapolation(model, val, cfg, dev);
  if (method == "rope") r["rope_scaled"] = rope_scaled_rows(model, val, cfg, dev);
  {
    const int64_t limit = model.position_encoding().max_length();
    int64_t ctx = cfg.per_position_multiplier * block;
    if (limit >= 0) ctx = std::min(ctx, limit);
    ctx = std::min<int64_t>(ctx, val.size() - 1);
    EvalResult e = evaluate_tokens(model, val, ctx, std::max<int64_t>(1, cfg.eval_tokens / ctx), 0, dev);
    r["per_position_loss"] = e.per_position_loss;
  }
  {
    data::EvalWindows w = t.dataset().eval_windows(block, 8);
    Tensor x = w.batch(0, w.size()).first.to(dev);
    r["attention_by_distance"] = model.attention_by_distance(x);
  }
  spdlog::info("[{} seed {}] synthetic {} task", method, seed, cfg.task);
  r["synthetic"] = synthetic_task(cfg, method, seed, dev);
  write_file_atomic(result_path, r.dump(1) + "\n");
  return r;
}

}  // namespace

// A re-run resumes an experiment, so its finished units must have been measured with the same
// settings: only the list of methods and seeds (and where things are) may change.
static void check_same_experiment(const CompareConfig& cfg) {
  const std::string path = cfg.out_dir + "/compare_config.json";
  if (!fs::exists(path)) return;
  CompareConfig saved;
  try {
    opt::from_json(compare_options(), saved, opt::parse_json_limited(read_file(path), path), path, true);
  } catch (const UsageError& e) {
    throw IoError(std::string(e.what()) + " (written by another version of posgrad? use another --out-dir)");
  }
  std::string diff;
  for (const auto& o : compare_options()) {
    const std::string& n = o.spec.name;
    if (n == "methods" || n == "seeds" || n == "out_dir" || n == "log_interval" || n == "data_dir" ||
        n == "max_corpus_bytes")
      continue;
    if (o.get(saved) != o.get(cfg))
      diff += (diff.empty() ? "" : ", ") + o.spec.flag() + " " + opt::format(o.get(saved)) + " there, " +
              opt::format(o.get(cfg)) + " now";
  }
  if (!diff.empty())
    throw UsageError(cfg.out_dir + " holds an experiment with other settings (" + diff +
                     "); its finished units cannot be mixed with new ones: use another --out-dir, or the same settings");
}

std::string run_compare(const CompareConfig& cfg) {
  cfg.validate();
  check_same_experiment(cfg);
  fs::create_directories(cfg.out_dir);
  write_file_atomic(cfg.out_dir + "/compare_config.json", cfg.to_json().dump(2) + "\n");
  std::vector<json> results;
  const size_t total = cfg.methods.size() * cfg.seeds.size();
  size_t done = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (uint64_t seed : cfg.seeds)
    for (const auto& method : cfg.methods) {
      spdlog::info("=== unit {}/{}: {} (seed {}) ===", done + 1, total, method, seed);
      results.push_back(run_unit(cfg, method, seed));
      ++done;
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      spdlog::info("=== {}/{} units done, {:.0f} s elapsed ===", done, total, el);
    }
  return write_report(cfg, results);
}

}  // namespace posgrad::train
