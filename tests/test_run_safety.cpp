// test_run_safety.cpp — nothing injected, nothing lost: external programs start from an argument
// vector (a directory name holding quotes, $(...), backticks, spaces and a newline gets its plots
// and runs nothing), one writer per run directory (a second process is refused with the holder's
// pid; the kernel releases a dead holder's hold), and a signal while the report is written keeps the
// previous report whole.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <omp.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "compare/compare.h"
#include "compare/options.h"
#include "compare/report.h"
#include "compare/results.h"
#include "compare/studies/attention/attention.h"
#include "compare/studies/cost/cost.h"
#include "compare/studies/passkey/passkey_config.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/suite/length_suite.h"
#include "data/fileio.h"
#include "data/process.h"
#include "support/compare_config.h"
#include "support/process.h"
#include "support/test_util.h"
#include "train/interrupt.h"
#include "train/presets.h"
#include "train/trainer.h"

using namespace posgrad;
using posgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

// Every shell metacharacter that matters, and a newline: a shell that saw this name would create
// `pwned-*` files in the working directory (or the test's directory).
std::string hostile_name(const TempDir& d) {
  return "it's \"a\" $(touch " + d.str("pwned-subst") + ") `touch " + d.str("pwned-tick") + "`; touch " +
         d.str("pwned-semi") + " '\nline two";
}

bool has_gnuplot() { return run_process({"gnuplot", "--version"}).ok(); }

std::vector<std::string> pwned(const TempDir& d) {
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(d.path))
    if (e.path().filename().string().rfind("pwned", 0) == 0) found.push_back(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(fs::current_path()))
    if (e.path().filename().string().rfind("pwned", 0) == 0) found.push_back(e.path().string());
  return found;
}

// The tests' tiny experiment on two methods and one seed, without the passkey test.
train::CompareConfig tiny(const TempDir& d, const std::string& out) {
  train::CompareConfig c = test::tiny_compare(d, out);
  c.methods = {"rope", "alibi"};
  c.seeds = {1};
  c.of<train::SuiteSettings>().tasks = {"reverse_string"};
  c.of<train::PasskeyConfig>().iters = 0;
  return c;
}

}  // namespace

TEST(RunProcess, ArgumentsReachTheProgramVerbatim) {
  TempDir d;
  const std::string name = hostile_name(d);
  const ProcessResult r = run_process({"printf", "%s", name});
  ASSERT_TRUE(r.ok()) << r.output;
  EXPECT_EQ(r.output, name);
  EXPECT_TRUE(pwned(d).empty());
  // The working directory is taken as a path, whatever its name.
  fs::create_directories(d.str(name));
  const ProcessResult pwd = run_process({"pwd", "-P"}, d.str(name));
  ASSERT_TRUE(pwd.ok()) << pwd.output;
  EXPECT_EQ(pwd.output, fs::canonical(d.str(name)).string() + "\n");
  EXPECT_TRUE(pwned(d).empty());
}

TEST(RunProcess, FailuresAreReportedNotThrown) {
  const ProcessResult missing = run_process({"posgrad-no-such-program-xyz"});
  EXPECT_FALSE(missing.started);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.output.find("posgrad-no-such-program-xyz"), std::string::npos);
  const ProcessResult fails = run_process({"sh", "-c", "echo out; echo err >&2; exit 7"});
  EXPECT_TRUE(fails.started);
  EXPECT_EQ(fails.exit_status, 7);
  EXPECT_NE(fails.output.find("out"), std::string::npos);
  EXPECT_NE(fails.output.find("err"), std::string::npos);
  const ProcessResult capped = run_process({"head", "-c", "100000", "/dev/zero"}, "", 10);
  EXPECT_TRUE(capped.ok());
  EXPECT_EQ(capped.output.size(), 10u);  // the rest was read and dropped: the program did not block
  TempDir d;
  const ProcessResult no_dir = run_process({"true"}, d.str("does-not-exist"));
  EXPECT_FALSE(no_dir.ok());
  EXPECT_THROW(run_process({}), std::invalid_argument);
}

