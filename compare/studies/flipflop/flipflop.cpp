// flipflop.cpp — see flipflop.h.
#include "compare/studies/flipflop/flipflop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <spdlog/spdlog.h>

#include "compare/markdown.h"
#include "compare/method.h"
#include "compare/studies/study_claims.h"
#include "compare/studies/task/task.h"
#include "data/fileio.h"
#include "nn/gpt.h"
#include "tensor/nograd.h"
#include "train/finetune.h"
#include "train/options.h"
#include "train/seeds.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
using markdown::num;
constexpr int64_t kEvalChunk = 50;  // test sequences per forward

const FlipFlopSettings& settings(const CompareConfig& c) { return c.of<FlipFlopSettings>(); }
// A probability as the flag prints it ("0.98", not "0.980000").
std::string prob(double p) { return opt::format(opt::Value(p)); }

nn::GPTConfig model_config(const CompareConfig& cfg, const std::string& method) {
  const FlipFlopSettings& s = settings(cfg);
  const TaskSettings& t = cfg.of<TaskSettings>();
  nn::GPTConfig mc;
  mc.vocab_size = data::kFlipFlopVocab;
  // Inputs are a sequence but its last token: a learned table covers the longest test input.
  mc.block_size = s.length * *std::max_element(s.multipliers.begin(), s.multipliers.end()) - 1;
  mc.n_layer = t.n_layer;
  mc.n_head = t.n_head;
  mc.n_embd = t.n_embd;
  mc.dropout = 0;
  mc.pos = cfg.base.model.pos;
  mc.attention_sinks = cfg.base.model.attention_sinks;
  apply_method(mc, method);
  return mc;
}

