// addition.cpp — see addition.h: the settings, the work of one unit, its JSON and checks, the entry.
// The report and the claim: addition_report.cpp.
#include "compare/studies/addition/addition.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include <spdlog/spdlog.h>

#include "compare/method.h"
#include "compare/rows.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/task/task.h"
#include "data/addition.h"
#include "data/fileio.h"
#include "nn/gpt.h"
#include "nn/posenc/position_encoding.h"
#include "tensor/nograd.h"
#include "train/finetune.h"
#include "train/options.h"
#include "train/seeds.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

const AdditionSettings& settings(const CompareConfig& c) { return c.of<AdditionSettings>(); }
bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}
int64_t max_length(const AdditionSettings& s) { return 3 * s.length; }

data::AdditionFormat format(const AdditionSettings& s, const std::string& variant) {
  // The hint set: the longest test answer, 3N + 1 digits.
  return {variant == "hints", max_length(s) + 1};
}

nn::GPTConfig model_config(const CompareConfig& cfg, const std::string& method, const std::string& variant) {
  const AdditionSettings& s = settings(cfg);
  const TaskSettings& t = cfg.of<TaskSettings>();
  nn::GPTConfig mc;
  mc.vocab_size = data::addition_vocab_size(format(s, variant));
  mc.block_size = data::addition_max_tokens(max_length(s), format(s, variant)) - 1;  // inputs: all but the last
  mc.n_layer = t.n_layer;
  mc.n_head = t.n_head;
  mc.n_embd = t.n_embd;
  mc.dropout = 0;
  mc.pos = cfg.base.model.pos;
  mc.attention_sinks = cfg.base.model.attention_sinks;
  apply_method(mc, method);
  return mc;
}

// One training batch: operand lengths drawn independently and uniformly in 1..N per example.
data::LengthBatch training_batch(const AdditionSettings& s, const data::AdditionFormat& f, Generator& g) {
  std::vector<std::pair<int64_t, int64_t>> lengths(static_cast<size_t>(s.batch));
  for (auto& [a, b] : lengths) {
    a = 1 + static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(s.length));
    b = 1 + static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(s.length));
  }
  return data::make_addition_batch(lengths, f, true, g);
}

