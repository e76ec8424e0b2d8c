// compare.cpp — see compare.h. The report and the plots are written by report.cpp.
#include "compare/compare.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "autograd/ops.h"
#include "compare/compare_dist.h"
#include "compare/method.h"
#include "compare/options.h"
#include "compare/report.h"
#include "compare/results.h"
#include "compare/study.h"
#include "compare/value_check.h"
#include "data/corpus.h"
#include "data/fileio.h"
#include "data/process.h"
#include "data/synthetic.h"
#include "tensor/kernels/kernels.h"
#include "train/interrupt.h"
#include "train/options.h"
#include "train/presets.h"
#include "train/trainer.h"

namespace posgrad::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- presets ---------------------------------------------------------------------------------------

const std::vector<std::string>& compare_preset_names() {
  static const std::vector<std::string> n = {"quick", "medium", "full", "tiny"};
  return n;
}

CompareConfig compare_preset(const std::string& name) {
  if (std::find(compare_preset_names().begin(), compare_preset_names().end(), name) == compare_preset_names().end())
    unknown_name("compare preset", name, compare_preset_names());
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
    c.seeds = {1, 2, 3};  // its methods: the article study's preset (compare/studies/article)
    c.eval_tokens = 8192;
    c.out_dir = "runs/compare-quick";
  } else if (name == "medium") {
    // About an hour on a 2-core machine (docs/presets.md): the quick preset's model and methods
    // trained three times longer, with the studies the quick preset leaves out or keeps small.
    set_model(c.base, 4, 4, 128, 64);
    set_run(c.base, 12, 2000, 100, 500);
    c.base.eval_windows = 32;
    c.seeds = {1, 2, 3};
    c.eval_tokens = 8192;
    c.out_dir = "runs/compare-medium";
  } else if (name == "full") {
    // A day or more on a 2-core machine (docs/presets.md): nanoGPT-sized models at context 128, five seeds.
    set_model(c.base, 4, 4, 128, 128);
    set_run(c.base, 16, 6000, 100, 500);
    c.base.eval_windows = 64;
    c.seeds = {1, 2, 3, 4, 5};
    c.eval_tokens = 32768;
    c.out_dir = "runs/compare-full";
  } else {  // tiny, for tests: seconds, not minutes
    set_model(c.base, 1, 2, 16, 16);
    set_run(c.base, 4, 6, 1, 6);
    c.base.eval_windows = 2;
    c.base.log_interval = 3;
    c.eval_multipliers = {1, 2, 4};
    c.eval_tokens = 128;
    c.per_position_multiplier = 2;
    c.seeds = {1, 2};
    c.out_dir = "runs/compare-tiny";
  }
  for (const StudyEntry& s : studies())  // each study's values (compare/study.h)
    if (s.preset) {
      if (name == "medium") s.preset(c, "quick");  // the medium preset: the quick one's, then its changes
      s.preset(c, name);
    }
  return c;
}

CompareConfig::CompareConfig() {
  for (const StudyEntry& s : studies())
    if (s.init_settings) s.init_settings(settings);
}

