// test_cli.cpp — the option tables and the `posgrad` command line as a user meets them: strict
// parsing with the exact messages, a sweep generated from the tables that feeds every numeric
// option hostile values, subcommands that read only their own arguments, errors on stderr with the
// documented exit status, corpus files that are not regular files, resume as documented (bit for
// bit equal to the uninterrupted run), interrupts that leave no temporary files, and a scaled RoPE
// trained and evaluated from the command line. CLI cases run the real binary ($POSGRAD_BIN).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "compare/compare.h"
#include "compare/options.h"
#include "data/fileio.h"
#include "nn/posenc/position_encoding.h"
#include "support/process.h"
#include "support/test_util.h"
#include "tensor/storage.h"
#include "train/checkpoint.h"
#include "train/options.h"
#include "train/presets.h"

using namespace posgrad;
using posgrad::test::Background;
using posgrad::test::Proc;
using posgrad::test::run_posgrad;
using posgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

using posgrad::test::write_corpus;

template <typename F>
std::string usage_error(F&& f) {
  return test::thrown_message<UsageError>(std::forward<F>(f));
}

bool contains(const std::string& hay, const std::string& needle) { return hay.find(needle) != std::string::npos; }

// The temporary files a run may leave: checkpoint.tmp/ and "<file>.tmp.<pid>.<n>".
std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == "checkpoint.tmp" || name.find(".tmp.") != std::string::npos) found.push_back(e.path().string());
  }
  return found;
}

}  // namespace

// ---- the tables ------------------------------------------------------------------------------------

template <typename S>
void expect_well_formed(const opt::Table<S>& table, const S& defaults, const std::string& what) {
  std::set<std::string> names;
  for (const auto& o : table) {
    EXPECT_TRUE(names.insert(o.spec.name).second) << what << ": duplicate option " << o.spec.name;
    EXPECT_FALSE(o.spec.help.empty()) << what << ": " << o.spec.name << " has no help";
    EXPECT_EQ(o.spec.name.find('-'), std::string::npos) << o.spec.name;
  }
  EXPECT_NO_THROW(opt::check_all(table, defaults)) << what;
  // JSON round trip through the table: every value comes back equal.
  S back;
  opt::from_json(table, back, opt::to_json(table, defaults), what, /*require_all=*/true);
  for (const auto& o : table) EXPECT_EQ(o.get(back), o.get(defaults)) << what << ": " << o.spec.name;
}

TEST(OptionTables, AreWellFormedAndRoundTripThroughJson) {
  for (const auto& p : train::train_preset_names())
    expect_well_formed(train::train_options(), train::train_preset(p), "train preset " + p);
  for (const auto& p : train::compare_preset_names())
    expect_well_formed(train::compare_options(), train::compare_preset(p), "compare preset " + p);
  expect_well_formed(train::eval_options(), train::EvalOptions{}, "eval");
  expect_well_formed(train::sample_options(), train::SampleOptions{}, "sample");
  // Every encoding's declared options are train options (so flags and config.json keys).
  for (const auto& s : nn::position_encoding_options())
    EXPECT_NE(opt::find(train::train_options(), s.name), nullptr) << s.name;
  // config.json holds exactly the table's keys.
  const nlohmann::json j = train::train_preset("default").to_json();
  EXPECT_EQ(j.size(), train::train_options().size());
  // compare has one seed option (--seeds) and no --pos or --seed.
  EXPECT_NE(opt::find(train::compare_options(), "seeds"), nullptr);
  EXPECT_EQ(opt::find(train::compare_options(), "seed"), nullptr);
  EXPECT_EQ(opt::find(train::compare_options(), "pos"), nullptr);
}

