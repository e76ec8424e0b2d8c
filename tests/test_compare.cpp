// test_compare.cpp — the comparison experiment: the tiny preset end to end (results.csv
// byte-identical for the same seeds and threads, the report's sections, the cost benchmark),
// `posgrad report` re-rendering from results.json alone, the typed result's JSON round trip, the
// claims table on results with known answers, and settings that must be refused.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "compare/build_commit.h"
#include "compare/claims.h"
#include "compare/compare.h"
#include "compare/report.h"
#include "compare/results.h"
#include "compare/rows.h"
#include "compare/studies/addition/addition.h"
#include "compare/studies/attention/attention.h"
#include "compare/studies/cost/cost.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/passkey/passkey.h"
#include "compare/studies/passkey/passkey_config.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/task/task.h"
#include "data/fileio.h"
#include "nn/gpt.h"
#include "nn/posenc/position_encoding.h"
#include "support/claim_verdict.h"
#include "support/compare_config.h"
#include "support/process.h"
#include "support/test_util.h"
#include "train/options.h"

using namespace posgrad;
using posgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

train::CompareConfig tiny(const TempDir& d, const std::string& out) { return test::tiny_compare(d, out); }

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(Compare, TinyPresetWritesTheReportAndIsReproducible) {
  TempDir d;
  // Two units at once (--jobs 2, one thread each), then one at a time with both threads: the same bits.
  auto with_jobs = [&](const std::string& out, int64_t jobs) {
    train::CompareConfig c = tiny(d, out);
    c.jobs = jobs;
    return c;
  };
  const std::string report = train::run_compare(with_jobs("a", 2));
  ASSERT_TRUE(fs::exists(report));
  train::run_compare(with_jobs("b", 1));
  const std::string a = read_file(d.str("a/results.csv")), b = read_file(d.str("b/results.csv"));
  EXPECT_EQ(a, b) << "results.csv differs between --jobs 2 and --jobs 1 with the same seeds";
  for (const char* f : {"suite.csv", "flipflop.csv", "pi.csv", "addition.csv", "passkey_seeds.csv"})
    EXPECT_EQ(read_file(d.str(std::string("a/") + f)), read_file(d.str(std::string("b/") + f))) << f;
  // Every method, with both seeds and an interval at the training length.
  for (const auto& m : nn::position_encoding_kinds()) {
    EXPECT_NE(a.find("\n" + m + ",val_perplexity,2,"), std::string::npos) << m;
    EXPECT_EQ(a.find("\n" + m + ",val_perplexity,2,n/a"), std::string::npos) << m;
  }
  // Learned absolute positions are n/a beyond their table; RoPE's variants are rows of their own.
  EXPECT_NE(a.find("\nlearned,perplexity_x2,0,n/a"), std::string::npos);
  for (const char* v : {"rope+yarn", "rope+linear", "rope+dynamic", "rope@bf16", "rope@fp16"})
    EXPECT_NE(a.find(std::string("\n") + v + ",perplexity_x2,2,"), std::string::npos) << v;
  const std::string md = read_file(report);
  EXPECT_NE(md.find("1 OpenMP thread per unit, 2 units at once (--jobs)"), std::string::npos);
  EXPECT_NE(read_file(d.str("b/report.md")).find("), 2 OpenMP threads\n"), std::string::npos);
  for (const char* section :
       {"## Provenance", "git commit", "seed-to-seed noise", "## The article's table, measured",
        "## Which differences are real", "## What each measure reads without position information",
        "## The article's claims", "## Length extrapolation", "## Cost (interleaved benchmark", "Noise figure",
        "## Attention by distance, over its uniform share", "All settings"})
    EXPECT_NE(md.find(section), std::string::npos) << section;
  // The decay contrast of every method, with both seeds, in results.csv.
  for (const auto& m : nn::position_encoding_kinds())
    EXPECT_NE(a.find("\n" + m + ",attention_decay_contrast,2,"), std::string::npos) << m;
  // The claims table has one row per claim (a) .. (k), the newer encodings' papers' (n1 .. n6), the
  // suite's (s1 .. s3), the position interpolation protocol's (p1 .. p4), passkey's, flip-flop's f1
  // once per method, and the addition study's z1 once per row and variant (tiny: every method and
  // rope+randomized, plain and hints), each with a verdict.
  for (const char id : std::string("abcdefghijk"))
    EXPECT_NE(md.find(std::string("| ") + id + " | "), std::string::npos) << id;
  for (const char* id :
       {"| n1 | ", "| n2 | ", "| n3 | ", "| n4 | ", "| n5 | ", "| n6 | ", "| s1 | ", "| s2 | ", "| s3 | ", "| p1 | ",
        "| p2 | ", "| p3 | ", "| p4 | ", "| pk1 | ", "| pk2 | ", "| f1 rope | ", "| f1 none | "})
    EXPECT_NE(md.find(id), std::string::npos) << id;
  for (const char* id : {"| z1 rope plain | ", "| z1 rope+randomized hints | ", "| z1 none hints | "})
    EXPECT_NE(md.find(id), std::string::npos) << id;
  EXPECT_EQ(count(md, "| **supported** |") + count(md, "| **contradicted** |") + count(md, "| **inconclusive** |") +
                count(md, "| **not measured** |"),
            26u + nn::position_encoding_kinds().size() + 2 * (nn::position_encoding_kinds().size() + 1));
  // The tiny preset runs the decoders only: claim (b) says what it needs.
  EXPECT_NE(md.find("needs the encoder track (--track both)"), std::string::npos);
  // Passkey retrieval: its section, and passkey.csv with every method and RoPE's scaled rows at
  // 1x and 2x (learned n/a beyond its table), per depth and the mean over depths.
  EXPECT_NE(md.find("## Passkey retrieval"), std::string::npos);
  const std::string passkey = read_file(d.str("a/passkey.csv"));
  EXPECT_EQ(passkey, read_file(d.str("b/passkey.csv")));
  EXPECT_EQ(passkey.substr(0, passkey.find('\n')), "row,multiplier,depth,n,mean,std,ci_low,ci_high");
  for (const auto& m : nn::position_encoding_kinds())
    for (const char* cell : {",1,0,2,", ",1,1,2,", ",1,mean,2,"})
      EXPECT_NE(passkey.find("\n" + m + cell), std::string::npos) << m << cell;
  EXPECT_NE(passkey.find("\nlearned,2,mean,0,n/a"), std::string::npos);
  for (const char* v : {"rope+linear", "rope+dynamic", "rope+yarn"})
    EXPECT_NE(passkey.find(std::string("\n") + v + ",2,mean,2,"), std::string::npos) << v;
  // The position-interpolation rows get the same passkey fine-tuning after the protocol (before /
  // after: "rope" against "rope ft2x", "rope+linear ft2x").
  for (const char* v : {"rope ft2x", "rope+linear ft2x"})
    for (const char* cell : {",1,mean,2,", ",2,mean,2,"})
      EXPECT_NE(passkey.find(std::string("\n") + v + cell), std::string::npos) << v << cell;
  // The length suite: its section, every method's plain row and the randomized rows, in suite.csv.
  EXPECT_NE(md.find("## Length generalisation suite"), std::string::npos);
  const std::string suite = read_file(d.str("a/suite.csv"));
  EXPECT_EQ(suite, read_file(d.str("b/suite.csv")));
  for (const auto& m : nn::position_encoding_kinds())
    EXPECT_NE(suite.find("\n" + m + ",even_pairs,1,3,sequence_accuracy,2,"), std::string::npos) << m;
  for (const char* m : {"sinusoidal", "learned", "rope"})
    EXPECT_NE(suite.find(std::string("\n") + m + "+randomized,reverse_string,4,6,token_accuracy,2,"), std::string::npos)
        << m;
  // The cost benchmark: every method at every length, attention and step, with peak memory.
  const std::string cost = read_file(d.str("a/cost.csv"));
  for (const auto& m : nn::position_encoding_kinds())
    for (const char* what : {",attention,16,", ",step,32,"})
      EXPECT_NE(cost.find("\n" + m + what), std::string::npos) << m << what;
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    for (const char* p : {"ppl_vs_length", "train_loss", "per_position_loss", "attention_distance", "suite_accuracy",
                          "passkey_rope", "passkey_rope+yarn", "passkey_learned"})
      EXPECT_TRUE(fs::exists(d.str(std::string("a/plots/") + p + ".png"))) << p;
  }
}