TEST(RunSafety, HostileDirectoryNameGetsItsPlotsAndRunsNothing) {
  TempDir d;
  auto c = tiny(d, hostile_name(d));
  train::run_compare(c);
  EXPECT_TRUE(pwned(d).empty()) << "a shell ran part of the directory's name";
  ASSERT_TRUE(fs::exists(c.out_dir + "/report.md"));
  if (has_gnuplot()) {
    for (const char* p : {"ppl_vs_length", "train_loss", "per_position_loss", "attention_distance", "suite_accuracy",
                          "pi_ppl_vs_length"})
      EXPECT_TRUE(fs::exists(c.out_dir + "/plots/" + p + ".png")) << p;
    const std::string md = read_file(c.out_dir + "/report.md");
    EXPECT_EQ(md.find("could not be drawn"), std::string::npos);
  }
  // `posgrad report` on the same directory: the same plots again, nothing run.
  for (const auto& e : fs::directory_iterator(c.out_dir + "/plots")) fs::remove(e.path());
  train::rerender_report(c.out_dir);
  EXPECT_TRUE(pwned(d).empty());
  if (has_gnuplot()) {
    EXPECT_TRUE(fs::exists(c.out_dir + "/plots/ppl_vs_length.png"));
  }
  // No staging folder is left behind.
  EXPECT_FALSE(fs::exists(c.out_dir + "/.report-new"));
  EXPECT_FALSE(fs::exists(c.out_dir + "/.plots-old"));
}

TEST(DirectoryLock, HoldsArePerProcessAndCounted) {
  TempDir d;
  const std::string dir = d.str("run");
  {
    DirectoryLock a(dir);
    EXPECT_TRUE(fs::exists(dir + "/.posgrad.lock"));
    EXPECT_EQ(read_file(dir + "/.posgrad.lock"), std::to_string(::getpid()) + "\n");
    {
      DirectoryLock b(d.str("run/../run"));  // the same directory, spelled otherwise: shared
    }
    // Still held after the inner one: another process is refused.
    const pid_t child = fork();
    if (child == 0) {
      try {
        DirectoryLock c(dir);
        _exit(0);
      } catch (const IoError& e) {
        const std::string m = e.what();
        _exit(m.find("process " + std::to_string(getppid())) != std::string::npos && m.find(dir) != std::string::npos
                  ? 3
                  : 4);
      }
    }
    int st = 0;
    waitpid(child, &st, 0);
    EXPECT_EQ(test::decode_status(st), 3) << "the child was not refused with the holder's pid and the directory";
  }
  const pid_t child = fork();  // released with the last hold
  if (child == 0) {
    try {
      DirectoryLock c(dir);
      _exit(0);
    } catch (...) {
      _exit(4);
    }
  }
  int st = 0;
  waitpid(child, &st, 0);
  EXPECT_EQ(test::decode_status(st), 0);
}

TEST(DirectoryLock, TheKernelReleasesADeadHoldersHold) {
  TempDir d;
  const std::string dir = d.str("run");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    try {
      DirectoryLock hold(dir);
      (void)!write(ready[1], "x", 1);
      pause();  // until SIGKILL: no destructor runs
    } catch (...) {
    }
    _exit(1);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  try {
    DirectoryLock mine(dir);
    ADD_FAILURE() << "granted while the child holds it";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("process " + std::to_string(child)), std::string::npos) << e.what();
  }
  kill(child, SIGKILL);
  int st = 0;
  waitpid(child, &st, 0);
  DirectoryLock mine(dir);  // the hold died with its holder
  close(ready[0]);
  close(ready[1]);
}

TEST(DirectoryLock, ASecondCompareOrTrainOnOneDirectoryIsRefused) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  test::write_corpus(d);
  // A training long enough to be caught running; SIGTERM ends it once the second one was refused.
  test::Background first("train --preset tiny --corpus " + d.str("corpus.txt") +
                             " --max-iters 100000 --eval-interval 100000 "
                             "--out-dir " +
                             d.str("run") + " --threads 1",
                         d.str("first.err"));
  ASSERT_TRUE(first.wait_for("step")) << test::slurp(d.str("first.err"));
  const test::Proc second = test::run_posgrad("train --out-dir " + d.str("run") + " --resume --threads 1");
  EXPECT_EQ(second.status, 1) << second.err;
  EXPECT_NE(second.err.find(d.str("run")), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("process " + std::to_string(first.pid)), std::string::npos) << second.err;
  kill(first.pid, SIGTERM);
  EXPECT_EQ(first.wait(), 130);
  // The same for compare: the first holds the experiment directory while it trains its units.
  test::Background cmp("compare --preset tiny --methods rope --seeds 1 --corpus " + d.str("corpus.txt") +
                           " --max-iters 100000 --out-dir " + d.str("cmp") + " --threads 1",
                       d.str("cmp.err"));
  ASSERT_TRUE(cmp.wait_for("seed 1] training")) << test::slurp(d.str("cmp.err"));
  const test::Proc other =
      test::run_posgrad("compare --preset tiny --methods rope --seeds 1 --corpus " + d.str("corpus.txt") +
                        " --max-iters 100000 --out-dir " + d.str("cmp") + " --threads 1");
  EXPECT_EQ(other.status, 1) << other.err;
  EXPECT_NE(other.err.find("process " + std::to_string(cmp.pid)), std::string::npos) << other.err;
  const test::Proc report = test::run_posgrad("report " + d.str("cmp"));
  EXPECT_NE(report.status, 0) << report.err;  // no results yet, and the directory is held
  kill(cmp.pid, SIGTERM);
  EXPECT_EQ(cmp.wait(), 130);
}