TEST(OptionParsing, IntegersAreStrictBaseTenWithoutSaturation) {
  const opt::Spec s = opt::integer("n", opt::closed(1, 100), "n");
  EXPECT_EQ(std::get<int64_t>(opt::parse(s, "12", "--n")), 12);
  EXPECT_EQ(std::get<int64_t>(opt::parse(s, "+7", "--n")), 7);
  for (const char* bad : {"0x10", "1e2", " 5", "5 ", "", "12abc", "1.0", "--3"})
    EXPECT_TRUE(contains(usage_error([&] { opt::parse(s, bad, "--n"); }), "not a base-10 integer")) << bad;
  EXPECT_EQ(usage_error([&] { opt::parse(s, "99999999999999999999", "--n"); }),
            "--n: '99999999999999999999' is out of range of a signed 64-bit integer (valid: [1, 100])");
  EXPECT_EQ(usage_error([&] { opt::parse(s, "0", "--n"); }), "--n: 0 is out of range (valid: [1, 100])");
  EXPECT_EQ(usage_error([&] { opt::parse(s, "4611686018427387904", "--n"); }),
            "--n: 4611686018427387904 is out of range (valid: [1, 100])");
  const opt::Spec u = opt::unsigned_integer("seed", "seed");
  EXPECT_EQ(std::get<uint64_t>(opt::parse(u, "18446744073709551615", "--seed")), std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(contains(usage_error([&] { opt::parse(u, "18446744073709551616", "--seed"); }), "out of range"));
  EXPECT_TRUE(contains(usage_error([&] { opt::parse(u, "-1", "--seed"); }), "not a base-10 non-negative integer"));
}

TEST(OptionParsing, FloatsMustBeFiniteAndInRange) {
  const opt::Spec s = opt::real("lr", opt::open_closed(0, 10), "lr");
  EXPECT_EQ(std::get<double>(opt::parse(s, "1e-3", "--lr")), 0.001);
  EXPECT_EQ(std::get<double>(opt::parse(s, "10", "--lr")), 10.0);
  EXPECT_EQ(usage_error([&] { opt::parse(s, "0", "--lr"); }), "--lr: 0 is out of range (valid: (0, 10])");
  EXPECT_EQ(usage_error([&] { opt::parse(s, "nan", "--lr"); }), "--lr: nan is not a finite number (valid: (0, 10])");
  EXPECT_EQ(usage_error([&] { opt::parse(s, "-inf", "--lr"); }), "--lr: -inf is not a finite number (valid: (0, 10])");
  EXPECT_EQ(usage_error([&] { opt::parse(s, "1e999", "--lr"); }), "--lr: '1e999' is out of the range of a double");
  EXPECT_TRUE(contains(usage_error([&] { opt::parse(s, "10.000001", "--lr"); }), "out of range"));
  EXPECT_TRUE(contains(usage_error([&] { opt::parse(s, "0.1x", "--lr"); }), "not a number"));
  // The text written back reads back exactly.
  for (const char* t : {"0.1", "0.001", "3e-07", "7.25"}) EXPECT_EQ(opt::format(opt::parse(s, t, "--lr")), t);
}

TEST(OptionParsing, BooleansChoicesAndLists) {
  const opt::Spec b = opt::boolean("bias", "b");
  EXPECT_EQ(std::get<bool>(opt::parse(b, "true", "--bias")), true);
  EXPECT_EQ(std::get<bool>(opt::parse(b, "0", "--bias")), false);
  EXPECT_TRUE(contains(usage_error([&] { opt::parse(b, "TRUE", "--bias"); }), "not a boolean"));
  const opt::Spec c = opt::choice("tokenizer", {"char", "byte"}, "t");
  EXPECT_EQ(usage_error([&] { opt::parse(c, "bite", "--tokenizer"); }),
            "--tokenizer: 'bite' is not one of char|byte (did you mean 'byte'?)");
  const opt::Spec l = opt::integer_list("mults", opt::closed(1, 64), 1, 4, "m");
  EXPECT_EQ(std::get<std::vector<int64_t>>(opt::parse(l, "1,2,4", "--mults")), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_TRUE(contains(usage_error([&] { opt::parse(l, "1,,2", "--mults"); }), "empty item"));
  EXPECT_TRUE(contains(usage_error([&] { opt::parse(l, "", "--mults"); }), "a list of 0 items"));
  EXPECT_TRUE(contains(usage_error([&] { opt::parse(l, "1,2,3,4,5", "--mults"); }), "a list of 5 items"));
  EXPECT_EQ(usage_error([&] { opt::parse(l, "2,65", "--mults"); }), "--mults: 65 is out of range (valid: [1, 64])");
}

TEST(OptionParsing, JsonKeysTypesDepthAndSize) {
  train::TrainConfig c;
  EXPECT_EQ(usage_error([&] {
              opt::from_json(train::train_options(), c, {{"max_iter", 3}}, "f.json");
            }),
            "f.json: unknown key 'max_iter' (did you mean 'max_iters'?)");
  EXPECT_TRUE(contains(usage_error([&] {
                         opt::from_json(train::train_options(), c, {{"lr", true}}, "f.json");
                       }),
                       "f.json: key 'lr': expected a number"));
  EXPECT_TRUE(contains(usage_error([&] {
                         opt::from_json(train::train_options(), c, {{"n_layer", 2.5}}, "f.json");
                       }),
                       "key 'n_layer': expected an integer"));
  EXPECT_TRUE(contains(usage_error([&] {
                         opt::from_json(train::train_options(), c, {{"n_layer", 0}}, "f.json");
                       }),
                       "key 'n_layer': 0 is out of range"));
  EXPECT_TRUE(
      contains(usage_error([&] {
                 opt::from_json(train::train_options(), c, {{"seed", std::numeric_limits<uint64_t>::max()}}, "f");
                 opt::from_json(train::train_options(), c, {{"n_layer", std::numeric_limits<uint64_t>::max()}}, "f");
               }),
               "out of range"));
  // Keys written with '-' (as flags) are accepted.
  opt::from_json(train::train_options(), c, {{"max-iters", 7}}, "f.json");
  EXPECT_EQ(c.max_iters, 7);
  std::string deep(100000, '[');
  EXPECT_TRUE(contains(usage_error([&] { opt::parse_json_limited(deep, "deep.json"); }), "nested deeper than 16"));
  EXPECT_NO_THROW(opt::parse_json_limited(std::string(15, '[') + std::string(15, ']'), "ok.json"));
  EXPECT_TRUE(
      contains(usage_error([&] { opt::parse_json_limited(std::string(2 << 20, ' '), "big.json"); }), "too large"));
  EXPECT_TRUE(
      contains(usage_error([&] { opt::parse_json_limited("{\"lr\": ", "cut.json"); }), "cut.json: not valid JSON"));
}

// ---- the command line ---------------------------------------------------------------------------

namespace {

// The six hostile values and whether a spec's declared type and range admit each.
struct Hostile {
  const char* text;
  long double value;
  bool integral;  // representable as an integer of the spec's type
};
const Hostile kHostile[] = {{"0", 0, true},
                            {"-1", -1, true},
                            {"nan", NAN, false},
                            {"inf", INFINITY, false},
                            {"4611686018427387904", 4611686018427387904.0L, true},
                            {"100000000000000000000", 1e20L, false}};  // 10^20 > INT64_MAX and > UINT64_MAX

bool admitted(const opt::Spec& s, const Hostile& h) {
  const bool unsigned_type = s.type == opt::Type::UInt || s.type == opt::Type::UIntList;
  const bool integer_type = s.type != opt::Type::Float && s.type != opt::Type::FloatList;
  if (integer_type && !h.integral) return false;
  if (unsigned_type && h.value < 0) return false;
  if (!std::isfinite(static_cast<double>(h.value))) return false;
  return unsigned_type || s.range.contains(h.value);
}

template <typename S>
int sweep(const std::string& sub, const opt::Table<S>& table) {
  int rejected = 0;
  for (const auto& o : table) {
    if (!o.spec.numeric()) continue;
    int here = 0;
    for (const Hostile& h : kHostile) {
      if (admitted(o.spec, h)) continue;
      ++here;
      const std::string args = sub + " " + o.spec.flag() + " " + h.text;
      Proc p = run_posgrad(args);
      EXPECT_TRUE(p.status == 1 || p.status == 2) << args << " -> exit " << p.status << "\n" << p.err;
      EXPECT_TRUE(contains(p.err, o.spec.flag())) << args << ": the error does not name the option\n" << p.err;
      EXPECT_TRUE(p.out.empty()) << args << ": wrote to stdout\n" << p.out;
    }
    // nan, inf and 10^20 are never valid: every numeric option rejects at least those three.
    EXPECT_GE(here, 3) << sub << " " << o.spec.flag();
    rejected += here;
  }
  return rejected;
}

}  // namespace

// One test per subcommand (so CTest runs them in parallel); the counts show the sweep really ran.
TEST(Cli, EveryNumericTrainOptionRejectsHostileValuesNamingIt) {
  POSGRAD_REQUIRE_BIN();
  EXPECT_GT(sweep("train", train::train_options()), 120);
}
TEST(Cli, EveryNumericCompareOptionRejectsHostileValuesNamingIt) {
  POSGRAD_REQUIRE_BIN();
  EXPECT_GT(sweep("compare", train::compare_options()), 160);
}
TEST(Cli, EveryNumericEvalAndSampleOptionRejectsHostileValuesNamingIt) {
  POSGRAD_REQUIRE_BIN();
  EXPECT_GT(sweep("eval", train::eval_options()) + sweep("sample", train::sample_options()), 20);
}

TEST(Cli, UnknownOptionsAndConfigKeysNameTheNearest) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  Proc p = run_posgrad("train --max-iter 3");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "unknown option '--max-iter' (did you mean '--max-iters'?)")) << p.err;
  p = run_posgrad("compare --seed 3");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "did you mean '--seeds'?")) << p.err;
  std::ofstream(d.str("typo.json")) << R"({"max_iter": 3})";
  p = run_posgrad("train --dry-run --config " + d.str("typo.json"));
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "typo.json': unknown key 'max_iter' (did you mean 'max_iters'?)")) << p.err;
  std::ofstream(d.str("type.json")) << R"({"lr": "fast"})";
  p = run_posgrad("train --dry-run --config " + d.str("type.json"));
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "key 'lr'")) << p.err;
  std::ofstream(d.str("deep.json")) << "{\"lr\": " << std::string(200000, '[') << "}";
  p = run_posgrad("train --dry-run --config " + d.str("deep.json"));
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_TRUE(contains(p.err, "nested deeper")) << p.err;
  std::ofstream(d.str("big.json")) << "{\"corpus\": \"" << std::string(2 << 20, 'x') << "\"}";
  p = run_posgrad("train --dry-run --config " + d.str("big.json"));
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_TRUE(contains(p.err, "at most 1 MiB")) << p.err;
  p = run_posgrad("train --dry-run --config " + d.str());
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_TRUE(contains(p.err, "is not a regular file")) << p.err;
}