void CompareConfig::validate() const {
  opt::check_all(compare_options(), *this);
  auto has = [](const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  auto unique = [](auto v) {
    std::sort(v.begin(), v.end());
    return std::adjacent_find(v.begin(), v.end()) == v.end();
  };
  POSGRAD_CHECK(jobs <= 1 || Device::parse(base.device).type == DeviceType::CPU, UsageError, "--jobs ", jobs,
                " needs --device cpu: the units of --device ", base.device, " run one at a time on it");
  POSGRAD_CHECK(base.threads == 0 || jobs <= base.threads, UsageError, "--jobs ", jobs, " is more than --threads ",
                base.threads, ": each job trains on its share of the threads, at least one");
  POSGRAD_CHECK(unique(methods), UsageError, "--methods lists a method twice");
  POSGRAD_CHECK(unique(seeds), UsageError, "--seeds lists a seed twice (each seed is one independent run)");
  POSGRAD_CHECK(has(eval_multipliers, 1), UsageError, "--eval-multipliers must include 1 (the training length)");
  POSGRAD_CHECK(has(eval_multipliers, per_position_multiplier), UsageError, "--per-position-multiplier (",
                per_position_multiplier,
                ") must be one of --eval-multipliers (the per-position loss comes from that pass)");
  const int64_t longest = *std::max_element(eval_multipliers.begin(), eval_multipliers.end()) * base.model.block_size;
  for (const auto& m : methods) {
    POSGRAD_CHECK(canonical_method(m, base.model) == m, UsageError, "--methods '", m, "' is written ",
                  canonical_method(m, base.model), " (the settings sorted by name, the values as a flag reads them)");
    TrainConfig b = base;
    b.model = method_model(base.model, m);
    try {
      b.validate();
    } catch (const ValueError& e) {
      if (!is_variant(m)) throw;
      // A variant's own settings: the message names the method, not only the option's flag.
      throw UsageError("--methods '" + m +
                       "' (its settings replace the experiment's flags of the same name): " + e.what());
    }
    check_memory(b, std::max(longest, per_position_multiplier * base.model.block_size), std::max<int64_t>(1, jobs));
    // The evaluation runs the same encoding at the longest length: what it refuses there is refused now.
    nn::GPTConfig at_longest = b.model;
    at_longest.vocab_size = std::max<int64_t>(1, at_longest.vocab_size);
    at_longest.block_size = std::max(longest, per_position_multiplier * base.model.block_size);
    try {
      at_longest.validate();
    } catch (const ValueError& e) {
      throw UsageError("--methods " + m + " at the longest evaluation length (" +
                       std::to_string(at_longest.block_size) + " tokens, --eval-multipliers): " + e.what());
    }
  }
  for (const StudyEntry& s : studies())  // each study's own relations between its options
    if (s.validate) s.validate(*this);
}

LocalJobs compare_jobs(const CompareConfig& cfg, int processes, size_t units) {
  const int threads = static_cast<int>(cfg.base.threads > 0 ? cfg.base.threads : omp_get_max_threads());
  int64_t jobs = cfg.jobs;
  if (jobs == 0) {
    const bool cpu = Device::parse(cfg.base.device).type == DeviceType::CPU;
    jobs = cpu && processes == 1 ? threads : 1;
    if (jobs > 1 && cfg.track != "encoder") {  // as many of the largest unit as the memory holds
      const uint64_t have = physical_memory_bytes();
      const int64_t longest = std::max(*std::max_element(cfg.eval_multipliers.begin(), cfg.eval_multipliers.end()),
                                       cfg.per_position_multiplier) *
                              cfg.base.model.block_size;
      long double largest = 0;
      for (const auto& m : cfg.methods) {
        TrainConfig b = cfg.base;
        b.model = method_model(cfg.base.model, m);
        largest = std::max(largest, estimate_memory(b, longest).total());
      }
      const int64_t fit = std::max<int64_t>(1, static_cast<int64_t>(static_cast<long double>(have) / largest));
      if (have > 0 && largest > 0 && fit < jobs) {
        spdlog::info(
            "--jobs 0: {} unit{} at once, not {}: the largest unit's estimate ({:.2f} GiB) fits {} time{} in "
            "the {:.1f} GiB of memory",
            fit, fit == 1 ? "" : "s", jobs, static_cast<double>(largest / (1024.0L * 1024 * 1024)), fit,
            fit == 1 ? "" : "s", static_cast<double>(have) / (1024.0 * 1024 * 1024));
        jobs = fit;
      }
    }
  } else if (jobs > threads) {  // --threads 0 (every core) and more jobs than cores: one thread each
    spdlog::warn("--jobs {} is more than the {} threads of this process: {} units at once", jobs, threads, threads);
    jobs = threads;
  }
  jobs = std::min<int64_t>(jobs, std::max<int64_t>(1, static_cast<int64_t>(units)));
  if (jobs <= 1) return {1, 0, 0};
  return {static_cast<int>(jobs), std::max(1, threads / static_cast<int>(jobs)), threads};
}

json CompareConfig::to_json() const { return opt::to_json(compare_options(), *this); }

// ---- one (method, seed) unit -----------------------------------------------------------------------

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
    c.fail("seed", std::to_string(u.seed),
           "this is the folder of seed " + std::to_string(seed) + " (a result copied from another unit?)");
  check_unit(u, cfg, result_path, "", advice);
  // ... and its model was trained with this experiment's settings: the unit's own config.json (the
  // Trainer's) must agree on every option that changes a result.
  TrainConfig want = cfg.base;
  want.model = method_model(cfg.base.model, method);
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
    if (o.spec.neutral || n == "max_corpus_bytes" || n == "corpus")  // no result changes (the text: corpus.json)
      continue;
    if (o.get(had) != o.get(want))
      diff += (diff.empty() ? "" : ", ") + o.spec.flag() + " " + opt::format(o.get(had)) + " there, " +
              opt::format(o.get(want)) + " now";
  }
  if (!diff.empty())
    throw UsageError(config_path + ": this unit was trained with other settings than the experiment's (" + diff +
                     "; copied from another experiment?); delete " + dir +
                     " to measure it again, or use the same settings");
  return u;
}