// A comparison training two units at once (--jobs 2), interrupted while both train: each writes its
// checkpoint, the command exits 130 saying how to resume, and the same command resumes both; the
// results are the bits of one job running uninterrupted (--jobs 1).
TEST(RunSafety, AnInterruptedRunOfTwoJobsResumesToTheSameResults) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  test::write_corpus(d);
  const std::string common = "compare --preset tiny --methods rope,alibi --seeds 1 --addition-iters 0 --corpus " +
                             d.str("corpus.txt") +
                             " --max-iters 6000 --eval-interval 3000 --log-interval 1 --threads 2 --out-dir ";
  test::Background b(common + d.str("b") + " --jobs 2", d.str("b.err"));
  // Every line of a unit names its job and the unit, whichever job took it.
  ASSERT_TRUE(b.wait_for(": rope seed 1] info step   100/")) << test::slurp(d.str("b.err"));
  ASSERT_TRUE(b.wait_for(": alibi seed 1] info step   100/")) << test::slurp(d.str("b.err"));
  kill(b.pid, SIGINT);
  ASSERT_EQ(b.wait(), 130) << test::slurp(d.str("b.err"));
  const std::string err = test::slurp(d.str("b.err"));
  EXPECT_NE(err.find("2 units at once (--jobs), 1 OpenMP thread each"), std::string::npos) << err;
  EXPECT_NE(err.find("[job 1/2: "), std::string::npos) << err;
  EXPECT_NE(err.find("[job 2/2: "), std::string::npos) << err;
  // Both units stopped, and the error says so of each (not one unit's "failed"), with the count kept.
  const size_t last = err.rfind("posgrad: ");
  ASSERT_NE(last, std::string::npos) << err;
  const std::string said = err.substr(err.rfind("posgrad: ", last - 1));
  for (const char* unit : {"(rope seed 1) stopped: interrupted by SIGINT",
                           "(alibi seed 1) stopped: interrupted by SIGINT", "0 of 2 units finished"})
    EXPECT_NE(said.find(unit), std::string::npos) << unit << " in: " << said;
  EXPECT_EQ(err.find("failed"), std::string::npos) << err;
  for (const char* unit : {"b/rope/seed1", "b/alibi/seed1"}) {
    EXPECT_TRUE(fs::exists(d.str(unit) + "/checkpoint/state.json")) << unit;
    EXPECT_FALSE(fs::exists(d.str(unit) + "/result.json")) << unit << ": the run finished before the signal";
  }
  const test::Proc resumed = test::run_posgrad(common + d.str("b") + " --jobs 2");
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("(resumed)"), std::string::npos) << resumed.err;
  const test::Proc one = test::run_posgrad(common + d.str("a") + " --jobs 1");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_EQ(read_file(d.str("a/results.csv")), read_file(d.str("b/results.csv")));
}