// Both evaluation protocols end to end: the sliding rows of results.csv, the report's tables and the
// claims' second verdict; every other row byte-identical to a run without the sliding evaluation;
// and a results.json from before the protocol (no sliding lengths, no per-window losses, no
// --eval-stride-fraction) still renders, with the sliding measurements not measured.
// The provenance names the commit the binary was built from (cmake/build_commit.cmake), recorded at
// build time: a `git describe --always --abbrev=12 --dirty` name, or the stated "unknown" outside a
// checkout, and the report shows exactly that text.
TEST(Compare, ProvenanceNamesTheCommitTheBinaryWasBuiltFrom) {
  const std::string commit = train::build_commit();
  EXPECT_TRUE(std::regex_match(commit, std::regex("[0-9A-Za-z._-]*[0-9a-f]{12}(-dirty)?")) ||
              commit == "unknown (not a git checkout)")
      << commit;
  train::CompareConfig cfg = train::compare_preset("tiny");
  EXPECT_EQ(train::collect_provenance(cfg).git_commit, commit);
}

TEST(Compare, TinyPresetMeasuresBothProtocols) {
  TempDir d;
  auto on = tiny(d, "on");
  on.methods = {"learned", "t5", "rope"};
  auto off = on;
  off.out_dir = d.str("off");
  off.of<train::LmSettings>().eval_stride_fraction = 0;
  train::run_compare(on);
  train::run_compare(off);
  const std::string a = read_file(d.str("on/results.csv")), b = read_file(d.str("off/results.csv"));
  std::istringstream lines(a);
  std::string line, without;
  while (std::getline(lines, line))
    if (line.find("_sliding_x") == std::string::npos) without += line + "\n";
  EXPECT_EQ(without, b) << "a row other than the sliding ones changed with the sliding evaluation";
  for (const char* row :
       {"\nrope,perplexity_sliding_x1,2,", "\nrope,perplexity_sliding_x4,2,", "\nt5,ppl_ratio_sliding_x2,2,",
        "\nrope,ppl_ratio_sliding_x4,2,", "\nlearned,perplexity_sliding_x1,2,", "\nlearned,perplexity_sliding_x2,0,n/a",
        "\nrope+yarn,perplexity_sliding_x2,0,n/a"})
    EXPECT_NE(a.find(row), std::string::npos) << row;
  EXPECT_EQ(b.find("_sliding_"), std::string::npos);
  const std::string md = read_file(d.str("on/report.md"));
  for (const char* part :
       {"### Sliding windows", "Windows per length: 1x: 15, 2x: 7, 4x: 3 (non-overlapping: 1x: 8, 2x: 4, 4x: 2)",
        "### Intervals over seeds and evaluation windows", "| rope | sliding |", "| rope+yarn | non-overlapping |",
        "; under sliding windows over the same targets, stride 32: 3 windows at 4x: "})
    EXPECT_NE(md.find(part), std::string::npos) << part;
  EXPECT_EQ(md.find("| rope+yarn | sliding |"), std::string::npos);
  const std::string md_off = read_file(d.str("off/report.md"));
  EXPECT_NE(md_off.find("Sliding windows: off (`--eval-stride-fraction 0`)"), std::string::npos);
  EXPECT_NE(md_off.find("sliding windows: off (--eval-stride-fraction 0)"), std::string::npos);

  nlohmann::json j = nlohmann::json::parse(read_file(d.str("on/results.json")));
  j["config"].erase("eval_stride_fraction");
  for (auto& u : j["units"]) {
    u.erase("study_keys");  // a file that old has no list of its studies' keys either
    u.erase("sliding");
    auto strip = [](nlohmann::json& ls) {
      for (auto& l : ls)
        if (l.is_object()) {
          l.erase("window_loss");
          l.erase("window_tokens");
        }
    };
    strip(u["lengths"]);
    for (auto& [name, v] : u["variants"].items()) strip(v);
  }
  fs::create_directories(d.str("old"));
  std::ofstream(d.str("old/results.json")) << j.dump(1);
  const std::string old_md = read_file(train::rerender_report(d.str("old")));
  EXPECT_EQ(read_file(d.str("old/results.csv")), b) << "an old results.json reads as the run without sliding windows";
  EXPECT_NE(old_md.find("| rope | non-overlapping | n/a | n/a | n/a |"), std::string::npos);
}