FlipFlopResult run(const CompareConfig& cfg, const std::string& method, uint64_t seed, Device dev) {
  const FlipFlopSettings& s = settings(cfg);
  const auto t0 = std::chrono::steady_clock::now();
  FlipFlopResult r;
  Generator init(stream(seed, "flipflop.init")), drop(stream(seed, "flipflop.dropout")),
      data_gen(stream(seed, "flipflop.data"));
  nn::GPT model(model_config(cfg, method), init, drop);
  model.to(dev);
  const FinetuneSpec spec =
      study_finetune_spec("flip-flop (" + method + " seed " + std::to_string(seed) + ")", s.iters, s.lr, cfg.out_dir);
  r.final_loss = finetune(model, spec, dev, [&](int64_t) {
                   data::FlipFlopBatch b = data::make_flipflop_batch(s.batch, s.length, s.p_train, data_gen);
                   return std::make_pair(b.x, b.y);
                 }).final_loss;
  NoGradGuard ng;
  r.cells = flipflop_cells(s);
  for (FlipFlopCell& c : r.cells) {
    // The test sequences of a cell: the same for every method and seed.
    Generator test_gen(stream(static_cast<uint64_t>(c.multiplier), "flipflop.test." + c.split));
    for (int64_t done = 0; done < s.sequences; done += kEvalChunk) {
      const int64_t n = std::min(kEvalChunk, s.sequences - done);
      const data::FlipFlopBatch b = data::make_flipflop_batch(n, s.length * c.multiplier, c.p_ignore, test_gen);
      c.score += data::score_flipflop_logits(model.forward(b.x.to(dev)).to(Device::cpu()), b.y);
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string line;
  for (const auto& c : r.cells)
    line += fmt::format(" {} {}x {:.3f}/{:.2f}", c.split, c.multiplier, c.score.read_accuracy(), c.score.glitch_rate());
  spdlog::info("[{} seed {}] flip-flop: loss {:.4f}, read accuracy / glitch rate:{} ({:.1f} s)", method, seed,
               r.final_loss, line, r.seconds);
  return r;
}

json to_json(const FlipFlopResult& r) {
  json cells = json::array();
  for (const auto& c : r.cells)
    cells.push_back({{"split", c.split},
                     {"multiplier", c.multiplier},
                     {"p_ignore", c.p_ignore},
                     {"sequences", c.score.sequences},
                     {"reads", c.score.reads},
                     {"wrong_reads", c.score.wrong_reads},
                     {"glitched", c.score.glitched}});
  return {{"final_loss", r.final_loss}, {"seconds", r.seconds}, {"cells", cells}};
}

FlipFlopResult from_json(const json& j) {
  FlipFlopResult r;
  r.final_loss = json_real(j.at("final_loss"));
  r.seconds = json_real(j.at("seconds"));
  for (const auto& c : j.at("cells")) {
    FlipFlopCell x;
    x.split = json_text(c.at("split"));
    x.multiplier = json_int(c.at("multiplier"));
    x.p_ignore = json_real(c.at("p_ignore"));
    x.score.sequences = json_int(c.at("sequences"));
    x.score.reads = json_int(c.at("reads"));
    x.score.wrong_reads = json_int(c.at("wrong_reads"));
    x.score.glitched = json_int(c.at("glitched"));
    r.cells.push_back(std::move(x));
  }
  return r;
}

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const FlipFlopResult* r = u.parts.find<FlipFlopResult>();
  if (!r || r->cells.empty()) return;  // off, or written before the study existed
  const FlipFlopSettings& s = settings(cfg);
  const std::string p = json_path_key(path, "flipflop");
  c.non_negative(r->final_loss, json_path_key(p, "final_loss"));
  c.non_negative(r->seconds, json_path_key(p, "seconds"));
  const auto want = flipflop_cells(s);
  const std::string cp = json_path_key(p, "cells");
  c.size(r->cells.size(), want.size(), cp, "one per --flipflop-multipliers length, then sparse and dense");
  for (size_t i = 0; i < want.size(); ++i) {
    const FlipFlopCell& x = r->cells[i];
    const std::string q = json_path_at(cp, i);
    if (x.split != want[i].split)
      c.fail(json_path_key(q, "split"), ValueCheck::quoted(x.split), "expected " + want[i].split);
    c.equal(x.multiplier, want[i].multiplier, json_path_key(q, "multiplier"), "--flipflop-multipliers");
    if (x.p_ignore != want[i].p_ignore)
      c.fail(json_path_key(q, "p_ignore"), ValueCheck::show(x.p_ignore), "the split's --flipflop-p-* value");
    c.equal(x.score.sequences, s.sequences, json_path_key(q, "sequences"), "--flipflop-sequences");
    // Every sequence ends with a read; a wrong read glitches its sequence, a glitched sequence has one.
    if (x.score.reads < x.score.sequences || x.score.reads > x.score.sequences * s.length * x.multiplier / 2)
      c.fail(json_path_key(q, "reads"), std::to_string(x.score.reads),
             "between one read per sequence and one per pair");
    if (x.score.wrong_reads < 0 || x.score.wrong_reads > x.score.reads)
      c.fail(json_path_key(q, "wrong_reads"), std::to_string(x.score.wrong_reads), "in [0, reads]");
    if (x.score.glitched < 0 || x.score.glitched > std::min(x.score.sequences, x.score.wrong_reads) ||
        (x.score.wrong_reads > 0 && x.score.glitched == 0))
      c.fail(json_path_key(q, "glitched"), std::to_string(x.score.glitched),
             "in [min(1, wrong_reads), min(sequences, wrong_reads)]");
  }
}

void validate(const CompareConfig& cfg) {
  const FlipFlopSettings& s = settings(cfg);
  POSGRAD_CHECK(s.p_sparse >= s.p_train && s.p_train >= s.p_dense, UsageError,
                "the flip-flop splits need --flipflop-p-sparse (", s.p_sparse, ") >= --flipflop-p-train (", s.p_train,
                ") >= --flipflop-p-dense (", s.p_dense,
                "): p is the share of ignore instructions, so sparse "
                "sequences have the most and dense the fewest");
  POSGRAD_CHECK(s.length % 2 == 0, UsageError, "--flipflop-length must be even (instruction-bit pairs), got ",
                s.length);
  POSGRAD_CHECK(std::find(s.multipliers.begin(), s.multipliers.end(), 1) != s.multipliers.end(), UsageError,
                "--flipflop-multipliers must include 1 (the training length)");
  auto sorted = s.multipliers;
  std::sort(sorted.begin(), sorted.end());
  POSGRAD_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), UsageError,
                "--flipflop-multipliers lists a length twice");
  if (s.iters == 0) return;
  for (const auto& m : cfg.methods) {
    nn::GPTConfig g = model_config(cfg, m);
    try {
      g.validate();
    } catch (const ValueError& e) {
      throw UsageError("--methods " + m +
                       " in the flip-flop model (--task-n-embd, --task-n-head, --flipflop-length x " +
                       "--flipflop-multipliers): " + e.what());
    }
    // Its memory before anything is built: training batches of --flipflop-length tokens, the test
    // chunks at the longest length.
    TrainConfig t = cfg.base;
    t.model = g;
    t.model.block_size = s.length;
    t.batch_size = std::max(s.batch, kEvalChunk);
    try {
      check_memory(t, g.block_size);
    } catch (const UsageError& e) {
      throw UsageError(std::string("the flip-flop model of ") + m + " (its sizes: --task-n-layer, --task-n-embd; " +
                       "--block-size below is --flipflop-length, the evaluation --flipflop-length x the largest " +
                       "--flipflop-multipliers, the batch max(--flipflop-batch, 50)): " + e.what());
    }
  }
}

