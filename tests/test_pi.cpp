// test_pi.cpp — the position-interpolation protocol (compare/studies/pi/pi_protocol.h): the fine-tuned copies
// (scaling and factor, training length kept, the trained model untouched), bit-identical rows for
// the same seed, interruption, the options' validation, and the tiny comparison end to end
// (pi.csv, the report's section, the claims, results.json round trip; bit-identical rows for the
// same seed are checked on the protocol itself).
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compare/compare.h"
#include "compare/results.h"
#include "compare/studies/passkey/passkey_config.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/pi/pi_report.h"
#include "data/fileio.h"
#include "support/test_util.h"
#include "train/interrupt.h"

using namespace posgrad;
using posgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kVocab = 11, kBlock = 8;

std::unique_ptr<nn::GPT> small_rope(Generator& g, Generator& d) {
  nn::GPTConfig c;
  c.vocab_size = kVocab;
  c.block_size = kBlock;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.pos.kind = "rope";
  auto m = std::make_unique<nn::GPT>(c, g, d);
  m->eval();
  return m;
}

// A periodic text with some noise: there is something to learn at every length.
data::TokenSpan text(int64_t n, int64_t shift) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back((i * 3 + ((i + shift) / 7) % 2) % kVocab);
  return data::TokenSpan::from_vector(ids);
}

train::CompareConfig config() {
  train::CompareConfig c = train::compare_preset("tiny");  // eval multipliers 1, 2, 4
  c.of<train::PiSettings>().iters = 3;
  c.of<train::PiSettings>().multipliers = {2, 4};
  c.of<train::PiSettings>().scalings = {"none", "linear", "ntk", "yarn"};
  c.eval_tokens = 64;
  c.of<train::PasskeyConfig>().iters =
      0;  // the test corpus has no 'k' for the passkey template; passkey is test_passkey's
  return c;
}

// Every number but the wall time.
bool same(std::vector<train::PiResult> a, std::vector<train::PiResult> b) {
  for (auto* v : {&a, &b})
    for (auto& r : *v) r.seconds = 0;
  train::UnitResult ua, ub;
  ua.parts.get<train::PiResults>().rows = a;
  ub.parts.get<train::PiResults>().rows = b;
  return train::to_json(ua) == train::to_json(ub);
}

}  // namespace