TEST(Compare, ReportRerendersFromResultsJsonAlone) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"t5", "rope"};
  train::run_compare(c);
  const std::string csv = read_file(d.str("a/results.csv")), md = read_file(d.str("a/report.md"));
  // Moved elsewhere, with only results.json: the same report, rendered where it now is.
  fs::create_directories(d.str("moved"));
  fs::copy_file(d.str("a/results.json"), d.str("moved/results.json"));
  const std::string report = train::rerender_report(d.str("moved"));
  EXPECT_EQ(report, d.str("moved/report.md"));
  EXPECT_EQ(read_file(d.str("moved/results.csv")), csv);
  std::string expected = md;  // the only difference: the --out-dir setting
  const std::string from = "| `--out-dir` | " + d.str("a") + " |", to = "| `--out-dir` | " + d.str("moved") + " |";
  ASSERT_NE(expected.find(from), std::string::npos);
  expected.replace(expected.find(from), from.size(), to);
  EXPECT_EQ(read_file(report), expected);
  EXPECT_THROW(train::rerender_report(d.str("nothing")), IoError);
  std::ofstream(d.str("moved/results.json"), std::ios::trunc) << "{\"format\": \"something else\"}";
  EXPECT_THROW(train::rerender_report(d.str("moved")), IoError);
}

TEST(Compare, SecondRunKeepsFinishedUnits) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"alibi", "rope"};
  train::run_compare(c);
  const auto t = fs::last_write_time(d.str("a/alibi/seed1/result.json"));
  const std::string before = read_file(d.str("a/results.csv"));
  train::run_compare(c);
  EXPECT_EQ(fs::last_write_time(d.str("a/alibi/seed1/result.json")), t);
  EXPECT_EQ(read_file(d.str("a/results.csv")), before);
  // Other settings in the same directory would mix units measured differently: refused.
  c.base.lr = 0.002;
  EXPECT_THROW(train::run_compare(c), UsageError);
  c.base.lr = tiny(d, "a").base.lr;
  c.methods = {"alibi", "rope", "none"};  // more methods (or seeds) are fine
  EXPECT_NO_THROW(train::run_compare(c));
}

// A kept unit's result.json must be its folder's (method, seed) and fit the settings: a copied or
// edited file is refused naming it and the mismatch (IoError: delete it to measure the unit again).
TEST(Compare, ResumedUnitsMustMatchTheirFolderAndSettings) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"alibi", "rope"};
  c.of<train::SuiteSettings>().iters = 0;
  c.of<train::PiSettings>().iters = 0;
  c.of<train::PasskeyConfig>().iters = 0;
  train::run_compare(c);
  const std::string rope1 = d.str("a/rope/seed1/result.json"), rope2 = d.str("a/rope/seed2/result.json"),
                    alibi1 = d.str("a/alibi/seed1/result.json");
  const std::string keep_rope2 = read_file(rope2), keep_alibi1 = read_file(alibi1);
  auto refused = [&](const std::string& file, const std::vector<std::string>& parts) {
    const std::string m = test::thrown_message<IoError>([&] { train::run_compare(c); });
    EXPECT_NE(m.find(file), std::string::npos) << m;
    EXPECT_NE(m.find("delete it to measure that unit again"), std::string::npos) << m;
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << p << " in: " << m;
  };
  fs::copy_file(rope1, rope2, fs::copy_options::overwrite_existing);  // seed 1's result in seed 2's folder
  refused(rope2, {"seed = 1: this is the folder of seed 2"});
  write_file_atomic(rope2, keep_rope2);
  fs::copy_file(rope1, alibi1, fs::copy_options::overwrite_existing);  // rope's result in alibi's folder
  refused(alibi1, {"method = \"rope\": this is the folder of method \"alibi\""});
  nlohmann::json j = nlohmann::json::parse(keep_alibi1);
  j["lengths"].erase(2);  // measured at other --eval-multipliers
  write_file_atomic(alibi1, j.dump());
  refused(alibi1, {"lengths: holds 2 entries, expected 3"});
  j = nlohmann::json::parse(keep_alibi1);
  j["lengths"][0]["perplexity"] = 0.5;
  write_file_atomic(alibi1, j.dump());
  refused(alibi1, {"lengths[0].perplexity = 0.5"});
  j = nlohmann::json::parse(keep_alibi1);
  j["passkey"] = {{"alibi", {{"final_loss", 1.0}, {"alphabet", "letters"}, {"cells", nlohmann::json::array()}}}};
  write_file_atomic(alibi1, j.dump());
  refused(alibi1, {"passkey: holds rows, but --passkey-iters is 0"});
  write_file_atomic(alibi1, keep_alibi1);
  EXPECT_NO_THROW(train::run_compare(c));  // restored: kept as before
}

TEST(Compare, BadSettingsAreRejected) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"rope", "bogus"};
  EXPECT_THROW(train::run_compare(c), ValueError);
  c.methods = {};
  EXPECT_THROW(train::run_compare(c), ValueError);
  c = tiny(d, "a");
  c.of<train::TaskSettings>().kind = "sort";
  EXPECT_THROW(train::run_compare(c), ValueError);
  c = tiny(d, "a");
  c.eval_multipliers = {2, 4};  // the training length itself is needed
  EXPECT_THROW(train::run_compare(c), UsageError);
  c = tiny(d, "a");
  c.per_position_multiplier = 3;  // not an evaluated length
  EXPECT_THROW(train::run_compare(c), UsageError);
  c = tiny(d, "a");
  c.jobs = 2;
  c.base.device = "cuda";  // one GPU runs one unit at a time
  EXPECT_EQ(test::thrown_message<UsageError>([&] { c.validate(); }),
            "--jobs 2 needs --device cpu: the units of --device cuda run one at a time on it");
  EXPECT_FALSE(fs::exists(d.str("a/results.csv")));
}

