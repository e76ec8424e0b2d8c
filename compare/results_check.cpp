// results_check.cpp — the range and consistency checks of results read back (results.h:
// check_unit, check_comparison, read_comparison). The rules, one per quantity, are stated in
// results.h; every failure names the file and the JSON path of the value (compare/value_check.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "compare/options.h"
#include "train/options.h"
#include "compare/studies/encoder/encoder_track.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/compare_eval.h"
#include "compare/results.h"
#include "compare/value_check.h"

namespace posgrad::train {

namespace {

std::string at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }
std::string dot(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

void check_length(const ValueCheck& c, const LengthResult& l, int64_t context, const std::string& p) {
  c.equal(l.context, context, dot(p, "context"), "the evaluation multiplier x --block-size");
  c.positive(l.windows, dot(p, "windows"));
  c.loss_and_perplexity(l.loss, l.perplexity, p);
  c.fraction(l.accuracy, dot(p, "accuracy"));
}

// A row of lengths, index-aligned with eval_multipliers; null where the method cannot run, never at 1x.
void check_lengths(const ValueCheck& c, const std::vector<std::optional<LengthResult>>& v, const CompareConfig& cfg,
                   const std::string& p) {
  c.size(v.size(), cfg.eval_multipliers.size(), p, "one per --eval-multipliers " + ValueCheck::list(cfg.eval_multipliers));
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t m = cfg.eval_multipliers[i];
    if (!v[i]) {
      if (m == 1) c.fail(at(p, i), "null", "every method is evaluated at the training length (multiplier 1)");
      continue;
    }
    check_length(c, *v[i], m * cfg.base.model.block_size, at(p, i));
  }
}

void check_curve(const ValueCheck& c, const std::vector<std::pair<int64_t, double>>& v, const CompareConfig& cfg,
                 const std::string& p) {
  int64_t last = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    const auto [step, loss] = v[i];
    if (step <= last || step > cfg.base.max_iters)
      c.fail(at(p, i) + "[0]", std::to_string(step),
             "steps must increase and lie in [0, --max-iters " + std::to_string(cfg.base.max_iters) + "]");
    last = step;
    c.at_least(loss, 0.0, at(p, i) + "[1]", "a loss");
  }
}

bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

void check_suite(const ValueCheck& c, const UnitResult& u, const CompareConfig& cfg, const std::string& p) {
  // run_length_suite: per task, the plain row, then the randomized one where the method is listed.
  std::vector<std::pair<std::string, bool>> want;
  if (cfg.suite_iters > 0)
    for (const auto& t : cfg.suite_tasks) {
      want.emplace_back(t, false);
      if (contains(cfg.suite_randomized, u.method)) want.emplace_back(t, true);
    }
  c.size(u.suite.size(), want.size(), p,
         cfg.suite_iters > 0 ? "--suite-tasks " + ValueCheck::list(cfg.suite_tasks) + ", plain and randomized rows"
                             : "--suite-iters 0: no suite");
  const auto buckets = suite_buckets(cfg);
  for (size_t i = 0; i < want.size(); ++i) {
    const SuiteTaskResult& s = u.suite[i];
    const std::string q = at(p, i);
    if (s.task != want[i].first || s.randomized != want[i].second)
      c.fail(q, ValueCheck::quoted(suite_row(s.task, s.randomized)),
             "expected task " + ValueCheck::quoted(want[i].first) + (want[i].second ? " randomized" : " plain") +
                 " (the order of --suite-tasks)");
    c.non_negative(s.final_loss, dot(q, "final_loss"));
    c.non_negative(s.seconds, dot(q, "seconds"));
    c.size(s.buckets.size(), buckets.size(), dot(q, "buckets"), "--suite-max-multiplier");
    for (size_t k = 0; k < buckets.size(); ++k) {
      const SuiteBucket& b = s.buckets[k];
      const std::string r = at(dot(q, "buckets"), k);
      c.equal(b.lo, buckets[k].first, dot(r, "lo"), "bucket k of --suite-length");
      c.equal(b.hi, buckets[k].second, dot(r, "hi"), "bucket k of --suite-length");
      c.count(b.examples, dot(r, "examples"));
      c.fraction(b.sequence_accuracy, dot(r, "sequence_accuracy"));
      c.fraction(b.token_accuracy, dot(r, "token_accuracy"));
    }
  }
}

