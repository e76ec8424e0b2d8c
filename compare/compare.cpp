// compare.cpp — see compare.h. The report and the plots are written by report.cpp.
#include "compare/compare.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/ops.h"
#include "data/corpus.h"
#include "data/synthetic.h"
#include "data/fileio.h"
#include "data/process.h"
#include "compare/compare_dist.h"
#include "compare/compare_eval.h"
#include "train/interrupt.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/passkey/passkey.h"
#include "compare/options.h"
#include "train/options.h"
#include "compare/studies/pi/pi_protocol.h"
#include "train/presets.h"
#include "compare/studies/cost/cost.h"
#include "compare/studies/encoder/encoder_track.h"
#include "compare/report.h"
#include "compare/results.h"
#include "train/trainer.h"
#include "compare/value_check.h"

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
  // Every preset evaluates up to 32x the training length (2048 tokens at 64) for claim (j).
  c.eval_multipliers = {1, 2, 4, 8, 16, 32};
  if (name == "quick") {
    // The default: nanoGPT's small CPU model, three seeds of the article's methods within 20 minutes
    // on a quiet 2-core machine (the measurements behind each budget: docs/presets.md).
    set_model(c.base, 4, 4, 128, 64);
    set_run(c.base, 12, 650, 65, 250);
    c.base.eval_windows = 32;
    c.base.log_interval = 50;
    c.seeds = {1, 2, 3};
    // The article's methods and the classic baselines: the encodings added since (sandwich, xpos, ...)
    // would lengthen the default beyond its 20 minutes; --methods names them, and the full and tiny
    // presets run every registered encoding.
    c.methods = {"none", "sinusoidal", "learned", "t5", "deberta", "rope", "alibi", "kerple"};
    c.eval_tokens = 8192;
    c.task_iters = 400;
    // Position interpolation: 2 lengths x 4 scalings x 40 steps per rope seed (cost: docs/presets.md).
    c.pi_iters = 40;
    c.pi_lr = 1e-4;
    c.pi_multipliers = {2, 4};
    c.pi_scalings = {"none", "linear", "ntk", "yarn"};
    // Passkey retrieval is off here: at this size and budget no encoding learns it (docs/presets.md).
    c.passkey.iters = 0;
    c.out_dir = "runs/compare-quick";
  } else if (name == "full") {
    // A few hours on a 2-core machine: nanoGPT-sized models at context 128, three seeds.
    set_model(c.base, 4, 4, 128, 128);
    set_run(c.base, 16, 6000, 100, 500);
    c.base.eval_windows = 64;
    c.seeds = {1, 2, 3, 4, 5};
    c.eval_tokens = 32768;
    c.task_iters = 1500;
    c.task_length = 12;
    c.task_n_layer = 3;
    c.task_examples = 128;
    // The six tasks a 2-layer RoPE model was learning in a sizing run (docs/presets.md).
    c.suite_tasks = {"cycle_navigation", "reverse_string", "stack_manipulation", "duplicate_string", "odd_first",
                     "bucket_sort"};
    c.suite_length = 8;
    c.suite_iters = 2000;
    c.suite_examples = 64;
    // Position interpolation at 5x the quick budget (not timed).
    c.pi_iters = 200;
    c.pi_lr = 1e-4;
    c.pi_multipliers = {2, 4};
    // The articles' passkey text fits the 128-token context (104 tokens of needle, question and key,
    // 25 of filler at 1x); a longer fine-tuning than the quick preset's, more examples per cell.
    c.passkey.template_name = "standard";
    c.passkey.iters = 1000;
    c.passkey.lr = 2e-3;
    c.passkey.examples = 32;
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
    c.suite_tasks = {"even_pairs", "reverse_string"};
    c.suite_length = 3;
    c.suite_iters = 3;
    c.suite_batch = 4;
    c.suite_examples = 3;
    c.suite_max_multiplier = 2;
    c.pi_iters = 3;
    c.pi_multipliers = {2};
    c.pi_scalings = {"none", "linear"};
    c.seeds = {1, 2};
    c.cost_lengths = {16, 32};
    c.cost_rounds = 2;
    // The short template with a 2-symbol key: 15 tokens, so a 17-token example keeps 2 of filler.
    c.passkey.iters = 3;
    c.passkey.batch = 2;
    c.passkey.examples = 2;
    c.passkey.multipliers = {1, 2};
    c.passkey.depths = {0, 1};
    c.passkey.key_length = 2;
    c.out_dir = "runs/compare-tiny";
  } else {
    unknown_name("compare preset", name, compare_preset_names());
  }
  c.encoder = encoder_track_preset(name);  // used with --track encoder|both (compare/studies/encoder/encoder.h)
  return c;
}