// An encoding without a CUDA attention kernel is refused on --device cuda before anything is built,
// naming it; --methods all stands alone.
TEST(Cli, CpuOnlyEncodingsAndMethodsAll) {
  Proc p = run_posgrad("train --dry-run --pos fire --device cuda");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("the fire position encoding has no CUDA attention kernel; use --device cpu"), std::string::npos)
      << p.err;
  p = run_posgrad("compare --preset tiny --methods all,rope --dry-run");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("'all' names every registered encoding and stands alone"), std::string::npos) << p.err;
}

TEST(Cli, SubcommandsResolveTheirOwnPresets) {
  POSGRAD_REQUIRE_BIN();
  // --dry-run loads the corpus (every refusal of the real run): a corpus here, without the passkey
  // template's letters, hence --passkey-iters 0 (neither option is what this test reads back).
  TempDir d;
  const std::string corpus = write_corpus(d);
  for (const std::string preset : {"quick", "full", "tiny"}) {
    Proc p = run_posgrad("compare --dry-run --passkey-iters 0 --corpus " + corpus + " --preset " + preset);
    ASSERT_EQ(p.status, 0) << preset << "\n" << p.err;
    const auto j = nlohmann::json::parse(p.out);
    EXPECT_EQ(j["out_dir"], train::compare_preset(preset).out_dir);
    EXPECT_EQ(j["max_iters"], train::compare_preset(preset).base.max_iters);
  }
  Proc p = run_posgrad("train --dry-run --preset nanogpt-shakespeare --max-iters 7");
  ASSERT_EQ(p.status, 0) << p.err;
  auto j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["corpus"], "shakespeare");
  EXPECT_EQ(j["max_iters"], 7);
  p = run_posgrad("train --dry-run --preset quick");  // a compare preset is not a train preset
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "--preset")) << p.err;
  // Every encoding option is reachable from the command line.
  p = run_posgrad("train --dry-run --corpus " + corpus +
                  " --pos rope --rope-scaling llama3 --rope-scaling-factor 8 "
                  "--rope-llama3-low-freq-factor 2 --rope-llama3-high-freq-factor 6 --rope-yarn-beta-fast 16 "
                  "--sinusoidal-scale-embedding false --t5-num-buckets 16");
  ASSERT_EQ(p.status, 0) << p.err;
  j = nlohmann::json::parse(p.out);
  EXPECT_EQ(j["rope_scaling"], "llama3");
  EXPECT_EQ(j["rope_scaling_factor"], 8.0);
  EXPECT_EQ(j["rope_llama3_high_freq_factor"], 6.0);
  EXPECT_EQ(j["sinusoidal_scale_embedding"], false);
  EXPECT_EQ(j["t5_num_buckets"], 16);
  // Relations between options are checked too, naming both.
  p = run_posgrad(
      "train --dry-run --pos rope --rope-scaling llama3 --rope-llama3-low-freq-factor 5 "
      "--rope-llama3-high-freq-factor 4");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "rope_llama3_high_freq_factor")) << p.err;
  p = run_posgrad("train --dry-run --min-lr 0.1 --lr 0.01");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "--min-lr")) << p.err;
}

