// test_fuzz_corpus.cpp — replays the committed fuzz corpus (tests/fuzz/corpus/<target>/*) through
// the fuzz entry functions (tests/fuzz/fuzz_targets.h) in every build, with any compiler: the
// seeds and every input that once crashed a loader are regression tests. No fuzzing happens here;
// bench/fuzz.sh does that with a clang build.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "data/fileio.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/support/test_util.h"
#include "train/checkpoint.h"

#ifndef POSGRAD_FUZZ_CORPUS_DIR
#error "POSGRAD_FUZZ_CORPUS_DIR must name tests/fuzz/corpus"
#endif

namespace fs = std::filesystem;
using posgrad::fuzz::kTargets;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

std::vector<fs::path> corpus(const std::string& target) {
  std::vector<fs::path> files;
  const fs::path dir = fs::path(POSGRAD_FUZZ_CORPUS_DIR) / target;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

class FuzzCorpus : public ::testing::TestWithParam<posgrad::fuzz::Target> {};

TEST_P(FuzzCorpus, EveryInputIsHandled) {
  const auto& t = GetParam();
  const auto files = corpus(t.name);
  ASSERT_FALSE(files.empty()) << "no corpus for fuzz target '" << t.name << "' under " << POSGRAD_FUZZ_CORPUS_DIR;
  for (const auto& f : files) {
    const std::string bytes = slurp(f);
    try {
      t.entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "fuzz target '" << t.name << "' on " << f << ": " << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Loaders, FuzzCorpus, ::testing::ValuesIn(kTargets),
                         [](const auto& info) { return std::string(info.param.name); });

// The checkpoint seed is the state.json that the harness's own scratch run writes; if the model,
// the configuration or the format changes, this fails and the seed must be regenerated (the
// message holds the new text).
TEST(FuzzCorpus, CheckpointSeedIsCurrent) {
  const std::string want = posgrad::fuzz::checkpoint_reference_state();
  const std::string got = slurp(fs::path(POSGRAD_FUZZ_CORPUS_DIR) / "checkpoint" / "valid_state.json");
  EXPECT_EQ(got, want) << "tests/fuzz/corpus/checkpoint/valid_state.json is stale; replace it with the text above";
}

// ... and the seed is a checkpoint that loads: the fuzzer starts from an accepted state.
TEST(FuzzCorpus, CheckpointSeedLoads) {
  const std::string dir = posgrad::fuzz::checkpoint_run_dir();
  posgrad::write_file_atomic(dir + "/checkpoint/state.json", posgrad::fuzz::checkpoint_reference_state());
  const auto ck = posgrad::train::read_checkpoint(dir);
  EXPECT_EQ(ck.state.step, 5);
  EXPECT_FALSE(ck.model.empty());
  EXPECT_FALSE(ck.optimizer.empty());
}