// --jobs: how many units a process runs at once, and the threads of each.
TEST(CompareJobs, AutomaticJobsAreOnePerThreadOnOneCpuProcess) {
  TempDir d;
  auto c = tiny(d, "a");  // --threads 2
  auto jobs = [&](int processes, size_t units) {
    const train::LocalJobs j = train::compare_jobs(c, processes, units);
    return std::make_pair(j.jobs, j.threads_per_job);
  };
  using P = std::pair<int, int>;
  EXPECT_EQ(jobs(1, 24), P(2, 1));
  EXPECT_EQ(jobs(1, 1), P(1, 0));   // one unit: every thread on it
  EXPECT_EQ(jobs(2, 24), P(1, 0));  // under a launcher the processes share the units already
  c.base.threads = 5;
  EXPECT_EQ(jobs(1, 24), P(5, 1));
  EXPECT_EQ(jobs(1, 3), P(3, 1));  // no more jobs than units
  c.jobs = 2;                      // given: as given, each with its share of the threads
  EXPECT_EQ(jobs(1, 24), P(2, 2));
  EXPECT_EQ(jobs(2, 24), P(2, 2));
  c.jobs = 1;
  EXPECT_EQ(jobs(1, 24), P(1, 0));
  // --threads 0 (every thread of the process) and more jobs than that: one job per thread (warned).
  c.base.threads = 0;
  c.jobs = omp_get_max_threads() + 3;
  EXPECT_EQ(jobs(1, 24), omp_get_max_threads() > 1 ? P(omp_get_max_threads(), 1) : P(1, 0));
  c.base.threads = 5;
  c.jobs = 0;
  c.base.device = "cuda";
  EXPECT_EQ(jobs(1, 24), P(1, 0));
  // As many as the memory holds: a batch whose estimate is over half of this machine's memory.
  c.base.device = "cpu";
  const uint64_t have = train::physical_memory_bytes();
  if (have == 0) GTEST_SKIP() << "this machine's memory is unknown";
  const int64_t longest = 4 * c.base.model.block_size;  // the tiny preset's longest evaluation
  while (train::estimate_memory(c.base, longest).total() < 0.6L * static_cast<long double>(have))
    c.base.batch_size *= 2;
  ASSERT_LE(train::estimate_memory(c.base, longest).total(), 1.2L * static_cast<long double>(have));
  EXPECT_EQ(jobs(1, 24), P(1, 0));
}

// The encoder track's own units (--track both) are shared by the jobs too: the same bits as one job.
TEST(CompareJobs, EncoderUnitsAreTheSameBitsWhateverTheJobs) {
  TempDir d;
  auto both = [&](const std::string& out, int64_t jobs) {
    auto c = tiny(d, out);
    c.methods = {"rope", "alibi", "t5"};
    c.track = "both";
    c.jobs = jobs;
    c.base.threads = std::max<int64_t>(c.base.threads, jobs);  // a job needs a thread of its own
    return c;
  };
  train::run_compare(both("one", 1));
  train::run_compare(both("three", 3));
  for (const char* f : {"results.csv", "encoder_results.csv", "suite.csv", "flipflop.csv"})
    EXPECT_EQ(read_file(d.str(std::string("one/") + f)), read_file(d.str(std::string("three/") + f))) << f;
}

// A unit that fails while another job runs: the first failure leaves as it was thrown (type and
// message, hence the exit status), the unit running beside it finishes and is kept, and no report.
// A resumed run's provenance is its last invocation's; units kept from an earlier one that trained
// with other threads or jobs are counted by setting, and the keys survive a round trip (old files: 0).
TEST(CompareJobs, UnitsKeptFromAnEarlierInvocationSayHowTheyTrained) {
  train::ComparisonResult r;
  r.provenance.threads = 1;
  r.provenance.jobs = 2;
  auto unit = [](int64_t threads, int64_t jobs) {
    train::UnitResult u;
    u.method = "rope";
    u.threads = threads;
    u.jobs = jobs;
    return u;
  };
  r.units = {unit(1, 2), unit(1, 2), unit(0, 0)};  // as the provenance, and one written before the keys
  EXPECT_EQ(train::kept_units_threads(r), "");
  r.units.push_back(unit(2, 1));
  r.units.push_back(unit(2, 1));
  r.units.push_back(unit(1, 3));
  EXPECT_EQ(train::kept_units_threads(r),
            "; units kept from an earlier invocation trained otherwise: 1 with 1 thread, 3 at once, 2 with 2 threads, "
            "one at a time");
  const train::UnitResult back = train::unit_from_json(train::to_json(unit(2, 1)), "test");
  EXPECT_EQ(back.threads, 2);
  EXPECT_EQ(back.jobs, 1);
  nlohmann::json old = train::to_json(unit(2, 1));
  old.erase("threads");
  old.erase("jobs");
  const train::UnitResult before = train::unit_from_json(old, "test");
  EXPECT_EQ(before.threads, 0);
  EXPECT_EQ(before.jobs, 0);
}

TEST(CompareJobs, AFailedUnitLeavesWithItsErrorAndTheRunningOneIsKept) {
  TempDir d;
  auto c = tiny(d, "bad");
  c.methods = {"rope", "alibi"};
  c.of<train::AdditionSettings>().iters = 0;
  c.jobs = 2;
  // Unit 2 (alibi seed 1) resumes from a corrupt checkpoint; unit 1 (rope seed 1) is taken before it.
  fs::create_directories(d.str("bad/alibi/seed1/checkpoint"));
  std::ofstream(d.str("bad/alibi/seed1/checkpoint/state.json")) << "{not json";
  const std::string msg = test::thrown_message<IoError>([&] { train::run_compare(c); });
  EXPECT_NE(msg.find("alibi/seed1/checkpoint"), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(d.str("bad/rope/seed1/result.json")));
  EXPECT_FALSE(fs::exists(d.str("bad/alibi/seed1/result.json")));
  EXPECT_FALSE(fs::exists(d.str("bad/results.csv")));
  // Without the damage the same command finishes, keeping what ran.
  fs::remove_all(d.str("bad/alibi/seed1"));
  train::run_compare(c);
  EXPECT_TRUE(fs::exists(d.str("bad/results.csv")));
  // Each unit records how it trained: two at once, one of the two threads each.
  const auto unit = nlohmann::json::parse(read_file(d.str("bad/alibi/seed1/result.json")));
  EXPECT_EQ(unit.at("threads"), 1);
  EXPECT_EQ(unit.at("jobs"), 2);
}

// ---- results and claims with known answers ----------------------------------------------------------

namespace {

// A comparison whose val perplexities (1x) and growths are given per method and seed.
train::ComparisonResult synthetic(const std::map<std::string, std::vector<double>>& ppl,
                                  const std::map<std::string, std::vector<double>>& growth_4x = {}) {
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");  // eval multipliers 1, 2, 4
  r.config.methods.clear();
  for (const auto& [m, v] : ppl) r.config.methods.push_back(m);
  r.config.seeds = {1, 2, 3};
  for (const auto& [m, v] : ppl)
    for (size_t s = 0; s < v.size(); ++s) {
      train::UnitResult u;
      u.method = m;
      u.seed = s + 1;
      const double g = growth_4x.count(m) ? growth_4x.at(m)[s] : 1.0;
      for (double mult : {1.0, 2.0, 4.0}) {
        const double p = v[s] * (mult == 4.0 ? g : 1.0);
        u.parts.get<train::LmResult>().lengths.push_back(
            train::LengthResult{static_cast<int64_t>(16 * mult), 4, std::log(p), p, 0.5});
      }
      r.units.push_back(u);
    }
  return r;
}

using test::verdict;

}  // namespace