TEST(Cli, ImpossibleSizesFailAtOnceNamingTheOptions) {
  POSGRAD_REQUIRE_BIN();
  Proc p = run_posgrad("train --dry-run --n-layer 1024 --n-embd 65536 --n-head 1");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "estimated") && contains(p.err, "--n-layer 1024") && contains(p.err, "--n-embd 65536"))
      << p.err;
  p = run_posgrad("train --dry-run --batch-size 1048576 --block-size 1048576");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "--batch-size 1048576")) << p.err;
  p = run_posgrad(
      "compare --dry-run --preset tiny --eval-multipliers 1,64 --per-position-multiplier 64 --block-size 1048576");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "estimated")) << p.err;
  // An in-range configuration the machine can hold passes and prints the estimate.
  TempDir d;
  p = run_posgrad("train --dry-run --corpus " + write_corpus(d));
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(contains(p.err, "memory estimate")) << p.err;
}

TEST(Cli, ErrorsGoToStderrWithTheDocumentedStatus) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  Proc p = run_posgrad("sample --run " + d.str("nothing-here"));
  EXPECT_EQ(p.status, 1);
  EXPECT_TRUE(p.out.empty()) << p.out;
  EXPECT_TRUE(contains(p.err, "posgrad: error: no checkpoint in '" + d.str("nothing-here"))) << p.err;
  EXPECT_FALSE(contains(p.err, "internal error")) << p.err;
  p = run_posgrad("train --help");
  EXPECT_EQ(p.status, 0);
  EXPECT_TRUE(contains(p.out, "Exit status: 0 success; 1 data or I/O error")) << p.out;
  EXPECT_TRUE(contains(p.out, "--rope-scaling-factor")) << p.out;
  p = run_posgrad("");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "posgrad: error: a subcommand is required (one of train, eval, ")) << p.err;
  p = run_posgrad("bogus-cmd --max-iters 3");  // the unknown subcommand is named, with the valid ones
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "unknown subcommand 'bogus-cmd' (one of train, eval, sample, compare")) << p.err;
  p = run_posgrad("train --bogus-option");  // a known subcommand's unknown option names both, posgrad once
  EXPECT_EQ(p.status, 2);
  EXPECT_FALSE(contains(p.err, "unknown subcommand")) << p.err;
  EXPECT_TRUE(contains(p.err, "posgrad: error: train: unknown option '--bogus-option'")) << p.err;
  EXPECT_FALSE(contains(p.err, "posgrad train")) << p.err;
  p = run_posgrad("--max-iters=3 train");  // an option before the subcommand is named, not "a subcommand is required"
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "unknown option '--max-iters' before the subcommand (the first word is one of train, "))
      << p.err;
  // A diverging run stops with status 3 and keeps its last good checkpoint.
  const std::string corpus = write_corpus(d);
  p = run_posgrad(
      "train --preset tiny --optimizer sgd --momentum 0 --lr 1e6 --grad-clip 0 --warmup-iters 0 "
      "--max-iters 200 --checkpoint-interval 1 --eval-interval 1000 --corpus " +
      corpus + " --out-dir " + d.str("r"));
  EXPECT_EQ(p.status, 3) << p.err;
  EXPECT_TRUE(contains(p.err, "at step")) << p.err;
  ASSERT_TRUE(fs::exists(d.str("r/checkpoint/state.json"))) << p.err;
  EXPECT_NO_THROW(train::read_checkpoint(d.str("r")));
}