void check_kept_units(const CompareConfig& cfg) {
  for (const auto& m : cfg.methods)
    for (uint64_t seed : cfg.seeds)
      if (fs::exists(cfg.out_dir + "/" + m + "/seed" + std::to_string(seed) + "/result.json"))
        (void)load_kept_unit(cfg, m, seed);
  for (const StudyEntry& s : studies())  // the units of the studies that train their own
    if (s.check_kept && (!s.enabled || s.enabled(cfg))) s.check_kept(cfg);
}

namespace {

// The overall progress of this process's share of the experiment's units (compare/compare_dist.h:
// round-robin over processes, then over the process's jobs), one line when a unit starts training and
// before each of its studies: the unit's place in the share, the unit and study, time elapsed, and
// time left. Units take very different times: a decoder unit and its studies against an
// encoder-track unit, and among decoder units those of a method that more studies run on (RoPE:
// position interpolation, passkey fine-tuning). So a unit is estimated by the mean of the finished
// units of its kind and method (another seed of it), else of its kind; the kinds not timed yet are
// named instead of guessed. With several jobs the work left is shared by them: time left is the
// estimated work left over the number of jobs. Called from every job's thread (one mutex).
class Progress {
 public:
  // `share` names the units counted: "unit" for a single process, "rank R's unit" under a launcher.
  Progress(std::vector<UnitSpec> units, std::string share, int jobs)
      : units_(std::move(units)),
        share_(std::move(share)),
        jobs_(std::max(1, jobs)),
        t0_(Clock::now()),
        started_(units_.size(), false) {}
  void start_unit(const UnitSpec& u) {
    const std::lock_guard<std::mutex> lock(mutex_);
    running_.erase(std::this_thread::get_id());  // a unit of this job's that failed
    size_t k = 0;
    while (k < units_.size() && (started_[k] || !same(units_[k], u))) ++k;
    if (k == units_.size()) return;  // not of this share (cannot happen)
    started_[k] = true;
    running_[std::this_thread::get_id()] = {k, Clock::now(), false};
  }
  // The unit of this job finished: its time counts in the estimates (a kept unit's does not).
  void end_unit() {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = running_.find(std::this_thread::get_id());
    if (it == running_.end()) return;
    if (!it->second.kept) times_.add(units_[it->second.index], seconds(it->second.t0));
    running_.erase(it);
  }
  // A unit kept from an earlier run: it took no time, so it does not count in the mean.
  void kept() {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = running_.find(std::this_thread::get_id()); it != running_.end()) it->second.kept = true;
  }
  void step(const std::string& what) const {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto mine = running_.find(std::this_thread::get_id());
    if (mine == running_.end()) return;
    const double elapsed = seconds(t0_);
    double left = 0;
    std::map<std::string, size_t> untimed;
    for (size_t i = 0; i < units_.size(); ++i) {  // the units not started yet
      if (started_[i]) continue;
      if (const auto e = estimate(units_[i]))
        left += *e;
      else
        ++untimed[units_[i].study];
    }
    for (const auto& [id, r] : running_) {  // the rest of the running units, where they have an estimate
      if (const auto e = estimate(units_[r.index]))
        left += std::max(0.0, *e - seconds(r.t0));
      else if (!r.kept)
        ++untimed[units_[r.index].study];
    }
    left /= jobs_;
    std::string eta;
    if (untimed.empty()) {
      eta = "about " + format_eta(left) + " left";
    } else {
      std::string names;
      for (const auto& [kind, n] : untimed)
        names += (names.empty() ? "" : ", ") + std::to_string(n) + " " + (kind.empty() ? "decoder" : kind) + " unit" +
                 (n == 1 ? "" : "s");
      eta = (times_.empty() ? std::string() : "about " + format_eta(left) + " left + ") + names + " not yet timed";
    }
    spdlog::info("=== progress: {} {}/{} ({}), {}; {} elapsed, {} ===", share_, mine->second.index + 1, units_.size(),
                 units_[mine->second.index].label(), what, format_eta(elapsed), eta);
  }