TEST(Claims, OrderingsAreDecidedPairByPair) {
  // Well separated, in the claimed order: supported.
  auto r = synthetic({{"rope", {4.00, 4.02, 4.01}},
                      {"deberta", {4.50, 4.52, 4.51}},
                      {"t5", {5.00, 5.02, 5.01}},
                      {"sinusoidal", {6.00, 6.02, 6.01}},
                      {"learned", {6.50, 6.52, 6.51}}});
  EXPECT_EQ(verdict(train::judge_claims(r), "a"), "supported");
  EXPECT_EQ(verdict(train::judge_claims(r), "d"), "supported");
  EXPECT_EQ(train::ranking(r, r.config.methods, train::lm_metric(train::Quantity::Perplexity, 1)),
            "rope < deberta < t5 < sinusoidal < learned");
  // One pair significantly the other way: contradicted.
  r = synthetic({{"rope", {4.50, 4.52, 4.51}},
                 {"deberta", {4.00, 4.02, 4.01}},
                 {"t5", {5.00, 5.02, 5.01}},
                 {"sinusoidal", {6.00, 6.02, 6.01}},
                 {"learned", {6.50, 6.52, 6.51}}});
  EXPECT_EQ(verdict(train::judge_claims(r), "a"), "contradicted");
  // Overlapping noise: inconclusive, and the ranking does not order what it cannot tell apart.
  r = synthetic({{"rope", {4.0, 4.6, 4.3}},
                 {"deberta", {4.2, 4.5, 4.35}},
                 {"t5", {5.00, 5.02, 5.01}},
                 {"sinusoidal", {6.00, 6.02, 6.01}},
                 {"learned", {6.50, 6.52, 6.51}}});
  EXPECT_EQ(verdict(train::judge_claims(r), "a"), "inconclusive");
  EXPECT_EQ(train::ranking(r, r.config.methods, train::lm_metric(train::Quantity::Perplexity, 1)),
            "rope ≈ deberta < t5 < sinusoidal < learned");
}

TEST(Claims, ExtrapolationThresholdsAndMissingMethods) {
  auto r = synthetic({{"t5", {5.0, 5.1, 5.2}}, {"rope", {4.0, 4.1, 4.2}}},
                     {{"t5", {1.02, 1.03, 1.025}}, {"rope", {1.9, 2.1, 2.0}}});
  const auto v = train::judge_claims(r);
  EXPECT_EQ(verdict(v, "e"), "supported");     // growth well under 10%
  EXPECT_EQ(verdict(v, "f"), "contradicted");  // RoPE doubles its perplexity at 4x
  EXPECT_EQ(verdict(v, "a"), "not measured");  // deberta and the absolute methods were not run
  EXPECT_EQ(verdict(v, "j"), "not measured");  // nothing at 2048 tokens
}

TEST(Claims, ParameterCountsAreExact) {
  auto r = synthetic({{"t5", {5, 5, 5}}, {"rope", {4, 4, 4}}, {"deberta", {4, 4, 4}}, {"learned", {6, 6, 6}}});
  auto set = [&](const std::string& m, int64_t n) {
    for (auto& u : r.units)
      if (u.method == m) u.position_parameters = n;
  };
  set("t5", 128);
  set("rope", 0);
  set("deberta", 8192);
  set("learned", 4096);
  EXPECT_EQ(verdict(train::judge_claims(r), "i"), "supported");
  set("learned", 64);  // a smaller table than T5's
  EXPECT_EQ(verdict(train::judge_claims(r), "i"), "contradicted");
  // An encoding outside the article's (KERPLE: 2 per head and layer) is reported, not decisive.
  auto k = synthetic({{"t5", {5, 5, 5}}, {"rope", {4, 4, 4}}, {"deberta", {4, 4, 4}}, {"kerple", {4, 4, 4}}});
  for (auto& u : k.units)
    u.position_parameters = u.method == "t5" ? 128 : u.method == "deberta" ? 8192 : u.method == "kerple" ? 32 : 0;
  const auto claims = train::judge_claims(k);
  EXPECT_EQ(verdict(claims, "i"), "supported");
  for (const auto& c : claims)
    if (c.id == "i") {
      EXPECT_NE(c.why.find("outside the article's methods, fewer than T5: kerple 32"), std::string::npos) << c.why;
    }
}

TEST(Results, JsonRoundTripIsExact) {
  auto r = synthetic({{"rope", {4.0, 4.1, 4.2}}, {"t5", {5.0, 5.1, 5.2}}});
  r.units.front().parts.get<train::LmResult>().variants["rope+yarn"] =
      r.units.front().parts.get<train::LmResult>().lengths;
  r.units.front().parts.get<train::LmResult>().variants["rope+yarn"][2].reset();
  r.units.front().parts.get<train::TaskResult>().scores = {train::TaskScore{3, 4, 0.25, 0.5, 0.75}, std::nullopt};
  r.units.front().parts.get<train::AttentionResult>().over_uniform = {{1.5, 0.75, 0.625}};
  r.units.front().parts.get<train::PasskeyRows>().rows["rope+yarn"] = {
      0.5, {"letters", {{1, 0.25, 4, 0.75}, {2, 0.25, 0, std::nullopt}}}};
  r.parts.get<train::CostResult>().rounds = 2;
  r.parts.get<train::CostResult>().lengths = {16};
  r.parts.get<train::CostResult>().rows.push_back({"rope", "step", 16, 4, {0.1, 0.3}, 1024, 77});
  r.provenance.git_commit = "abc";
  const nlohmann::json j = train::to_json(r);
  const train::ComparisonResult back = train::comparison_from_json(j, "test");
  EXPECT_EQ(train::to_json(back), j);
  EXPECT_DOUBLE_EQ(back.parts.value<train::CostResult>().rows.front().median(), 0.2);
  EXPECT_DOUBLE_EQ(back.parts.value<train::CostResult>().rows.front().spread(), 1.0);
  nlohmann::json broken = j;
  broken["units"][0].erase("lengths");
  EXPECT_THROW(train::comparison_from_json(broken, "broken.json"), IoError);
  broken = j;
  broken["units"][0]["passkey"]["rope+yarn"]["cells"][0].erase("depth");
  EXPECT_NE(
      test::thrown_message<IoError>([&] { train::comparison_from_json(broken, "broken.json"); }).find("broken.json"),
      std::string::npos);
  for (const nlohmann::json& bad :
       {nlohmann::json(1e300), nlohmann::json(-1.5), nlohmann::json(true), nlohmann::json("7")}) {
    broken = j;
    broken["units"][0]["parameters"] = bad;  // integers must be JSON integers: no conversion of 1e300
    EXPECT_THROW(train::comparison_from_json(broken, "broken.json"), IoError) << bad.dump();
  }
}