TEST(RunSafety, ASignalWhileTheReportIsWrittenKeepsThePreviousReport) {
  TempDir d;
  auto c = tiny(d, "a");
  train::run_compare(c);
  const std::string md = read_file(c.out_dir + "/report.md"), csv = read_file(c.out_dir + "/results.csv");
  std::vector<std::string> plots;
  for (const auto& e : fs::directory_iterator(c.out_dir + "/plots")) plots.push_back(e.path().filename().string());
  train::install_interrupt_handlers();
  raise(SIGINT);  // recorded by the handler: the render sees it at its first check
  ASSERT_TRUE(train::interrupt_requested());
  try {
    train::rerender_report(c.out_dir);
    ADD_FAILURE() << "the interrupted render returned";
  } catch (const train::Interrupted& e) {
    EXPECT_EQ(e.signal, SIGINT);
    EXPECT_EQ(e.run_dir, c.out_dir);
    EXPECT_NE(std::string(e.what()).find("previous report"), std::string::npos) << e.what();
  }
  train::clear_interrupt();
  signal(SIGINT, SIG_DFL);
  EXPECT_EQ(read_file(c.out_dir + "/report.md"), md);
  EXPECT_EQ(read_file(c.out_dir + "/results.csv"), csv);
  std::vector<std::string> after;
  for (const auto& e : fs::directory_iterator(c.out_dir + "/plots")) after.push_back(e.path().filename().string());
  std::sort(plots.begin(), plots.end());
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, plots);
  EXPECT_FALSE(fs::exists(c.out_dir + "/.report-new"));
  // Uninterrupted, the same report again.
  train::rerender_report(c.out_dir);
  EXPECT_EQ(read_file(c.out_dir + "/results.csv"), csv);
}

TEST(RunSafety, ReportRefusesAnEmptyDirectoryName) {
  POSGRAD_REQUIRE_BIN();
  const test::Proc p = test::run_posgrad("report ''");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("RUN_DIR is empty"), std::string::npos) << p.err;
  // The directory is positional or --run (as eval, sample and fill-mask take it), one of them required.
  const test::Proc none = test::run_posgrad("report");
  EXPECT_EQ(none.status, 2) << none.err;
  EXPECT_NE(none.err.find("the experiment directory is required (RUN_DIR or --run)"), std::string::npos) << none.err;
  const test::Proc flag = test::run_posgrad("report --run ''");
  EXPECT_EQ(flag.status, 2) << flag.err;
  EXPECT_NE(flag.err.find("RUN_DIR is empty"), std::string::npos) << flag.err;
  const test::Proc both = test::run_posgrad("report a --run b");
  EXPECT_EQ(both.status, 2) << both.err;
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
}

// A fresh start where an earlier attempt left no complete checkpoint: its metrics and partial
// checkpoint are discarded (and said so), so metrics.jsonl holds one run, not two.
TEST(RunSafety, AnAbandonedAttemptLeavesNoDuplicateMetrics) {
  TempDir d;
  train::TrainConfig c = train::train_preset("tiny");
  c.corpus = test::write_corpus(d);
  c.out_dir = d.str("run");
  c.threads = 1;
  {
    train::Trainer t(c, false);
    t.run();
  }
  const std::string first = read_file(d.str("run/metrics.jsonl"));
  const auto lines = std::count(first.begin(), first.end(), '\n');
  ASSERT_GT(lines, 2);
  fs::remove(d.str("run/checkpoint/state.json"));  // the attempt never finished its first checkpoint
  std::ofstream(d.str("run/metrics.jsonl"), std::ios::app) << "{\"step\": 999}\n";
  {
    train::Trainer t(c, false);
    t.run();
  }
  const std::string second = read_file(d.str("run/metrics.jsonl"));
  EXPECT_EQ(std::count(second.begin(), second.end(), '\n'), lines) << second;
  EXPECT_EQ(second.find("\"step\": 999"), std::string::npos);
  EXPECT_TRUE(fs::exists(d.str("run/checkpoint/state.json")));
}

