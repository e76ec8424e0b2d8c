// results.cpp — see results.h.
#include "compare/results.h"

#include <omp.h>
#include <spdlog/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "compare/build_commit.h"
#include "compare/options.h"
#include "compare/rows.h"
#include "compare/study.h"
#include "compare/value_check.h"
#include "data/fileio.h"
#include "tensor/storage.h"
#include "train/options.h"

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
std::vector<std::pair<int64_t, double>> curve(const json& j) {
  std::vector<std::pair<int64_t, double>> v;
  for (const auto& e : j) {
    if (!e.is_array() || e.size() != 2) throw json::type_error::create(302, "expected [step, loss]", &e);
    v.emplace_back(integer(e[0]), real(e[1]));
  }
  return v;
}

}  // namespace

json to_json(const UnitResult& u) {
  json j = {{"method", u.method},
            {"seed", u.seed},
            {"parameters", u.parameters},
            {"position_parameters", u.position_parameters},
            {"train_curve", u.train_curve},
            {"val_curve", u.val_curve},
            {"train_seconds", u.train_seconds},
            {"resumed", u.resumed},
            {"threads", u.threads},
            {"jobs", u.jobs}};
  // Each study's keys are listed under "study_keys", so that a key missing on reading is told apart
  // from a result made before the study existed (a file without the list).
  json written = json::object();
  for (const StudyEntry& s : studies()) {
    if (!s.unit_to_json) continue;
    std::set<std::string> before;
    for (auto it = j.begin(); it != j.end(); ++it) before.insert(it.key());
    s.unit_to_json(u, j);
    json keys = json::array();
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!before.count(it.key())) keys.push_back(it.key());
    if (!keys.empty()) written[s.name] = keys;
  }
  j["study_keys"] = written;
  return j;
}

namespace {

// A unit file that lists its studies' keys must hold every one of them.
void check_study_keys(const json& j, const std::string& source) {
  if (!j.contains("study_keys")) return;  // written before the list existed
  for (const auto& [study, keys] : j.at("study_keys").items())
    for (const auto& k : keys)
      if (!j.contains(k.get<std::string>()))
        throw IoError(source + ": the key \"" + k.get<std::string>() + "\" of the study " + study +
                      " is missing from this unit's result (the file was edited or cut short); remove the unit's "
                      "folder to train it again");
}

}  // namespace

UnitResult unit_from_json(const json& j, const std::string& source) {
  UnitResult u;
  try {
    u.method = j.at("method").get<std::string>();
    u.seed = unsigned_integer(j.at("seed"));
    u.parameters = integer(j.at("parameters"));
    u.position_parameters = integer(j.at("position_parameters"));
    u.train_curve = curve(j.at("train_curve"));
    u.val_curve = curve(j.at("val_curve"));
    check_study_keys(j, source);
    for (const StudyEntry& s : studies())
      if (s.unit_from_json) s.unit_from_json(j, u);
    u.train_seconds = real(j.at("train_seconds"));
    u.resumed = j.at("resumed").get<bool>();
    if (j.contains("threads")) u.threads = j.at("threads").get<int64_t>();  // absent before these keys
    if (j.contains("jobs")) u.jobs = j.at("jobs").get<int64_t>();
  } catch (const json::exception& e) {
    throw IoError(source + ": not a unit result of this posgrad version (" + e.what() + ")");
  }
  return u;
}

static json provenance_json(const Provenance& p) {
  return {{"git_commit", p.git_commit},  {"cpu", p.cpu},   {"simd", p.simd},       {"compiler", p.compiler},
          {"libraries", p.libraries},    {"cuda", p.cuda}, {"threads", p.threads}, {"jobs", p.jobs},
          {"config_hash", p.config_hash}};
}

json to_json(const ComparisonResult& r) {
  json units = json::array();
  for (const auto& u : r.units) units.push_back(to_json(u));
  json j = {{"format", "posgrad-comparison-1"},
            {"config", r.config.to_json()},
            {"provenance", provenance_json(r.provenance)},
            {"units", units}};
  for (const StudyEntry& s : studies())
    if (s.to_json) s.to_json(r, j);
  return j;
}

ComparisonResult comparison_from_json(const json& j, const std::string& source) {
  ComparisonResult r;
  try {
    if (j.value("format", "") != "posgrad-comparison-1")
      throw IoError(source + ": not a posgrad comparison result (format '" + j.value("format", std::string("?")) +
                    "')");
    opt::from_json(compare_options(), r.config, j.at("config"), source + ": config", true);
    const json& p = j.at("provenance");
    r.provenance = {p.at("git_commit").get<std::string>(),
                    p.at("cpu").get<std::string>(),
                    p.at("simd").get<std::string>(),
                    p.at("compiler").get<std::string>(),
                    p.at("libraries").get<std::string>(),
                    p.at("cuda").get<std::string>(),
                    p.at("config_hash").get<std::string>(),
                    integer(p.at("threads")),
                    p.contains("jobs") ? integer(p.at("jobs")) : int64_t{1}};
    for (const auto& u : j.at("units")) r.units.push_back(unit_from_json(u, source));
    for (const StudyEntry& s : studies())
      if (s.from_json) s.from_json(j, r, source);
  } catch (const json::exception& e) {
    throw IoError(source + ": incomplete comparison result (" + e.what() + ")");
  } catch (const UsageError& e) {
    throw IoError(e.what());
  }
  return r;
}

// ---- provenance ------------------------------------------------------------------------------------

namespace {

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
  p.git_commit = build_commit();
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

// ---- metrics ---------------------------------------------------------------------------------------

const UnitResult* first_unit(const ComparisonResult& r, const std::string& method) {
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units)
      if (u.method == method && u.seed == seed) return &u;
  return nullptr;
}

std::vector<std::string> rows(const ComparisonResult& r) {
  std::vector<std::string> out = r.config.methods;
  for (const StudyEntry& s : studies())
    if (s.rows)
      for (const auto& row : s.rows(r))
        if (std::find(out.begin(), out.end(), row) == out.end()) out.push_back(row);
  return out;
}

std::string method_of(const std::string& row) { return Row::parse(row).method; }

std::vector<double> values(const ComparisonResult& r, const std::string& row, const Metric& m) {
  const StudyEntry& study = study_entry(m.study);
  std::vector<double> v;
  const std::string method = method_of(row);
  for (uint64_t seed : r.config.seeds)
    for (const auto& u : r.units)
      if (u.method == method && u.seed == seed)
        if (auto x = study.value(r.config, u, row, m)) v.push_back(*x);
  return v;
}

Summary summary(const ComparisonResult& r, const std::string& row, const Metric& m) {
  return summarize(values(r, row, m));
}

std::map<uint64_t, double> values_by_seed(const ComparisonResult& r, const std::string& row, const Metric& m) {
  const StudyEntry& study = study_entry(m.study);
  std::map<uint64_t, double> v;
  const std::string method = method_of(row);
  for (const auto& u : r.units)
    if (u.method == method)
      if (auto x = study.value(r.config, u, row, m)) v.emplace(u.seed, *x);
  return v;
}

std::vector<Metric> csv_metrics(const CompareConfig& c) {
  std::vector<Metric> out;
  for (const StudyEntry& s : studies())
    if (s.metrics)
      for (auto& m : s.metrics(c)) out.push_back(std::move(m));
  return out;
}

}  // namespace posgrad::train
