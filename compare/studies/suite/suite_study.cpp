// suite_study.cpp — the length-generalisation suite's entry (compare/study.h): its checks, work,
// results and report (length_suite.h, length_suite_report.h).
#include <algorithm>
#include <filesystem>

#include "compare/studies/suite/length_suite.h"
#include "compare/studies/suite/length_suite_report.h"
#include "data/length_tasks.h"
#include "nn/posenc/position_encoding.h"
#include "tensor/option_table.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
std::string at(const std::string& p, size_t i) { return json_path_at(p, i); }
std::string dot(const std::string& p, const std::string& k) { return json_path_key(p, k); }
bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const std::string p = dot(path, "suite");
  const auto& tasks = u.parts.value<SuiteResult>().tasks;
  // run_length_suite: per task, the plain row, then the randomized one where the method is listed.
  std::vector<std::pair<std::string, bool>> want;
  if (cfg.of<SuiteSettings>().iters > 0)
    for (const auto& t : cfg.of<SuiteSettings>().tasks) {
      want.emplace_back(t, false);
      if (contains(cfg.of<SuiteSettings>().randomized, u.method)) want.emplace_back(t, true);
    }
  c.size(tasks.size(), want.size(), p,
         cfg.of<SuiteSettings>().iters > 0
             ? "--suite-tasks " + ValueCheck::list(cfg.of<SuiteSettings>().tasks) + ", plain and randomized rows"
             : "--suite-iters 0: no suite");
  const auto buckets = suite_buckets(cfg);
  for (size_t i = 0; i < want.size(); ++i) {
    const SuiteTaskResult& s = tasks[i];
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

void validate(const CompareConfig& cfg) {
  auto unique = [](auto v) {
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) == v.end();
  };
  POSGRAD_CHECK(unique(cfg.of<SuiteSettings>().tasks), UsageError,
                "--suite-tasks lists a task twice (each task is trained and scored once)");
  POSGRAD_CHECK(unique(cfg.of<SuiteSettings>().randomized), UsageError, "--suite-randomized lists a method twice");
  validate_length_suite(cfg);
}

// Its rows of the option table (compare/options.h).
void options(opt::Table<CompareConfig>& t) {
  using namespace opt;
  Rows<CompareConfig> r(t);
  r.group("Length-generalisation suite")
      .add(choice_list("suite_tasks", data::length_task_names(), 16,
                       "Suite tasks (Deletang et al. 2023), each trained on lengths 1..suite_length"),
           POSGRAD_MEMBER(template of<SuiteSettings>().tasks))
      .add(integer("suite_length", closed(1, 256), "Longest training input length N of the suite", "symbols"),
           POSGRAD_MEMBER(template of<SuiteSettings>().length))
      .add(integer("suite_iters", closed(0, kMany), "Training steps per suite task (0: no suite)", "steps"),
           POSGRAD_MEMBER(template of<SuiteSettings>().iters))
      .add(integer("suite_batch", closed(1, 4096), "Suite sequences per step", "sequences"),
           POSGRAD_MEMBER(template of<SuiteSettings>().batch))
      .add(integer("suite_examples", closed(1, 1 << 16), "Suite test examples per length bucket", "sequences"),
           POSGRAD_MEMBER(template of<SuiteSettings>().examples))
      .add(
          integer("suite_max_multiplier", closed(1, 16), "Suite buckets [1,N], [N+1,2N], ... up to this multiple of N"),
          POSGRAD_MEMBER(template of<SuiteSettings>().max_multiplier))
      .add(real("suite_lr", open_closed(0, 1), "Peak learning rate of the suite's models"),
           POSGRAD_MEMBER(template of<SuiteSettings>().lr))
      .add(
          [] {
            auto s = choice_list("suite_randomized", nn::position_encoding_kinds(), 32,
                                 "Methods also trained with randomized positions (Ruoss et al. 2023) where among "
                                 "--methods; every encoding but none takes them (t5, alibi, kerple, sandwich, deberta: "
                                 "CPU only)");
            s.min_items = 0;
            return s;
          }(),
          POSGRAD_MEMBER(template of<SuiteSettings>().randomized));
}

// Its values in each preset (compare_preset).
void preset(CompareConfig& c, const std::string& name) {
  if (name == "medium") {
    // Kazemnejad et al.'s copy, reverse and sort (claim s3) beside cycle navigation, at the quick
    // preset's length and budget: each reached >= 0.94 in distribution (RoPE, seed 1) or is the
    // quick preset's own task (docs/presets.md).
    c.of<SuiteSettings>().tasks = {"cycle_navigation", "duplicate_string", "reverse_string", "bucket_sort"};
  } else if (name == "full") {
    // The six tasks a 2-layer RoPE model was learning in a sizing run (docs/presets.md).
    c.of<SuiteSettings>().tasks = {"cycle_navigation", "reverse_string", "stack_manipulation",
                                   "duplicate_string", "odd_first",      "bucket_sort"};
    c.of<SuiteSettings>().length = 8;
    c.of<SuiteSettings>().iters = 2000;
    c.of<SuiteSettings>().examples = 64;
  } else if (name == "tiny") {
    c.of<SuiteSettings>().tasks = {"even_pairs", "reverse_string"};
    c.of<SuiteSettings>().length = 3;
    c.of<SuiteSettings>().iters = 3;
    c.of<SuiteSettings>().batch = 4;
    c.of<SuiteSettings>().examples = 3;
    c.of<SuiteSettings>().max_multiplier = 2;
  }
}

}  // namespace

StudyEntry suite_study() {
  StudyEntry e;
  e.name = SuiteResult::kStudy;
  e.summary =
      "length-generalisation suite: algorithmic tasks trained on lengths 1..N, scored in length buckets up to "
      "kN, with and without randomized positions (Deletang et al. 2023; Ruoss et al. 2023)";
  e.init_settings = [](Parts& p) { p.get<SuiteSettings>(); };
  e.options = options;
  e.preset = preset;
  e.validate = validate;
  e.enabled = [](const CompareConfig& c) { return c.of<SuiteSettings>().iters > 0; };
  e.run_unit = [](UnitContext& ctx) {
    ctx.unit.parts.get<SuiteResult>().tasks = run_length_suite(ctx.cfg, ctx.method, ctx.seed, ctx.dev);
  };
  e.unit_to_json = [](const UnitResult& u, json& j) { j["suite"] = suite_to_json(u.parts.value<SuiteResult>().tasks); };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    if (j.contains("suite"))
      u.parts.get<SuiteResult>().tasks = suite_from_json(j.at("suite"));  // absent: made before the suite existed
  };
  e.check_unit = check_part;
  e.write_files = [](const ComparisonResult& r, const ReportDir& out) {
    write_suite_csv(r, out.dir + "/suite.csv");
    write_suite_seeds_csv(r, out.dir + "/suite_seeds.csv");
    write_suite_plots(r, out.plots);
    return std::vector<std::string>{};
  };
  e.markdown = [](const ComparisonResult& r, const ReportDir& out) {
    return suite_markdown(r, std::filesystem::exists(out.plots + "/suite_accuracy.png"));
  };
  e.claims = judge_suite_claims;
  return e;
}

}  // namespace posgrad::train