void check_pi(const ValueCheck& c, const UnitResult& u, const CompareConfig& cfg, const std::string& p) {
  const bool runs = u.method == "rope" && cfg.pi_iters > 0;
  const size_t want = runs ? cfg.pi_multipliers.size() * cfg.pi_scalings.size() : 0;
  c.size(u.pi.size(), want, p,
         runs ? "--pi-multipliers x --pi-scalings" : "the protocol runs on rope units with --pi-iters > 0 only");
  for (size_t i = 0; i < want; ++i) {
    const PiResult& r = u.pi[i];
    const std::string q = at(p, i);
    const int64_t m = cfg.pi_multipliers[i / cfg.pi_scalings.size()];
    const std::string& s = cfg.pi_scalings[i % cfg.pi_scalings.size()];
    if (r.scaling != s) c.fail(dot(q, "scaling"), ValueCheck::quoted(r.scaling), "expected " + ValueCheck::quoted(s) + " (--pi-scalings, in order)");
    c.equal(r.multiplier, m, dot(q, "multiplier"), "--pi-multipliers, in order");
    c.equal(r.iters, cfg.pi_iters, dot(q, "iters"), "--pi-iters");
    c.positive(r.batch, dot(q, "batch"));
    c.non_negative(r.first_loss, dot(q, "first_loss"));
    c.non_negative(r.final_loss, dot(q, "final_loss"));
    c.non_negative(r.seconds, dot(q, "seconds"));
    check_lengths(c, r.lengths, cfg, dot(q, "lengths"));
  }
}

void check_passkey(const ValueCheck& c, const UnitResult& u, const CompareConfig& cfg, const std::string& p) {
  const PasskeyConfig& k = cfg.passkey;
  if (k.iters == 0) {
    if (!u.passkey.empty()) c.fail(p, "", "holds rows, but --passkey-iters is 0 (no passkey test)");
    return;
  }
  if (!u.passkey.count(u.method)) c.fail(p, "", "has no row " + ValueCheck::quoted(u.method) + " (--passkey-iters > 0)");
  const size_t cells = k.multipliers.size() * k.depths.size();
  for (const auto& [row, r] : u.passkey) {
    const std::string q = p + "[" + ValueCheck::quoted(row) + "]";
    if (row.substr(0, row.find_first_of("+@ ")) != u.method)
      c.fail(q, "", "a row of unit " + ValueCheck::quoted(u.method) + " must be that method or a variant of it");
    c.non_negative(r.final_loss, dot(q, "final_loss"));
    if (r.grid.alphabet != "digits" && r.grid.alphabet != "letters")
      c.fail(dot(q, "alphabet"), ValueCheck::quoted(r.grid.alphabet), "expected \"digits\" or \"letters\" (data/passkey.h)");
    c.size(r.grid.cells.size(), cells, dot(q, "cells"), "--passkey-multipliers x --passkey-depths");
    for (size_t i = 0; i < cells; ++i) {
      const PasskeyCell& e = r.grid.cells[i];
      const std::string s = at(dot(q, "cells"), i);
      c.equal(e.multiplier, k.multipliers[i / k.depths.size()], dot(s, "multiplier"), "--passkey-multipliers, in order");
      const double depth = k.depths[i % k.depths.size()];
      if (e.depth != depth)
        c.fail(dot(s, "depth"), ValueCheck::show(e.depth), "expected " + ValueCheck::show(depth) + " (--passkey-depths, in order)");
      c.count(e.examples, dot(s, "examples"));
      if (e.accuracy) c.fraction(*e.accuracy, dot(s, "accuracy"));
      else if (e.multiplier == 1) c.fail(dot(s, "accuracy"), "null", "every row is scored at the training length, where it was fine-tuned");
    }
  }
}

}  // namespace