AdditionRow train_row(const CompareConfig& cfg, const std::string& method, uint64_t seed, Device dev,
                      const std::string& variant, bool randomized) {
  const AdditionSettings& s = settings(cfg);
  const auto t0 = std::chrono::steady_clock::now();
  AdditionRow r;
  r.variant = variant;
  r.randomized = randomized;
  const data::AdditionFormat f = format(s, variant);
  const nn::GPTConfig mc = model_config(cfg, method, variant);
  // Initialisation and data by variant, shared by the plain and the randomized row (so those differ
  // only by their positions); the positions from a stream of their own.
  Generator init(stream(seed, "addition.init." + variant)), drop(stream(seed, "addition.dropout." + variant)),
      data_gen(stream(seed, "addition.data." + variant)), pos_gen(stream(seed, "addition.positions." + variant));
  nn::GPT model(mc, init, drop);
  model.to(dev);
  const std::string row = Row{method, "", 0, randomized}.name();
  FinetuneSpec spec = study_finetune_spec("addition (" + variant + ", " + row + " seed " + std::to_string(seed) + ")",
                                          s.iters, s.lr, cfg.out_dir);
  // Its units are saved only when every model of the unit is scored: a resume trains the unit again.
  spec.on_interrupt = "on resume this addition unit (" + method + " seed " + std::to_string(seed) +
                      ") is trained again from its first model; finished units are kept";
  r.final_loss = finetune_length_model(model, spec, dev, randomized, mc.block_size, pos_gen,
                                       [&] { return training_batch(s, f, data_gen); });  // then positions 0 .. T-1
  NoGradGuard ng;
  for (int64_t n = 1; n <= max_length(s); ++n) {
    // The test examples of a length: the same for every method, seed and variant.
    Generator test_gen(stream(static_cast<uint64_t>(n), "addition.test"));
    const data::LengthBatch b = data::make_addition_batch(
        std::vector<std::pair<int64_t, int64_t>>(static_cast<size_t>(s.examples), {n, n}), f, false, test_gen);
    const data::LengthScore sc = data::score_length_logits(model.forward(b.x.to(dev)).to(Device::cpu()), b.y);
    AdditionLength l{n, sc.examples, 0};
    for (size_t i = 0; i < sc.correct.size(); ++i) l.correct += sc.correct[i] == sc.scored[i];
    r.lengths.push_back(l);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

AdditionUnit run(const CompareConfig& cfg, const std::string& method, uint64_t seed) {
  const Device dev = Device::parse(cfg.base.device);
  AdditionUnit u{method, seed, {}};
  for (const auto& [variant, randomized] : addition_rows(cfg, method)) {
    u.rows.push_back(train_row(cfg, method, seed, dev, variant, randomized));
    const AdditionRow& r = u.rows.back();
    std::string line;
    for (const auto& l : r.lengths) line += fmt::format(" {:.2f}", l.exact());
    spdlog::info("[{} seed {}] addition {}: loss {:.4f}, exact match by length{} ({:.1f} s)",
                 Row{method, "", 0, randomized}.name(), seed, variant, r.final_loss, line, r.seconds);
  }
  return u;
}

// The checks of one unit against the configuration (a kept result.json, results.json's units).
void check_unit(const AdditionUnit& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& p) {
  const AdditionSettings& s = settings(cfg);
  const auto want = addition_rows(cfg, u.method);
  c.size(u.rows.size(), want.size(), json_path_key(p, "rows"),
         "--addition-variants, plain and where --addition-randomized lists the method randomized");
  for (size_t i = 0; i < want.size(); ++i) {
    const AdditionRow& r = u.rows[i];
    const std::string q = json_path_at(json_path_key(p, "rows"), i);
    if (r.variant != want[i].first || r.randomized != want[i].second)
      c.fail(q, ValueCheck::quoted(r.variant + (r.randomized ? " randomized" : "")),
             "expected " + want[i].first + (want[i].second ? " randomized" : ""));
    c.non_negative(r.final_loss, json_path_key(q, "final_loss"));
    c.non_negative(r.seconds, json_path_key(q, "seconds"));
    c.size(r.lengths.size(), static_cast<size_t>(max_length(s)), json_path_key(q, "lengths"),
           "operand lengths 1 .. 3 x --addition-length");
    for (size_t k = 0; k < r.lengths.size(); ++k) {
      const AdditionLength& l = r.lengths[k];
      const std::string lp = json_path_at(json_path_key(q, "lengths"), k);
      c.equal(l.n, static_cast<int64_t>(k) + 1, json_path_key(lp, "n"), "lengths 1 .. 3N in order");
      c.equal(l.examples, s.examples, json_path_key(lp, "examples"), "--addition-examples");
      if (l.correct < 0 || l.correct > l.examples)
        c.fail(json_path_key(lp, "correct"), std::to_string(l.correct), "in [0, examples]");
    }
  }
}

std::string unit_path(const CompareConfig& cfg, const std::string& method, uint64_t seed) {
  return cfg.out_dir + "/addition/" + method + "/seed" + std::to_string(seed) + "/result.json";
}

// A finished unit is kept (checked: its method, seed and rows those of the configuration), else measured.
// The unit kept in out_dir, checked against its folder and the settings; none when it is not there.
// IoError naming the file when it cannot be read or fails a check.
std::optional<AdditionUnit> load_kept(const CompareConfig& cfg, const std::string& method, uint64_t seed) {
  const std::string path = unit_path(cfg, method, seed);
  if (!fs::exists(path)) return std::nullopt;
  const std::string advice = "; delete it to measure that unit again";
  AdditionUnit u;
  try {
    u = addition_unit_from_json(json::parse(read_file(path)));
  } catch (const json::exception& e) {
    throw IoError(path + ": not an addition unit's result (" + e.what() + ")" + advice);
  }
  const ValueCheck c(path, advice);
  if (u.method != method) c.fail("method", ValueCheck::quoted(u.method), "expected " + method + " (its folder)");
  if (u.seed != seed) c.fail("seed", std::to_string(u.seed), "expected " + std::to_string(seed) + " (its folder)");
  check_unit(u, cfg, c, "");
  return u;
}

json run_or_keep(const CompareConfig& cfg, const std::string& method, uint64_t seed) {
  if (const auto kept = load_kept(cfg, method, seed)) {
    spdlog::info("[{} seed {}] addition: kept from {}", method, seed, unit_path(cfg, method, seed));
    return addition_unit_to_json(*kept);
  }
  const std::string path = unit_path(cfg, method, seed);
  const json j = addition_unit_to_json(run(cfg, method, seed));
  fs::create_directories(fs::path(path).parent_path());
  write_file_atomic(path, j.dump(1) + "\n");
  return j;
}

void validate(const CompareConfig& cfg) {
  const AdditionSettings& s = settings(cfg);
  auto unique = [](auto v) {
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) == v.end();
  };
  POSGRAD_CHECK(unique(s.variants), UsageError, "--addition-variants lists a variant twice");
  POSGRAD_CHECK(unique(s.randomized), UsageError, "--addition-randomized lists a method twice");
  POSGRAD_CHECK(unique(s.seeds), UsageError, "--addition-seeds lists a seed twice");
  validate_randomized_methods("--addition-randomized", s.randomized, cfg);
  if (s.iters == 0) return;
  for (const auto& m : cfg.methods)
    for (const auto& v : s.variants) {
      const nn::GPTConfig g = model_config(cfg, m, v);
      try {
        g.validate();
      } catch (const ValueError& e) {
        throw UsageError("--methods " + m + " in the addition model (--task-n-embd, --task-n-head, " +
                         "--addition-length): " + e.what());
      }
      TrainConfig t = cfg.base;
      t.model = g;
      t.batch_size = std::max(s.batch, s.examples);
      try {
        check_memory(t, g.block_size);
      } catch (const UsageError& e) {
        throw UsageError(std::string("the addition model of ") + m + " (its sizes: --task-n-layer, --task-n-embd; " +
                         "the longest sequence from 3 x --addition-length, the batch max(--addition-batch, " +
                         "--addition-examples)): " + e.what());
      }
    }
}

}  // namespace