 private:
  using Clock = std::chrono::steady_clock;
  struct Running {
    size_t index = 0;
    Clock::time_point t0;
    bool kept = false;
  };
  static double seconds(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
  static bool same(const UnitSpec& a, const UnitSpec& b) {
    return a.method == b.method && a.seed == b.seed && a.study == b.study;
  }
  std::optional<double> estimate(const UnitSpec& u) const { return times_.estimate(u); }
  std::vector<UnitSpec> units_;  // this process's share, in order (study "" = a decoder unit)
  std::string share_;
  int jobs_ = 1;
  Clock::time_point t0_;
  mutable std::mutex mutex_;
  UnitTimes times_;
  std::vector<bool> started_;
  std::map<std::thread::id, Running> running_;  // by the job's thread
};

// The studies that run on the units of `method` in this configuration, in registry order.
std::vector<const StudyEntry*> unit_studies(const CompareConfig& cfg, const std::string& method) {
  std::vector<const StudyEntry*> out;
  for (const StudyEntry& s : studies())
    if (s.run_unit && (!s.enabled || s.enabled(cfg)) && (!s.applies || s.applies(cfg, method))) out.push_back(&s);
  return out;
}

// The studies of one trained unit, in registry order. Each finished study's part is saved at once in
// <unit>/studies/<study>.json, so a unit interrupted in a study resumes at that study: the parts of
// the studies before it are read back instead of measured again. A study that derives models for
// later ones (StudyEntry::derives_models: the PI protocol's fine-tuned copies) runs again when a study
// after it has to, so that those models exist (its numbers are the same: every study is seeded).
void run_unit_studies(UnitContext& ctx, const std::string& dir, Progress* progress) {
  const auto todo = unit_studies(ctx.cfg, ctx.method);
  std::vector<bool> keep(todo.size());
  for (size_t i = 0; i < todo.size(); ++i) keep[i] = fs::exists(dir + "/studies/" + todo[i]->name + ".json");
  for (size_t i = todo.size(); i-- > 0;)
    if (todo[i]->derives_models && keep[i])
      for (size_t j = i + 1; j < todo.size(); ++j) keep[i] = keep[i] && keep[j];
  for (size_t i = 0; i < todo.size(); ++i) {
    const StudyEntry& s = *todo[i];
    const std::string path = dir + "/studies/" + s.name + ".json";
    if (keep[i]) {
      spdlog::info("[{} seed {}] study {} finished earlier — kept", ctx.method, ctx.seed, s.name);
      try {
        if (s.unit_from_json) s.unit_from_json(opt::parse_json_limited(read_file(path), path, 256 << 20, 16), ctx.unit);
      } catch (const std::exception& e) {
        throw IoError(path + ": not this study's result (" + e.what() + "); delete it to measure the study again");
      }
      continue;
    }
    if (progress) progress->step("study " + s.name);
    s.run_unit(ctx);
    json part = json::object();
    if (s.unit_to_json) s.unit_to_json(ctx.unit, part);
    fs::create_directories(dir + "/studies");
    write_file_atomic(path, part.dump(1) + "\n");
  }
}

// The studies' rows in the pretraining batches of one unit (StudyEntry::pretrain_mix), in registry
// order; empty when no study adds any, so that the Trainer keeps the sampler's batches untouched.
BatchMix pretrain_mix(const CompareConfig& cfg, const std::string& method, uint64_t seed, const CorpusData& corpus) {
  std::vector<BatchMix> mixes;
  for (const StudyEntry& s : studies())
    if (s.pretrain_mix && (!s.enabled || s.enabled(cfg)) && (!s.applies || s.applies(cfg, method)))
      if (BatchMix m = s.pretrain_mix(cfg, method, seed, corpus)) mixes.push_back(std::move(m));
  if (mixes.size() <= 1) return mixes.empty() ? BatchMix() : mixes.front();
  return [mixes](int64_t step, int64_t micro, Tensor& x, Tensor& y) {
    for (const BatchMix& m : mixes) m(step, micro, x, y);
  };
}

UnitResult run_unit(const CompareConfig& cfg, const std::string& method, uint64_t seed, Progress* progress = nullptr) {
  const std::string dir = cfg.out_dir + "/" + method + "/seed" + std::to_string(seed);
  const std::string result_path = dir + "/result.json";
  if (fs::exists(result_path)) {
    spdlog::info("[{} seed {}] finished earlier — kept", method, seed);
    if (progress) progress->kept();
    return load_kept_unit(cfg, method, seed);
  }
  TrainConfig tc = cfg.base;
  tc.model = method_model(cfg.base.model, method);
  tc.seed = seed;
  tc.out_dir = dir;
  const bool resume = fs::exists(dir + "/checkpoint/state.json");
  const Device dev = Device::parse(tc.device);
  auto t0 = std::chrono::steady_clock::now();
  const int64_t threads = tc.threads > 0 ? tc.threads : omp_get_max_threads();
  Trainer t(tc, resume);
  // What the studies need of the corpus is refused before training, not after.
  const CorpusData corpus{t.dataset(), t.tokenizer()};
  for (const StudyEntry& s : studies())
    if (s.check_data && s.run_unit && (!s.enabled || s.enabled(cfg))) s.check_data(cfg, &corpus);
  t.set_batch_mix(pretrain_mix(cfg, method, seed, corpus));
  if (progress) progress->step(resume ? "training (resumed)" : "training");
  spdlog::info("[{} seed {}] training{}", method, seed, resume ? " (resumed)" : "");
  t.run();
  UnitResult u;
  u.method = method;
  u.seed = seed;
  u.train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  u.resumed = resume;
  u.threads = threads;
  u.jobs = std::max<int64_t>(1, cfg.jobs);  // run_compare passes the resolved count
  nn::GPT& model = t.model();
  model.eval();
  u.parameters = model.num_parameters();
  u.position_parameters = u.parameters - model.num_non_position_parameters();
  u.train_curve = t.train_curve();
  u.val_curve = t.val_curve();
  spdlog::info("[{} seed {}] evaluating", method, seed);
  UnitContext ctx{cfg, method, seed, dev, model, t.dataset(), t.tokenizer(), u, {}};
  run_unit_studies(ctx, dir, progress);
  write_file_atomic(result_path, to_json(u).dump(1) + "\n");
  std::error_code ec;
  fs::remove_all(dir + "/studies", ec);  // in result.json now
  return u;
}

}  // namespace