// A re-run in an experiment directory may add methods, seeds or a track, never drop finished
// results: a track switch or a shorter --methods / --seeds is refused, naming what would be dropped.
// The options the table marks result-neutral (opt::Spec::neutral) may change on a re-run: the
// finished units are kept, their numbers unchanged; an option that changes results is refused.
TEST(RunSafety, AResultNeutralOptionMayChangeOnARerun) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"rope"};
  c.seeds = {1};
  c.of<train::PiSettings>().iters = 0;
  c.of<train::SuiteSettings>().iters = 0;
  c.base.threads = 1;
  train::run_compare(c);
  const std::string before = read_file(c.out_dir + "/results.csv");
  auto other = c;
  other.base.threads = 2;
  other.jobs = 2;
  other.of<train::CostSettings>().rounds = c.of<train::CostSettings>().rounds + 1;
  other.base.checkpoint_interval = 2;
  other.base.log_interval = 1;
  train::run_compare(other);
  EXPECT_EQ(read_file(c.out_dir + "/results.csv"), before);
  const auto j = nlohmann::json::parse(read_file(c.out_dir + "/results.json"));
  EXPECT_EQ(j["cost"]["rounds"].get<int64_t>(), c.of<train::CostSettings>().rounds + 1);
  EXPECT_TRUE(j["units"][0]["resumed"].get<bool>() == false);
  for (const auto& o : train::compare_options()) {
    if (o.spec.neutral) {
      // addition_spread_margin: a claim's margin, applied when the report is written (no unit reads it).
      EXPECT_TRUE(o.spec.name == "out_dir" || o.spec.name == "threads" || o.spec.name == "jobs" ||
                  o.spec.name == "cost_rounds" || o.spec.name == "log_interval" ||
                  o.spec.name == "checkpoint_interval" || o.spec.name == "data_dir" ||
                  o.spec.name == "addition_spread_margin")
          << o.spec.name << " is marked result-neutral";
    }
  }
  auto changed = c;
  changed.base.lr *= 2;
  EXPECT_NE(test::thrown_message<UsageError>([&] { train::run_compare(changed); }).find("--lr"), std::string::npos);
}

// A unit interrupted in a study resumes at that study: the studies it finished (<unit>/studies/<name>.json)
// are read back, not measured again; the others are measured, with the same numbers.
TEST(RunSafety, AUnitInterruptedInAStudyResumesAtThatStudy) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"rope"};
  c.seeds = {1};
  c.base.threads = 1;
  train::run_compare(c);
  const std::string unit = c.out_dir + "/rope/seed1";
  EXPECT_FALSE(std::filesystem::exists(unit + "/studies")) << "the parts are in result.json once it is written";
  const std::string csv = read_file(c.out_dir + "/results.csv");
  // The state an interruption in the task study leaves: lm and attention saved, no result.json.
  const auto j = nlohmann::json::parse(read_file(unit + "/result.json"));
  std::filesystem::create_directories(unit + "/studies");
  nlohmann::json lm = {{"lengths", j["lengths"]},
                       {"sliding", j["sliding"]},
                       {"variants", j["variants"]},
                       {"per_position_loss", j["per_position_loss"]}};
  nlohmann::json attention = {{"attention_over_uniform", j["attention_over_uniform"]},
                              {"attention_first_token_share", j["attention_first_token_share"]}};
  attention["attention_over_uniform"][0][0] = 0.123456;  // a kept part is used as it is
  write_file_atomic(unit + "/studies/lm.json", lm.dump());
  write_file_atomic(unit + "/studies/attention.json", attention.dump());
  std::filesystem::remove(unit + "/result.json");
  train::run_compare(c);
  const auto again = nlohmann::json::parse(read_file(unit + "/result.json"));
  EXPECT_EQ(again["attention_over_uniform"][0][0].get<double>(), 0.123456);
  EXPECT_EQ(again["task"], j["task"]);  // measured again: the same numbers
  auto untimed = [](nlohmann::json rows) {
    for (auto& r : rows) r.erase("seconds");
    return rows;
  };
  EXPECT_EQ(untimed(again["pi"]), untimed(j["pi"]));
  // results.csv is the same but for the decay contrast, which is the kept (edited) profile's.
  const std::string row = "\nrope,attention_decay_contrast,";
  auto without_row = [&](std::string s) {
    const size_t at = s.find(row);
    if (at != std::string::npos) s.erase(at, s.find('\n', at + 1) - at);
    return s;
  };
  const std::string now = read_file(c.out_dir + "/results.csv");
  EXPECT_EQ(without_row(now), without_row(csv));
  char kept[64];
  std::snprintf(
      kept, sizeof kept, "1,%.6f,",
      train::attention_decay_contrast(again["attention_over_uniform"].get<std::vector<std::vector<double>>>()));
  EXPECT_NE(now.find(row + kept), std::string::npos) << now;
  // A damaged saved part is refused, naming it.
  std::filesystem::create_directories(unit + "/studies");
  write_file_atomic(unit + "/studies/lm.json", "{\"lengths\": 3}");
  std::filesystem::remove(unit + "/result.json");
  const std::string msg = test::thrown_message<IoError>([&] { train::run_compare(c); });
  EXPECT_NE(msg.find("studies/lm.json"), std::string::npos) << msg;
}