TEST(Cli, RunFilesMustBeRegularFiles) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d);
  ASSERT_EQ(run_posgrad("train --preset tiny --max-iters 2 --corpus " + corpus + " --out-dir " + d.str("r")).status, 0);
  // state.json replaced by an endless device, then by a FIFO: refused at once, never read (or waited on).
  const std::string state = d.str("r/checkpoint/state.json");
  fs::remove(state);
  fs::create_symlink("/dev/zero", state);
  Proc p = run_posgrad("eval --run " + d.str("r"));
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_TRUE(contains(p.err, state + "' is not a regular file")) << p.err;
  fs::remove(state);
  ASSERT_EQ(mkfifo(state.c_str(), 0600), 0);
  p = run_posgrad("sample --run " + d.str("r"));
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_TRUE(contains(p.err, "is not a regular file")) << p.err;
  fs::create_directories(d.str("x"));
  ASSERT_EQ(mkfifo(d.str("x/results.json").c_str(), 0600), 0);
  p = run_posgrad("report " + d.str("x"));
  EXPECT_EQ(p.status, 1) << p.err;
}

TEST(Cli, ExistingRunsAreNotOverwrittenAndEmptyRunsStillCheckpoint) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d);
  const std::string base = "train --preset tiny --corpus " + corpus + " --out-dir " + d.str("r");
  ASSERT_EQ(run_posgrad(base + " --max-iters 0").status, 0);
  EXPECT_EQ(train::read_checkpoint(d.str("r")).state.step, 0);  // the initial model, as the log says
  Proc p = run_posgrad(base + " --max-iters 3");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_TRUE(contains(p.err, "already holds a run")) << p.err;
  EXPECT_EQ(run_posgrad("train --out-dir " + d.str("r") + " --resume --max-iters 3").status, 0);
  EXPECT_EQ(train::read_checkpoint(d.str("r")).state.step, 3);
  // Seeds and methods are independent runs: a repeated one would count one run twice.
  p = run_posgrad("compare --preset tiny --dry-run --seeds 5,5");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "--seeds lists a seed twice")) << p.err;
  p = run_posgrad("compare --preset tiny --dry-run --methods rope,rope");
  EXPECT_EQ(p.status, 2);
  p = run_posgrad("compare --preset tiny --dry-run --suite-tasks parity_check,parity_check");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "--suite-tasks lists a task twice")) << p.err;
  p = run_posgrad("compare --preset tiny --dry-run --suite-randomized rope,rope");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "--suite-randomized lists a method twice")) << p.err;
  // --jobs shares --threads: more jobs than threads is refused, naming both; the dry run says how
  // many units the run would train at once.
  p = run_posgrad("compare --preset tiny --dry-run --threads 1 --jobs 2");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_TRUE(contains(p.err, "--jobs 2 is more than --threads 1")) << p.err;
  const std::string tiny_corpus = write_corpus(d);
  p = run_posgrad("compare --preset tiny --dry-run --threads 2 --jobs 0 --corpus " + tiny_corpus);
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(contains(p.err, "the run: 2 units at once (--jobs 0), 1 OpenMP thread each")) << p.err;
  p = run_posgrad("compare --preset tiny --dry-run --threads 2 --jobs 1 --corpus " + tiny_corpus);
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(contains(p.err, "the run: one unit at a time (--jobs 1)")) << p.err;
  // A device this machine does not have: the dry run refuses it as the run would (no machine has 100 GPUs).
  for (const std::string cmd : {"train --preset tiny --pos rope", "compare --preset tiny --methods rope,alibi"}) {
    p = run_posgrad(cmd + " --dry-run --device cuda:99");
    EXPECT_EQ(p.status, 1) << cmd << ": " << p.err;
    EXPECT_TRUE(contains(p.err, "cuda:99 requested, but this machine has") ||
                contains(p.err, "no CUDA GPU is present") || contains(p.err, "built without CUDA"))
        << cmd << ": " << p.err;
    if (!cuda_available()) {
      p = run_posgrad(cmd + " --dry-run --device cuda");
      EXPECT_EQ(p.status, 1) << cmd << ": " << p.err;
    }
  }
  // --dry-run sees what the real run would refuse.
  p = run_posgrad("train --preset tiny --pos rope --n-embd 3 --n-head 3 --dry-run");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_TRUE(contains(p.err, "rotary")) << p.err;
  p = run_posgrad("train --dry-run --corpus " + d.str("missing.txt"));
  EXPECT_EQ(p.status, 1) << p.err;
  // Results that cannot be written are a failure.
  if (fs::exists("/dev/full")) {
    const std::string cmd = "'" + test::bin_path() + "' info >/dev/full 2>/dev/null";
    EXPECT_EQ(test::decode_status(std::system(cmd.c_str())), 1);
  }
}

TEST(Cli, CorpusMustBeABoundedRegularFile) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d);
  ASSERT_EQ(mkfifo(d.str("fifo").c_str(), 0600), 0);
  std::ofstream(d.str("empty.txt")).close();
  const std::string base = "train --preset tiny --max-iters 1 --out-dir " + d.str("r") + " --corpus ";
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : {Case{base + d.str(), "is a directory"}, Case{base + "/dev/zero", "is a device"},
                        Case{base + d.str("fifo"), "is a FIFO"}, Case{base + d.str("missing.txt"), "does not exist"},
                        Case{base + d.str("empty.txt"), "is empty"},
                        Case{base + corpus + " --max-corpus-bytes 100", "more than --max-corpus-bytes 100"}}) {
    Proc p = run_posgrad(c.args);
    EXPECT_EQ(p.status, 1) << c.args << "\n" << p.err;
    EXPECT_TRUE(contains(p.err, c.expect)) << c.args << "\n" << p.err;
  }
  EXPECT_FALSE(fs::exists(d.str("r/checkpoint.tmp")));
}