std::vector<UnitSpec> experiment_units(const CompareConfig& cfg) {
  std::vector<UnitSpec> units;
  if (cfg.track != "encoder") units = compare_units(cfg.methods, cfg.seeds);
  for (const StudyEntry& s : studies())
    if (s.own_units && (!s.enabled || s.enabled(cfg)))
      for (const auto& [method, seed] : s.own_units(cfg)) units.push_back({method, seed, s.name});
  return units;
}

// The finished units were trained on the text recorded in corpus.json: other text now would mix two
// corpora in one report (UsageError naming both; IoError for an unreadable corpus.json).
void check_same_corpus(const CompareConfig& cfg) {
  const std::string corpus_json = cfg.out_dir + "/corpus.json";
  if (!fs::exists(corpus_json)) return;
  nlohmann::json rec;
  try {
    rec = opt::parse_json_limited(read_file(corpus_json), corpus_json, 1 << 16, 4);
  } catch (const UsageError& e) {
    throw IoError(e.what());
  }
  const std::string text = data::load_corpus(cfg.base.corpus, cfg.base.data_dir, cfg.base.max_corpus_bytes);
  const nlohmann::json now = data::corpus_record(cfg.base.corpus, cfg.base.data_dir, text);
  if (rec.value("fnv1a64", "") != now.value("fnv1a64", "") ||
      rec.value("bytes", int64_t{-1}) != now.value("bytes", int64_t{-1}))
    throw UsageError(cfg.out_dir + " holds units trained on " + rec.value("path", std::string("?")) + " (" +
                     (rec.contains("bytes") ? rec["bytes"].dump() : "?") + " bytes, fnv1a64 " +
                     rec.value("fnv1a64", "?") + "), but --corpus " + cfg.base.corpus + " is now " +
                     now["bytes"].dump() + " bytes, fnv1a64 " + now.value("fnv1a64", "") +
                     ": its finished units cannot be mixed with units of other text; "
                     "restore the file, or use another --out-dir");
}

