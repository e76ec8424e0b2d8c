// results_check.cpp — the range and consistency checks of results read back (results.h:
// check_unit, check_comparison, read_comparison). The rules, one per quantity, are stated in
// results.h; every failure names the file and the JSON path of the value (compare/value_check.h).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "compare/options.h"
#include "compare/results.h"
#include "compare/study.h"
#include "compare/value_check.h"
#include "train/options.h"

namespace posgrad::train {

namespace {

std::string at(const std::string& path, size_t i) { return json_path_at(path, i); }
std::string dot(const std::string& path, const std::string& key) { return json_path_key(path, key); }

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

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

void check_unit(const UnitResult& u, const CompareConfig& cfg, const std::string& source, const std::string& path,
                const std::string& advice) {
  const ValueCheck c(source, advice);
  const std::string& p = path;
  if (!contains(cfg.methods, u.method))
    c.fail(dot(p, "method"), ValueCheck::quoted(u.method),
           "not among the configured methods (" + ValueCheck::list(cfg.methods) + ")");
  if (std::find(cfg.seeds.begin(), cfg.seeds.end(), u.seed) == cfg.seeds.end())
    c.fail(dot(p, "seed"), std::to_string(u.seed),
           "not among the configured seeds (" + ValueCheck::list(cfg.seeds) + ")");
  c.count(u.parameters, dot(p, "parameters"));
  if (u.position_parameters < 0 || u.position_parameters > u.parameters)
    c.fail(dot(p, "position_parameters"), std::to_string(u.position_parameters),
           "must lie in [0, parameters " + std::to_string(u.parameters) + "]");
  check_curve(c, u.train_curve, cfg, dot(p, "train_curve"));
  check_curve(c, u.val_curve, cfg, dot(p, "val_curve"));
  // The curves every unit records: the training curve (one point per --log-interval), validation points.
  if (cfg.base.max_iters > 0 && u.train_curve.empty())
    c.fail(dot(p, "train_curve"), "[]", "a trained unit has a training curve");
  if (cfg.base.max_iters >= cfg.base.eval_interval && u.val_curve.empty())
    c.fail(dot(p, "val_curve"), "[]", "a unit trained past --eval-interval has validation points");
  for (const StudyEntry& s : studies())
    if (s.check_unit) s.check_unit(u, cfg, c, p);
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
  if (r.provenance.jobs < 1)
    c.fail("provenance.jobs", std::to_string(r.provenance.jobs), "at least one unit at a time");
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
      c.fail(p, "",
             "a second unit for (" + u.method + ", seed " + std::to_string(u.seed) + "); the first is " +
                 at("units", it->second));
  }
  if (decoder)
    for (const auto& m : cfg.methods)
      for (uint64_t s : cfg.seeds)
        if (!seen.count({m, s}))
          c.fail("units", "",
                 "no unit for (" + m + ", seed " + std::to_string(s) + "), but config.seeds claims " +
                     ValueCheck::list(cfg.seeds) + " for each of " + ValueCheck::list(cfg.methods));
  for (const StudyEntry& s : studies())
    if (s.check) s.check(r, c, source, advice);
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
