// compare_dist.h — the comparison's units over the processes of a job (dist/communicator.h): the
// (method, seed) units in the single-process order (seeds outer, methods inner), unit i assigned to
// rank i mod N (round-robin: with equal units every rank gets its share, and the assignment depends
// on nothing but N), each rank running its own and sending every UnitResult as JSON to rank 0, which
// puts them back in unit order. The JSON round trip is exact (doubles are written with enough digits
// to read back the same bits, as for a resumed unit's result.json), so rank 0 holds what a single
// process would have measured with the same threads per unit, and results.csv is byte-identical to
// the single-process run whatever N is.
//
// Within a process, its share runs on `jobs` threads at once (compare --jobs; LocalJobs below), each
// unit on one of them with threads_per_job OpenMP threads, the units taken in order as jobs become
// free. Every kernel's result is independent of the OpenMP thread count (train/threads.h), and the
// results are put back in unit order, so they are the same bits whatever the number of jobs.
//
// Failures: with one process and one job an exception leaves at once, as before. With several jobs,
// a job whose unit fails logs which unit and why; the other jobs finish the unit they are running
// (kept for a re-run) and start no other, and the first failure's exception is then thrown as it was
// (its type, hence the exit status, and message). With several processes, a rank whose unit fails
// logs which unit and why, skips its remaining units and still takes part in the gather; the
// other ranks finish theirs (each unit's result.json is written when it finishes, so a re-run skips
// them). Rank 0 then throws one error naming every failed unit, its rank and its message, of the
// first failure's kind (usage, numerical, interrupted, I/O), so the exit status keeps its meaning.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/results.h"
#include "dist/communicator.h"

namespace posgrad::train {

// One unit of the experiment: a decoder unit (study empty: the language model trained by the
// runner, then every study that runs on it), or a unit of a study with units of its own
// (StudyEntry::own_units, e.g. the encoder track), named by that study.
struct UnitSpec {
  std::string method;
  uint64_t seed = 0;
  std::string study;
  std::string label() const;  // rope seed 2, encoder: rope seed 2
};

// Time estimates of units from the finished ones, for the progress line's time left: units differ
// by kind (a decoder unit and its studies against an encoder-track unit) and, among decoder units, by
// method (RoPE's units also run the position-interpolation protocol and, in the quick preset, the
// passkey fine-tuning). A unit's estimate is the mean time of the finished units of its study and
// method (another seed of it), else of its study; none before any unit of its study has finished.
class UnitTimes {
 public:
  void add(const UnitSpec& u, double seconds);              // a finished unit (seconds >= 0)
  std::optional<double> estimate(const UnitSpec& u) const;  // seconds
  bool empty() const { return by_study_.empty(); }

 private:
  using Sum = std::pair<double, size_t>;  // seconds and units
  std::map<std::string, Sum> by_study_;
  std::map<std::pair<std::string, std::string>, Sum> by_method_;  // (study, method)
};

// Every unit of the experiment, in the single-process order: for each seed, each method.
std::vector<UnitSpec> compare_units(const std::vector<std::string>& methods, const std::vector<uint64_t>& seeds);

// The rank that runs unit `index` of a job of `size` processes: index mod size.
int unit_owner(size_t index, int size);

// How one process runs its share: `jobs` units at once (>= 1), each job a thread of its own whose
// OpenMP thread count starts at threads_per_job (0: the process's setting, left as it is; only with
// one job).
// The jobs share total_threads (train/threads.h, job_share): as jobs run out of units, the ones still
// training take the threads freed.
struct LocalJobs {
  int jobs = 1;
  int threads_per_job = 0;
  int total_threads = 0;
};

// The log-line prefix of the calling thread: "[job 2/3] " on the threads of a run with several jobs,
// "" elsewhere (the command line's log pattern prints it; cli/main.cpp).
const std::string& job_log_prefix();

// Runs this rank's units with run(unit), which returns the unit's result as JSON, and returns, on
// rank 0, every unit's result in unit order; on the other ranks an empty vector. out_dir names the
// experiment in an interruption's message. After each unit a progress line: units done of this
// process's share and the time elapsed (the runner's progress line, compare/compare.cpp, has the time
// left). With local.jobs > 1, run is called from several threads at once: it must be thread-safe.
std::vector<nlohmann::json> run_units_distributed(const std::vector<UnitSpec>& units, dist::Communicator& comm,
                                                  const std::string& out_dir,
                                                  const std::function<nlohmann::json(const UnitSpec&)>& run,
                                                  const LocalJobs& local = {});

}  // namespace posgrad::train