TEST(Rows, NamesAreSpelledAndReadInOnePlace) {
  const std::vector<std::pair<train::Row, std::string>> cases = {
      {{"rope", "", 0, false}, "rope"},           {{"rope", "+yarn", 0, false}, "rope+yarn"},
      {{"rope", "@bf16", 0, false}, "rope@bf16"}, {{"rope", "+linear", 2, false}, "rope+linear ft2x"},
      {{"rope", "", 16, false}, "rope ft16x"},    {{"learned", "", 0, true}, "learned+randomized"},
  };
  for (const auto& [row, name] : cases) {
    EXPECT_EQ(row.name(), name);
    const train::Row back = train::Row::parse(name);
    EXPECT_EQ(back.name(), name);
    EXPECT_EQ(back.method, row.method) << name;
    EXPECT_EQ(back.variant, row.variant) << name;
    EXPECT_EQ(back.finetune, row.finetune) << name;
    EXPECT_EQ(back.randomized, row.randomized) << name;
  }
  EXPECT_EQ(train::method_of("rope+linear ft2x"), "rope");
  EXPECT_EQ(train::method_of("kerple"), "kerple");
}

// The decay contrast C = (N - F) / (N + F) of the layers' mean profile, N over the first
// floor((T - 1) / 2) distances, F over the rest: 0 for the uniform profile, known values otherwise.
TEST(Claims, AttentionDecayContrastKnownValues) {
  EXPECT_EQ(train::attention_decay_contrast({std::vector<double>(15, 1.0)}), 0.0);       // uniform: exactly 0
  EXPECT_DOUBLE_EQ(train::attention_decay_contrast({{3, 1, 1, 1}}), 1.0 / 3.0);          // N = 2, F = 1
  EXPECT_DOUBLE_EQ(train::attention_decay_contrast({{2, 2, 0, 0}, {0, 0, 0, 0}}), 1.0);  // layers' mean (1, 1, 0, 0)
  EXPECT_DOUBLE_EQ(train::attention_decay_contrast({{1, 1, 3, 3}}), -0.5);               // grows: N = 1, F = 3
  EXPECT_DOUBLE_EQ(train::attention_decay_contrast({{2, 2, 1, 1, 1}}), 1.0 / 3.0);       // T = 6: near 1..2, far 3..5
  EXPECT_TRUE(std::isnan(train::attention_decay_contrast({{1.0}})));                     // T = 2: one distance
  EXPECT_TRUE(std::isnan(train::attention_decay_contrast({})));
}

namespace {

// A profile of 15 distances (block 16) whose decay contrast is c: 1 + c on the 7 near, 1 - c on the 8 far.
std::vector<std::vector<double>> profile_with_contrast(double c) {
  std::vector<double> p(15, 1.0 - c);
  for (size_t d = 0; d < 7; ++d) p[d] = 1.0 + c;
  return {p, p};
}

// The comparison of `synthetic` with each method's per-seed decay contrasts as attention profiles.
train::ComparisonResult with_decay(const std::map<std::string, std::vector<double>>& contrast) {
  std::map<std::string, std::vector<double>> ppl;
  for (const auto& [m, v] : contrast) ppl[m] = std::vector<double>(v.size(), 4.0);
  train::ComparisonResult r = synthetic(ppl);
  r.config.base.model.block_size = 16;
  for (auto& u : r.units)
    u.parts.get<train::AttentionResult>().over_uniform = profile_with_contrast(contrast.at(u.method)[u.seed - 1]);
  return r;
}

const train::ClaimVerdict& claim(const std::vector<train::ClaimVerdict>& all, const std::string& id) {
  for (const auto& c : all)
    if (c.id == id) return c;
  throw std::logic_error("no claim " + id);
}

}  // namespace