std::vector<std::pair<std::string, bool>> addition_rows(const CompareConfig& cfg, const std::string& method) {
  const AdditionSettings& s = settings(cfg);
  std::vector<std::pair<std::string, bool>> out;
  for (const auto& v : {std::string("plain"), std::string("hints")}) {
    if (!contains(s.variants, v)) continue;
    out.emplace_back(v, false);
    if (contains(s.randomized, method)) out.emplace_back(v, true);
  }
  return out;
}

json addition_unit_to_json(const AdditionUnit& u) {
  json rows = json::array();
  for (const auto& r : u.rows) {
    json lengths = json::array();
    for (const auto& l : r.lengths) lengths.push_back({{"n", l.n}, {"examples", l.examples}, {"correct", l.correct}});
    rows.push_back({{"variant", r.variant},
                    {"randomized", r.randomized},
                    {"final_loss", r.final_loss},
                    {"seconds", r.seconds},
                    {"lengths", lengths}});
  }
  return {{"method", u.method}, {"seed", u.seed}, {"rows", rows}};
}

AdditionUnit addition_unit_from_json(const json& j) {
  AdditionUnit u;
  u.method = json_text(j.at("method"));
  u.seed = json_uint(j.at("seed"));
  for (const auto& e : j.at("rows")) {
    AdditionRow r;
    r.variant = json_text(e.at("variant"));
    r.randomized = e.at("randomized").get<bool>();
    r.final_loss = json_real(e.at("final_loss"));
    r.seconds = json_real(e.at("seconds"));
    for (const auto& l : e.at("lengths"))
      r.lengths.push_back({json_int(l.at("n")), json_int(l.at("examples")), json_int(l.at("correct"))});
    u.rows.push_back(std::move(r));
  }
  return u;
}