void check_unit(const UnitResult& u, const CompareConfig& cfg, const std::string& source, const std::string& path,
                const std::string& advice) {
  const ValueCheck c(source, advice);
  const std::string& p = path;
  if (!contains(cfg.methods, u.method))
    c.fail(dot(p, "method"), ValueCheck::quoted(u.method), "not among the configured methods (" + ValueCheck::list(cfg.methods) + ")");
  if (std::find(cfg.seeds.begin(), cfg.seeds.end(), u.seed) == cfg.seeds.end())
    c.fail(dot(p, "seed"), std::to_string(u.seed), "not among the configured seeds (" + ValueCheck::list(cfg.seeds) + ")");
  c.count(u.parameters, dot(p, "parameters"));
  if (u.position_parameters < 0 || u.position_parameters > u.parameters)
    c.fail(dot(p, "position_parameters"), std::to_string(u.position_parameters),
           "must lie in [0, parameters " + std::to_string(u.parameters) + "]");
  check_curve(c, u.train_curve, cfg, dot(p, "train_curve"));
  check_curve(c, u.val_curve, cfg, dot(p, "val_curve"));
  check_lengths(c, u.lengths, cfg, dot(p, "lengths"));
  // The derived rows are exactly those a rope unit makes (rope_variant_rows less the skipped ones).
  std::vector<std::string> want_variants;
  if (u.method == "rope") {
    const auto skipped = skipped_rope_variants(cfg);
    for (const auto& row : rope_variant_rows())
      if (!skipped.count(row)) want_variants.push_back(row);
  }
  for (const auto& row : want_variants)
    if (!u.variants.count(row)) c.fail(dot(p, "variants"), "", "has no row " + ValueCheck::quoted(row) + ", which every rope unit measures");
  for (const auto& [name, v] : u.variants) {
    const std::string q = dot(p, "variants") + "[" + ValueCheck::quoted(name) + "]";
    if (!contains(want_variants, name))
      c.fail(q, "", want_variants.empty() ? "only rope units have derived rows"
                                          : "not a derived row of this configuration (" + ValueCheck::list(want_variants) + ")");
    if (name.substr(0, name.find_first_of("+@")) != u.method || name.find_first_of("+@") == std::string::npos)
      c.fail(q, "", "a variant of unit " + ValueCheck::quoted(u.method) + " is named " + u.method + "+<scaling> or " +
                        u.method + "@<precision>");
    check_lengths(c, v, cfg, q);
  }
  // The curves and profiles every unit records: the training curve (one point per --log-interval),
  // the per-position loss where that window was evaluated, the attention profile per layer.
  if (cfg.base.max_iters > 0 && u.train_curve.empty()) c.fail(dot(p, "train_curve"), "[]", "a trained unit has a training curve");
  if (cfg.base.max_iters >= cfg.base.eval_interval && u.val_curve.empty())
    c.fail(dot(p, "val_curve"), "[]", "a unit trained past --eval-interval has validation points");
  {
    const auto it = std::find(cfg.eval_multipliers.begin(), cfg.eval_multipliers.end(), cfg.per_position_multiplier);
    const bool evaluated = it != cfg.eval_multipliers.end() && static_cast<size_t>(it - cfg.eval_multipliers.begin()) < u.lengths.size() &&
                           u.lengths[static_cast<size_t>(it - cfg.eval_multipliers.begin())].has_value();
    c.size(u.per_position_loss.size(), evaluated ? static_cast<size_t>(cfg.per_position_multiplier * cfg.base.model.block_size) : 0,
           dot(p, "per_position_loss"), "one per position of the --per-position-multiplier window, where it was evaluated");
  }
  c.size(u.attention_by_distance.size(), static_cast<size_t>(cfg.base.model.n_layer), dot(p, "attention_by_distance"),
         "one profile per layer (--n-layer)");
  for (size_t l = 0; l < u.attention_by_distance.size(); ++l)
    c.size(u.attention_by_distance[l].size(), static_cast<size_t>(cfg.base.model.block_size),
           at(dot(p, "attention_by_distance"), l), "one weight per distance 0..--block-size - 1");
  for (size_t i = 0; i < u.per_position_loss.size(); ++i) c.at_least(u.per_position_loss[i], 0.0, at(dot(p, "per_position_loss"), i), "a loss");
  for (size_t l = 0; l < u.attention_by_distance.size(); ++l)
    for (size_t i = 0; i < u.attention_by_distance[l].size(); ++i)
      c.at_least(u.attention_by_distance[l][i], 0.0, at(at(dot(p, "attention_by_distance"), l), i), "an attention weight");
  c.size(u.task.size(), cfg.task_multipliers.size(), dot(p, "task"),
         "one per --task-multipliers " + ValueCheck::list(cfg.task_multipliers));
  for (size_t i = 0; i < u.task.size(); ++i) {
    if (!u.task[i]) {
      if (cfg.task_multipliers[i] == 1) c.fail(at(dot(p, "task"), i), "null", "every method is scored at the task's training length");
      continue;
    }
    const std::string q = at(dot(p, "task"), i);
    c.equal(u.task[i]->length, cfg.task_multipliers[i] * cfg.task_length, dot(q, "length"), "the task multiplier x --task-length");
    c.count(u.task[i]->examples, dot(q, "examples"));
    c.fraction(u.task[i]->exact_match, dot(q, "exact_match"));
    c.fraction(u.task[i]->token_f1, dot(q, "token_f1"));
    c.fraction(u.task[i]->token_accuracy, dot(q, "token_accuracy"));
  }
  c.at_least(u.task_final_loss, 0.0, dot(p, "task_final_loss"), "a loss");
  check_suite(c, u, cfg, dot(p, "suite"));
  check_pi(c, u, cfg, dot(p, "pi"));
  check_passkey(c, u, cfg, dot(p, "passkey"));
  c.non_negative(u.train_seconds, dot(p, "train_seconds"));
}