void CompareConfig::validate() const {
  opt::check_all(compare_options(), *this);
  auto has = [](const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  auto unique = [](auto v) {
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) == v.end();
  };
  POSGRAD_CHECK(unique(methods), UsageError, "--methods lists a method twice");
  POSGRAD_CHECK(unique(seeds), UsageError, "--seeds lists a seed twice (each seed is one independent run)");
  POSGRAD_CHECK(unique(suite_tasks), UsageError, "--suite-tasks lists a task twice (each task is trained and scored once)");
  POSGRAD_CHECK(unique(suite_randomized), UsageError, "--suite-randomized lists a method twice");
  POSGRAD_CHECK(has(eval_multipliers, 1), UsageError, "--eval-multipliers must include 1 (the training length)");
  POSGRAD_CHECK(has(task_multipliers, 1), UsageError, "--task-multipliers must include 1 (the training length)");
  POSGRAD_CHECK(has(eval_multipliers, per_position_multiplier), UsageError, "--per-position-multiplier (",
                per_position_multiplier, ") must be one of --eval-multipliers (the per-position loss comes from that pass)");
  for (int64_t T : cost_lengths) {
    TrainConfig b = base;
    b.model.block_size = T;
    b.batch_size = std::max<int64_t>(1, base.batch_size * base.model.block_size / T);
    check_memory(b, T);
  }
  POSGRAD_CHECK(task_n_embd % task_n_head == 0, UsageError, "--task-n-embd (", task_n_embd,
                ") must be divisible by --task-n-head (", task_n_head, ")");
  const int64_t longest = *std::max_element(eval_multipliers.begin(), eval_multipliers.end()) * base.model.block_size;
  for (const auto& m : methods) {
    TrainConfig b = base;
    b.model.pos.kind = m;
    b.validate();
    check_memory(b, std::max(longest, per_position_multiplier * base.model.block_size));
    // The evaluation runs the same encoding at the longest length: what it refuses there is refused now.
    nn::GPTConfig at_longest = b.model;
    at_longest.vocab_size = std::max<int64_t>(1, at_longest.vocab_size);
    at_longest.block_size = std::max(longest, per_position_multiplier * base.model.block_size);
    try {
      at_longest.validate();
    } catch (const ValueError& e) {
      throw UsageError("--methods " + m + " at the longest evaluation length (" + std::to_string(at_longest.block_size) +
                       " tokens, --eval-multipliers): " + e.what());
    }
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
  // The synthetic task's and the suite's models (the --task-n-* sizes) with each method: the encoding's
  // own size rules (an even rotary width, xPos pairs, ...) before anything is trained.
  for (const auto& m : methods) {
    nn::GPTConfig g = task_model.model;
    g.vocab_size = std::max<int64_t>(1, g.vocab_size);
    g.pos = base.model.pos;
    g.pos.kind = m;
    try {
      g.validate();
    } catch (const ValueError& e) {
      throw UsageError("--methods " + m + " in the task and suite models (--task-n-embd " + std::to_string(task_n_embd) +
                       ", --task-n-head " + std::to_string(task_n_head) + "): " + e.what());
    }
  }
  validate_length_suite(*this);
  validate_pi(*this);
  if (track != "decoder") {  // before anything is written: a refused track leaves nothing behind
    POSGRAD_CHECK(base.device == "cpu", UsageError, "--device ", base.device, ": the encoder track (--track ", track,
                  ") trains its encoders on the CPU only; use --device cpu, or --track decoder for a GPU run");
    const EncoderTrackConfig ec = encoder_track_config(*this);
    ec.validate();
    check_encoder_memory(ec);
  }
  validate_passkey(passkey, base.model.block_size);
  if (passkey.iters > 0)
    check_memory(base, *std::max_element(passkey.multipliers.begin(), passkey.multipliers.end()) * base.model.block_size);
}

json CompareConfig::to_json() const { return opt::to_json(compare_options(), *this); }

// ---- one (method, seed) unit -----------------------------------------------------------------------

// One pass at each evaluation length (compare/compare_eval.h).
std::vector<std::optional<LengthResult>> evaluate_lengths(nn::GPT& model, const data::TokenSpan& val,
                                                          const CompareConfig& cfg, Device dev,
                                                          std::vector<double>* per_position) {
  std::vector<std::optional<LengthResult>> out;
  const int64_t block = model.config().block_size;
  const int64_t limit = model.position_encoding().max_length();
  for (int64_t m : cfg.eval_multipliers) {
    const int64_t ctx = m * block;
    if ((limit >= 0 && ctx > limit) || ctx + 1 > static_cast<int64_t>(val.size())) {
      out.emplace_back();
      continue;
    }
    const EvalResult e = evaluate_tokens(model, val, ctx, std::max<int64_t>(1, cfg.eval_tokens / ctx), 0, dev);
    out.push_back(LengthResult{e.context, e.windows, e.loss, e.perplexity, e.accuracy});
    if (per_position && m == cfg.per_position_multiplier) *per_position = e.per_position_loss;
  }
  return out;
}

namespace {

// The options of each derived RoPE row at multiplier m (m = 1 is the plain model for the scalings).
std::vector<std::pair<std::string, opt::Value>> rope_variant_options(const std::string& row, int64_t m) {
  if (row == "rope@bf16") return {{"rope_position_precision", std::string("bf16")}};
  if (row == "rope@fp16") return {{"rope_position_precision", std::string("fp16")}};
  const std::string scaling = row.substr(std::string("rope+").size());
  return {{"rope_scaling", scaling}, {"rope_scaling_factor", scaling == "dynamic" ? 1.0 : static_cast<double>(m)}};
}

}  // namespace

const std::vector<std::string>& rope_variant_rows() {
  static const std::vector<std::string> rows = {"rope+linear", "rope+dynamic", "rope+yarn", "rope@bf16", "rope@fp16"};
  return rows;
}

nn::PosEncConfig rope_config(const CompareConfig& cfg) {
  nn::PosEncConfig pc = cfg.base.model.pos;
  pc.kind = "rope";
  pc.n_embd = cfg.base.model.n_embd;
  pc.n_head = cfg.base.model.n_head;
  pc.n_layer = cfg.base.model.n_layer;
  pc.block_size = cfg.base.model.block_size;
  return pc;
}

std::map<std::string, std::string> skipped_rope_variants(const CompareConfig& cfg) {
  std::map<std::string, std::string> out;
  for (const std::string& row : rope_variant_rows())
    for (int64_t m : cfg.eval_multipliers) {
      if (m == 1 && row[4] == '+') continue;  // the plain model's numbers
      nn::PosEncConfig pc = rope_config(cfg);
      try {
        for (const auto& [name, v] : rope_variant_options(row, m)) pc.set(name, v);
        pc.validate();
      } catch (const ValueError& e) {
        out[row] = e.what();
        break;
      }
    }
  return out;
}

namespace {

// A copy of `model` with other RoPE options (RoPE has no parameters to change).
std::unique_ptr<nn::GPT> rope_variant(const nn::GPT& model, const std::vector<std::pair<std::string, opt::Value>>& options) {
  nn::GPTConfig c = model.config();
  for (const auto& [name, v] : options) c.pos.set(name, v);
  Generator g(0), d(0);
  auto m = std::make_unique<nn::GPT>(c, g, d);
  m->load_state_dict(model.state_dict());
  m->eval();
  return m;
}

// Evaluation-time variants of a trained RoPE model: the context-extension scalings (linear and YaRN
// stretch by s = L / L_train; dynamic NTK grows its base with the current length itself, s = 1, so
// it is the plain model up to L_train), and the rotary arithmetic rounded to bf16 / fp16 (claim k).
std::map<std::string, std::vector<std::optional<LengthResult>>> rope_variants(
    nn::GPT& model, const data::TokenSpan& val, const CompareConfig& cfg, Device dev,
    const std::vector<std::optional<LengthResult>>& plain) {
  std::map<std::string, std::vector<std::optional<LengthResult>>> rows;
  const auto skipped = skipped_rope_variants(cfg);  // rows this configuration cannot build: absent
  for (const std::string scaling : {"linear", "dynamic", "yarn"}) {
    if (skipped.count("rope+" + scaling)) continue;
    std::vector<std::optional<LengthResult>> row;
    for (size_t i = 0; i < cfg.eval_multipliers.size(); ++i) {
      const int64_t m = cfg.eval_multipliers[i];
      if (m == 1) {  // s = 1 (and dynamic NTK up to L_train) is the plain model: the same numbers
        row.push_back(plain[i]);
        continue;
      }
      CompareConfig one = cfg;
      one.eval_multipliers = {m};
      auto v = rope_variant(model, {{"rope_scaling", scaling},
                                    {"rope_scaling_factor", scaling == "dynamic" ? 1.0 : static_cast<double>(m)}});
      row.push_back(evaluate_lengths(*v, val, one, dev, nullptr).front());
    }
    rows["rope+" + scaling] = row;
  }
  for (const std::string precision : {"bf16", "fp16"}) {
    if (skipped.count("rope@" + precision)) continue;
    auto v = rope_variant(model, {{"rope_position_precision", precision}});
    rows["rope@" + precision] = evaluate_lengths(*v, val, cfg, dev, nullptr);
  }
  return rows;
}

// The synthetic task: a small model trained with the one training step, scored with the one
// decoder (greedy) at each task multiplier.
void synthetic_task(const CompareConfig& cfg, const std::string& method, uint64_t seed, Device dev, UnitResult& u) {
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
  const LRSchedule sched{2e-3, 2e-4, std::max<int64_t>(1, cfg.task_iters / 10), cfg.task_iters, true};
  data::SyntheticTaskGenerator train_gen(task, cfg.task_symbols, seed * 7919 + 1);
  for (int64_t it = 0; it < cfg.task_iters; ++it) {
    if (interrupt_requested())
      throw Interrupted(detail::concat("interrupted by ", signal_name(interrupt_signal()), " during the synthetic task of ",
                                       method, " seed ", seed, " (on resume the unit keeps its trained model and runs its evaluation and every study after training again: evaluation, derived rows, position interpolation and synthetic task)"),
                        cfg.out_dir, it, interrupt_signal());
    try {
      u.task_final_loss = training_step(model, opt, sched, it, 1, 1.0, dev, [&] {
                            data::SyntheticBatch b = train_gen.next(cfg.task_batch, L);
                            return std::make_pair(b.x, b.y);
                          }).loss;
    } catch (const NonFiniteLoss& e) {
      throw NonFiniteLoss("synthetic task (" + method + " seed " + std::to_string(seed) + "): " + e.what());
    }
  }
  const int64_t limit = model.position_encoding().max_length();
  for (int64_t m : cfg.task_multipliers) {
    const int64_t len = m * L;
    if (limit >= 0 && 2 * len + 1 > limit) {
      u.task.emplace_back();
      continue;
    }
    data::SyntheticTaskGenerator test_gen(task, cfg.task_symbols, 1000003 + static_cast<uint64_t>(m));
    data::SyntheticBatch b = test_gen.next(cfg.task_examples, len);
    std::vector<std::vector<int64_t>> prompts;
    const std::vector<int64_t> flat = b.prompt.to_int_vector();
    const int64_t P = b.prompt.size(1);
    for (int64_t i = 0; i < cfg.task_examples; ++i) prompts.emplace_back(flat.begin() + i * P, flat.begin() + (i + 1) * P);
    const auto answers = generate(model, prompts, len, 0.0, 0, nullptr, 0, dev);
    const data::SyntheticScore s = data::score_predictions(answers, [&] {
      std::vector<std::vector<int64_t>> t;
      const std::vector<int64_t> tf = b.target.to_int_vector();
      for (int64_t i = 0; i < cfg.task_examples; ++i) t.emplace_back(tf.begin() + i * len, tf.begin() + (i + 1) * len);
      return t;
    }());
    u.task.push_back(TaskScore{len, s.examples, s.exact_match, s.token_f1, s.token_accuracy});
  }
}

}  // namespace

UnitResult load_kept_unit(const CompareConfig& cfg, const std::string& method, uint64_t seed) {
  const std::string dir = cfg.out_dir + "/" + method + "/seed" + std::to_string(seed);
  const std::string result_path = dir + "/result.json";
  json j;
  try {
    j = json::parse(read_file(result_path));
  } catch (const json::exception& e) {
    throw IoError("'" + result_path + "' is not valid JSON (" + e.what() + "); delete it to measure that unit again");
  }
  // The unit of this folder, measured with these settings (a result.json copied from another unit,
  // or edited, is refused: the user decides whether its numbers go, by deleting the file).
  const std::string advice = "; delete it to measure that unit again";
  UnitResult u;
  try {
    u = unit_from_json(j, result_path);
  } catch (const IoError& e) {
    throw IoError(e.what() + advice);
  }
  const ValueCheck c(result_path, advice);
  if (u.method != method)
    c.fail("method", ValueCheck::quoted(u.method),
           "this is the folder of method " + ValueCheck::quoted(method) + " (a result copied from another unit?)");
  if (u.seed != seed)
    c.fail("seed", std::to_string(u.seed), "this is the folder of seed " + std::to_string(seed) +
                                               " (a result copied from another unit?)");
  check_unit(u, cfg, result_path, "", advice);
  // ... and its model was trained with this experiment's settings: the unit's own config.json (the
  // Trainer's) must agree on every option that changes a result.
  TrainConfig want = cfg.base;
  want.model.pos.kind = method;
  want.seed = seed;
  const std::string config_path = dir + "/config.json";
  TrainConfig had;
  try {
    had = TrainConfig::from_json(opt::parse_json_limited(read_file(config_path), config_path), config_path);
  } catch (const Error& e) {
    throw IoError(std::string(e.what()) + "; delete " + dir + " to measure that unit again");
  }
  std::string diff;
  for (const auto& o : train_options()) {
    const std::string& n = o.spec.name;
    if (n == "out_dir" || n == "threads" || n == "log_interval" || n == "data_dir" || n == "max_corpus_bytes" ||
        n == "checkpoint_interval" || n == "corpus")  // where things are, and how often it logged (the text: corpus.json)
      continue;
    if (o.get(had) != o.get(want))
      diff += (diff.empty() ? "" : ", ") + o.spec.flag() + " " + opt::format(o.get(had)) + " there, " + opt::format(o.get(want)) + " now";
  }
  if (!diff.empty())
    throw UsageError(config_path + ": this unit was trained with other settings than the experiment's (" + diff +
                     "; copied from another experiment?); delete " + dir + " to measure it again, or use the same settings");
  return u;
}

void check_kept_units(const CompareConfig& cfg) {
  for (const auto& m : cfg.methods)
    for (uint64_t seed : cfg.seeds)
      if (fs::exists(cfg.out_dir + "/" + m + "/seed" + std::to_string(seed) + "/result.json")) (void)load_kept_unit(cfg, m, seed);
}

namespace {

UnitResult run_unit(const CompareConfig& cfg, const std::string& method, uint64_t seed) {
  const std::string dir = cfg.out_dir + "/" + method + "/seed" + std::to_string(seed);
  const std::string result_path = dir + "/result.json";
  if (fs::exists(result_path)) {
    spdlog::info("[{} seed {}] finished earlier — kept", method, seed);
    return load_kept_unit(cfg, method, seed);
  }
  TrainConfig tc = cfg.base;
  tc.model.pos.kind = method;
  tc.seed = seed;
  tc.out_dir = dir;
  const bool resume = fs::exists(dir + "/checkpoint/state.json");
  const Device dev = Device::parse(tc.device);
  auto t0 = std::chrono::steady_clock::now();
  Trainer t(tc, resume);
  // The passkey test needs the template in the corpus's vocabulary: refused before training, not after.
  if (cfg.passkey.iters > 0)
    check_passkey_data(t.dataset().train(), t.tokenizer(), cfg.passkey, tc.model.block_size);
  spdlog::info("[{} seed {}] training{}", method, seed, resume ? " (resumed)" : "");
  t.run();
  UnitResult u;
  u.method = method;
  u.seed = seed;
  u.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  u.resumed = resume;
  nn::GPT& model = t.model();
  model.eval();
  u.parameters = model.num_parameters();
  u.position_parameters = u.parameters - model.num_non_position_parameters();
  u.train_curve = t.train_curve();
  u.val_curve = t.val_curve();
  spdlog::info("[{} seed {}] evaluating", method, seed);
  const data::TokenSpan& val = t.dataset().val();
  u.lengths = evaluate_lengths(model, val, cfg, dev, &u.per_position_loss);
  if (method == "rope") u.variants = rope_variants(model, val, cfg, dev, u.lengths);
  // Fine-tuned scalings (compare/studies/pi/pi_protocol.h). With the passkey test on, each tuned row then gets the
  // passkey fine-tuning and scoring of the untuned model (same steps, examples and seed), so that
  // "rope" against "rope+linear ft2x" in the passkey table is before / after the protocol.
  std::map<std::string, PasskeyResult> pi_passkey;
  PiCallback on_row;
  if (cfg.passkey.iters > 0)
    on_row = [&](const std::string& row, nn::GPT& tuned) {
      auto copy = copy_gpt(tuned, {}, seed ^ 0x9a55d0ULL, dev);
      PasskeyResult pr;
      try {
        pr.final_loss = finetune_passkey(*copy, t.dataset().train(), t.tokenizer(), cfg.passkey, seed, dev).final_loss;
      } catch (const NonFiniteLoss& e) {
        throw NonFiniteLoss("passkey fine-tuning (" + row + " seed " + std::to_string(seed) + "): " + e.what());
      }
      pr.grid = evaluate_passkey(*copy, val, t.tokenizer(), cfg.passkey, dev);
      pi_passkey[row] = pr;
    };
  if (method == "rope") u.pi = run_pi_protocol(model, t.dataset().train(), val, cfg, seed, dev, on_row);
  {
    data::EvalWindows w = t.dataset().eval_windows(tc.model.block_size, 8);
    Tensor x = w.batch(0, w.size()).first.to(dev);
    u.attention_by_distance = model.attention_by_distance(x);
  }
  spdlog::info("[{} seed {}] synthetic {} task", method, seed, cfg.task);
  synthetic_task(cfg, method, seed, dev, u);
  u.suite = run_length_suite(cfg, method, seed, dev);
  if (cfg.passkey.iters > 0)
    u.passkey = run_passkey(model, t.dataset().train(), val, t.tokenizer(), cfg.passkey, method, seed, dev,
                            skipped_rope_variants(cfg));
  for (auto& [row, pr] : pi_passkey) u.passkey[row] = std::move(pr);
  write_file_atomic(result_path, to_json(u).dump(1) + "\n");
  return u;
}

}  // namespace

// A re-run resumes an experiment, so its finished units must have been measured with the same
// settings: only the list of methods and seeds (and where things are) may change.
void check_same_experiment(const CompareConfig& cfg) {
  const std::string path = cfg.out_dir + "/compare_config.json";
  if (!fs::exists(path)) return;
  // Nothing finished yet (say an earlier attempt failed at once): nothing to mix, the new settings win.
  // The decoder units (<method>/seed<k>/result.json) are checked against the decoder settings, the
  // encoder track's (encoder/<method>/seed<k>/result.json) against the --encoder-* settings.
  bool decoder_finished = false, encoder_finished = false;
  std::error_code ec;
  const fs::path encoder_dir = fs::path(cfg.out_dir) / "encoder";
  for (auto it = fs::recursive_directory_iterator(cfg.out_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->path().filename() != "result.json") continue;
    const auto rel = it->path().lexically_relative(encoder_dir);
    (!rel.empty() && *rel.begin() != ".." ? encoder_finished : decoder_finished) = true;
  }
  if (!decoder_finished && !encoder_finished) return;
  // The finished units were trained on the text recorded in corpus.json: other text now would mix
  // two corpora in one report.
  const std::string corpus_json = cfg.out_dir + "/corpus.json";
  if (fs::exists(corpus_json)) {
    nlohmann::json rec;
    try {
      rec = opt::parse_json_limited(read_file(corpus_json), corpus_json, 1 << 16, 4);
    } catch (const UsageError& e) {
      throw IoError(e.what());
    }
    const std::string text = data::load_corpus(cfg.base.corpus, cfg.base.data_dir, cfg.base.max_corpus_bytes);
    const nlohmann::json now = data::corpus_record(cfg.base.corpus, cfg.base.data_dir, text);
    if (rec.value("fnv1a64", "") != now.value("fnv1a64", "") || rec.value("bytes", int64_t{-1}) != now.value("bytes", int64_t{-1}))
      throw UsageError(cfg.out_dir + " holds units trained on " + rec.value("path", std::string("?")) + " (" +
                       (rec.contains("bytes") ? rec["bytes"].dump() : "?") + " bytes, fnv1a64 " + rec.value("fnv1a64", "?") +
                       "), but --corpus " + cfg.base.corpus + " is now " + now["bytes"].dump() + " bytes, fnv1a64 " +
                       now.value("fnv1a64", "") + ": its finished units cannot be mixed with units of other text; "
                       "restore the file, or use another --out-dir");
  }
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
        n == "max_corpus_bytes" || n == "track")
      continue;
    const bool encoder_option = n.rfind("encoder_", 0) == 0;
    const bool both_tracks = n == "corpus" || n == "tokenizer";  // the encoder track reads them too
    if (!both_tracks && (encoder_option ? !encoder_finished : !decoder_finished)) continue;
    if (o.get(saved) != o.get(cfg))
      diff += (diff.empty() ? "" : ", ") + o.spec.flag() + " " + opt::format(o.get(saved)) + " there, " +
              opt::format(o.get(cfg)) + " now";
  }
  if (!diff.empty())
    throw UsageError(cfg.out_dir + " holds an experiment with other settings (" + diff +
                     "); its finished units cannot be mixed with new ones: use another --out-dir, or the same settings");
  // What may change: the methods and seeds may grow, a track may be added (decoder or encoder -> both);
  // nothing that would drop finished results from results.json and the report.
  if ((decoder_finished && cfg.track == "encoder") || (encoder_finished && cfg.track == "decoder"))
    throw UsageError(cfg.out_dir + " holds finished units of the " + (cfg.track == "encoder" ? "decoder" : "encoder") +
                     " track (--track " + saved.track + " there); --track " + cfg.track +
                     " would drop them from results.json and the report: use --track both, or another --out-dir");
  auto dropped = [](const auto& before, const auto& now) {
    std::string d;
    for (const auto& x : before)
      if (std::find(now.begin(), now.end(), x) == now.end()) d += (d.empty() ? "" : ",") + opt::format(opt::Value(x));
    return d;
  };
  const std::string m = dropped(saved.methods, cfg.methods);
  const std::string s = dropped(saved.seeds, cfg.seeds);
  if (!m.empty() || !s.empty())
    throw UsageError(cfg.out_dir + " holds an experiment with " + (m.empty() ? "" : "--methods " + m) +
                     (!m.empty() && !s.empty() ? " and " : "") + (s.empty() ? "" : "--seeds " + s) +
                     " that this run leaves out; --methods and --seeds may only grow (the report covers every "
                     "finished unit): list them too, or use another --out-dir");
}