namespace {

void options(opt::Table<CompareConfig>& t) {
  using namespace opt;
  Rows<CompareConfig> r(t);
  // Added after results were first written: a file without an option ran no addition study, and the
  // other options read as their defaults.
  const AdditionSettings d;
  r.group("Reversed addition with index hints (Zhou et al. 2024)")
      .add(added_later(integer("addition_iters", closed(0, kMany),
                               "Training steps of each addition model (0: no addition study); the models' sizes are "
                               "the synthetic task's "
                               "(--task-n-layer, --task-n-embd, --task-n-head)",
                               "steps"),
                       d.iters),
           POSGRAD_MEMBER(template of<AdditionSettings>().iters))
      .add(added_later(integer("addition_length", closed(1, 64), "Longest training operand N; tested at 1 .. 3N digits",
                               "digits"),
                       d.length),
           POSGRAD_MEMBER(template of<AdditionSettings>().length))
      .add(added_later(integer("addition_batch", closed(1, 4096), "Addition examples per training step", "sequences"),
                       d.batch),
           POSGRAD_MEMBER(template of<AdditionSettings>().batch))
      .add(added_later(integer("addition_examples", closed(1, 1 << 16), "Addition test examples per operand length",
                               "sequences"),
                       d.examples),
           POSGRAD_MEMBER(template of<AdditionSettings>().examples))
      .add(added_later(real("addition_lr", open_closed(0, 1), "Peak learning rate of the addition models"), d.lr),
           POSGRAD_MEMBER(template of<AdditionSettings>().lr))
      .add(added_later(choice_list("addition_variants", {"plain", "hints"}, 2,
                                   "Addition formats: plain (reversed digits) and hints (index hints, Zhou et al. §3)"),
                       d.variants),
           POSGRAD_MEMBER(template of<AdditionSettings>().variants))
      .add(added_later(
               [] {
                 auto s = choice_list(
                     "addition_randomized", nn::position_encoding_kinds(), 32,
                     "Methods also trained on addition with randomized positions (Ruoss et al. "
                     "2023) where among --methods; only encodings that take position ids (refused otherwise, naming "
                     "the encoding)");
                 s.min_items = 0;
                 return s;
               }(),
               d.randomized),
           POSGRAD_MEMBER(template of<AdditionSettings>().randomized))
      .add(added_later(unsigned_list(
                           "addition_seeds", 64,
                           "Seeds of the addition study's own units (the spread over seeds is its subject); fixed once "
                           "units of the study finished in --out-dir"),
                       std::vector<uint64_t>(d.seeds)),
           POSGRAD_MEMBER(template of<AdditionSettings>().seeds))
      // The claim's margin changes the verdict, not a measurement: a re-run may change it and keeps
      // the finished units (the report judges z1 again with the new margin).
      .add(
          added_later(result_neutral(real(
                          "addition_spread_margin", open_closed(0, 1),
                          "Claim z1: the seed-to-seed spread of exact match at N+1 .. 2N digits that counts as fragile "
                          "(judged when the report is written: a re-run may change it)")),
                      d.spread_margin),
          POSGRAD_MEMBER(template of<AdditionSettings>().spread_margin));
}

void preset(CompareConfig& c, const std::string& name) {
  AdditionSettings& s = c.of<AdditionSettings>();
  // quick: off (iters 0): at N = 3 a model needs about 2000 steps, 2 minutes on the 2-core machine,
  // and the quick preset's eight methods x 5 seeds x 2 variants (+ randomized rows) would take hours
  // (docs/presets.md).
  if (name == "full") {
    s.iters = 3000;
    s.examples = 64;
  } else if (name == "tiny") {
    s.iters = 3;
    s.length = 2;
    s.batch = 4;
    s.examples = 2;
    s.seeds = {1, 2};
    s.randomized = {"rope"};
  }
}

}  // namespace