void check_comparison(const ComparisonResult& r, const std::string& source) {
  const std::string advice = " (results.json was edited or damaged; run posgrad compare again to remake it)";
  const ValueCheck c(source, advice);
  const CompareConfig& cfg = r.config;
  if (cfg.methods.empty()) c.fail("config.methods", "[]", "no method configured");
  if (cfg.seeds.empty()) c.fail("config.seeds", "[]", "no seed configured");
  // Every rule the command line enforces (a seed or a method twice, n_embd % n_head, ...), except the
  // memory estimate, which belongs to the machine that ran it.
  try {
    const SkipMemoryChecks not_this_machine;
    cfg.validate();
  } catch (const ValueError& e) {
    c.fail("config", "", std::string("a configuration posgrad compare refuses: ") + e.what());
  }
  c.count(r.provenance.threads, "provenance.threads");
  // The decoder units: exactly one per (configured method, configured seed); none for --track encoder.
  const bool decoder = cfg.track != "encoder";
  std::map<std::pair<std::string, uint64_t>, size_t> seen;
  for (size_t i = 0; i < r.units.size(); ++i) {
    const UnitResult& u = r.units[i];
    const std::string p = at("units", i);
    if (!decoder) c.fail(p, "", "--track encoder has no decoder units");
    check_unit(u, cfg, source, p, advice);
    const auto [it, fresh] = seen.emplace(std::make_pair(u.method, u.seed), i);
    if (!fresh)
      c.fail(p, "", "a second unit for (" + u.method + ", seed " + std::to_string(u.seed) + "); the first is " +
                        at("units", it->second));
  }
  if (decoder)
    for (const auto& m : cfg.methods)
      for (uint64_t s : cfg.seeds)
        if (!seen.count({m, s}))
          c.fail("units", "", "no unit for (" + m + ", seed " + std::to_string(s) + "), but config.seeds claims " +
                                  ValueCheck::list(cfg.seeds) + " for each of " + ValueCheck::list(cfg.methods));
  // The cost benchmark (none for --track encoder).
  c.count(r.cost.threads, "cost.threads");
  if (decoder) {  // every method at every --cost-lengths, attention and step, one time per round
    c.equal(r.cost.rounds, cfg.cost_rounds, "cost.rounds", "--cost-rounds");
    if (r.cost.lengths != cfg.cost_lengths) c.fail("cost.lengths", ValueCheck::list(r.cost.lengths), "expected --cost-lengths " + ValueCheck::list(cfg.cost_lengths));
    c.size(r.cost.rows.size(), cfg.methods.size() * cfg.cost_lengths.size() * 2, "cost.rows",
           "one attention and one step row per method and --cost-lengths");
    for (const auto& m : cfg.methods)
      for (int64_t T : cfg.cost_lengths)
        for (const char* what : {"attention", "step"})
          if (!r.cost.find(m, what, T))
            c.fail("cost.rows", "", std::string("no ") + what + " row for " + m + " at T = " + std::to_string(T));
    for (size_t i = 0; i < r.cost.rows.size(); ++i)
      c.size(r.cost.rows[i].seconds.size(), static_cast<size_t>(cfg.cost_rounds), at("cost.rows", i) + ".seconds", "one per round (--cost-rounds)");
  }
  for (size_t i = 0; i < r.cost.lengths.size(); ++i) c.positive(r.cost.lengths[i], at("cost.lengths", i));
  for (size_t i = 0; i < r.cost.rows.size(); ++i) {
    const CostRow& row = r.cost.rows[i];
    const std::string p = at("cost.rows", i);
    if (!contains(cfg.methods, row.method))
      c.fail(dot(p, "method"), ValueCheck::quoted(row.method), "not among the configured methods (" + ValueCheck::list(cfg.methods) + ")");
    if (row.what != "attention" && row.what != "step")
      c.fail(dot(p, "what"), ValueCheck::quoted(row.what), "expected \"attention\" or \"step\"");
    c.positive(row.T, dot(p, "T"));
    c.positive(row.batch, dot(p, "batch"));
    for (size_t k = 0; k < row.seconds.size(); ++k) c.non_negative(row.seconds[k], at(dot(p, "seconds"), k));
    c.count(row.peak_bytes, dot(p, "peak_bytes"));
    c.count(row.parameters, dot(p, "parameters"));
  }
  // The encoder track: present exactly when configured.
  if ((cfg.track != "decoder") != r.encoder.has_value())
    c.fail("encoder", "", r.encoder ? "present, but config.track is \"decoder\"" : "missing, but config.track is " +
                                                                                        ValueCheck::quoted(cfg.track));
  if (r.encoder) check_encoder_track(*r.encoder, cfg, source, advice);
}