// Which parts of the experiment have finished or half-trained units in out_dir: "" for the decoder
// units (<method>/seed<k>/result.json, or the checkpoint/state.json a resume would continue from),
// a study's name for the units of a study with units of its own (<study>/<method>/seed<k>/...).
std::set<std::string> started_parts(const CompareConfig& cfg) {
  std::set<std::string> own, found;
  for (const StudyEntry& s : studies())
    if (s.own_units) own.insert(s.name);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(cfg.out_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const bool checkpoint =
        it->path().filename() == "state.json" && it->path().parent_path().filename() == "checkpoint";
    if (it->path().filename() != "result.json" && !checkpoint) continue;
    const fs::path rel = it->path().lexically_relative(cfg.out_dir);
    const std::string first = rel.empty() ? "" : rel.begin()->string();
    found.insert(own.count(first) ? first : "");
  }
  return found;
}

// Whether the units of `part` (started_parts) depend on option `name`. A study's own option: the
// units of that study when it has units of its own, else the decoder units (whose studies it
// configures). An option of the experiment's own rows (model, training, corpus, encodings): the
// decoder units, and the units of a study with units of its own that says it reads it
// (StudyEntry::own_units_read).
bool part_reads(const std::string& part, const std::string& name) {
  for (const StudyEntry& s : studies()) {
    if (!s.options) continue;
    opt::Table<CompareConfig> t;
    s.options(t);
    if (std::any_of(t.begin(), t.end(), [&](const auto& o) { return o.spec.name == name; }))
      return s.own_units ? part == s.name : part.empty();
  }
  if (part.empty()) return true;
  const StudyEntry& s = study_entry(part);
  return s.own_units_read && s.own_units_read(name);
}