void options(opt::Table<CompareConfig>& t) {
  using namespace opt;
  Rows<CompareConfig> r(t);
  // Added after results were first written: a file without an option ran no flip-flop study, and
  // the other options read as their defaults.
  r.group("Flip-flop language modelling (Liu et al. 2023)")
      .add(added_later(integer("flipflop_iters", closed(0, kMany),
                               "Training steps of the flip-flop model (0: no flip-flop study)", "steps"),
                       int64_t{0}),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().iters))
      .add(added_later(integer("flipflop_length", closed(4, 1 << 16),
                               "Training sequence length (even: instruction-bit pairs)", "tokens"),
                       int64_t{64}),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().length))
      .add(added_later(integer("flipflop_batch", closed(1, 4096), "Flip-flop sequences per training step", "sequences"),
                       int64_t{32}),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().batch))
      .add(added_later(integer("flipflop_sequences", closed(1, 1 << 20), "Test sequences per cell (split x length)",
                               "sequences"),
                       int64_t{200}),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().sequences))
      .add(added_later(real("flipflop_lr", open_closed(0, 1), "Peak learning rate of the flip-flop model"), 3e-3),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().lr))
      .add(added_later(real("flipflop_p_train", closed(0, 1),
                            "p(ignore) of the training and in-distribution sequences (FFL(p))"),
                       0.8),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().p_train))
      .add(added_later(real("flipflop_p_sparse", closed(0, 1),
                            "p(ignore) of the sparse test sequences (rare, long-range reads)"),
                       0.98),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().p_sparse))
      .add(added_later(real("flipflop_p_dense", closed(0, 1), "p(ignore) of the dense test sequences"), 0.1),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().p_dense))
      .add(added_later(integer_list("flipflop_multipliers", closed(1, 64), 1, 8,
                                    "In-distribution test lengths as multiples of --flipflop-length (must include 1)"),
                       std::vector<int64_t>{1, 2, 4}),
           POSGRAD_MEMBER(template of<FlipFlopSettings>().multipliers));
}

void preset(CompareConfig& c, const std::string& name) {
  FlipFlopSettings& s = c.of<FlipFlopSettings>();
  if (name == "quick") {
    // 600 steps: RoPE and ALiBi reach read accuracy >= 0.999 in distribution (seed 1), NoPE, T5 and the
    // learned table stay near 0.7; at 400 steps RoPE had not yet learned it (docs/presets.md).
    s.iters = 600;
  } else if (name == "full") {
    s.iters = 3000;
    s.length = 128;
    s.sequences = 500;
  } else if (name == "tiny") {
    s.iters = 3;
    s.length = 8;
    s.batch = 4;
    s.sequences = 3;
    s.multipliers = {1, 2};
  }
}

// Per seed, a cell's proportion with its number of sequences (glitch) or reads (read accuracy).
std::map<uint64_t, Scored> scored(const ComparisonResult& r, const std::string& method, const std::string& split,
                                  int64_t k, bool glitch) {
  std::map<uint64_t, Scored> out;
  for (const auto& u : r.units) {
    if (u.method != method) continue;
    const FlipFlopResult* f = u.parts.find<FlipFlopResult>();
    if (!f) continue;
    for (const auto& c : f->cells)
      if (c.split == split && c.multiplier == k) {
        const double v = glitch ? c.score.glitch_rate() : c.score.read_accuracy();
        if (std::isfinite(v)) out[u.seed] = Scored{v, glitch ? c.score.sequences : c.score.reads};
      }
  }
  return out;
}

