// compare_dist.cpp — see compare_dist.h.
#include "compare/compare_dist.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <optional>

#include <nlohmann/json.hpp>

#include "train/evaluate.h"
#include "train/interrupt.h"

namespace posgrad::train {

using json = nlohmann::json;

std::vector<UnitSpec> compare_units(const std::vector<std::string>& methods, const std::vector<uint64_t>& seeds) {
  std::vector<UnitSpec> units;
  for (uint64_t seed : seeds)
    for (const auto& method : methods) units.push_back({method, seed, ""});
  return units;
}

std::string UnitSpec::label() const {
  return (study.empty() ? "" : study + ": ") + method + " seed " + std::to_string(seed);
}

void UnitTimes::add(const UnitSpec& u, double seconds) {
  for (Sum* s : {&by_study_[u.study], &by_method_[{u.study, u.method}]}) {
    s->first += seconds;
    ++s->second;
  }
}

std::optional<double> UnitTimes::estimate(const UnitSpec& u) const {
  auto mean = [](const Sum& s) { return s.first / static_cast<double>(s.second); };
  if (const auto it = by_method_.find({u.study, u.method}); it != by_method_.end()) return mean(it->second);
  if (const auto it = by_study_.find(u.study); it != by_study_.end()) return mean(it->second);
  return std::nullopt;
}

int unit_owner(size_t index, int size) { return static_cast<int>(index % static_cast<size_t>(size)); }

namespace {

// The kind of an exception, as the exit status sees it.
std::string kind_of(const std::exception_ptr& e, int* signal) {
  try {
    std::rethrow_exception(e);
  } catch (const Interrupted& x) {
    *signal = x.signal;
    return "interrupted";
  } catch (const NonFiniteLoss&) {
    return "numerical";
  } catch (const ValueError&) {
    return "usage";
  } catch (const Error&) {
    return "io";
  } catch (...) {
    return "internal";
  }
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

std::vector<json> run_units_distributed(const std::vector<UnitSpec>& units, dist::Communicator& comm,
                                        const std::string& out_dir, const std::function<json(const UnitSpec&)>& run) {
  const int n = comm.size(), me = comm.rank();
  const auto t0 = std::chrono::steady_clock::now();
  size_t mine = 0, done = 0;
  for (size_t i = 0; i < units.size(); ++i) mine += unit_owner(i, n) == me;
  std::vector<json> results;
  json sent = {{"units", json::array()}, {"failures", json::array()}};
  for (size_t i = 0; i < units.size(); ++i) {
    if (unit_owner(i, n) != me) continue;
    const UnitSpec& u = units[i];
    // One numbering in the log: the experiment's. Each process's progress line (compare.cpp) counts
    // its own share and names the unit, so one process needs no line of its own here.
    if (n > 1) spdlog::info("=== rank {} runs experiment unit {}/{}: {} ===", me, i + 1, units.size(), u.label());
    if (n == 1) {
      results.push_back(run(u));  // one process: errors leave at once, as they always did
    } else {
      try {
        sent["units"].push_back({{"index", i}, {"result", run(u)}});
      } catch (...) {
        const std::exception_ptr e = std::current_exception();
        int signal = 0;
        const std::string kind = kind_of(e, &signal), what = message_of(e);
        spdlog::error("unit {}/{} ({}) failed on rank {}: {}; this rank runs none of its remaining units", i + 1,
                      units.size(), u.label(), me, what);
        sent["failures"].push_back(
            {{"index", i}, {"label", u.label()}, {"rank", me}, {"kind", kind}, {"signal", signal}, {"message", what}});
        break;
      }
    }
    ++done;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (n > 1)
      spdlog::info("=== rank {}: {}/{} of its units done, {:.0f} s elapsed ===", me, done, mine, el);
    else
      spdlog::info("=== {}/{} units done, {:.0f} s elapsed ===", done, mine, el);
  }
  if (n == 1) return results;

  const std::vector<std::string> parts = comm.gather(sent.dump(), 0);
  if (!comm.is_root()) return {};
  std::vector<std::optional<json>> ordered(units.size());
  json failures = json::array();
  for (size_t r = 0; r < parts.size(); ++r) {
    const json part = json::parse(parts[r]);
    for (const auto& f : part.at("failures")) failures.push_back(f);
    for (const auto& e : part.at("units")) ordered.at(e.at("index").get<size_t>()) = e.at("result");
  }
  if (!failures.empty()) {
    size_t finished = 0;
    for (const auto& o : ordered) finished += o.has_value();
    std::string msg;
    for (const auto& f : failures)
      msg += (msg.empty() ? "" : "; ") + std::string("unit ") + std::to_string(f.at("index").get<size_t>() + 1) + "/" +
             std::to_string(units.size()) + " (" + f.at("label").get<std::string>() + ") failed on rank " +
             std::to_string(f.at("rank").get<int>()) + ": " + f.at("message").get<std::string>();
    msg += "; " + std::to_string(finished) + " of " + std::to_string(units.size()) +
           " units finished and are kept: the same command resumes the others";
    const std::string kind = failures.front().at("kind").get<std::string>();
    if (kind == "interrupted") throw Interrupted(msg, out_dir, 0, failures.front().at("signal").get<int>());
    if (kind == "numerical") throw NonFiniteLoss(msg);
    if (kind == "usage") throw UsageError(msg);
    if (kind == "io") throw IoError(msg);
    throw std::runtime_error(msg);
  }
  std::vector<json> out;
  for (size_t i = 0; i < ordered.size(); ++i) {
    POSGRAD_CHECK(ordered[i].has_value(), IoError, "unit ", i + 1, " (", units[i].label(), ") sent no result");
    out.push_back(std::move(*ordered[i]));
  }
  return out;
}

}  // namespace posgrad::train
