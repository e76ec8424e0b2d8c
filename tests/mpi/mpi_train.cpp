// mpi_train.cpp — data-parallel training and the distributed comparison between two processes
// (mpirun -np 2), against the single-process runs that each rank also makes itself:
//  - 20 steps of a tiny GPT with N = 2 and the same global batch as N = 1 agree within float
//    rounding (parameters within 2e-5 absolute, losses within 1e-5 relative: the global mean is
//    associated differently, nothing else differs); both ranks hold the same bits; two N = 2 runs are
//    bit-identical; an N = 2 run stopped after 10 steps and resumed to 20 is bit-identical to one of 20;
//    only rank 0 writes the run directory; a signal that reaches one rank stops both after the same
//    step, with rank 0's checkpoint;
//  - `compare` over two processes writes a results.csv byte-identical to the single-process run; a
//    unit that fails on rank 1 is named in rank 0's error with its rank and message, and the units
//    that finished elsewhere keep their result.json.
#include <cmath>
#include <csignal>
#include <filesystem>

#include "compare/compare.h"
#include "compare/compare_dist.h"
#include "compare/studies/addition/addition.h"
#include "compare/studies/passkey/passkey_config.h"
#include "data/fileio.h"
#include "mpi_support.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/interrupt.h"
#include "train/presets.h"
#include "train/trainer.h"

using namespace posgrad;
using posgrad::test::SharedDir;
using posgrad::test::thrown_message;
namespace fs = std::filesystem;