// Claim (g) on the measure that can fail: uniform attention (every profile exactly 1, contrast 0) is
// not support, whatever NoPE reads; decay beyond NoPE's and above 0 (each by more than the margin)
// is; growth contradicts; differences inside the margin decide nothing; rope missing is not
// measured; one seed is inconclusive.
TEST(Claims, DecayWithDistanceIsJudgedAgainstNoPEAndTheUniformValue) {
  const auto g = [](const train::ComparisonResult& r) { return claim(train::judge_claims(r), "g"); };
  // Uniform attention, for RoPE and NoPE alike: C = 0 exactly on every seed.
  auto uniform = with_decay({{"rope", {0, 0, 0}}, {"none", {0, 0, 0}}});
  for (auto& u : uniform.units) u.parts.get<train::AttentionResult>().over_uniform = {std::vector<double>(15, 1.0)};
  EXPECT_EQ(train::values(uniform, "rope", train::attention_decay_metric()), (std::vector<double>{0, 0, 0}));
  train::ClaimVerdict v = g(uniform);
  EXPECT_EQ(v.verdict, "inconclusive") << v.why;
  EXPECT_NE(v.why.find("contains 0, the position-blind value"), std::string::npos) << v.why;
  // Both constant: Welch has no noise estimate (compare/stats.h), so the comparison with NoPE is open.
  EXPECT_NE(v.why.find("not testable against NoPE (none) (no variance on either side)"), std::string::npos) << v.why;
  EXPECT_NE(v.metric.find("Family of 2 tests"), std::string::npos) << v.metric;
  EXPECT_NE(v.metric.find("after " + std::to_string(uniform.config.base.max_iters) + " training steps"),
            std::string::npos);
  EXPECT_NE(v.metric.find("distances 1..7, F: 8..15"), std::string::npos) << v.metric;
  // Uniform RoPE against a NoPE that learned some locality: RoPE is significantly less local (contradicted).
  uniform = with_decay({{"rope", {0, 0, 0}}, {"none", {0.10, 0.11, 0.12}}});
  for (auto& u : uniform.units)
    if (u.method == "rope") u.parts.get<train::AttentionResult>().over_uniform = {std::vector<double>(15, 1.0)};
  EXPECT_EQ(g(uniform).verdict, "contradicted");
  // A decaying profile, beyond NoPE's: supported.
  v = g(with_decay({{"rope", {0.30, 0.32, 0.31}}, {"none", {0.05, 0.07, 0.06}}}));
  EXPECT_EQ(v.verdict, "supported") << v.why;
  EXPECT_NE(v.measured.find("rope 0.310 ["), std::string::npos) << v.measured;
  // Growing with distance: contradicted (interval below 0).
  v = g(with_decay({{"rope", {-0.20, -0.22, -0.21}}, {"none", {-0.21, -0.20, -0.22}}}));
  EXPECT_EQ(v.verdict, "contradicted") << v.why;
  EXPECT_NE(v.why.find("grows with distance"), std::string::npos) << v.why;
  // Decays, but as much as NoPE: inconclusive, saying so.
  v = g(with_decay({{"rope", {0.30, 0.32, 0.31}}, {"none", {0.31, 0.30, 0.32}}}));
  EXPECT_EQ(v.verdict, "inconclusive");
  EXPECT_NE(v.why.find("is above the position-blind value 0 beyond the margin"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("not significantly more local than NoPE (none) (Welch p 1.000"), std::string::npos) << v.why;
  // Significantly above 0 and above NoPE, but by less than the margin (0.01): too small to count.
  v = g(with_decay({{"rope", {0.004, 0.005, 0.006}}, {"none", {0, 0, 0}}}));
  EXPECT_EQ(v.verdict, "inconclusive") << v.why;
  EXPECT_NE(v.why.find("excludes 0 but not the margin ±0.01"), std::string::npos) << v.why;
  EXPECT_NE(v.why.find("differs from NoPE (none) within the margin ±0.01"), std::string::npos) << v.why;
  // ... and just as small the other way is no contradiction either.
  EXPECT_EQ(g(with_decay({{"rope", {-0.004, -0.005, -0.006}}, {"none", {0, 0, 0}}})).verdict, "inconclusive");
  // Decays, NoPE not run: inconclusive, not measured against it.
  v = g(with_decay({{"rope", {0.30, 0.32, 0.31}}, {"t5", {0.30, 0.32, 0.31}}}));
  EXPECT_EQ(v.verdict, "inconclusive");
  EXPECT_NE(v.why.find("not measured against NoPE (none): add it to --methods"), std::string::npos) << v.why;
  // RoPE missing: not measured.
  v = g(with_decay({{"none", {0.05, 0.07, 0.06}}}));
  EXPECT_EQ(v.verdict, "not measured");
  EXPECT_EQ(v.why, "needs rope in --methods");
  // One seed: no interval.
  v = g(with_decay({{"rope", {0.30}}, {"none", {0.05}}}));
  EXPECT_EQ(v.verdict, "inconclusive");
  EXPECT_NE(v.why.find("one seed of RoPE"), std::string::npos) << v.why;
  // NoPE with one seed: not testable against it.
  v = g(with_decay({{"rope", {0.30, 0.32, 0.31}}, {"none", {0.05}}}));
  EXPECT_EQ(v.verdict, "inconclusive");
  EXPECT_NE(v.why.find("not testable against NoPE (none) (fewer than 2 seeds)"), std::string::npos) << v.why;
}

// The stated error rates of claim (g)'s rule, by simulated null experiments (3 seeds a side, normal
// noise): no effect at all, and the same decay with and without the encoding. False support at most
// 2.5% (one tail of either test), false contradiction at most 5% (two tails, union bound); and the
// rule has power where the effect is plain.
TEST(Claims, DecayRuleErrorRatesUnderSimulatedNulls) {
  Generator gen(2024);
  auto normal = [&] {  // Box-Muller
    const double u1 = 1.0 - gen.next_unit(), u2 = gen.next_unit();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::acos(-1.0) * u2);
  };
  auto draw = [&](double mean, double sd) {
    std::vector<double> v;
    for (int i = 0; i < 3; ++i) v.push_back(mean + sd * normal());
    return v;
  };
  const int n = 10000;
  for (double shared : {0.0, 0.3}) {
    int supported = 0, contradicted = 0;
    for (int i = 0; i < n; ++i) {
      const auto j = train::judge_decay(draw(shared, 0.1), draw(shared, 0.1), "RoPE", "NoPE");
      supported += j.verdict == "supported";
      contradicted += j.verdict == "contradicted";
    }
    // Bounds with 4 binomial standard errors of slack at n = 10000.
    EXPECT_LE(supported / double(n), 0.025 + 0.0063) << "shared decay " << shared;
    EXPECT_LE(contradicted / double(n), 0.05 + 0.0088) << "shared decay " << shared;
    EXPECT_GE(contradicted / double(n), 0.01) << "the tails are reached (the test is not vacuous)";
  }
  int power = 0;
  for (int i = 0; i < 1000; ++i)
    power += train::judge_decay(draw(0.3, 0.02), draw(0.0, 0.02), "RoPE", "NoPE").verdict == "supported";
  EXPECT_GE(power, 990);
}

// The measure on a real model, then the claim: uniform attention in every layer (zero query/key
// projections) gives a profile of exactly 1 and a contrast of exactly 0, which can never support (g).
TEST(Claims, UniformAttentionModelGivesTheBaselineAndNoSupport) {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.pos.kind = "rope";
  Generator g(1), d(2);
  nn::GPT model(c, g, d);
  model.eval();
  for (size_t l = 0; l < model.blocks->size(); ++l) {
    Tensor w = (*model.blocks)[l].attn->qkv->weight.narrow(0, 0, 2 * c.n_embd);
    nn::assign_data(w, Tensor::zeros(w.shape(), w.dtype()));
    Tensor b = (*model.blocks)[l].attn->qkv->bias.narrow(0, 0, 2 * c.n_embd);
    nn::assign_data(b, Tensor::zeros(b.shape(), b.dtype()));
  }
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 3 * 16; ++i) ids.push_back((i * 7 + 3) % 11);
  const auto profile = model.attention_over_uniform_by_distance(Tensor::from_ints(ids, {3, 16}));
  for (const auto& layer : profile)
    for (double v : layer) EXPECT_NEAR(v, 1.0, 1e-12);
  EXPECT_NEAR(train::attention_decay_contrast(profile), 0.0, 1e-12);
  auto r = with_decay({{"rope", {0, 0, 0}}, {"none", {0, 0, 0}}});
  for (auto& u : r.units) u.parts.get<train::AttentionResult>().over_uniform = profile;
  EXPECT_NE(verdict(train::judge_claims(r), "g"), "supported");
}