TEST(Cli, ResumeAsDocumentedEqualsTheUninterruptedRunAndLeavesNoTemporaries) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d, 2000);
  const std::string common =
      "train --preset tiny --max-iters 3000 --checkpoint-interval 50 --eval-interval 1000 "
      "--log-interval 1 --threads 2 --corpus " +
      corpus;
  // Interrupted with SIGINT (Ctrl-C) once training is under way ...
  Background b(common + " --out-dir " + d.str("b"), d.str("b.err"));
  ASSERT_TRUE(b.wait_for("step    60/3000")) << test::slurp(d.str("b.err"));
  kill(b.pid, SIGINT);
  ASSERT_EQ(b.wait(), 130) << test::slurp(d.str("b.err"));
  const std::string err = test::slurp(d.str("b.err"));
  EXPECT_TRUE(contains(err, "interrupted by SIGINT at step")) << err;
  EXPECT_TRUE(contains(err, "to continue, run: " + test::bin_path() + " train --out-dir " + d.str("b") + " --resume"))
      << err;
  EXPECT_TRUE(temporaries(d.str("b")).empty());
  const auto at = train::read_checkpoint(d.str("b")).state.step;
  EXPECT_GT(at, 0);
  EXPECT_LT(at, 3000) << "the run finished before the signal: make it longer";
  // ... a stale temporary as a killed run would leave it ...
  fs::create_directories(d.str("b/checkpoint.tmp"));
  std::ofstream(d.str("b/checkpoint.tmp/model.safetensors")) << "half";
  std::ofstream(d.str("b/config.json.tmp.4242.0")) << "{";
  // ... then resumed exactly as the README says.
  Proc r = run_posgrad("train --out-dir " + d.str("b") + " --resume");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "removed " + d.str("b/checkpoint.tmp"))) << r.err;
  EXPECT_TRUE(temporaries(d.str("b")).empty());
  // The uninterrupted run.
  Proc a = run_posgrad(common + " --out-dir " + d.str("a"));
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(read_file(d.str("a/checkpoint/model.safetensors")), read_file(d.str("b/checkpoint/model.safetensors")));
  EXPECT_EQ(read_file(d.str("a/checkpoint/optimizer.safetensors")),
            read_file(d.str("b/checkpoint/optimizer.safetensors")));
  EXPECT_EQ(train::read_checkpoint(d.str("b")).state.step, 3000);
}

TEST(Cli, SigtermAlsoCheckpointsAndExits130) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d, 2000);
  Background b("train --preset tiny --max-iters 100000 --checkpoint-interval 100000 --log-interval 1 --corpus " +
                   corpus + " --out-dir " + d.str("r"),
               d.str("err"));
  ASSERT_TRUE(b.wait_for("step    20/")) << test::slurp(d.str("err"));
  kill(b.pid, SIGTERM);
  EXPECT_EQ(b.wait(), 130) << test::slurp(d.str("err"));
  EXPECT_TRUE(contains(test::slurp(d.str("err")), "interrupted by SIGTERM"));
  EXPECT_GE(train::read_checkpoint(d.str("r")).state.step, 20);  // written at the interrupt, not at an interval
  EXPECT_TRUE(temporaries(d.str("r")).empty());
}

TEST(Cli, ResumeChangesOnlyWhatIsGivenAndLogsIt) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d);
  const std::string dir = d.str("r");
  ASSERT_EQ(
      run_posgrad("train --preset tiny --max-iters 10 --lr 0.003 --corpus " + corpus + " --out-dir " + dir).status, 0);
  Proc p = run_posgrad("train --out-dir " + dir + " --resume --max-iters 14");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(contains(p.err, "resume: --max-iters 10 -> 14 (given explicitly)")) << p.err;
  auto saved = nlohmann::json::parse(read_file(dir + "/config.json"));
  EXPECT_EQ(saved["max_iters"], 14);
  EXPECT_EQ(saved["lr"], 0.003);  // kept from the run, not the preset's default
  EXPECT_EQ(train::read_checkpoint(dir).state.step, 14);
  p = run_posgrad("train --out-dir " + dir + " --resume --n-layer 3");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "--n-layer cannot change when resuming")) << p.err;
  p = run_posgrad("train --out-dir " + dir + " --resume --preset tiny");
  EXPECT_EQ(p.status, 2);
  EXPECT_TRUE(contains(p.err, "--preset cannot be combined with --resume")) << p.err;
  // state.json is checksummed: an edited field is refused, naming the file.
  const std::string state = dir + "/checkpoint/state.json";
  std::string text = read_file(state);
  const size_t at = text.find("\"step\": 14");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 10, "\"step\": 13");
  std::ofstream(state, std::ios::trunc) << text;
  p = run_posgrad("train --out-dir " + dir + " --resume");
  EXPECT_EQ(p.status, 1);
  EXPECT_TRUE(contains(p.err, state + " is corrupt or was edited")) << p.err;
}