std::optional<double> value(const CompareConfig&, const UnitResult& u, const std::string& row, const Metric& m) {
  const FlipFlopResult* f = u.parts.find<FlipFlopResult>();
  if (row != u.method || !f) return std::nullopt;
  for (const auto& c : f->cells)
    if (flipflop_metric(c.split, c.multiplier, true).label == m.label)
      return c.score.glitch_rate();
    else if (flipflop_metric(c.split, c.multiplier, false).label == m.label)
      return c.score.read_accuracy();
  return std::nullopt;
}

bool any_results(const ComparisonResult& r) {
  for (const auto& u : r.units)
    if (const FlipFlopResult* f = u.parts.find<FlipFlopResult>(); f && !f->cells.empty()) return true;
  return false;
}

std::string cell_name(const FlipFlopCell& c) { return c.split + " " + std::to_string(c.multiplier) + "x"; }

void write_csv(const ComparisonResult& r, const std::string& path) {
  std::ostringstream o;
  o << "method,seed,split,multiplier,p_ignore,sequences,reads,wrong_reads,glitched,read_accuracy,glitch_rate,"
       "glitch_wilson_low,glitch_wilson_high\n";
  for (const auto& m : r.config.methods)
    for (uint64_t seed : r.config.seeds)
      for (const auto& u : r.units) {
        if (u.method != m || u.seed != seed) continue;
        const FlipFlopResult* f = u.parts.find<FlipFlopResult>();
        if (!f) continue;
        for (const auto& c : f->cells) {
          const Proportion w = wilson_interval(c.score.glitched, c.score.sequences);
          o << m << ',' << seed << ',' << c.split << ',' << c.multiplier << ',' << prob(c.p_ignore) << ','
            << c.score.sequences << ',' << c.score.reads << ',' << c.score.wrong_reads << ',' << c.score.glitched << ','
            << num(c.score.read_accuracy()) << ',' << num(c.score.glitch_rate()) << ',' << num(w.low) << ','
            << num(w.high) << '\n';
        }
      }
  write_file_atomic(path, o.str());
}

// plots/flipflop_glitch.png: the glitch rate per cell (mean over seeds, 95% interval clipped to
// [0, 1]), one line per method. Returns whether gnuplot drew it.
bool write_plot(const ComparisonResult& r, const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::string d = std::filesystem::absolute(dir).string();
  const auto cells = flipflop_cells(settings(r.config));
  std::ofstream dat(d + "/flipflop_glitch.dat");
  std::string plot = "plot ";
  int idx = 0;
  for (const auto& m : r.config.methods) {
    dat << "# " << m << "\n";
    int points = 0;
    for (size_t k = 0; k < cells.size(); ++k) {
      const Summary s = summary(r, m, flipflop_metric(cells[k].split, cells[k].multiplier, true));
      if (!s.n) continue;
      ++points;
      const double lo = s.has_interval() ? std::max(0.0, s.ci_low) : s.mean;
      const double hi = s.has_interval() ? std::min(1.0, s.ci_high) : s.mean;
      dat << k << " " << s.mean << " " << lo << " " << hi << "\n";
    }
    dat << "\n\n";
    if (points)
      plot += std::string(plot.size() > 5 ? ", " : "") + "'flipflop_glitch.dat' index " + std::to_string(idx) +
              " with yerrorlines lw 2 title '" + m + "'";
    ++idx;
  }
  dat.close();
  if (plot.size() <= 5) return false;
  std::string tics;
  for (size_t k = 0; k < cells.size(); ++k) tics += (k ? ", '" : "'") + cell_name(cells[k]) + "' " + std::to_string(k);
  {
    std::ofstream gp(d + "/flipflop_glitch.gp");
    gp << markdown::gnuplot_style() << "set output 'flipflop_glitch.png'\nset xtics (" << tics << ")\n"
       << "set xrange [-0.3:" << cells.size() - 0.7 << "]\nset yrange [0:1.05]\nset ylabel 'glitch rate (sequences "
       << "with a wrong read)'\nset title 'Flip-flop: glitch rate per test cell (mean and 95% interval over "
       << r.config.seeds.size() << " seeds)'\n"
       << plot << "\n";
  }
  return markdown::run_gnuplot(d, "flipflop_glitch.gp") && std::filesystem::exists(d + "/flipflop_glitch.png");
}