namespace {

// Whether the study runs in this configuration (its steps > 0, decoders trained).
bool runs(const CompareConfig& c) { return c.of<AdditionSettings>().iters > 0 && c.track != "encoder"; }

// A result read back holds the study's units exactly when it ran, one per configured method and
// addition seed, each checked (check_unit); c.fail names the JSON path otherwise.
void check_units(const ComparisonResult& r, const ValueCheck& c, const std::string&, const std::string&) {
  const CompareConfig& cfg = r.config;
  const auto* a = r.parts.find<AdditionResult>();
  const bool held = a && !a->units.empty();
  if (runs(cfg) != held)
    c.fail("addition", "",
           held ? "present, but the configuration does not run the study (--addition-iters " +
                      std::to_string(settings(cfg).iters) + ", --track " + cfg.track + ")"
                : "missing, but config.addition_iters is " + std::to_string(settings(cfg).iters) + ": the study ran");
  if (!held) return;
  std::map<std::pair<std::string, uint64_t>, size_t> seen;
  for (size_t i = 0; i < a->units.size(); ++i) {
    const AdditionUnit& u = a->units[i];
    const std::string path = json_path_at("addition", i);
    check_unit(u, cfg, c, path);
    const auto [it, fresh] = seen.emplace(std::make_pair(u.method, u.seed), i);
    if (!fresh)
      c.fail(path, "",
             "a second unit for (" + u.method + ", seed " + std::to_string(u.seed) + "); the first is " +
                 json_path_at("addition", it->second));
  }
  for (const auto& m : cfg.methods)
    for (uint64_t seed : settings(cfg).seeds)
      if (!seen.count({m, seed}))
        c.fail("addition", "",
               "no unit for (" + m + ", seed " + std::to_string(seed) +
                   "), which --methods and --addition-seeds "
                   "configure");
}

}  // namespace

StudyEntry addition_study() {
  StudyEntry e;
  e.name = AdditionResult::kStudy;
  e.summary =
      "reversed multi-digit addition with and without index hints, exact match by operand length up to 3N "
      "and its spread over seeds (Zhou et al. 2024)";
  e.init_settings = [](Parts& p) { p.get<AdditionSettings>(); };
  e.options = options;
  e.preset = preset;
  e.validate = validate;
  e.enabled = runs;
  e.own_units = [](const CompareConfig& cfg) {
    std::vector<std::pair<std::string, uint64_t>> u;
    for (const auto& m : cfg.methods)
      for (uint64_t seed : settings(cfg).seeds) u.emplace_back(m, seed);
    return u;
  };
  e.run_own_unit = run_or_keep;
  e.check_kept = [](const CompareConfig& cfg) {
    for (const auto& m : cfg.methods)
      for (uint64_t seed : settings(cfg).seeds) (void)load_kept(cfg, m, seed);
  };
  // Its task models take the experiment's encoding options and device: every option of the
  // experiment's own rows counts (conservatively) for its finished units.
  e.own_units_read = [](const std::string&) { return true; };
  e.collect = [](const CompareConfig&, const std::vector<json>& units, ComparisonResult& r) {
    AdditionResult a;
    for (size_t i = 0; i < units.size(); ++i) {
      try {
        a.units.push_back(addition_unit_from_json(units[i]));
      } catch (const json::exception& ex) {
        throw IoError("the addition unit " + std::to_string(i + 1) + " sent by its process: " + ex.what());
      }
    }
    r.parts.get<AdditionResult>() = std::move(a);
  };
  e.to_json = [](const ComparisonResult& r, json& j) {
    if (const auto* a = r.parts.find<AdditionResult>(); a && !a->units.empty()) {
      json units = json::array();
      for (const auto& u : a->units) units.push_back(addition_unit_to_json(u));
      j["addition"] = units;
    }
  };
  e.from_json = [](const json& j, ComparisonResult& r, const std::string& source) {
    if (!j.contains("addition")) return;
    AdditionResult a;
    try {
      for (const auto& u : j.at("addition")) a.units.push_back(addition_unit_from_json(u));
    } catch (const json::exception& ex) {
      throw IoError(source + ": addition: " + ex.what());
    }
    r.parts.get<AdditionResult>() = std::move(a);
  };
  e.check = check_units;
  e.write_files = [](const ComparisonResult& r, const ReportDir& out) {
    if (const auto* a = r.parts.find<AdditionResult>(); a && !a->units.empty()) {
      write_addition_csv(r, out.dir + "/addition.csv");
      write_addition_seeds_csv(r, out.dir + "/addition_seeds.csv");
      write_addition_plots(r, out.plots);
    }
    return std::vector<std::string>{};  // shown in the section, not the gallery
  };
  e.markdown = [](const ComparisonResult& r, const ReportDir& out) { return addition_markdown(r, out.plots); };
  e.claims = judge_addition_claims;
  return e;
}

}  // namespace posgrad::train