// A half-trained unit (its checkpoint, no result.json yet) would be resumed by a re-run: other
// settings are refused then too, not mixed into its training curve.
TEST(RunSafety, AHalfTrainedUnitIsNotResumedWithOtherSettings) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"rope"};
  c.seeds = {1};
  c.of<train::PiSettings>().iters = 0;
  c.of<train::SuiteSettings>().iters = 0;
  c.base.threads = 1;
  c.base.checkpoint_interval = 2;
  train::run_compare(c);
  ASSERT_TRUE(std::filesystem::exists(c.out_dir + "/rope/seed1/checkpoint/state.json"));
  std::filesystem::remove(c.out_dir + "/rope/seed1/result.json");  // as if interrupted after a checkpoint
  auto changed = c;
  changed.base.lr *= 2;
  const std::string msg = test::thrown_message<UsageError>([&] { train::run_compare(changed); });
  EXPECT_NE(msg.find("--lr"), std::string::npos) << msg;
  EXPECT_NE(msg.find("half-trained"), std::string::npos) << msg;
  train::run_compare(c);  // the same settings resume it
  EXPECT_TRUE(std::filesystem::exists(c.out_dir + "/rope/seed1/result.json"));
}

TEST(RunSafety, ARerunMayGrowTheExperimentButNotShrinkIt) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"alibi", "rope"};
  c.of<train::PiSettings>().iters = 0;
  c.of<train::SuiteSettings>().iters = 0;
  c.base.threads = 1;
  train::run_compare(c);
  auto fewer = c;
  fewer.methods = {"rope"};
  try {
    train::run_compare(fewer);
    ADD_FAILURE() << "a shorter --methods was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--methods alibi that this run leaves out"), std::string::npos) << e.what();
  }
  auto encoder_only = c;
  encoder_only.track = "encoder";
  try {
    train::run_compare(encoder_only);
    ADD_FAILURE() << "switching to --track encoder was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("finished units of the decoder track"), std::string::npos) << e.what();
  }
  // --threads applies to the cost benchmark of a re-run that keeps every unit (and trains none).
  omp_set_num_threads(2);
  train::run_compare(c);
  const auto j = nlohmann::json::parse(read_file(c.out_dir + "/results.json"));
  EXPECT_EQ(j["cost"]["threads"].get<int64_t>(), 1);
}

// After the first SIGINT or SIGTERM, a second signal of either kind takes the default action (ends the
// process at once), not only a second one of the same kind.
TEST(RunSafety, ASecondSignalOfEitherKindEndsAtOnce) {
  for (int first : {SIGINT, SIGTERM}) {
    train::install_interrupt_handlers();
    raise(first);
    EXPECT_EQ(train::interrupt_signal(), first);
    for (int other : {SIGINT, SIGTERM}) {
      struct sigaction now {};
      sigaction(other, nullptr, &now);
      EXPECT_EQ(now.sa_handler, SIG_DFL) << "after " << first << ", signal " << other << " is still caught";
    }
    train::clear_interrupt();
  }
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
}

// --dry-run refuses a directory another process is writing, as the real run would (without taking it).
TEST(DirectoryLock, DryRunRefusesADirectoryInUse) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  test::write_corpus(d);
  const std::string dir = d.str("run");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    DirectoryLock hold(dir);
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  const std::string args = "compare --preset tiny --methods rope --seeds 1 --corpus " + d.str("corpus.txt") +
                           " --out-dir " + dir + " --dry-run";
  const test::Proc busy = test::run_posgrad(args);
  EXPECT_EQ(busy.status, 1) << busy.err;
  EXPECT_NE(busy.err.find("in use by process " + std::to_string(child)), std::string::npos) << busy.err;
  DirectoryLock::check_available(d.str("elsewhere/new"));  // a directory yet to be made under a writable one
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  const test::Proc free = test::run_posgrad(args);
  EXPECT_EQ(free.status, 0) << free.err;
  DirectoryLock::check_available(dir);
  close(ready[0]);
  close(ready[1]);
}

