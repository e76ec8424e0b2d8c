// test_results_check.cpp — what `posgrad report` refuses in a results.json (compare/results.h:
// read_comparison, check_comparison): each hand edit below is an IoError naming the file, the JSON
// path and the value, and the command exits with status 1; a valid file renders. The valid inputs
// are the committed fuzz seeds tests/fuzz/corpus/results/ (made by posgrad_fuzz_seeds, and a real
// tiny run), so this also pins that those seeds pass the checks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "compare/claims.h"
#include "compare/compare.h"
#include "compare/report.h"
#include "compare/results.h"
#include "compare/studies/lm/lm.h"
#include "data/fileio.h"
#include "support/process.h"
#include "support/test_util.h"
#include "tensor/option_table.h"
#include "train/options.h"

using namespace posgrad;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

json seed(const std::string& name) {
  return json::parse(read_file(std::string(POSGRAD_FUZZ_CORPUS_DIR) + "/results/" + name));
}

// The message of rerender_report on `j` (written as DIR/results.json), "" when it is accepted.
std::string refusal(const test::TempDir& d, const json& j) {
  fs::create_directories(d.str("run"));
  std::ofstream(d.str("run/results.json"), std::ios::trunc) << j.dump(1);
  try {
    train::rerender_report(d.str("run"));
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(ResultsCheck, TheSeedsAreValidAndRender) {
  test::TempDir d;
  for (const char* name : {"decoder.json", "both_tracks.json", "tiny_rope.json"}) {
    EXPECT_EQ(refusal(d, seed(name)), "") << name;
    EXPECT_TRUE(fs::exists(d.str("run/report.md"))) << name;
  }
}

TEST(ResultsCheck, HandEditsAreRefusedNamingTheValue) {
  test::TempDir d;
  const json valid = seed("both_tracks.json");
  struct Case {
    std::string what;
    std::function<void(json&)> edit;
    std::vector<std::string> message;  // parts the message must hold
  };
  const std::vector<Case> cases = {
      {"negative perplexity",
       [](json& j) { j["units"][0]["lengths"][0]["perplexity"] = -1; },
       {"units[0].lengths[0].perplexity = -1", "finite and >= 1"}},
      {"absurd perplexity",
       [](json& j) { j["units"][0]["lengths"][1]["perplexity"] = 1e308; },
       {"units[0].lengths[1].perplexity = 1e+308", "not exp(loss)"}},
      {"perplexity edited alone",
       [](json& j) { j["units"][1]["lengths"][0]["perplexity"] = 20.0; },
       {"units[1].lengths[0].perplexity = 20", "not exp(loss)"}},
      {"negative loss", [](json& j) { j["units"][0]["val_curve"][0][1] = -0.5; }, {"units[0].val_curve[0][1] = -0.5"}},
      {"accuracy 1.7",
       [](json& j) { j["units"][0]["lengths"][0]["accuracy"] = 1.7; },
       {"units[0].lengths[0].accuracy = 1.7", "[0, 1]"}},
      {"token F1 1.7",
       [](json& j) { j["units"][1]["task"][1]["token_f1"] = 1.7; },
       {"units[1].task[1].token_f1 = 1.7"}},
      {"negative seconds", [](json& j) { j["units"][0]["train_seconds"] = -3; }, {"units[0].train_seconds = -3"}},
      {"negative count",
       [](json& j) { j["units"][0]["task"][0]["examples"] = -4; },
       {"units[0].task[0].examples = -4"}},
      {"unknown method",
       [](json& j) { j["units"][1]["method"] = "bogus"; },
       {"units[1].method = \"bogus\"", "not among the configured methods (alibi, rope)"}},
      {"three seeds, one unit each",
       [](json& j) {
         j["config"]["seeds"] = {1, 2, 3};
       },
       {"no unit for (alibi, seed 2)", "claims 1, 2, 3"}},
      {"duplicate unit",
       [](json& j) { j["units"].push_back(j["units"][0]); },
       {"units[2]: a second unit for (alibi, seed 1); the first is units[0]"}},
      {"lengths of other multipliers",
       [](json& j) { j["units"][0]["lengths"].erase(2); },
       {"units[0].lengths: holds 2 entries, expected 3", "--eval-multipliers 1, 2, 4"}},
      {"suite rows not configured",
       [](json& j) { j["units"][0]["suite"] = seed("tiny_rope.json")["units"][0]["suite"]; },
       {"units[0].suite: holds"}},
      {"negative cost", [](json& j) { j["cost"]["rows"][0]["seconds"][0] = -0.1; }, {"cost.rows[0].seconds[0] = -0.1"}},
      {"encoder accuracy",
       [](json& j) { j["encoder"]["units"][1]["mlm_accuracy"][0] = 1.5; },
       {"encoder.units[1].mlm_accuracy[0] = 1.5"}},
      {"encoder unit missing", [](json& j) { j["encoder"]["units"].erase(0); }, {"no unit for (alibi, seed 1)"}},
      {"encoder track gone", [](json& j) { j.erase("encoder"); }, {"encoder: missing, but config.track is \"both\""}},
      {"encoder F1",
       [](json& j) { j["encoder"]["units"][0]["tasks"][2]["span_f1"] = -0.25; },
       {"encoder.units[0].tasks[2].span_f1 = -0.25"}},
      {"a null number",
       [](json& j) { j["units"][0]["parameters"] = nullptr; },
       {"expected an integer (int64), got null"}},
      // What every unit and the cost benchmark always hold: no row of them may vanish.
      {"derived rows emptied",
       [](json& j) { j["units"][1]["variants"] = json::object(); },
       {"units[1].variants: has no row \"rope+linear\""}},
      {"derived rows null", [](json& j) { j["units"][1]["variants"] = nullptr; }, {"units[1]"}},
      {"a derived row for alibi",
       [](json& j) { j["units"][0]["variants"]["alibi+linear"] = j["units"][0]["lengths"]; },
       {"only rope units have derived rows"}},
      {"task at 1x null", [](json& j) { j["units"][0]["task"][0] = nullptr; }, {"units[0].task[0] = null"}},
      {"per-position loss emptied",
       [](json& j) { j["units"][0]["per_position_loss"] = json::array(); },
       {"units[0].per_position_loss: holds 0 entries, expected 32"}},
      {"attention profile emptied",
       [](json& j) { j["units"][0]["attention_over_uniform"] = json::array(); },
       {"units[0].attention_over_uniform: holds 0 entries"}},
      {"attention profile shortened",
       [](json& j) { j["units"][0]["attention_over_uniform"][0].erase(0); },
       {"units[0].attention_over_uniform[0]: holds"}},
      {"attention weight above its bound",
       [](json& j) { j["units"][0]["attention_over_uniform"][0][0] = 1e3; },
       {"units[0].attention_over_uniform[0][0] = 1000: a weight over its uniform share 1/n is at most n"}},
      {"attention weight negative",
       [](json& j) { j["units"][0]["attention_over_uniform"][0][2] = -0.5; },
       {"units[0].attention_over_uniform[0][2] = -0.5"}},
      {"training curve emptied",
       [](json& j) { j["units"][0]["train_curve"] = json::array(); },
       {"units[0].train_curve = []"}},
      {"validation curve emptied",
       [](json& j) { j["units"][0]["val_curve"] = json::array(); },
       {"units[0].val_curve = []"}},
      {"cost rows emptied", [](json& j) { j["cost"]["rows"] = json::array(); }, {"cost.rows: holds 0 entries"}},
      {"a round dropped",
       [](json& j) { j["cost"]["rows"][0]["seconds"].erase(0); },
       {"cost.rows[0].seconds: holds 1 entries, expected 2"}},
      {"cost lengths emptied", [](json& j) { j["cost"]["lengths"] = json::array(); }, {"cost.lengths"}},
      {"passkey alphabet",
       [](json& j) {
         j = seed("tiny_rope.json");
         j["units"][0]["passkey"]["rope"]["alphabet"] = "bogus";
       },
       {"units[0].passkey[\"rope\"].alphabet = \"bogus\"", "\"digits\" or \"letters\""}},
      {"passkey at 1x null",
       [](json& j) {
         j = seed("tiny_rope.json");
         j["units"][0]["passkey"]["rope"]["cells"][0]["accuracy"] = nullptr;
       },
       {"units[0].passkey[\"rope\"].cells[0].accuracy = null"}},
      // The configuration itself, by the rules of the command line (one unit would count twice).
      {"a seed twice",
       [](json& j) {
         j["config"]["seeds"] = {1, 1};
       },
       {"config: a configuration posgrad compare refuses", "--seeds lists a seed twice"}},
      {"a method twice",
       [](json& j) {
         j["config"]["methods"] = {"alibi", "rope", "alibi"};
       },
       {"--methods lists a method twice"}},
      {"heads that do not divide the width",
       [](json& j) { j["config"]["n_head"] = 3; },
       {"config: a configuration posgrad compare refuses"}},
      // An encoder score is n/a only past a learned table's trained rows: rope is scored at every length.
      {"encoder n/a where measured",
       [](json& j) { j["encoder"]["units"][0]["mlm_accuracy"][0] = nullptr; },
       {"encoder.units[0].mlm_accuracy[0] = null", "must be a number"}},
      {"encoder task n/a where measured",
       [](json& j) { j["encoder"]["units"][0]["tasks"][0]["accuracy"] = nullptr; },
       {"encoder.units[0].tasks[0].accuracy = null", "must be a number"}},
  };
  for (const auto& c : cases) {
    json j = valid;
    c.edit(j);
    const std::string m = refusal(d, j);
    EXPECT_TRUE(has(m, d.str("run/results.json"))) << c.what << ": " << m;
    for (const auto& part : c.message) EXPECT_TRUE(has(m, part)) << c.what << ": " << m;
  }
  // Through the command line: status 1, the value named on stderr, nothing rendered.
  if (fs::exists(test::bin_path())) {
    json j = valid;
    j["units"][0]["lengths"][0]["perplexity"] = -1;
    fs::remove_all(d.str("run"));
    (void)refusal(d, j);
    const test::Proc p = test::run_posgrad("report " + d.str("run"));
    EXPECT_EQ(p.status, 1) << p.err;
    EXPECT_TRUE(has(p.err, "units[0].lengths[0].perplexity = -1")) << p.err;
    EXPECT_FALSE(fs::exists(d.str("run/report.md")));
  }
}

// "expected an integer, got JSON null null" read twice the same thing: the value is shown once.
TEST(ResultsCheck, JsonTypeErrorsShowTheValueOnce) {
  train::TrainConfig c;
  try {
    opt::from_json(train::train_options(), c, {{"n_layer", nullptr}}, "f.json");
    ADD_FAILURE() << "null accepted";
  } catch (const UsageError& e) {
    EXPECT_TRUE(has(e.what(), "expected an integer, got null")) << e.what();
    EXPECT_FALSE(has(e.what(), "null null")) << e.what();
  }
  try {
    opt::from_json(train::train_options(), c, {{"lr", "abc"}}, "f.json");
  } catch (const UsageError& e) {
    EXPECT_FALSE(has(e.what(), "JSON")) << e.what();
  }
  try {
    opt::from_json(train::train_options(), c, {{"bias", nullptr}}, "f.json");
    ADD_FAILURE() << "null accepted";
  } catch (const UsageError& e) {
    EXPECT_TRUE(has(e.what(), "expected true or false, got null")) << e.what();
  }
}

// "not measured: deberta, deberta, t5": an inner link of a claim's chain was listed once per pair.
TEST(ResultsCheck, MissingMethodsAreListedOnceSorted) {
  train::ComparisonResult r;
  r.config = train::compare_preset("tiny");
  r.config.methods = {"rope", "sinusoidal"};
  r.config.seeds = {1, 2};
  for (const auto& m : r.config.methods)
    for (uint64_t s : r.config.seeds) {
      train::UnitResult u;
      u.method = m;
      u.seed = s;
      for (int k : {1, 2, 4})
        u.parts.get<train::LmResult>().lengths.push_back(train::LengthResult{16 * k, 2, 1.5, std::exp(1.5), 0.5});
      r.units.push_back(u);
    }
  bool seen = false;
  for (const auto& v : train::judge_claims(r))
    if (v.id == "a") {
      seen = true;
      EXPECT_EQ(v.verdict, "not measured");
      EXPECT_EQ(v.why, "needs deberta, t5");
    }
  EXPECT_TRUE(seen);
}

// A unit written by this version lists each study's keys (study_keys), so a key taken out by hand is
// refused by name instead of being read as a result made before that study existed.
TEST(ResultsCheck, AStudysKeyRemovedIsRefusedNotReadAsOlder) {
  test::TempDir d;
  json j = seed("both_tracks.json");
  for (auto& u : j["units"]) u = train::to_json(train::unit_from_json(u, "the seed"));
  ASSERT_EQ(refusal(d, j), "");
  ASSERT_TRUE(j["units"][0]["study_keys"].contains("attention")) << j["units"][0]["study_keys"].dump();
  const std::string key = j["units"][0]["study_keys"]["attention"][0].get<std::string>();
  j["units"][0].erase(key);
  const std::string m = refusal(d, j);
  EXPECT_TRUE(has(m, "the key \"" + key + "\" of the study attention is missing")) << m;
  // A file without the list (an older version's) still reads the missing key as "not measured then".
  j["units"][0].erase("study_keys");
  for (auto& u : j["units"]) u.erase("study_keys");
  EXPECT_FALSE(has(refusal(d, j), "of the study attention is missing"));
}

// A value of the wrong JSON type anywhere in the file is refused with its JSON path
// (nlohmann-json's diagnostics, on in every build).
TEST(ResultsCheck, AWrongTypeNamesItsJsonPath) {
  test::TempDir d;
  json j = seed("both_tracks.json");
  j["units"][0]["lengths"][1]["perplexity"] = "high";
  const std::string m = refusal(d, j);
  EXPECT_TRUE(has(m, "/units/0/lengths/1/perplexity")) << m;
  j = seed("both_tracks.json");
  j["encoder"]["units"][1]["tasks"][0]["accuracy"] = json::array();
  const std::string e = refusal(d, j);
  EXPECT_TRUE(has(e, "/encoder/units/1/tasks/0/accuracy")) << e;
}