void check_encoder_track(const EncoderTrackResult& e, const CompareConfig& cfg, const std::string& source,
                         const std::string& advice) {
  const ValueCheck c(source, advice);
  const EncoderTrackConfig& ec = e.config;
  try {
    ec.validate();
  } catch (const ValueError& x) {
    c.fail("encoder.config", "", x.what());
  }
  // The track ran with the comparison's methods, seeds and --encoder-* settings (encoder_track_config).
  const EncoderTrackConfig want = encoder_track_config(cfg);
  if (ec.method_list() != want.method_list())
    c.fail("encoder.config.methods", ValueCheck::list(ec.method_list()), "config.methods is " + ValueCheck::list(want.method_list()));
  if (ec.seeds != want.seeds)
    c.fail("encoder.config.seeds", ValueCheck::list(ec.seeds), "config.seeds is " + ValueCheck::list(want.seeds));
  const nlohmann::json have_s = ec.settings_json(), want_s = want.settings_json();
  // Only the settings that are options of the comparison (--encoder-<key>) are recorded in its config.
  std::set<std::string> options;
  for (const auto& o : compare_options()) options.insert(o.spec.name);
  for (const auto& [k, v] : want_s.items())
    if (options.count("encoder_" + k) && (!have_s.contains(k) || have_s[k] != v))
      c.fail("encoder.config." + k, have_s.contains(k) ? have_s[k].dump() : "missing",
             "config's --encoder-" + k + " is " + v.dump());
  std::map<std::pair<std::string, uint64_t>, size_t> seen;
  for (size_t i = 0; i < e.units.size(); ++i) {
    const EncoderUnitResult& u = e.units[i];
    const std::string p = at("encoder.units", i);
    check_encoder_unit(u, ec, source, p, advice);
    const auto [it, fresh] = seen.emplace(std::make_pair(u.method, u.seed), i);
    if (!fresh)
      c.fail(p, "", "a second encoder unit for (" + u.method + ", seed " + std::to_string(u.seed) + "); the first is " +
                        at("encoder.units", it->second));
  }
  for (const auto& m : ec.method_list())
    for (uint64_t s : ec.seeds)
      if (!seen.count({m, s}))
        c.fail("encoder.units", "", "no unit for (" + m + ", seed " + std::to_string(s) + "), but encoder.config.seeds claims " +
                                        ValueCheck::list(ec.seeds));
}

ComparisonResult read_comparison(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = opt::parse_json_limited(text, source, 256 << 20, 16);
  } catch (const UsageError& e) {
    throw IoError(e.what());
  }
  ComparisonResult r = comparison_from_json(j, source);
  check_comparison(r, source);
  return r;
}

}  // namespace posgrad::train