TEST(Cli, ScaledRopeTrainsAndEvaluates) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d);
  const std::string tiny = " --preset tiny --max-iters 6 --corpus " + corpus;
  Proc p = run_posgrad("train --pos rope --rope-scaling yarn --rope-scaling-factor 4" + tiny + " --out-dir " +
                       d.str("yarn"));
  ASSERT_EQ(p.status, 0) << p.err;
  ASSERT_EQ(run_posgrad("train --pos rope" + tiny + " --out-dir " + d.str("plain")).status, 0);
  auto cfg = nlohmann::json::parse(read_file(d.str("yarn/config.json")));
  EXPECT_EQ(cfg["rope_scaling"], "yarn");
  EXPECT_EQ(cfg["rope_scaling_factor"], 4.0);
  // The scaling changes the model: the trained weights differ from plain RoPE's.
  EXPECT_NE(read_file(d.str("yarn/checkpoint/model.safetensors")),
            read_file(d.str("plain/checkpoint/model.safetensors")));
  p = run_posgrad("eval --run " + d.str("yarn") + " --contexts 16,64 --windows 2");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(contains(p.out, "perplexity")) << p.out;
  EXPECT_TRUE(contains(p.out, "      64 ")) << p.out;
}

// A run of an encoding without a CUDA attention kernel (CoPE): eval and sample --device cuda refuse it
// as train does — a usage error (2) naming the encoding, before anything is printed or computed —
// on any build (the check precedes the device).
// eval's default lengths (1, 2 and 4 times the training length) may be longer than a small validation
// split: those print n/a with the reason, not an error about --contexts, which was not given; a length
// given with --contexts must fit. A learned table's row says how far past the table the length is.
TEST(Cli, EvalDefaultLengthsLongerThanTheValidationSplitPrintNa) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d, 40);  // about 1,850 characters: a validation split of 185
  ASSERT_EQ(run_posgrad("train --preset tiny --max-iters 2 --pos learned --block-size 64 --corpus " + corpus +
                        " --out-dir " + d.str("r"))
                .status,
            0);
  Proc p = run_posgrad("eval --run " + d.str("r") + " --windows 1");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(contains(p.out,
                       "     128        n/a          n/a        n/a        0   (64 positions past the learned "
                       "table's 64)"))
      << p.out;
  EXPECT_EQ(p.out.find("   64        n/a"), std::string::npos) << p.out;  // the training length is measured
  ASSERT_EQ(run_posgrad("train --preset tiny --max-iters 2 --pos rope --block-size 64 --corpus " + corpus +
                        " --out-dir " + d.str("rope"))
                .status,
            0);
  p = run_posgrad("eval --run " + d.str("rope") + " --windows 1");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(contains(p.out, "     256        n/a          n/a        n/a        0   (the validation split's "))
      << p.out;
  EXPECT_TRUE(contains(p.out, " tokens hold no window of 256)")) << p.out;
  EXPECT_EQ(p.out.find("     128        n/a"), std::string::npos) << p.out;
  p = run_posgrad("eval --run " + d.str("r") + " --windows 1 --contexts 64,256");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_TRUE(contains(p.err,
                       "--contexts: a window of 256 tokens needs 257 validation tokens; the validation split "
                       "has "))
      << p.err;
  EXPECT_TRUE(p.out.empty()) << p.out;
}

TEST(Cli, EvalAndSampleRefuseACpuOnlyEncodingOnCuda) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d);
  ASSERT_EQ(run_posgrad("train --pos cope --preset tiny --max-iters 2 --corpus " + corpus + " --out-dir " + d.str("c"))
                .status,
            0);
  for (const std::string cmd : {"eval --contexts 16 --windows 2", "sample --tokens 5"}) {
    const Proc p = run_posgrad(cmd + " --device cuda --run " + d.str("c"));
    EXPECT_EQ(p.status, 2) << cmd << "\n" << p.err;
    EXPECT_TRUE(contains(p.err, "--device cuda: the cope position encoding has no CUDA attention kernel"))
        << cmd << "\n"
        << p.err;
    EXPECT_EQ(p.out, "") << cmd;
  }
}

TEST(Cli, TrainEvalSampleAndConfigFiles) {
  POSGRAD_REQUIRE_BIN();
  TempDir d;
  const std::string corpus = write_corpus(d);
  std::ofstream(d.str("cfg.json")) << R"({"max-iters": 4, "pos": "rope", "lr": 0.002})";
  Proc t = run_posgrad("train --preset tiny --config " + d.str("cfg.json") + " --corpus " + corpus + " --out-dir " +
                       d.str("r"));
  ASSERT_EQ(t.status, 0) << t.err;
  auto saved = nlohmann::json::parse(read_file(d.str("r/config.json")));
  EXPECT_EQ(saved["max_iters"], 4);
  EXPECT_EQ(saved["pos"], "rope");
  EXPECT_EQ(saved["lr"], 0.002);
  // A run's config.json is itself a --config file that reproduces the run.
  Proc again = run_posgrad("train --config " + d.str("r/config.json") + " --out-dir " + d.str("r2"));
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(read_file(d.str("r/checkpoint/model.safetensors")), read_file(d.str("r2/checkpoint/model.safetensors")));
  Proc e = run_posgrad("eval --run " + d.str("r") + " --contexts 16,32 --windows 2");
  EXPECT_EQ(e.status, 0) << e.err;
  EXPECT_TRUE(contains(e.out, "perplexity")) << e.out;
  // Sampling: the text alone on stdout; a near-zero temperature is greedy (the same as top-k 1).
  Proc s = run_posgrad("sample --run " + d.str("r") + " --tokens 20 --prompt the --temperature 1e-300 --seed 1");
  ASSERT_EQ(s.status, 0) << s.err;
  Proc g = run_posgrad("sample --run " + d.str("r") + " --tokens 20 --prompt the --top-k 1 --seed 2");
  ASSERT_EQ(g.status, 0) << g.err;
  EXPECT_EQ(s.out, g.out);
  EXPECT_EQ(s.out.rfind("the", 0), 0u) << s.out;
  EXPECT_TRUE(contains(s.err, "tokens/s")) << s.err;
  Proc bad = run_posgrad("train --config " + d.str("missing.json"));
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(contains(bad.err, "missing.json' does not exist")) << bad.err;
}