TEST(PiProtocol, FineTunesScaledCopiesAndIsBitReproducible) {
  Generator g(5), d(6);
  auto model = small_rope(g, d);
  const auto before = model->state_dict();
  const data::TokenSpan train_split = text(600, 1), val = text(200, 2);
  const auto cfg = config();
  std::vector<std::string> seen;
  const auto a = train::run_pi_protocol(
      *model, "rope", train_split, val, cfg, 7, Device::cpu(), [&](const std::string& row, nn::GPT& tuned) {
        seen.push_back(row);
        const auto& o = tuned.config().pos.options;
        EXPECT_EQ(tuned.config().block_size, kBlock) << row;  // YaRN's L0 and the evaluation lengths stay L
        EXPECT_FALSE(tuned.is_training()) << row;
        if (row == "rope+drope ft1x") {  // DroPE: the rotary embedding dropped, the rest of the model kept
          EXPECT_EQ(tuned.config().pos.kind, "none");
          return;
        }
        EXPECT_EQ(tuned.config().pos.kind, "rope") << row;
        const std::string scaling = o.text("rope_scaling");
        const int64_t M = row.find("ft2x") != std::string::npos ? 2 : 4;
        EXPECT_EQ(row, train::pi_row_name("rope", scaling, M));  // the copy carries the row's scaling ...
        EXPECT_EQ(o.real("rope_scaling_factor"), scaling == "none" ? 1.0 : static_cast<double>(M))
            << row;  // ... at s = M
      });
  const std::vector<std::string> rows = {"rope ft2x",      "rope+linear ft2x", "rope+ntk ft2x",
                                         "rope+yarn ft2x", "rope ft4x",        "rope+linear ft4x",
                                         "rope+ntk ft4x",  "rope+yarn ft4x",   "rope+drope ft1x"};
  EXPECT_EQ(seen, rows);
  ASSERT_EQ(a.size(), 9u);
  EXPECT_EQ(a.back().scaling, "drope");
  EXPECT_EQ(a.back().multiplier, 1);  // recalibrated at the training length
  // DroPE zero-shot at 1x is another model than RoPE fine-tuned: its loss differs from every scaled row's.
  for (size_t i = 0; i + 1 < a.size(); ++i) EXPECT_NE(a.back().lengths[0]->loss, a[i].lengths[0]->loss) << i;
  for (const auto& r : a) {
    EXPECT_EQ(r.iters, 3);
    EXPECT_EQ(r.batch, std::max<int64_t>(1, cfg.base.batch_size / r.multiplier));  // tokens per step as in training
    ASSERT_EQ(r.lengths.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(r.lengths[i].has_value());
      EXPECT_EQ(r.lengths[i]->context, cfg.eval_multipliers[i] * kBlock);
      EXPECT_TRUE(std::isfinite(r.lengths[i]->perplexity));
    }
    EXPECT_NE(r.first_loss, r.final_loss);  // it trained
  }
  // The scalings differ: linear, ntk and yarn at s = 2 give other losses than plain RoPE.
  EXPECT_NE(a[0].lengths[1]->loss, a[1].lengths[1]->loss);
  EXPECT_NE(a[1].lengths[1]->loss, a[2].lengths[1]->loss);
  EXPECT_NE(a[2].lengths[1]->loss, a[3].lengths[1]->loss);
  // The trained model is left as it was.
  const auto after = model->state_dict();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(before[i].second.to_vector(), after[i].second.to_vector());
  // Same seed: bit-identical rows; another seed: other batches.
  EXPECT_TRUE(same(a, train::run_pi_protocol(*model, "rope", train_split, val, cfg, 7, Device::cpu())));
  const auto other = train::run_pi_protocol(*model, "rope", train_split, val, cfg, 8, Device::cpu());
  EXPECT_NE(other[0].first_loss, a[0].first_loss);
  // Off: no rows.
  auto off = cfg;
  off.of<train::PiSettings>().iters = 0;
  EXPECT_TRUE(train::run_pi_protocol(*model, "rope", train_split, val, off, 7, Device::cpu()).empty());
}