// A kept unit must have been trained with the experiment's settings: its own config.json (the
// Trainer's) is compared, so a unit folder copied from another experiment — or an experiment whose
// compare_config.json was lost — is refused, naming the file and the differing option.
TEST(RunSafety, AUnitTrainedWithOtherSettingsIsRefused) {
  TempDir d;
  auto a = tiny(d, "a");
  a.of<train::PiSettings>().iters = 0;
  a.of<train::SuiteSettings>().iters = 0;
  train::run_compare(a);
  auto b = a;
  b.out_dir = d.str("b");
  b.base.lr = 2 * a.base.lr;
  train::run_compare(b);
  fs::remove_all(d.str("a/rope"));
  fs::copy(d.str("b/rope"), d.str("a/rope"), fs::copy_options::recursive);
  try {
    train::run_compare(a);
    ADD_FAILURE() << "a unit of other settings was kept";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(d.str("a/rope/seed1/config.json") + ": this unit was trained with other settings"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("--lr"), std::string::npos) << m;
  }
  // Without compare_config.json the experiment-level check cannot run; the units' own still do.
  fs::remove(d.str("b/compare_config.json"));
  auto longer = b;
  longer.base.max_iters = b.base.max_iters + 1;
  try {
    train::run_compare(longer);
    ADD_FAILURE() << "units trained for fewer steps were kept";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--max-iters"), std::string::npos) << e.what();
  }
}

// The text is part of the experiment: finished units are not mixed with units of a changed corpus,
// and a checkpoint does not resume on other text.
TEST(RunSafety, AChangedCorpusIsRefused) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"alibi"};
  c.of<train::PiSettings>().iters = 0;
  c.of<train::SuiteSettings>().iters = 0;
  train::run_compare(c);
  std::ofstream(c.base.corpus, std::ios::app) << "and a line more.\n";
  auto more = c;
  more.methods = {"alibi", "rope"};
  try {
    train::run_compare(more);
    ADD_FAILURE() << "a changed corpus was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(
        std::string(e.what()).find("holds units trained on " + fs::absolute(c.base.corpus).lexically_normal().string()),
        std::string::npos)
        << e.what();
  }
  train::TrainConfig t = train::train_preset("tiny");
  t.corpus = test::write_corpus(d, 300);
  t.out_dir = d.str("run");
  t.threads = 1;
  {
    train::Trainer tr(t, false);
    tr.run();
  }
  std::ofstream(t.corpus, std::ios::app) << "more text\n";
  t.max_iters += 5;
  try {
    train::Trainer tr(t, true);
    ADD_FAILURE() << "a checkpoint resumed on other text";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("has changed since the checkpoint was written"), std::string::npos)
        << e.what();
  }
}

// A damaged finished unit is found before any new unit trains (and by --dry-run), not when its turn
// comes hours later.
TEST(RunSafety, ADamagedKeptUnitIsFoundBeforeTraining) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = test::write_corpus(d);
  const std::string base =
      "compare --preset tiny --seeds 1 --threads 1 --pi-iters 0 --suite-iters 0 --passkey-iters 0 "
      "--corpus " +
      corpus + " --out-dir " + d.str("run");
  ASSERT_EQ(test::run_posgrad(base + " --methods rope,alibi").status, 0);
  std::ofstream(d.str("run/alibi/seed1/result.json"), std::ios::trunc) << "{";
  const test::Proc dry = test::run_posgrad(base + " --methods t5,rope,alibi --dry-run");
  EXPECT_EQ(dry.status, 1) << dry.err;
  EXPECT_NE(dry.err.find(d.str("run/alibi/seed1/result.json")), std::string::npos) << dry.err;
  const test::Proc real = test::run_posgrad(base + " --methods t5,rope,alibi");
  EXPECT_EQ(real.status, 1) << real.err;
  EXPECT_EQ(real.err.find("[t5 seed 1] training"), std::string::npos) << "trained before refusing:\n" << real.err;
  EXPECT_FALSE(fs::exists(d.str("run/t5")));
}

// The lock file is never a link written through, nor a directory; --dry-run refuses both as the run does.
TEST(DirectoryLock, ALockFileThatIsNotAFileIsRefused) {
  TempDir d;
  fs::create_directories(d.str("a/.posgrad.lock"));
  EXPECT_THROW(DirectoryLock a(d.str("a")), IoError);
  EXPECT_THROW(DirectoryLock::check_available(d.str("a")), IoError);
  fs::create_directories(d.str("b"));
  std::ofstream(d.str("target")) << "keep\n";
  fs::create_symlink(d.str("target"), d.str("b/.posgrad.lock"));
  EXPECT_THROW(DirectoryLock b(d.str("b")), IoError);
  EXPECT_THROW(DirectoryLock::check_available(d.str("b")), IoError);
  EXPECT_EQ(read_file(d.str("target")), "keep\n");
}
