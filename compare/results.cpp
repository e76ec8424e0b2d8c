// results.cpp — see results.h.
#include "compare/results.h"

#include <omp.h>
#include <spdlog/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "data/fileio.h"
#include "data/process.h"
#include "tensor/storage.h"
#include "compare/options.h"
#include "train/options.h"
#include "compare/value_check.h"

namespace posgrad::train {

using json = nlohmann::json;

// ---- JSON schema ---------------------------------------------------------------------------------

namespace {

// Typed reads of untrusted JSON: an integer must be a JSON integer in range (a float such as 1e300
// would be undefined behaviour to convert), a real any JSON number; json::type_error otherwise,
// which the callers turn into an IoError naming the file.
int64_t integer(const json& j) { return json_int(j); }
uint64_t unsigned_integer(const json& j) { return json_uint(j); }
double real(const json& j) { return json_real(j); }
std::vector<double> reals(const json& j) {
  std::vector<double> v;
  for (const auto& e : j) v.push_back(real(e));
  return v;
}
std::vector<std::pair<int64_t, double>> curve(const json& j) {
  std::vector<std::pair<int64_t, double>> v;
  for (const auto& e : j) {
    if (!e.is_array() || e.size() != 2) throw json::type_error::create(302, "expected [step, loss]", &e);
    v.emplace_back(integer(e[0]), real(e[1]));
  }
  return v;
}

json length_json(const std::optional<LengthResult>& l) {
  if (!l) return nullptr;
  return {{"context", l->context}, {"windows", l->windows}, {"loss", l->loss}, {"perplexity", l->perplexity},
          {"accuracy", l->accuracy}};
}

std::optional<LengthResult> length_from(const json& j) {
  if (j.is_null()) return std::nullopt;
  LengthResult l;
  l.context = integer(j.at("context"));
  l.windows = integer(j.at("windows"));
  l.loss = real(j.at("loss"));
  l.perplexity = real(j.at("perplexity"));
  l.accuracy = real(j.at("accuracy"));
  return l;
}

json lengths_json(const std::vector<std::optional<LengthResult>>& v) {
  json a = json::array();
  for (const auto& l : v) a.push_back(length_json(l));
  return a;
}

std::vector<std::optional<LengthResult>> lengths_from(const json& j) {
  std::vector<std::optional<LengthResult>> v;
  for (const auto& e : j) v.push_back(length_from(e));
  return v;
}

json pi_json(const std::vector<PiResult>& v) {
  json a = json::array();
  for (const auto& p : v)
    a.push_back({{"scaling", p.scaling}, {"multiplier", p.multiplier}, {"iters", p.iters}, {"batch", p.batch},
                 {"first_loss", p.first_loss}, {"final_loss", p.final_loss}, {"seconds", p.seconds},
                 {"lengths", lengths_json(p.lengths)}});
  return a;
}

std::vector<PiResult> pi_from(const json& j) {
  if (!j.is_array()) throw json::type_error::create(302, "\"pi\": expected an array", &j);
  std::vector<PiResult> v;
  for (const auto& e : j) {
    PiResult p;
    p.scaling = e.at("scaling").get<std::string>();
    p.multiplier = integer(e.at("multiplier"));
    p.iters = integer(e.at("iters"));
    p.batch = integer(e.at("batch"));
    p.first_loss = real(e.at("first_loss"));
    p.final_loss = real(e.at("final_loss"));
    p.seconds = real(e.at("seconds"));
    p.lengths = lengths_from(e.at("lengths"));
    v.push_back(std::move(p));
  }
  return v;
}

}  // namespace

json to_json(const UnitResult& u) {
  json variants = json::object();
  for (const auto& [name, v] : u.variants) variants[name] = lengths_json(v);
  json task = json::array();
  for (const auto& t : u.task)
    task.push_back(t ? json{{"length", t->length}, {"examples", t->examples}, {"exact_match", t->exact_match},
                            {"token_f1", t->token_f1}, {"token_accuracy", t->token_accuracy}}
                     : json(nullptr));
  return {{"method", u.method},
          {"seed", u.seed},
          {"parameters", u.parameters},
          {"position_parameters", u.position_parameters},
          {"train_curve", u.train_curve},
          {"val_curve", u.val_curve},
          {"lengths", lengths_json(u.lengths)},
          {"variants", variants},
          {"per_position_loss", u.per_position_loss},
          {"attention_by_distance", u.attention_by_distance},
          {"task", task},
          {"task_final_loss", u.task_final_loss},
          {"suite", suite_to_json(u.suite)},
          {"pi", pi_json(u.pi)},
          {"passkey", passkey_to_json(u.passkey)},
          {"train_seconds", u.train_seconds},
          {"resumed", u.resumed}};
}

UnitResult unit_from_json(const json& j, const std::string& source) {
  UnitResult u;
  try {
    u.method = j.at("method").get<std::string>();
    u.seed = unsigned_integer(j.at("seed"));
    u.parameters = integer(j.at("parameters"));
    u.position_parameters = integer(j.at("position_parameters"));
    u.train_curve = curve(j.at("train_curve"));
    u.val_curve = curve(j.at("val_curve"));
    u.lengths = lengths_from(j.at("lengths"));
    for (const auto& [name, v] : j.at("variants").items()) u.variants[name] = lengths_from(v);
    u.per_position_loss = reals(j.at("per_position_loss"));
    for (const auto& layer : j.at("attention_by_distance")) u.attention_by_distance.push_back(reals(layer));
    for (const auto& t : j.at("task")) {
      if (t.is_null()) {
        u.task.emplace_back();
        continue;
      }
      TaskScore s;
      s.length = integer(t.at("length"));
      s.examples = integer(t.at("examples"));
      s.exact_match = real(t.at("exact_match"));
      s.token_f1 = real(t.at("token_f1"));
      s.token_accuracy = real(t.at("token_accuracy"));
      u.task.push_back(s);
    }
    u.task_final_loss = real(j.at("task_final_loss"));
    if (j.contains("suite")) u.suite = suite_from_json(j.at("suite"));  // absent: made before the suite existed
    if (j.contains("pi")) u.pi = pi_from(j.at("pi"));                   // absent: made before the protocol existed
    if (j.contains("passkey")) u.passkey = passkey_from_json(j.at("passkey"));  // absent: before the passkey test
    u.train_seconds = real(j.at("train_seconds"));
    u.resumed = j.at("resumed").get<bool>();
  } catch (const json::exception& e) {
    throw IoError(source + ": not a unit result of this posgrad version (" + e.what() + ")");
  }
  return u;
}

static json provenance_json(const Provenance& p) {
  return {{"git_commit", p.git_commit}, {"cpu", p.cpu},         {"simd", p.simd},       {"compiler", p.compiler},
          {"libraries", p.libraries},   {"cuda", p.cuda},       {"threads", p.threads}, {"config_hash", p.config_hash}};
}

json to_json(const ComparisonResult& r) {
  json units = json::array();
  for (const auto& u : r.units) units.push_back(to_json(u));
  json cost_rows = json::array();
  for (const auto& c : r.cost.rows)
    cost_rows.push_back({{"method", c.method}, {"what", c.what}, {"T", c.T}, {"batch", c.batch},
                         {"seconds", c.seconds}, {"peak_bytes", c.peak_bytes}, {"parameters", c.parameters}});
  json j = {{"format", "posgrad-comparison-1"},
            {"config", r.config.to_json()},
            {"provenance", provenance_json(r.provenance)},
            {"units", units},
            {"cost", {{"rounds", r.cost.rounds}, {"threads", r.cost.threads}, {"lengths", r.cost.lengths}, {"rows", cost_rows}}}};
  if (r.encoder) j["encoder"] = to_json(*r.encoder);
  return j;
}

ComparisonResult comparison_from_json(const json& j, const std::string& source) {
  ComparisonResult r;
  try {
    if (j.value("format", "") != "posgrad-comparison-1")
      throw IoError(source + ": not a posgrad comparison result (format '" + j.value("format", std::string("?")) + "')");
    opt::from_json(compare_options(), r.config, j.at("config"), source + ": config", true);
    const json& p = j.at("provenance");
    r.provenance = {p.at("git_commit").get<std::string>(), p.at("cpu").get<std::string>(),
                    p.at("simd").get<std::string>(),       p.at("compiler").get<std::string>(),
                    p.at("libraries").get<std::string>(),  p.at("cuda").get<std::string>(),
                    p.at("config_hash").get<std::string>(), integer(p.at("threads"))};
    for (const auto& u : j.at("units")) r.units.push_back(unit_from_json(u, source));
    const json& c = j.at("cost");
    r.cost.rounds = integer(c.at("rounds"));
    r.cost.threads = integer(c.at("threads"));
    for (const auto& x : c.at("lengths")) r.cost.lengths.push_back(integer(x));
    for (const auto& row : c.at("rows"))
      r.cost.rows.push_back({row.at("method").get<std::string>(), row.at("what").get<std::string>(),
                             integer(row.at("T")), integer(row.at("batch")), reals(row.at("seconds")),
                             integer(row.at("peak_bytes")), integer(row.at("parameters"))});
    if (j.contains("encoder")) r.encoder = encoder_track_from_json(j.at("encoder"), source);
  } catch (const json::exception& e) {
    throw IoError(source + ": incomplete comparison result (" + e.what() + ")");
  } catch (const UsageError& e) {
    throw IoError(e.what());
  }
  return r;
}

// ---- provenance ------------------------------------------------------------------------------------

namespace {

// The first line of what `argv` printed, when it succeeded; "" otherwise (data/process.h: no shell).
std::string first_line_of(const std::vector<std::string>& argv) {
  const ProcessResult r = run_process(argv);
  if (!r.ok()) return "";
  std::string out = r.output.substr(0, r.output.find('\n'));
  while (!out.empty() && (out.back() == ' ' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

}  // namespace

Provenance collect_provenance(const CompareConfig& cfg) {
  Provenance p;
  const std::string git = first_line_of({"git", "-C", POSGRAD_SOURCE_DIR, "describe", "--always", "--abbrev=12", "--dirty"});
  p.git_commit = git.empty() ? "unknown (not a git checkout)" : git;
  p.cpu = cpu_model();
  __builtin_cpu_init();
  p.simd = __builtin_cpu_supports("avx512f") ? "AVX-512" : __builtin_cpu_supports("avx2") ? "AVX2" : "portable";
#if defined(__clang__)
  p.compiler = std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  p.compiler = std::string("gcc ") + __VERSION__;
#endif
  p.libraries = "nlohmann-json " + std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." + std::to_string(NLOHMANN_JSON_VERSION_PATCH) +
                ", spdlog " + std::to_string(SPDLOG_VER_MAJOR) + "." + std::to_string(SPDLOG_VER_MINOR) + "." +
                std::to_string(SPDLOG_VER_PATCH) + ", OpenMP " + std::to_string(_OPENMP);
  p.cuda = POSGRAD_HAVE_CUDA ? (cuda_available() ? "built, GPU present" : "built, no GPU present") : "not built";
  p.threads = cfg.base.threads > 0 ? cfg.base.threads : omp_get_max_threads();
  p.config_hash = hex64(fnv1a64(cfg.to_json().dump()));
  return p;
}

// ---- cost ------------------------------------------------------------------------------------------

double CostRow::median() const {
  if (seconds.empty()) return NAN;
  std::vector<double> s = seconds;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

double CostRow::spread() const {
  if (seconds.empty()) return NAN;
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  return (*hi - *lo) / median();
}

double CostResult::noise() const {
  std::vector<double> s;
  for (const auto& r : rows) s.push_back(r.spread());
  if (s.empty()) return NAN;
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

const CostRow* CostResult::find(const std::string& method, const std::string& what, int64_t T) const {
  for (const auto& r : rows)
    if (r.method == method && r.what == what && r.T == T) return &r;
  return nullptr;
}

// ---- metrics ---------------------------------------------------------------------------------------

std::string Metric::name() const {
  const std::string x = "_x" + std::to_string(multiplier);
  switch (q) {
    case Quantity::Parameters: return "parameters";
    case Quantity::PositionParameters: return "position_parameters";
    case Quantity::Loss: return multiplier == 1 ? "val_loss" : "loss" + x;
    case Quantity::Perplexity: return multiplier == 1 ? "val_perplexity" : "perplexity" + x;
    case Quantity::Accuracy: return multiplier == 1 ? "val_accuracy" : "accuracy" + x;
    case Quantity::PerplexityRatio: return "ppl_ratio" + x;
    case Quantity::TaskExactMatch: return "task_exact_match" + x;
    case Quantity::TaskTokenF1: return "task_token_f1" + x;
  }
  return "?";
}

bool Metric::lower_is_better() const {
  return q == Quantity::Loss || q == Quantity::Perplexity || q == Quantity::PerplexityRatio ||
         q == Quantity::Parameters || q == Quantity::PositionParameters;
}

int Metric::precision() const {
  switch (q) {
    case Quantity::Parameters:
    case Quantity::PositionParameters: return 0;
    case Quantity::Accuracy:
    case Quantity::Loss: return 4;
    default: return 3;
  }
}

std::vector<std::string> rows(const ComparisonResult& r) {
  std::vector<std::string> out = r.config.methods;
  for (const auto& m : r.config.methods)
    for (const auto& u : r.units)
      if (u.method == m)
        for (const auto& [name, v] : u.variants)
          if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  return out;
}

namespace {

std::optional<size_t> index_of(const std::vector<int64_t>& v, int64_t x) {
  auto it = std::find(v.begin(), v.end(), x);
  if (it == v.end()) return std::nullopt;
  return static_cast<size_t>(it - v.begin());
}

const std::vector<std::optional<LengthResult>>* lengths_of(const UnitResult& u, const std::string& row) {
  if (row == u.method) return &u.lengths;
  auto it = u.variants.find(row);
  return it == u.variants.end() ? nullptr : &it->second;
}

// The method a row belongs to: "rope+yarn" and "rope@bf16" are evaluations of the rope units.
std::string method_of(const std::string& row) { return row.substr(0, row.find_first_of("+@")); }

std::optional<double> value_of(const CompareConfig& c, const UnitResult& u, const std::string& row, const Metric& m) {
  if (m.q == Quantity::Parameters) return static_cast<double>(u.parameters);
  if (m.q == Quantity::PositionParameters) return static_cast<double>(u.position_parameters);
  if (m.q == Quantity::TaskExactMatch || m.q == Quantity::TaskTokenF1) {
    if (row != u.method) return std::nullopt;
    auto i = index_of(c.task_multipliers, m.multiplier);
    if (!i || *i >= u.task.size() || !u.task[*i]) return std::nullopt;
    return m.q == Quantity::TaskExactMatch ? u.task[*i]->exact_match : u.task[*i]->token_f1;
  }
  const auto* ls = lengths_of(u, row);
  if (!ls) return std::nullopt;
  auto at = [&](int64_t mult) -> std::optional<LengthResult> {
    auto i = index_of(c.eval_multipliers, mult);
    if (!i || *i >= ls->size()) return std::nullopt;
    return (*ls)[*i];
  };
  const auto l = at(m.multiplier);
  if (!l) return std::nullopt;
  switch (m.q) {
    case Quantity::Loss: return l->loss;
    case Quantity::Perplexity: return l->perplexity;
    case Quantity::Accuracy: return l->accuracy;
    case Quantity::PerplexityRatio: {
      // Relative to the same row at the training length (a variant equals its method there, or is
      // compared with itself).
      const auto one = at(1);
      if (!one) return std::nullopt;
      return l->perplexity / one->perplexity;
    }
    default: return std::nullopt;
  }
}

}  // namespace

std::vector<double> values(const ComparisonResult& r, const std::string& row, const Metric& m) {
  std::vector<double> v;
  const std::string method = method_of(row);
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units)
      if (u.method == method && u.seed == seed)
        if (auto x = value_of(r.config, u, row, m)) v.push_back(*x);
  return v;
}

Summary summary(const ComparisonResult& r, const std::string& row, const Metric& m) { return summarize(values(r, row, m)); }

std::vector<Metric> csv_metrics(const CompareConfig& c) {
  std::vector<Metric> m = {{Quantity::Parameters, 1}, {Quantity::PositionParameters, 1}, {Quantity::Loss, 1},
                           {Quantity::Perplexity, 1}, {Quantity::Accuracy, 1}};
  for (int64_t k : c.eval_multipliers)
    if (k != 1) m.push_back({Quantity::Perplexity, k});
  for (int64_t k : c.eval_multipliers)
    if (k != 1) m.push_back({Quantity::PerplexityRatio, k});
  for (int64_t k : c.task_multipliers) m.push_back({Quantity::TaskExactMatch, k});
  for (int64_t k : c.task_multipliers) m.push_back({Quantity::TaskTokenF1, k});
  return m;
}

}  // namespace posgrad::train
