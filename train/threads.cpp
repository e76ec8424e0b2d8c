// threads.cpp — see threads.h.
#include "train/threads.h"

#include <omp.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace posgrad::train {

namespace {

// Columns of a cpuN line (proc(5)): user nice system idle iowait irq softirq steal guest guest_nice.
// guest time is already counted in user (and guest_nice in nice).
enum Column { User, Nice, System, Idle, IoWait, Irq, SoftIrq, Steal, Guest, GuestNice };

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

std::optional<CpuTimes> parse_proc_stat(const std::string& text, const std::vector<int>& cpus,
                                        double ticks_per_second) {
  std::istringstream in(text);
  std::string line;
  CpuTimes t;
  size_t found = 0;
  while (std::getline(in, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    std::istringstream f(line.substr(3));
    int cpu = -1;
    f >> cpu;
    if (!cpus.empty() && std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    std::vector<double> col;
    double v;
    while (f >> v) col.push_back(v);
    if (col.size() < 4) return std::nullopt;
    col.resize(std::max<size_t>(col.size(), GuestNice + 1), 0.0);
    // user and nice include guest and guest_nice already; the total counts them once.
    double total = 0;
    for (int c = User; c <= Steal; ++c) total += col[static_cast<size_t>(c)];
    t.total += total / ticks_per_second;
    t.busy += (col[User] + col[Nice] + col[System] + col[Irq] + col[SoftIrq] + col[Steal]) / ticks_per_second;
    ++found;
  }
  if (found == 0) return std::nullopt;
  return t;
}

int threads_for_load(int cores, double others_busy) {
  cores = std::max(cores, 1);
  const long busy = std::lround(std::max(others_busy, 0.0));
  return static_cast<int>(std::clamp<long>(cores - busy, 1, cores));
}

ThreadGovernor::ThreadGovernor(int64_t fixed_threads, int max_threads, double interval_seconds)
    : interval_(interval_seconds) {
  if (fixed_threads > 0) {
    threads_ = max_threads_ = static_cast<int>(fixed_threads);
    omp_set_num_threads(threads_);
    return;
  }
  // The OpenMP default of this process (OMP_NUM_THREADS, else every core), read once before any
  // governor changed it.
  static const int process_default = omp_get_max_threads();
  max_threads_ = max_threads > 0 ? max_threads : process_default;
  threads_ = max_threads_;
  omp_set_num_threads(threads_);
  cpus_ = affinity_cpus();
  const long tck = sysconf(_SC_CLK_TCK);
  ticks_ = tck > 0 ? static_cast<double>(tck) : 100.0;
  start_ = sample();
  adaptive_ = start_.has_value() && max_threads_ > 1;
}

std::optional<ThreadGovernor::Sample> ThreadGovernor::sample() const {
  std::ifstream f("/proc/stat");
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  auto cpu = parse_proc_stat(ss.str(), cpus_, ticks_);
  if (!cpu) return std::nullopt;
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return std::nullopt;
  return Sample{std::chrono::steady_clock::now(), *cpu,
                static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec)};
}

void ThreadGovernor::between_steps() {
  follow_job_share();
  if (!adaptive_) return;
  const auto now = std::chrono::steady_clock::now();
  // The first window is short, so that a run started under load adapts within its first steps.
  const double window = last_others_ < 0 ? std::min(0.5, interval_) : interval_;
  if (std::chrono::duration<double>(now - start_->wall).count() < window) return;
  const std::optional<Sample> s = sample();
  if (!s) {
    adaptive_ = false;  // /proc/stat went away: keep the count we have
    return;
  }
  const double wall = std::chrono::duration<double>(s->wall - start_->wall).count();
  const double others = std::max(0.0, (s->cpu.busy - start_->cpu.busy) - (s->own - start_->own)) / wall;
  const int cores = std::max<int>(1, static_cast<int>(cpus_.empty() ? max_threads_ : cpus_.size()));
  const int want = std::min(max_threads_, threads_for_load(cores, others));
  if (want != threads_) {
    spdlog::info(
        "OpenMP threads {} -> {}: other processes kept {:.1f} of {} cores busy (--threads N fixes the count; "
        "results do not depend on it)",
        threads_, want, others, cores);
    threads_ = want;
    omp_set_num_threads(threads_);
  }
  last_others_ = others;
  start_ = s;
}

// ---- threads shared by jobs --------------------------------------------------------------------------

namespace {
// The pool: its threads, which jobs still run (by index), and a generation that changes with either,
// so that follow_job_share takes the lock only after a change.
std::mutex g_jobs_mutex;
int g_job_total = 1;
std::vector<char> g_job_running;
bool g_job_stopped = false;  // a job ended on a failure or an interrupt
std::atomic<uint64_t> g_job_generation{0};
thread_local int t_job_index = -1;
thread_local uint64_t t_job_seen = ~uint64_t{0};
thread_local int t_job_share = 1;         // the share at generation t_job_seen
thread_local bool t_job_stopped = false;  // and whether a job had stopped then

// The calling job's share now (g_jobs_mutex held): its rank among the running jobs decides the remainder.
int current_share() {
  int running = 0, rank = 0;
  for (size_t i = 0; i < g_job_running.size(); ++i) {
    if (!g_job_running[i]) continue;
    if (static_cast<int>(i) < t_job_index) ++rank;
    ++running;
  }
  return job_share(g_job_total, running, rank);
}
}  // namespace

int job_share(int total, int running, int index) {
  running = std::max(1, running);
  const int base = total / running, extra = total % running;
  return std::max(1, base + (index < extra ? 1 : 0));
}

void begin_job_share(int total, int jobs) {
  const std::lock_guard<std::mutex> lock(g_jobs_mutex);
  g_job_total = std::max(1, total);
  g_job_running.assign(static_cast<size_t>(std::max(1, jobs)), 1);
  g_job_stopped = false;
  g_job_generation.fetch_add(1);
}

void begin_job(int index) {
  const std::lock_guard<std::mutex> lock(g_jobs_mutex);
  t_job_index = index;
  t_job_seen = g_job_generation.load();
  t_job_share = current_share();
  t_job_stopped = g_job_stopped;
  omp_set_num_threads(t_job_share);
}

void end_job(bool stopped) {
  if (t_job_index < 0) return;
  const std::lock_guard<std::mutex> lock(g_jobs_mutex);
  if (static_cast<size_t>(t_job_index) < g_job_running.size()) g_job_running[static_cast<size_t>(t_job_index)] = 0;
  g_job_stopped = g_job_stopped || stopped;
  g_job_generation.fetch_add(1);
  t_job_index = -1;
}

void follow_job_share() {
  if (t_job_index < 0) return;
  const int now = omp_get_max_threads();  // this thread's setting (a Trainer's governor may have set it)
  // The lock only after the pool changed; a Trainer's fixed count may still differ from the share.
  if (g_job_generation.load(std::memory_order_acquire) != t_job_seen) {
    const std::lock_guard<std::mutex> lock(g_jobs_mutex);
    t_job_share = current_share();
    t_job_stopped = g_job_stopped;
    t_job_seen = g_job_generation.load();
  }
  const int share = t_job_share;
  if (share == now) return;
  if (share > now)
    spdlog::info("OpenMP threads {} -> {}: {} (results do not depend on it)", now, share,
                 t_job_stopped ? "a job stopped on a failure or an interrupt" : "other jobs have no units left");
  omp_set_num_threads(share);
}

}  // namespace posgrad::train
