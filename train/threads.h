// threads.h — the OpenMP thread count of a training loop under load from other processes.
//
// posgrad's CPU kernels split work statically and synchronise at the end of every parallel region,
// so one thread that shares its core with another process holds up all the others: with a busy
// loop on one of two cores, two threads run at a fraction of one. The default thread setting
// (--threads 0) therefore follows the load: half a second into the run, then every two seconds,
// the governor reads how much of the cores this process may run on (its affinity mask) other
// processes kept busy, from the kernel's per-CPU counters (/proc/stat, proc(5)) minus this
// process's own CPU time, and uses
//     threads = clamp(cores − round(others), 1, cores)
// for the next steps. Niced processes count too: with the kernel's autogroup scheduling (the
// default of desktop and many server kernels) a niced process in another session takes its fair
// share all the same. Steal time (another virtual machine on the same host) counts as well. An
// explicit --threads N is kept as it is.
//
// Results do not depend on this: every kernel's reductions have a fixed order that does not depend
// on the number of threads, so a run whose thread count changes is bit-identical to one that keeps
// it (tests: Threads.TrainingIsBitIdenticalWhateverTheThreadCount, and the autograd determinism
// test across thread counts).
//
// Where /proc/stat cannot be read (not Linux, a sandbox), the governor keeps all cores.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace posgrad::train {

// Busy and total time of a set of CPUs, in seconds (from clock ticks).
struct CpuTimes {
  double busy = 0;   // user + nice + system + irq + softirq + steal
  double total = 0;  // every column, idle and iowait included
};

// Sums the "cpuN" lines of a /proc/stat text over the CPUs in `cpus` (an empty list: every cpuN
// line). ticks_per_second: sysconf(_SC_CLK_TCK). std::nullopt when no listed CPU has a line or a
// line is malformed (fewer than 4 numeric columns).
std::optional<CpuTimes> parse_proc_stat(const std::string& text, const std::vector<int>& cpus, double ticks_per_second);

// The thread count for `cores` usable cores when other processes keep `others_busy` cores busy
// (a mean over the measuring window, ≥ 0): clamp(cores − round(others_busy), 1, cores).
int threads_for_load(int cores, double others_busy);

class ThreadGovernor {
 public:
  // fixed_threads > 0: that many threads, always (omp_set_num_threads once). 0: follow the load,
  // starting from max_threads (≤ 0: the process's OpenMP default — OMP_NUM_THREADS, else every core —
  // as it was before any governor changed it) and never above it.
  // interval_seconds: the measuring window (the first one is at most 0.5 s).
  explicit ThreadGovernor(int64_t fixed_threads, int max_threads = 0, double interval_seconds = 2.0);

  // Call between steps: when a window has ended, measures the others' load over it and sets the
  // thread count for the next window (logged at info when it changes). Cheap otherwise.
  void between_steps();

  int threads() const { return threads_; }
  bool adaptive() const { return adaptive_; }
  // The other processes' mean load over the last finished window, in cores (−1 before the first).
  double last_others_busy() const { return last_others_; }

 private:
  struct Sample {
    std::chrono::steady_clock::time_point wall;
    CpuTimes cpu;
    double own = 0;  // this process's CPU seconds
  };
  std::optional<Sample> sample() const;

  bool adaptive_ = false;
  int max_threads_ = 1, threads_ = 1;
  double interval_ = 2.0, last_others_ = -1;
  std::vector<int> cpus_;
  double ticks_ = 100;
  std::optional<Sample> start_;
};

// ---- threads shared by the jobs of one process (compare --jobs, compare/compare_dist.h) -------------
//
// A comparison that trains several units at once gives each job (a thread of its own) a share of the
// process's threads. When jobs run out of units, the ones still training take the threads freed: every
// training loop calls follow_job_share() between steps (the Trainer through its ThreadGovernor, the
// studies' fine-tuning loop, train/finetune.h), which sets the calling job's OpenMP thread count to
// job_share(total, jobs still running, its rank among them). Threads of no job are left alone. Results do not
// depend on it (see above).

// The threads of job `index` (0-based) when `running` jobs share `total` threads: total / running, the
// first total % running jobs one more; at least 1.
int job_share(int total, int running, int index);

// Called by the job pool: job `index` of a pool sharing `total` threads starts on the calling thread
// (begin_job: its share is set at once), and a job that has no units left ends (end_job: the others
// take its threads at their next step; stopped = it ended on a failure or an interrupt, which the log
// line of the others says). A pool's jobs begin before any of them ends. A running job's share is
// job_share(total, running jobs, its rank among them), so the shares always add up to total.
void begin_job_share(int total, int jobs);  // once per pool, before its jobs start
void begin_job(int index);
void end_job(bool stopped = false);

// Between training steps: the calling job's share, set with omp_set_num_threads when it differs from
// the thread's setting (logged when it grew). Cheap: one atomic load, the lock only after the pool
// changed. Nothing on a thread that is not a job.
void follow_job_share();

}  // namespace posgrad::train