// A re-run resumes an experiment, so its finished units must have been measured with the same
// settings: only the list of methods and seeds (and where things are) may change.
void check_same_experiment(const CompareConfig& cfg) {
  const std::string path = cfg.out_dir + "/compare_config.json";
  if (!fs::exists(path)) return;
  // Nothing finished or half-trained yet (say an earlier attempt failed at once): nothing to mix, the
  // new settings win. Each part's units are checked against the settings they read (part_reads).
  const std::set<std::string> parts = started_parts(cfg);
  if (parts.empty()) return;
  check_same_corpus(cfg);
  CompareConfig saved;
  try {
    opt::from_json(compare_options(), saved, opt::parse_json_limited(read_file(path), path), path, true);
  } catch (const UsageError& e) {
    throw IoError(std::string(e.what()) + " (written by another version of posgrad? use another --out-dir)");
  }
  std::string diff;
  for (const auto& o : compare_options()) {
    const std::string& n = o.spec.name;
    // Result-neutral options (the table marks them: where files go, threads, log and checkpoint
    // intervals, the cost benchmark's rounds) may change; methods, seeds and track by the rules below.
    if (o.spec.neutral || n == "methods" || n == "seeds" || n == "max_corpus_bytes" || n == "track") continue;
    if (std::none_of(parts.begin(), parts.end(), [&](const std::string& p) { return part_reads(p, n); })) continue;
    if (o.get(saved) != o.get(cfg))
      diff += (diff.empty() ? "" : ", ") + o.spec.flag() + " " + opt::format(o.get(saved)) + " there, " +
              opt::format(o.get(cfg)) + " now";
  }
  if (!diff.empty())
    throw UsageError(cfg.out_dir + " holds an experiment with other settings (" + diff +
                     "); its finished or half-trained units cannot be mixed with new ones: use another --out-dir, or "
                     "the same settings");
  // What may change: the methods and seeds may grow, a track may be added (decoder or encoder -> both);
  // nothing that would drop finished results from results.json and the report.
  if (parts.count("") && cfg.track == "encoder")
    throw UsageError(cfg.out_dir + " holds finished units of the decoder track (--track " + saved.track +
                     " there); --track encoder would drop them from results.json and the report: use --track both, "
                     "or another --out-dir");
  for (const StudyEntry& s : studies())
    if (s.own_units && parts.count(s.name) && s.enabled && !s.enabled(cfg))
      throw UsageError(cfg.out_dir + " holds finished units of the study " + s.name +
                       ", which these settings turn off (the settings there: --track " + saved.track +
                       "); they would drop from results.json and the report: use the settings that run it, or "
                       "another --out-dir");
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
  auto on = [&](const StudyEntry& s) { return s.check_data && (!s.enabled || s.enabled(cfg)); };
  // The studies with units of their own (the encoder track) first: they read the corpus themselves.
  for (const StudyEntry& s : studies())
    if (on(s) && !s.run_unit) s.check_data(cfg, nullptr);
  if (cfg.track == "encoder") return;  // no decoder units
  const TrainConfig& b = cfg.base;
  const std::string text = data::load_corpus(b.corpus, b.data_dir, b.max_corpus_bytes);
  const auto tok = data::make_tokenizer(b.tokenizer, text);
  const data::TokenDataset ds(text, *tok, b.model.block_size);  // the Trainer's short-corpus refusal
  const CorpusData corpus{ds, *tok};
  for (const StudyEntry& s : studies())
    if (on(s) && s.run_unit) s.check_data(cfg, &corpus);
}

namespace {

// The matrix products this process ran since `before` (kernels::matmul_work), the wall time and their
// average rate: the products' FLOPs over a machine's FMA peak (bench_gemm) bound the run's time from
// below. Units kept from an earlier run, other ranks' units and CUDA products are not in it.
void log_matmul_work(const kernels::MatmulWork& before, double seconds, int ranks) {
  const kernels::MatmulWork work = kernels::matmul_work() - before;
  const double fp32 = double(work.fp32), bf16 = double(work.bf16);
  spdlog::info(
      "matrix products{}: {:.4g} TFLOP in fp32, {:.4g} TFLOP in bf16 over {:.1f} s of wall time, {:.1f} GFLOP/s on "
      "average (CPU products only; units kept from an earlier run not counted)",
      ranks > 1 ? " of rank 0" : "", fp32 * 1e-12, bf16 * 1e-12, seconds,
      (fp32 + bf16) / std::max(seconds, 1e-9) * 1e-9);
}

}  // namespace