// ---- issue 22: the decoder's eval reads the recorded corpus and refuses non-finite scores -----------------

// The checkpoint records the corpus by absolute path and content hash: eval works from another
// directory than the run's (a relative --corpus), refuses the corpus once it changed (exit 1, naming
// the recorded and current size and hash), and a NaN weight written through the checkpoint library
// (checksums kept consistent) makes eval exit 3 instead of printing nan.
TEST(EvalCommand, RecordedCorpusAndNonFiniteScores) {
  POSGRAD_REQUIRE_BIN();
  TempDir tmp;
  const std::string corpus = write_corpus(tmp);
  const std::string original = test::slurp(corpus);
  fs::create_directories(tmp.str("elsewhere"));
  Proc p =
      run_posgrad("train --preset tiny --max-iters 2 --eval-interval 2 --corpus corpus.txt --out-dir run", tmp.str());
  ASSERT_EQ(p.status, 0) << p.err;
  const train::LoadedCheckpoint ck0 = train::read_checkpoint(tmp.str("run"), false);
  EXPECT_EQ(ck0.state.corpus.at("path").get<std::string>(), corpus);
  EXPECT_EQ(ck0.state.corpus.at("bytes").get<int64_t>(), static_cast<int64_t>(original.size()));
  EXPECT_EQ(ck0.state.corpus.at("fnv1a64").get<std::string>(), hex64(fnv1a64(original)));
  p = run_posgrad("eval --run " + tmp.str("run") + " --windows 2", tmp.str("elsewhere"));
  EXPECT_EQ(p.status, 0) << p.err;
  { std::ofstream(corpus, std::ios::app) << "x"; }
  p = run_posgrad("eval --run " + tmp.str("run") + " --windows 2", tmp.str("elsewhere"));
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_TRUE(contains(p.err, "corpus '" + corpus + "' has changed since the run in")) << p.err;
  EXPECT_TRUE(contains(p.err, "recorded " + std::to_string(original.size()) + " bytes, fnv1a64 " +
                                  hex64(fnv1a64(original)) + "; now " + std::to_string(original.size() + 1) + " bytes"))
      << p.err;
  { std::ofstream(corpus, std::ios::binary) << original; }
  // a NaN weight, saved with the library's own writer (state.json's checksums follow)
  train::LoadedCheckpoint ck = train::read_checkpoint(tmp.str("run"), true);
  for (auto& [name, t] : ck.model)
    if (name.find("weight") != std::string::npos) {
      auto v = t.to_vector();
      v[0] = std::numeric_limits<double>::quiet_NaN();
      t = Tensor::from_vector(v, t.shape(), t.dtype());
      break;
    }
  train::write_checkpoint(tmp.str("run"), ck.state, ck.model, ck.optimizer);
  p = run_posgrad("eval --run " + tmp.str("run") + " --windows 2");
  EXPECT_EQ(p.status, 3) << p.out << p.err;
  EXPECT_TRUE(contains(p.err, "gives a non-finite loss")) << p.err;
  // no run at all: the message names both kinds of run
  p = run_posgrad("eval --run " + tmp.str("nothing"));
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_TRUE(contains(p.err, "no run in '" + tmp.str("nothing") + "' (no such directory)")) << p.err;
}

// --encoder-lr: the option table's range is the encoder track's, (0, 1), in --help and the parser.
TEST(EvalCommand, EncoderLrRangeMatchesTheTrack) {
  POSGRAD_REQUIRE_BIN();
  TempDir tmp;
  const std::string corpus = write_corpus(tmp);
  Proc p = run_posgrad("compare --help");
  const size_t at = p.out.find("--encoder-lr");
  ASSERT_NE(at, std::string::npos) << p.out;
  const std::string help_line = p.out.substr(at, p.out.find('\n', at) - at);
  EXPECT_FALSE(contains(help_line, "(0, 1]")) << help_line;
  EXPECT_TRUE(contains(help_line, "(0, 1)")) << help_line;
  p = run_posgrad("compare --preset tiny --track encoder --encoder-lr 1 --dry-run --corpus " + corpus);
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_TRUE(contains(p.err, "--encoder-lr")) << p.err;
  p = run_posgrad("compare --preset tiny --track encoder --encoder-lr 0.5 --dry-run --corpus " + corpus);
  EXPECT_EQ(p.status, 0) << p.err;
}
