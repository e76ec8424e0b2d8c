// compare_dist.cpp — see compare_dist.h.
#include "compare/compare_dist.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "train/evaluate.h"
#include "train/interrupt.h"
#include "train/threads.h"

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

// Every failure of a run in one exception, of the first one's kind (so the exit status keeps its
// meaning): each unit named with its own message, then how many units finished and are kept.
[[noreturn]] void throw_failures(const json& failures, size_t units, size_t finished, const std::string& out_dir,
                                 bool ranks) {
  std::string msg;
  for (const auto& f : failures) {
    const bool stopped = f.at("kind").get<std::string>() == "interrupted";
    msg += (msg.empty() ? "" : "; ") + std::string("unit ") + std::to_string(f.at("index").get<size_t>() + 1) + "/" +
           std::to_string(units) + " (" + f.at("label").get<std::string>() + ") " + (stopped ? "stopped" : "failed") +
           (ranks ? " on rank " + std::to_string(f.at("rank").get<int>()) : std::string()) + ": " +
           f.at("message").get<std::string>();
  }
  msg += "; " + std::to_string(finished) + " of " + std::to_string(units) +
         " units finished and are kept: the same command resumes the others";
  const std::string kind = failures.front().at("kind").get<std::string>();
  if (kind == "interrupted") throw Interrupted(msg, out_dir, 0, failures.front().at("signal").get<int>());
  if (kind == "numerical") throw NonFiniteLoss(msg);
  if (kind == "usage") throw UsageError(msg);
  if (kind == "io") throw IoError(msg);
  throw std::runtime_error(msg);
}

}  // namespace

namespace {

thread_local std::string g_job_prefix;

// This process's units on local.jobs threads, taken in order as jobs become free. results[k] is the
// result of units[mine[k]] (empty where it did not run); every failure is in `failures` (unit index
// into `units`, the exception), in the order they happened. A failure stops the taking of new units.
void run_on_jobs(const std::vector<UnitSpec>& units, const std::vector<size_t>& mine, const LocalJobs& local,
                 const std::function<json(const UnitSpec&)>& run, const std::function<void(size_t)>& finished,
                 std::vector<std::optional<json>>& results,
                 std::vector<std::pair<size_t, std::exception_ptr>>& failures) {
  std::mutex mutex;
  size_t next = 0;
  bool stop = false;
  auto job = [&](int j) {
    const std::string job_name = "job " + std::to_string(j + 1) + "/" + std::to_string(local.jobs);
    g_job_prefix = "[" + job_name + "] ";
    begin_job(j);  // this thread's OpenMP setting only (train/threads.h)
    for (;;) {
      size_t k = 0;
      {
        const std::lock_guard<std::mutex> lock(mutex);
        if (stop || next == mine.size()) {
          end_job();  // the jobs still training take its threads
          return;
        }
        k = next++;
      }
      const UnitSpec& u = units[mine[k]];
      // Every line of the unit (its steps and evaluations too) names it: the jobs' lines interleave.
      g_job_prefix = "[" + job_name + ": " + u.label() + "] ";
      try {
        json r = run(u);
        const std::lock_guard<std::mutex> lock(mutex);
        results[k] = std::move(r);
        finished(k);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex);
        failures.emplace_back(mine[k], std::current_exception());
        int signal = 0;
        const bool interrupted = kind_of(failures.back().second, &signal) == "interrupted";
        if (interrupted)  // every job's unit stops at its next step: one line each
          spdlog::warn("unit {}/{} ({}) stopped: {}", mine[k] + 1, units.size(), u.label(),
                       message_of(failures.back().second));
        else
          spdlog::error("unit {}/{} ({}) failed: {}{}", mine[k] + 1, units.size(), u.label(),
                        message_of(failures.back().second),
                        stop ? "" : "; the other jobs finish the units they have taken and take no new one");
        stop = true;
        end_job(/*stopped=*/true);
        return;
      }
    }
  };
  begin_job_share(local.total_threads > 0 ? local.total_threads : local.jobs * std::max(1, local.threads_per_job),
                  local.jobs);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(local.jobs));
  for (int j = 0; j < local.jobs; ++j) threads.emplace_back(job, j);
  for (auto& t : threads) t.join();
}

}  // namespace

const std::string& job_log_prefix() { return g_job_prefix; }

std::vector<json> run_units_distributed(const std::vector<UnitSpec>& units, dist::Communicator& comm,
                                        const std::string& out_dir, const std::function<json(const UnitSpec&)>& run,
                                        const LocalJobs& local) {
  const int n = comm.size(), me = comm.rank();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<size_t> mine;
  for (size_t i = 0; i < units.size(); ++i)
    if (unit_owner(i, n) == me) mine.push_back(i);
  size_t done = 0;
  auto finished = [&](size_t) {
    ++done;
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (n > 1)
      spdlog::info("=== rank {}: {}/{} of its units done, {:.0f} s elapsed ===", me, done, mine.size(), el);
    else
      spdlog::info("=== {}/{} units done, {:.0f} s elapsed ===", done, mine.size(), el);
  };
  std::vector<json> results;
  json sent = {{"units", json::array()}, {"failures", json::array()}};
  auto failed = [&](size_t i, const std::exception_ptr& e) {
    int signal = 0;
    const std::string kind = kind_of(e, &signal), what = message_of(e);
    sent["failures"].push_back({{"index", i},
                                {"label", units[i].label()},
                                {"rank", me},
                                {"kind", kind},
                                {"signal", signal},
                                {"message", what}});
  };
  const int jobs = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(1, local.jobs)), mine.size()));
  if (jobs > 1) {
    std::vector<std::optional<json>> got(mine.size());
    std::vector<std::pair<size_t, std::exception_ptr>> failures;
    run_on_jobs(units, mine, {jobs, local.threads_per_job, local.total_threads}, run, finished, got, failures);
    for (const auto& [i, e] : failures) failed(i, e);
    if (n == 1) {
      // One failure leaves as thrown; several (an interrupt stops every job's unit) in one message.
      if (failures.size() == 1) std::rethrow_exception(failures.front().second);
      if (!failures.empty()) {
        size_t finished = 0;
        for (const auto& g : got) finished += g.has_value();
        throw_failures(sent["failures"], units.size(), finished, out_dir, /*ranks=*/false);
      }
      for (auto& g : got) results.push_back(std::move(*g));
      return results;
    }
    for (size_t k = 0; k < mine.size(); ++k)
      if (got[k]) sent["units"].push_back({{"index", mine[k]}, {"result", std::move(*got[k])}});
    if (!failures.empty()) spdlog::error("rank {} runs none of its remaining units", me);
  } else {
    for (const size_t i : mine) {
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
          spdlog::error("unit {}/{} ({}) failed on rank {}: {}; this rank runs none of its remaining units", i + 1,
                        units.size(), u.label(), me, message_of(e));
          failed(i, e);
          break;
        }
      }
      finished(i);
    }
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
    throw_failures(failures, units.size(), finished, out_dir, /*ranks=*/true);
  }
  std::vector<json> out;
  for (size_t i = 0; i < ordered.size(); ++i) {
    POSGRAD_CHECK(ordered[i].has_value(), IoError, "unit ", i + 1, " (", units[i].label(), ") sent no result");
    out.push_back(std::move(*ordered[i]));
  }
  return out;
}

}  // namespace posgrad::train