TEST(PiProtocol, BadInputsAndInterruption) {
  Generator g(5), d(6);
  auto model = small_rope(g, d);
  const auto cfg = config();
  // A split too short for one window of 4 x 8 tokens: named, before anything is fine-tuned.
  int before = 0;
  try {
    (void)train::run_pi_protocol(*model, "rope", text(30, 1), text(200, 2), cfg, 1, Device::cpu(),
                                 [&](const std::string&, nn::GPT&) { ++before; });
    ADD_FAILURE() << "a too short split was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("at 4x needs a training split of at least 33 tokens"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(before, 0);
  // Not RoPE.
  nn::GPTConfig c = model->config();
  c.pos.kind = "alibi";
  nn::GPT alibi(c, g, d);
  EXPECT_THROW((void)train::run_pi_protocol(alibi, "alibi", text(600, 1), text(200, 2), cfg, 1, Device::cpu()),
               UsageError);
  // SIGINT during the first row's evaluation: the next row stops before its first step.
  train::install_interrupt_handlers();
  int rows = 0;
  try {
    (void)train::run_pi_protocol(*model, "rope", text(600, 1), text(200, 2), cfg, 1, Device::cpu(),
                                 [&](const std::string&, nn::GPT&) {
                                   ++rows;
                                   std::raise(SIGINT);
                                 });
    ADD_FAILURE() << "not interrupted";
  } catch (const train::Interrupted& e) {
    EXPECT_EQ(e.step, 0);
    EXPECT_NE(std::string(e.what()).find("rope+linear ft2x"), std::string::npos) << e.what();
  }
  EXPECT_EQ(rows, 1);
  train::clear_interrupt();
}

TEST(PiProtocol, OptionErrorsAreNamed) {
  auto expect_error = [](const train::CompareConfig& c, const std::string& flag) {
    try {
      c.validate();
      ADD_FAILURE() << "accepted; expected an error naming " << flag;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  auto c = train::compare_preset("tiny");
  EXPECT_NO_THROW(c.validate());
  c.of<train::PiSettings>().multipliers = {2, 2};
  expect_error(c, "--pi-multipliers");
  c.of<train::PiSettings>().multipliers = {1};  // the training length itself: nothing to extend
  expect_error(c, "--pi-multipliers");
  c = train::compare_preset("tiny");
  c.of<train::PiSettings>().scalings = {"linear", "linear"};
  expect_error(c, "--pi-scalings");
  c.of<train::PiSettings>().scalings = {"dynamic"};  // not a fine-tuned scaling here
  expect_error(c, "--pi-scalings");
  c = train::compare_preset("tiny");
  c.of<train::PiSettings>().lr = 0;
  expect_error(c, "--pi-lr");
  c = train::compare_preset("tiny");
  c.of<train::PiSettings>().iters = -1;
  expect_error(c, "--pi-iters");
}

TEST(PiProtocol, TinyComparisonReportsTheRows) {
  TempDir d;
  std::ostringstream os;
  for (int i = 0; i < 300; ++i)
    os << "in the beginning " << (i % 9) << " was the word, and the word " << (i % 4) << ".\n";
  std::ofstream(d.str("corpus.txt")) << os.str();
  auto c = train::compare_preset("tiny");
  c.base.corpus = d.str("corpus.txt");
  c.base.threads = 2;
  c.methods = {"rope"};
  c.of<train::PasskeyConfig>().iters = 0;  // this corpus has no 'k' for the passkey template (test_compare covers both)
  c.out_dir = d.str("a");
  const std::string report = train::run_compare(c);
  const std::string csv = read_file(d.str("a/pi.csv")), md = read_file(report);
  for (const char* row : {"\nrope,0,none,2,32,perplexity,2,", "\nrope+linear,0,linear,4,64,perplexity,2,",
                          "\nrope ft2x,2,none,2,32,perplexity,2,", "\nrope+linear ft2x,2,linear,4,64,loss,2,"})
    EXPECT_NE(csv.find(row), std::string::npos) << row << "\n" << csv;
  EXPECT_NE(md.find("## Position interpolation: RoPE scaled and fine-tuned"), std::string::npos);
  EXPECT_NE(md.find("| rope+linear ft2x | 32 |"), std::string::npos);
  EXPECT_NE(md.find("| p1 | PI: RoPE interpolated (linear)"), std::string::npos);
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    EXPECT_TRUE(fs::exists(d.str("a/plots/pi_ppl_vs_length.png")));
  }
  // results.json round trip, the fine-tuned rows included; a malformed entry names the file.
  const auto j = nlohmann::json::parse(read_file(d.str("a/results.json")));
  const auto r = train::comparison_from_json(j, "results.json");
  ASSERT_EQ(r.units.front().parts.value<train::PiResults>().rows.size(), 3u);
  EXPECT_EQ(train::to_json(r), j);
  EXPECT_EQ(train::pi_rows(r), (std::vector<std::string>{"rope ft2x", "rope+linear ft2x", "rope+drope ft1x"}));
  EXPECT_NE(md.find("| rope+drope ft1x | 16 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| p4 | DroPE"), std::string::npos);
  EXPECT_NE(csv.find("\nrope+drope ft1x,1,drope,4,64,perplexity,2,"), std::string::npos) << csv;
  for (const auto& [key, bad] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"multiplier", 2.5}, {"lengths", "x"}, {"final_loss", "nan"}}) {
    auto broken = j;
    broken["units"][0]["pi"][0][key] = bad;
    try {
      (void)train::comparison_from_json(broken, "/some/results.json");
      ADD_FAILURE() << key << " accepted";
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("/some/results.json"), std::string::npos) << e.what();
    }
  }
  auto broken = j;
  broken["units"][0]["pi"] = 3;
  EXPECT_THROW((void)train::comparison_from_json(broken, "/some/results.json"), IoError);
}