std::string section(const ComparisonResult& r, bool plot_drawn) {
  const FlipFlopSettings& s = settings(r.config);
  const auto cells = flipflop_cells(s);
  std::ostringstream md;
  md << "## Flip-flop language modelling\n\n"
     << "Liu et al. 2023 §3: sequences of instruction-bit pairs, `w b` writes b, `i b` is ignored, `r b` must read "
     << "the last written bit. Trained " << s.iters << " steps of " << s.batch << " FFL(" << prob(s.p_train)
     << ") sequences of " << s.length << " tokens (the task models' sizes: " << r.config.of<TaskSettings>().n_layer
     << " layers, " << r.config.of<TaskSettings>().n_embd << " wide), the loss on the read bits only (Liu et al. train "
     << "on every token; the other tokens are random and add only irreducible loss). Scored by teacher-forced "
     << "argmax at every read on " << s.sequences << " fixed test sequences per cell: in distribution at each length, "
     << "sparse FFL(" << prob(s.p_sparse) << ": long gaps between a write and its read) and dense FFL("
     << prob(s.p_dense) << ") at the training length. Glitch rate: the share of sequences with any wrong read. "
     << "Mean [95% interval] over seeds; `flipflop.csv` has every seed's counts with Wilson intervals. A model that "
     << "ignores its input reads 0.5; NoPE can solve the task (the last write is found by content and the causal "
     << "mask). Beyond the training length a learned table's rows were never trained.\n\n";
  std::vector<std::string> head = {"method", "read accuracy, in 1x"};
  for (const auto& c : cells) head.push_back("glitch rate, " + cell_name(c));
  markdown::Table t(head);
  for (const auto& m : r.config.methods) {
    std::vector<std::string> row = {m, markdown::bounded_cell(summary(r, m, flipflop_metric("in", 1, false)), 3, 0, 1)};
    for (const auto& c : cells)
      row.push_back(markdown::bounded_cell(summary(r, m, flipflop_metric(c.split, c.multiplier, true)), 3, 0, 1));
    t.row(row);
  }
  md << t.markdown() << "\n";
  if (plot_drawn) md << "![flipflop_glitch](plots/flipflop_glitch.png)\n\n";
  return md.str();
}

}  // namespace

std::vector<FlipFlopCell> flipflop_cells(const FlipFlopSettings& s) {
  std::vector<FlipFlopCell> out;
  auto ks = s.multipliers;
  std::sort(ks.begin(), ks.end());
  for (int64_t k : ks) out.push_back({"in", k, s.p_train, {}});
  out.push_back({"sparse", 1, s.p_sparse, {}});
  out.push_back({"dense", 1, s.p_dense, {}});
  return out;
}

Metric flipflop_metric(const std::string& split, int64_t multiplier, bool glitch) {
  Metric m;
  m.study = FlipFlopResult::kStudy;
  m.multiplier = multiplier;
  m.label = std::string(glitch ? "flipflop_glitch_rate_" : "flipflop_read_accuracy_") + split + "_x" +
            std::to_string(multiplier);
  m.lower_better = glitch;
  m.digits = 3;
  return m;
}