namespace {

dist::Communicator& w() { return dist::world(); }

train::TrainConfig tiny_run(const std::string& corpus, const std::string& out) {
  train::TrainConfig c = train::train_preset("tiny");  // 2 layers, 16 wide, context 16, batch 4, 20 steps
  c.corpus = corpus;
  c.out_dir = out;
  c.threads = 1;
  return c;
}

std::vector<float> parameters_of(train::Trainer& t) {
  std::vector<float> all;
  for (const Tensor& p : t.model().parameters()) {
    const auto v = p.to_float_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

std::string bytes_of(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

}  // namespace

TEST(DataParallelTraining, TwoProcessesMatchOneAndRepeatBitForBit) {
  SharedDir d;
  const std::string corpus = posgrad::test::write_corpus(d);
  // N = 1: each rank trains alone (same seed, same global batch), into a directory of its own.
  train::Trainer single(tiny_run(corpus, d.str("single" + std::to_string(w().rank()))), false);
  single.run();
  const std::vector<float> p1 = parameters_of(single);
  const auto curve1 = single.train_curve();
  // N = 2, twice.
  std::vector<float> p2[2];
  std::vector<std::pair<int64_t, double>> curve2;
  for (int run = 0; run < 2; ++run) {
    train::Trainer t(tiny_run(corpus, d.str("dp" + std::to_string(run))), false, &w());
    ASSERT_NE(t.data_parallel(), nullptr);
    EXPECT_EQ(t.data_parallel()->rows(), 2);
    t.run();
    EXPECT_EQ(t.current_step(), 20);
    p2[run] = parameters_of(t);
    if (run == 0) curve2 = t.train_curve();
  }
  EXPECT_TRUE(bytes_of(p2[0]) == bytes_of(p2[1])) << "two N = 2 runs differ";
  const auto all = w().gather(bytes_of(p2[0]), 0);
  if (w().is_root()) {
    EXPECT_TRUE(all.at(0) == all.at(1)) << "the ranks hold different parameters";
  }
  ASSERT_EQ(p1.size(), p2[0].size());
  double max_diff = 0;
  for (size_t i = 0; i < p1.size(); ++i) max_diff = std::max(max_diff, std::abs(double(p1[i]) - double(p2[0][i])));
  EXPECT_LT(max_diff, 2e-5) << "N = 2 drifted from N = 1 after 20 steps";
  EXPECT_GT(max_diff, 0.0) << "N = 2 equal to N = 1 bit for bit: was the batch split at all?";
  if (w().is_root()) std::printf("N = 1 vs N = 2 after 20 steps: largest parameter difference %.3g\n", max_diff);
  if (w().is_root()) {  // the curves are rank 0's (it logs them)
    ASSERT_EQ(curve1.size(), curve2.size());
    for (size_t i = 0; i < curve1.size(); ++i)
      EXPECT_NEAR(curve2[i].second, curve1[i].second, 1e-5 * std::abs(curve1[i].second)) << "step " << curve1[i].first;
    EXPECT_TRUE(fs::exists(d.str("dp0/checkpoint/state.json")));
    EXPECT_TRUE(fs::exists(d.str("dp0/metrics.jsonl")));
  }
  w().barrier();
  // Resume: a run stopped abruptly after 11 steps (its last checkpoint is step 10's) and resumed to
  // 20 equals the uninterrupted run bit for bit.
  const train::TrainConfig cut = tiny_run(corpus, d.str("resumed"));
  {
    train::Trainer t(cut, false, &w());
    t.run(/*stop_after=*/11);
  }
  train::Trainer t(cut, true, &w());
  EXPECT_EQ(t.current_step(), 10);
  t.run();
  EXPECT_TRUE(bytes_of(parameters_of(t)) == bytes_of(p2[0])) << "resumed N = 2 run differs from the uninterrupted one";
}

TEST(DataParallelTraining, ASignalOnOneRankStopsEveryRankAfterTheSameStep) {
  SharedDir d;
  const std::string corpus = posgrad::test::write_corpus(d);
  train::install_interrupt_handlers();
  train::Trainer t(tiny_run(corpus, d.str("interrupted")), false, &w());
  if (w().rank() == 1) std::raise(SIGINT);  // rank 1 alone is signalled, before the first step
  int64_t stopped_at = -1;
  try {
    t.run();
  } catch (const train::Interrupted& e) {
    stopped_at = e.step;
  }
  train::clear_interrupt();
  train::install_interrupt_handlers();  // the handler resets itself after one signal
  EXPECT_EQ(stopped_at, 1) << "rank " << w().rank();
  w().barrier();
  if (w().is_root()) {
    EXPECT_EQ(train::read_checkpoint_config(d.str("interrupted")).max_iters, 20);
    EXPECT_TRUE(fs::exists(d.str("interrupted/checkpoint/state.json")));
  }
}

TEST(DataParallelTraining, ABatchSmallerThanTheProcessesIsRefused) {
  SharedDir d;
  const std::string corpus = posgrad::test::write_corpus(d);
  train::TrainConfig c = tiny_run(corpus, d.str("small"));
  c.batch_size = 1;
  EXPECT_NE(thrown_message<UsageError>([&] { train::Trainer t(c, false, &w()); }).find("smaller than the 2 processes"),
            std::string::npos);
}

namespace {

train::CompareConfig tiny_compare(const std::string& corpus, const std::string& out) {
  train::CompareConfig c = train::compare_preset("tiny");
  c.base.corpus = corpus;
  c.base.threads = 1;
  c.methods = {"rope", "alibi"};
  c.seeds = {1, 2};
  c.out_dir = out;
  c.of<train::PasskeyConfig>().iters =
      0;  // this corpus lacks the passkey template's letters (the test is test_compare's)
  // The addition study's own units are distributed in the first test only, so that the others count
  // decoder (and encoder) units alone.
  c.of<train::AdditionSettings>().iters = 0;
  return c;
}

}  // namespace

TEST(DistributedCompare, ResultsCsvIsByteIdenticalToOneProcess) {
  SharedDir d;
  const std::string corpus = posgrad::test::write_corpus(d);
  // With the addition study's own units (its tiny settings: 2 seeds per method), distributed too.
  auto with_addition = [&](const std::string& out) {
    train::CompareConfig c = tiny_compare(corpus, out);
    c.of<train::AdditionSettings>().iters = train::compare_preset("tiny").of<train::AdditionSettings>().iters;
    return c;
  };
  ASSERT_GT(with_addition(d.str("x")).of<train::AdditionSettings>().iters, 0);
  if (w().is_root()) {  // the single-process run, on rank 0 alone
    auto single = dist::make_single_communicator();
    train::run_compare(with_addition(d.str("one")), single.get());
  }
  w().barrier();
  const std::string report = train::run_compare(with_addition(d.str("two")), &w());
  EXPECT_EQ(report.empty(), !w().is_root());
  w().barrier();
  if (w().is_root()) {
    const std::string one = read_file(d.str("one/results.csv")), two = read_file(d.str("two/results.csv"));
    EXPECT_EQ(one, two) << "results.csv differs between 1 and 2 processes";
    EXPECT_EQ(read_file(d.str("one/addition.csv")), read_file(d.str("two/addition.csv")))
        << "addition.csv differs between 1 and 2 processes";
    EXPECT_NE(one.find("\nalibi,val_perplexity,2,"), std::string::npos);
    EXPECT_TRUE(fs::exists(d.str("two/report.md")));
    EXPECT_TRUE(fs::exists(d.str("two/cost.csv")));
  }
}

TEST(DistributedCompare, EncoderUnitsAreSharedToo) {
  // --track both: the 4 decoder units and the 4 encoder units are one list, round-robin over the two
  // processes (compare/compare_dist.h), so rank 1 trains encoders too; every output is the same.
  SharedDir d;
  const std::string corpus = posgrad::test::write_corpus(d);
  auto both = [&](const std::string& out) {
    train::CompareConfig c = tiny_compare(corpus, out);
    c.track = "both";
    return c;
  };
  const auto units = train::experiment_units(both(d.str("x")));
  ASSERT_EQ(units.size(), 8u);
  EXPECT_EQ(units[5].study, "encoder");
  EXPECT_EQ(train::unit_owner(5, 2), 1);
  if (w().is_root()) {
    auto single = dist::make_single_communicator();
    train::run_compare(both(d.str("one")), single.get());
  }
  w().barrier();
  (void)train::run_compare(both(d.str("two")), &w());
  w().barrier();
  if (w().is_root()) {
    for (const char* f : {"results.csv", "encoder_results.csv", "pi.csv", "suite.csv"})
      EXPECT_EQ(read_file(d.str(std::string("one/") + f)), read_file(d.str(std::string("two/") + f)))
          << f << " differs between 1 and 2 processes";
  }
}

TEST(DistributedCompare, AFailedUnitIsNamedAndTheOthersAreKept) {
  SharedDir d;
  const std::string corpus = posgrad::test::write_corpus(d);
  // Unit 2 of 4 (alibi, seed 1) belongs to rank 1; a corrupt checkpoint makes it fail there, when it
  // resumes (a corrupt result.json would be refused before any unit runs: check_kept_units).
  if (w().is_root()) {
    fs::create_directories(d.str("bad/alibi/seed1/checkpoint"));
    std::ofstream(d.str("bad/alibi/seed1/checkpoint/state.json")) << "{not json";
  }
  w().barrier();
  const train::CompareConfig c = tiny_compare(corpus, d.str("bad"));
  if (w().is_root()) {
    const std::string msg = thrown_message<IoError>([&] { train::run_compare(c, &w()); });
    EXPECT_NE(msg.find("unit 2/4 (alibi seed 1) failed on rank 1: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("alibi/seed1/checkpoint"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 of 4 units finished and are kept"), std::string::npos) << msg;
    EXPECT_TRUE(fs::exists(d.str("bad/rope/seed1/result.json")));
    EXPECT_TRUE(fs::exists(d.str("bad/rope/seed2/result.json")));
    EXPECT_FALSE(fs::exists(d.str("bad/results.csv")));
  } else {
    EXPECT_EQ(train::run_compare(c, &w()), "");  // rank 1 sent its failure and is done
  }
}

POSGRAD_MPI_TEST_MAIN()