TEST(HalfPrecision, RoundingToBf16AndFp16IsToNearestEven) {
  EXPECT_EQ(nn::round_to_fp16(2049.0), 2048.0);  // tie -> even
  EXPECT_EQ(nn::round_to_fp16(2051.0), 2052.0);
  EXPECT_EQ(nn::round_to_fp16(65519.0), 65504.0);
  EXPECT_TRUE(std::isinf(nn::round_to_fp16(65520.0)));
  EXPECT_EQ(nn::round_to_fp16(1.0 / 3.0), 0.333251953125);
  EXPECT_EQ(nn::round_to_fp16(std::ldexp(1.0, -24)), std::ldexp(1.0, -24));  // the smallest subnormal
  EXPECT_EQ(nn::round_to_bf16(257.0), 256.0);
  EXPECT_EQ(nn::round_to_bf16(259.0), 260.0);
  EXPECT_EQ(nn::round_to_bf16(1.0 / 3.0), 0.333984375);
  EXPECT_EQ(nn::round_to_bf16(-3.0), -3.0);
  EXPECT_EQ(nn::round_to_bf16(0.0), 0.0);
}

// ---- issue 22: every refusal of the real run, before training, and --dry-run refuses the same --------------

namespace {

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string repeated(const std::string& line, int n) {
  std::string t;
  for (int i = 0; i < n; ++i) t += line;
  return t;
}

}  // namespace

// Table: each case is refused by the real run before anything is trained or written, and --dry-run
// refuses it with the same exit status and message.
TEST(CompareDryRun, RefusesEverythingTheRealRunRefuses) {
  POSGRAD_REQUIRE_BIN();
  struct Case {
    std::string name, corpus_text, args;
    int status;
    std::string message;
  };
  const std::string fox = "the quick brown fox jumps over the lazy dog.\n";
  const std::vector<Case> cases = {
      {"passkey template letters missing from the corpus", repeated("0123 4567 89\n", 400),
       "--track decoder --methods none", 2, "cannot encode the template text"},
      {"decoder corpus shorter than the block", repeated(fox, 2), "--track decoder --methods none --passkey-iters 0", 2,
       "corpus too short for block 16"},
      {"encoder corpus too short for the longest evaluation", repeated(fox, 8), "--track encoder --methods none", 2,
       "(--encoder-length 16 x the largest of --encoder-multipliers, 4, + 1)"},
      {"line_word without a newline", repeated("the quick brown fox ", 200), "--track encoder --methods none", 2,
       "--encoder-tasks line_word cannot run on this corpus"},
      {"PI multiplier not evaluated", repeated(fox, 400), "--track decoder --methods rope --pi-multipliers 8", 2,
       "--pi-multipliers 8 is not among --eval-multipliers (1,2,4)"},
      {"PI scaling impossible at 2 rotary channels", repeated(fox, 400),
       "--track decoder --methods rope --passkey-iters 0 --pi-scalings ntk --rope-fraction 0.25", 2,
       "--pi-scalings ntk at --pi-multipliers 2: RoPE NTK-aware scaling needs a rotary dimension > 2"},
      {"encoder lr 1 (the table's range is the track's)", repeated(fox, 400), "--track encoder --encoder-lr 1", 2,
       "--encoder-lr"},
      // The task and suite models' own sizes, with each method's size rules (an even rotary width).
      {"odd rotary width in the task model", repeated(fox, 400), "--track decoder --methods rope --task-n-embd 6", 2,
       "--methods rope in the task and suite models (--task-n-embd 6, --task-n-head 2)"},
      // DeBERTa's log buckets are reached only beyond the training length: refused for the evaluation's.
      {"DeBERTa buckets invalid at the evaluation length", repeated(fox, 400),
       "--track decoder --methods deberta --deberta-max-relative-positions 10", 2,
       "--methods deberta at the longest evaluation length (64 tokens, --eval-multipliers)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir tmp;
    write_text(tmp.str("corpus.txt"), c.corpus_text);
    const std::string args = "compare --preset tiny --seeds 1 --corpus " + tmp.str("corpus.txt") + " " + c.args;
    const test::Proc dry = test::run_posgrad(args + " --out-dir " + tmp.str("dry") + " --dry-run");
    const test::Proc real = test::run_posgrad(args + " --out-dir " + tmp.str("real"));
    EXPECT_EQ(real.status, c.status) << real.err;
    EXPECT_EQ(dry.status, c.status) << dry.err;
    EXPECT_NE(real.err.find(c.message), std::string::npos) << real.err;
    EXPECT_NE(dry.err.find(c.message), std::string::npos) << dry.err;
    EXPECT_FALSE(std::filesystem::exists(tmp.str("real"))) << "refused before anything is written";
    EXPECT_EQ(real.err.find("] training"), std::string::npos) << "refused before training: " << real.err;
  }
}

// The derived rope+dynamic row needs more than 2 rotary channels: with 2 the comparison runs, that row
// is absent (results, CSV) and the report says why — decided before training, never a failure after.
TEST(CompareDryRun, RopeDynamicRowIsSkippedWithAReasonAtTwoRotaryChannels) {
  POSGRAD_REQUIRE_BIN();
  TempDir tmp;
  write_text(tmp.str("corpus.txt"), repeated("the quick brown fox jumps over the lazy dog.\n", 400));
  const std::string args =
      "compare --preset tiny --track decoder --methods rope --seeds 1 "
      "--rope-fraction 0.25 --corpus " +
      tmp.str("corpus.txt") + " --out-dir " + tmp.str("run");
  train::CompareConfig cfg = train::compare_preset("tiny");
  cfg.base.model.pos.set("rope_fraction", 0.25);
  const auto skipped = train::skipped_variants(cfg);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped.begin()->first, "rope+dynamic");
  EXPECT_TRUE(train::skipped_variants(train::compare_preset("tiny")).empty());
  test::Proc p = test::run_posgrad(args + " --dry-run");
  ASSERT_EQ(p.status, 0) << p.err;
  p = test::run_posgrad(args);
  ASSERT_EQ(p.status, 0) << p.err;
  const std::string report = test::slurp(tmp.str("run/report.md"));
  EXPECT_NE(report.find("- `rope+dynamic` not measured: this configuration cannot build it (RoPE dynamic NTK scaling "
                        "needs a rotary dimension > 2, got 2)"),
            std::string::npos);
  const std::string csv = test::slurp(tmp.str("run/results.csv"));
  EXPECT_EQ(csv.find("rope+dynamic"), std::string::npos);
  EXPECT_NE(csv.find("rope+linear"), std::string::npos);
  // The passkey test (on in the tiny preset) leaves the row out too, instead of failing after training.
  const std::string passkey = test::slurp(tmp.str("run/passkey.csv"));
  EXPECT_EQ(passkey.find("rope+dynamic"), std::string::npos) << passkey;
  EXPECT_NE(passkey.find("\nrope+linear,"), std::string::npos) << passkey;
}