std::vector<ClaimVerdict> judge_flipflop_claims(const ComparisonResult& r) {
  std::vector<ClaimVerdict> out;
  if (!any_results(r)) return out;
  const FlipFlopSettings& s = settings(r.config);
  const std::string claim =
      "A Transformer that fits flip-flop in distribution still glitches on sparse sequences "
      "(Liu et al. 2023 §4)";
  const std::string metric = "glitch rate (sequences with a wrong read): sparse FFL(" + prob(s.p_sparse) +
                             ") above in-distribution FFL(" + prob(s.p_train) + ") at " + std::to_string(s.length) +
                             " tokens, margin_test (margin 0; seeds' and test sequences' noise); only where the "
                             "in-distribution read accuracy is at least " +
                             num(kFlipFlopLearned, 2) + "; one test";
  const std::string budget = std::to_string(s.iters) + " steps of " + std::to_string(s.batch) + "x" +
                             std::to_string(s.length) + " tokens x " + std::to_string(r.config.seeds.size()) +
                             " seeds; " + std::to_string(s.sequences) + " test sequences per cell";
  for (const auto& m : r.config.methods) {
    const auto acc = scored(r, m, "in", 1, false);
    const auto in = scored(r, m, "in", 1, true), sparse = scored(r, m, "sparse", 1, true);
    if (acc.empty() || in.empty() || sparse.empty()) continue;
    double learned = 0;
    for (const auto& [seed, x] : acc) learned += x.value / static_cast<double>(acc.size());
    const MarginTest t = margin_test(m + " sparse above in-distribution", sparse, in, false, 0.0);
    // The glitch rates pooled over the seeds, with the Wilson interval of the pooled count (a
    // description; the verdict is margin_test's).
    auto pooled = [](const std::map<uint64_t, Scored>& v) {
      int64_t k = 0, n = 0;
      for (const auto& [seed, x] : v) {
        k += static_cast<int64_t>(std::llround(x.value * static_cast<double>(x.examples)));
        n += x.examples;
      }
      const Proportion w = wilson_interval(k, n);
      return num(n ? static_cast<double>(k) / static_cast<double>(n) : NAN, 3) + " (" + std::to_string(k) + "/" +
             std::to_string(n) + " [" + num(w.low, 3) + ", " + num(w.high, 3) + "])";
    };
    const std::string measured = "read accuracy in 1x " + num(learned, 3) + "; glitch rate in " + pooled(in) +
                                 ", sparse " + pooled(sparse) + "; sparse − in " + margin_text(t, 3);
    Judgement j;
    if (learned < kFlipFlopLearned) {
      j = {kInconclusive,
           m + " did not learn flip-flop in distribution (read accuracy " + num(learned, 3) + " < " +
               num(kFlipFlopLearned, 2) + "): a glitch beyond a task not learned says nothing",
           0};
    } else {
      std::vector<ClaimTest> tests = {t.test};
      j = judge_family(tests, "");
    }
    out.push_back(claim_from("f1 " + m, claim, metric, measured, j, budget));
  }
  return out;
}

StudyEntry flipflop_study() {
  StudyEntry e;
  e.name = FlipFlopResult::kStudy;
  e.summary =
      "flip-flop language modelling: read accuracy and glitch rate in distribution, on sparse and dense "
      "sequences and beyond the training length (Liu et al. 2023)";
  e.init_settings = [](Parts& p) { p.get<FlipFlopSettings>(); };
  e.options = options;
  e.preset = preset;
  e.validate = validate;
  e.enabled = [](const CompareConfig& c) { return c.of<FlipFlopSettings>().iters > 0; };
  e.run_unit = [](UnitContext& ctx) {
    ctx.unit.parts.get<FlipFlopResult>() = run(ctx.cfg, ctx.method, ctx.seed, ctx.dev);
  };
  e.unit_to_json = [](const UnitResult& u, json& j) {
    const FlipFlopResult* f = u.parts.find<FlipFlopResult>();
    if (f && !f->cells.empty()) j["flipflop"] = to_json(*f);
  };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    if (j.contains("flipflop")) u.parts.get<FlipFlopResult>() = from_json(j.at("flipflop"));
  };
  e.check_unit = check_part;
  e.metrics = [](const CompareConfig& c) {
    std::vector<Metric> m;
    if (c.of<FlipFlopSettings>().iters == 0) return m;
    for (const auto& cell : flipflop_cells(c.of<FlipFlopSettings>())) {
      m.push_back(flipflop_metric(cell.split, cell.multiplier, false));
      m.push_back(flipflop_metric(cell.split, cell.multiplier, true));
    }
    return m;
  };
  e.value = value;
  e.write_files = [](const ComparisonResult& r, const ReportDir& out) {
    if (any_results(r)) {
      write_csv(r, out.dir + "/flipflop.csv");
      write_plot(r, out.plots);
    }
    return std::vector<std::string>{};  // shown in the section, not the gallery
  };
  e.markdown = [](const ComparisonResult& r, const ReportDir& out) {
    return any_results(r) ? section(r, std::filesystem::exists(out.plots + "/flipflop_glitch.png")) : std::string();
  };
  e.claims = judge_flipflop_claims;
  return e;
}

}  // namespace posgrad::train