void check_compare_data(const CompareConfig& cfg) {
  if (cfg.track != "decoder") (void)load_encoder_track_data(cfg);  // check_encoder_data: --encoder-* sizes
  if (cfg.track == "encoder") return;
  const TrainConfig& b = cfg.base;
  const std::string text = data::load_corpus(b.corpus, b.data_dir, b.max_corpus_bytes);
  const auto tok = data::make_tokenizer(b.tokenizer, text);
  const data::TokenDataset ds(text, *tok, b.model.block_size);  // the Trainer's short-corpus refusal
  if (cfg.passkey.iters > 0) check_passkey_data(ds.train(), *tok, cfg.passkey, b.model.block_size);
  if (std::find(cfg.methods.begin(), cfg.methods.end(), "rope") != cfg.methods.end())
    check_pi_data(cfg, b.model.block_size, ds.train());
}

std::string run_compare(const CompareConfig& cfg, dist::Communicator* comm) {
  dist::Communicator& job = comm ? *comm : dist::world();
  cfg.validate();
  check_same_experiment(cfg);
  check_compare_data(cfg);  // what the corpus allows, before anything is written or trained
  check_kept_units(cfg);    // every finished unit this run would keep, before any new one trains
  // One writer per experiment directory (data/process.h); the other ranks share rank 0's hold. The
  // settings are checked again once it is held: the process that held it may have changed them.
  std::unique_ptr<DirectoryLock> hold;
  if (job.is_root()) {
    hold = std::make_unique<DirectoryLock>(cfg.out_dir);
    check_same_experiment(cfg);
  }
  job.barrier();
  if (job.is_root()) {
    fs::create_directories(cfg.out_dir);
    write_file_atomic(cfg.out_dir + "/compare_config.json", cfg.to_json().dump(2) + "\n");
    if (!fs::exists(cfg.out_dir + "/corpus.json")) {  // the text of the experiment's first units (check_same_experiment)
      const std::string text = data::load_corpus(cfg.base.corpus, cfg.base.data_dir, cfg.base.max_corpus_bytes);
      write_file_atomic(cfg.out_dir + "/corpus.json",
                        data::corpus_record(cfg.base.corpus, cfg.base.data_dir, text).dump(2) + "\n");
    }
  }
  job.barrier();
  ComparisonResult r;
  r.config = cfg;
  if (job.is_root()) r.provenance = collect_provenance(cfg);
  // The encoder track (compare/studies/encoder/encoder_track.h) runs on rank 0; the decoder units are shared.
  if (cfg.track != "decoder" && job.is_root()) r.encoder = run_compare_encoder_track(cfg);
  if (cfg.track == "encoder") {
    if (!job.is_root()) return "";
    write_file_atomic(cfg.out_dir + "/results.json", to_json(r).dump(1) + "\n");
    return write_report(r);
  }
  // The units over the job's processes (compare/compare_dist.h); rank 0 gets them all, in order.
  r.units = run_units_distributed(compare_units(cfg.methods, cfg.seeds), job, cfg.out_dir,
                                  [&](const UnitSpec& u) { return run_unit(cfg, u.method, u.seed); });
  if (!job.is_root()) return "";
  spdlog::info("=== cost benchmark: {} rounds over {} methods x {} lengths ===", cfg.cost_rounds, cfg.methods.size(),
               cfg.cost_lengths.size());
  r.cost = measure_cost(cfg);
  write_file_atomic(cfg.out_dir + "/results.json", to_json(r).dump(1) + "\n");
  return write_report(r);
}

}  // namespace posgrad::train