std::string run_compare(const CompareConfig& cfg, dist::Communicator* comm) {
  dist::Communicator& job = comm ? *comm : dist::world();
  cfg.validate();
  const auto started = std::chrono::steady_clock::now();
  const kernels::MatmulWork work_before = kernels::matmul_work();
  // Every product of the run, the studies' own models and evaluations included, in --precision.
  const kernels::MatmulPrecisionScope precision(kernels::parse_matmul_precision(cfg.base.precision));
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
    if (!fs::exists(cfg.out_dir +
                    "/corpus.json")) {  // the text of the experiment's first units (check_same_experiment)
      const std::string text = data::load_corpus(cfg.base.corpus, cfg.base.data_dir, cfg.base.max_corpus_bytes);
      write_file_atomic(cfg.out_dir + "/corpus.json",
                        data::corpus_record(cfg.base.corpus, cfg.base.data_dir, text).dump(2) + "\n");
    }
  }
  job.barrier();
  ComparisonResult r;
  r.config = cfg;
  if (job.is_root()) r.provenance = collect_provenance(cfg);
  // Every unit over the job's processes (compare/compare_dist.h): the decoder units, then the units
  // of the studies that train their own models; rank 0 gets them all, in order.
  const std::vector<UnitSpec> units = experiment_units(cfg);
  std::vector<UnitSpec> mine;  // this process's share
  for (size_t i = 0; i < units.size(); ++i)
    if (unit_owner(i, job.size()) == job.rank()) mine.push_back(units[i]);
  // Several units at once (--jobs): each trains with its share of the threads, fixed (the units' own
  // trainings read it from --threads); the results do not depend on it (compare/compare_dist.h).
  const LocalJobs local = compare_jobs(cfg, job.size(), mine.size());
  CompareConfig unit_cfg = cfg;
  unit_cfg.jobs = local.jobs;  // what each unit records of how it trained
  if (local.jobs > 1) {
    unit_cfg.base.threads = local.threads_per_job;
    spdlog::info("{} units at once (--jobs), {} OpenMP thread{} each", local.jobs, local.threads_per_job,
                 local.threads_per_job == 1 ? "" : "s");
  }
  if (job.is_root()) {
    r.provenance.jobs = local.jobs;
    if (local.jobs > 1) r.provenance.threads = local.threads_per_job;
  }
  Progress progress(mine, job.size() == 1 ? "unit" : "rank " + std::to_string(job.rank()) + "'s unit", local.jobs);
  const std::vector<json> done = run_units_distributed(
      units, job, cfg.out_dir,
      [&](const UnitSpec& u) {
        progress.start_unit(u);
        json result;
        if (u.study.empty()) {
          result = to_json(run_unit(unit_cfg, u.method, u.seed, &progress));
        } else {
          progress.step("study " + u.study);
          result = study_entry(u.study).run_own_unit(unit_cfg, u.method, u.seed);
        }
        progress.end_unit();
        return result;
      },
      local);
  if (!job.is_root()) return "";
  std::map<std::string, std::vector<json>> own;
  for (size_t i = 0; i < units.size(); ++i) {
    if (!units[i].study.empty())
      own[units[i].study].push_back(done[i]);
    else
      r.units.push_back(
          unit_from_json(done[i], "the result of unit " + std::to_string(i + 1) + " (" + units[i].label() + ")"));
  }
  for (const auto& [study, results] : own) study_entry(study).collect(cfg, results, r);
  // Then the experiment-level studies (the cost benchmark), on rank 0.
  for (const StudyEntry& s : studies())
    if (s.run_experiment && (!s.enabled || s.enabled(cfg))) s.run_experiment(cfg, r);
  write_file_atomic(cfg.out_dir + "/results.json", to_json(r).dump(1) + "\n");
  log_matmul_work(work_before, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                  job.size());
  return write_report(r);
}

}  // namespace posgrad::train
