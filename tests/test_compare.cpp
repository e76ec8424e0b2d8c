// test_compare.cpp — the comparison experiment on its tiny preset: it writes the report, the CSVs
// and the plots; the same seed and thread count give a byte-identical results.csv; a second run
// into the same directory skips the finished units; bad --methods are rejected.
#include <gtest/gtest.h>
#include <omp.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_util.h"
#include "train/compare.h"
#include "data/fileio.h"

using namespace posgrad;
using posgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

train::CompareConfig tiny(const TempDir& d, const std::string& out) {
  std::ostringstream os;
  for (int i = 0; i < 300; ++i) os << "in the beginning " << (i % 9) << " was the word, and the word " << (i % 4) << ".\n";
  const std::string corpus = d.str("corpus.txt");
  if (!fs::exists(corpus)) std::ofstream(corpus) << os.str();
  train::CompareConfig c = train::compare_preset("tiny");
  c.base.corpus = corpus;
  c.base.threads = 2;
  c.out_dir = d.str(out);
  return c;
}

}  // namespace

TEST(Compare, TinyPresetWritesReportAndIsReproducible) {
  TempDir d;
  std::string report = train::run_compare(tiny(d, "a"));
  ASSERT_TRUE(fs::exists(report));
  train::run_compare(tiny(d, "b"));
  const std::string a = read_file(d.str("a/results.csv")), b = read_file(d.str("b/results.csv"));
  EXPECT_EQ(a, b) << "results.csv differs between two runs with the same seed and thread count";
  // Every method appears, with real numbers at the training length.
  for (const std::string m : {"none", "sinusoidal", "learned", "t5", "deberta", "rope", "alibi"}) {
    EXPECT_NE(a.find(m + ",val_perplexity,"), std::string::npos) << m;
    EXPECT_EQ(a.find(m + ",val_perplexity,n/a"), std::string::npos) << m;
  }
  // Learned absolute positions are n/a beyond their table; RoPE has its scaled rows.
  EXPECT_NE(a.find("learned,perplexity_x2,n/a"), std::string::npos);
  EXPECT_NE(a.find("rope+yarn,perplexity_x2,"), std::string::npos);
  const std::string md = read_file(report);
  for (const char* section : {"The article's table, measured", "Length extrapolation", "Cost", "Reading", "git commit"})
    EXPECT_NE(md.find(section), std::string::npos) << section;
  EXPECT_TRUE(fs::exists(d.str("a/timing.csv")));
  EXPECT_TRUE(fs::exists(d.str("a/results.json")));
  if (std::system("command -v gnuplot >/dev/null 2>&1") == 0) {
    for (const char* p : {"ppl_vs_length", "train_loss", "per_position_loss", "attention_distance"})
      EXPECT_TRUE(fs::exists(d.str(std::string("a/plots/") + p + ".png"))) << p;
  }
}

TEST(Compare, SecondRunSkipsFinishedUnits) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"alibi", "rope"};
  train::run_compare(c);
  const auto t = fs::last_write_time(d.str("a/alibi/seed1/result.json"));
  const std::string before = read_file(d.str("a/results.csv"));
  train::run_compare(c);
  EXPECT_EQ(fs::last_write_time(d.str("a/alibi/seed1/result.json")), t);
  EXPECT_EQ(read_file(d.str("a/results.csv")), before);
}

TEST(Compare, BadSettingsAreRejected) {
  TempDir d;
  auto c = tiny(d, "a");
  c.methods = {"rope", "bogus"};
  EXPECT_THROW(train::run_compare(c), ValueError);
  c.methods = {};
  EXPECT_THROW(train::run_compare(c), ValueError);
  c = tiny(d, "a");
  c.task = "sort";
  EXPECT_THROW(train::run_compare(c), ValueError);
}
