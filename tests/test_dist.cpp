// test_dist.cpp — the communicator layer in one process: the single-process communicator (every
// collective the identity, bad input refused with a message), the rank-ordered sum of all_reduce_sum
// (on a communicator that pretends to be rank 1 of 3 and is handed fixed buffers, so that the
// association (x0 + x1) + x2 shows in float32), how a process decides to start MPI, the
// data-parallel slicing of a global batch, the comparison's unit order and owners, and the tool under
// `mpirun -np 2` (where this build has MPI): one run directory written once, resume, a refused batch.
// The collectives across processes are tests/mpi/ (CTest mpi.*, run with mpirun -np 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "compare/compare_dist.h"
#include "data/fileio.h"
#include "dist/communicator.h"
#include "support/process.h"
#include "support/test_util.h"
#include "train/data_parallel.h"

using namespace posgrad;
using posgrad::test::thrown_message;

namespace {

// Rank 1 of 3 whose all-gather returns three fixed rows (as if ranks 0 and 2 held them).
class FakeThree final : public dist::Communicator {
 public:
  std::vector<std::vector<float>> rows;
  int rank() const override { return 1; }
  int size() const override { return 3; }
  int local_size() const override { return 3; }
  int local_rank() const override { return 1; }
  std::string name() const override { return "fake"; }
  void barrier() override {}

 protected:
  void all_gather_bytes(const void* send, void* recv, size_t nbytes, Device) override {
    EXPECT_EQ(std::memcmp(send, rows[1].data(), nbytes), 0) << "this rank's own buffer is row 1";
    for (int r = 0; r < 3; ++r) std::memcpy(static_cast<char*>(recv) + r * nbytes, rows[r].data(), nbytes);
  }
  void broadcast_bytes(void*, size_t, int, Device) override {}
  std::vector<std::string> gather_strings(const std::string&, int) override { return {}; }
};

// Sets or unsets an environment variable for one scope.
class EnvVar {
 public:
  EnvVar(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~EnvVar() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

}  // namespace

TEST(Dist, SingleCommunicatorIsTheIdentity) {
  auto c = dist::make_single_communicator();
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->name(), "single");
  EXPECT_TRUE(c->is_root());
  Tensor t = Tensor::from_vector(std::vector<float>{1.5f, -2.25f, 3.0f}, {3});
  c->all_reduce_sum(t);
  EXPECT_EQ(t.to_float_vector(), (std::vector<float>{1.5f, -2.25f, 3.0f}));
  c->broadcast(t, 0);
  EXPECT_EQ(t.to_float_vector(), (std::vector<float>{1.5f, -2.25f, 3.0f}));
  EXPECT_EQ(c->all_reduce_sum(0.1), 0.1);
  EXPECT_EQ(c->broadcast(std::string("abc"), 0), "abc");
  EXPECT_EQ(c->gather("xyz", 0), (std::vector<std::string>{"xyz"}));
  c->barrier();
}

TEST(Dist, BadTensorsAndRootsAreRefusedWithAMessage) {
  auto c = dist::make_single_communicator();
  Tensor ints = Tensor::from_ints({1, 2}, {2});
  EXPECT_NE(thrown_message<ValueError>([&] { c->all_reduce_sum(ints); }).find("float32 or float64"), std::string::npos);
  Tensor strided = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2}).t();
  EXPECT_NE(thrown_message<ValueError>([&] { c->all_reduce_sum(strided); }).find("contiguous"), std::string::npos);
  Tensor undefined;
  EXPECT_NE(thrown_message<ValueError>([&] { c->broadcast(undefined, 0); }).find("undefined"), std::string::npos);
  Tensor t = Tensor::zeros({2});
  EXPECT_NE(thrown_message<ValueError>([&] { c->broadcast(t, 1); }).find("root 1 is not a rank"), std::string::npos);
  EXPECT_NE(thrown_message<ValueError>([&] { c->gather("x", -1); }).find("root -1"), std::string::npos);
}

TEST(Dist, AllReduceSumAddsInRankOrder) {
  FakeThree c;
  // float32: (1e8 + 1) + -1e8 = 0 (1e8 + 1 rounds to 1e8), whereas 1e8 + (1 + -1e8) = 8 and
  // (1e8 + -1e8) + 1 = 1: only the rank-order association gives 0.
  c.rows = {{1e8f, 0.5f}, {1.0f, 0.25f}, {-1e8f, 0.125f}};
  Tensor t = Tensor::from_vector(c.rows[1], {2});
  c.all_reduce_sum(t);
  const std::vector<float> got = t.to_float_vector();
  EXPECT_EQ(got[0], (1e8f + 1.0f) + -1e8f);
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[1], 0.875f);
}

TEST(Dist, LaunchFollowsTheEnvironment) {
  EnvVar a("POSGRAD_DIST", nullptr), b("OMPI_COMM_WORLD_SIZE", nullptr), c("PMI_RANK", nullptr),
      d("PMIX_RANK", nullptr);
  EXPECT_EQ(dist::launch_from_environment(), dist::Launch::Single);
  EXPECT_EQ(dist::launch_reason(), "");
  {
    EnvVar slurm("SLURM_PROCID", "0");  // a batch script's shell: not a launched process
    EXPECT_EQ(dist::launch_from_environment(), dist::Launch::Single);
  }
  {
    EnvVar ompi("OMPI_COMM_WORLD_SIZE", "2");
    EXPECT_EQ(dist::launch_from_environment(), dist::Launch::Mpi);
    EXPECT_EQ(dist::launch_reason(), "OMPI_COMM_WORLD_SIZE=2");
    EnvVar single("POSGRAD_DIST", "single");
    EXPECT_EQ(dist::launch_from_environment(), dist::Launch::Single);
  }
  {
    EnvVar pmix("PMIX_RANK", "0");
    EXPECT_EQ(dist::launch_from_environment(), dist::Launch::Mpi);
  }
  {
    EnvVar forced("POSGRAD_DIST", "mpi");
    EXPECT_EQ(dist::launch_from_environment(), dist::Launch::Mpi);
  }
  EnvVar bad("POSGRAD_DIST", "gloo");
  EXPECT_NE(thrown_message<UsageError>([] { dist::launch_from_environment(); }).find("POSGRAD_DIST is 'gloo'"),
            std::string::npos);
}

TEST(Dist, WorldIsSingleWithoutALauncher) {
  EXPECT_EQ(dist::world().size(), 1);
  EXPECT_EQ(dist::world().name(), "single");
  EXPECT_GE(dist::default_threads(), 1);
}

TEST(DataParallel, EachRankTakesAContiguousSliceOfTheGlobalBatch) {
  FakeThree c;  // rank 1 of 3
  train::DataParallel dp(c, 8);
  EXPECT_EQ(dp.first_row(), 2);  // rows 0-1, 2-4, 5-7
  EXPECT_EQ(dp.rows(), 3);
  EXPECT_DOUBLE_EQ(dp.loss_weight(), 3.0 / 8.0);
  std::vector<int64_t> ids(8 * 4);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  Tensor x = Tensor::from_ints(ids, {8, 4});
  auto [sx, sy] = dp.slice({x, x});
  ASSERT_EQ(sx.shape(), (Shape{3, 4}));
  EXPECT_EQ(sx.to_int_vector().front(), 8);  // row 2
  EXPECT_EQ(sy.to_int_vector().back(), 19);  // row 4
  EXPECT_EQ(dp.global_tokens(3 * 4), 8 * 4);
  Tensor wrong = Tensor::from_ints(std::vector<int64_t>(12, 0), {3, 4});
  EXPECT_NE(thrown_message<ValueError>([&] {
              dp.slice({wrong, wrong});
            }).find("expected x and y of 8 rows"),
            std::string::npos);
  EXPECT_NE(
      thrown_message<UsageError>([&] { train::DataParallel small(c, 2); }).find("--batch-size 2 is smaller than the 3"),
      std::string::npos);
}

TEST(CompareDist, UnitsKeepTheSingleProcessOrderAndGoRoundRobin) {
  const auto units = train::compare_units({"rope", "alibi"}, {1, 2});
  ASSERT_EQ(units.size(), 4u);
  EXPECT_EQ(units[0].method, "rope");
  EXPECT_EQ(units[0].seed, 1u);
  EXPECT_EQ(units[1].method, "alibi");
  EXPECT_EQ(units[2].seed, 2u);
  EXPECT_EQ(train::unit_owner(0, 2), 0);
  EXPECT_EQ(train::unit_owner(3, 2), 1);
  EXPECT_EQ(train::unit_owner(5, 1), 0);
}

// The time left is estimated per method within a kind of unit: a RoPE unit (its studies: PI,
// passkey) by another RoPE seed, a method not timed yet by its kind's mean, another kind not at all.
TEST(CompareDist, UnitTimesEstimateAUnitByItsMethodThenByItsKind) {
  train::UnitTimes t;
  EXPECT_TRUE(t.empty());
  EXPECT_FALSE(t.estimate({"rope", 2, ""}).has_value());
  t.add({"rope", 1, ""}, 100);
  t.add({"none", 1, ""}, 10);
  t.add({"none", 2, ""}, 20);
  EXPECT_FALSE(t.empty());
  EXPECT_DOUBLE_EQ(*t.estimate({"rope", 2, ""}), 100);
  EXPECT_DOUBLE_EQ(*t.estimate({"none", 3, ""}), 15);
  EXPECT_DOUBLE_EQ(*t.estimate({"alibi", 1, ""}), (100 + 10 + 20) / 3.0);  // the decoder units' mean
  EXPECT_FALSE(t.estimate({"rope", 1, "encoder"}).has_value());            // another kind: not guessed
  t.add({"alibi", 1, "encoder"}, 4);
  EXPECT_DOUBLE_EQ(*t.estimate({"rope", 1, "encoder"}), 4);
  EXPECT_DOUBLE_EQ(*t.estimate({"rope", 3, ""}), 100);  // the encoder unit is not a decoder RoPE unit
}

#ifndef POSGRAD_TEST_MPIEXEC
#define POSGRAD_TEST_MPIEXEC ""
#endif

namespace {

// `mpiexec -np 2 posgrad args` (as root too, on a machine with fewer cores than processes).
test::Proc run_launched(const std::string& args, const test::TempDir& cwd) {
  const std::string cmd = "cd '" + cwd.str() + "' && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '" +
                          std::string(POSGRAD_TEST_MPIEXEC) + "' -np 2 --oversubscribe '" + test::bin_path() + "' " +
                          args + " >out.txt 2>err.txt </dev/null";
  test::Proc p;
  p.status = test::decode_status(std::system(cmd.c_str()));
  p.out = test::slurp(cwd.str("out.txt"));
  p.err = test::slurp(cwd.str("err.txt"));
  return p;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(MpiLaunch, TrainWritesOnceResumesAndRefusesASmallBatch) {
  if (!dist::mpi_built() || std::string(POSGRAD_TEST_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  POSGRAD_REQUIRE_BIN();
  test::TempDir d;
  {
    std::ofstream corpus(d.str("corpus.txt"));
    for (int i = 0; i < 300; ++i)
      corpus << "in the beginning " << (i % 9) << " was the word, and the word " << (i % 4) << ".\n";
  }
  // The tiny preset: 20 steps, progress at steps 1, 5, 10, 15, 20, evaluation at 10 and 20.
  test::Proc p = run_launched("train --preset tiny --corpus corpus.txt --out-dir run --threads 1", d);
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.err.find("[rank 0/2]"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("data-parallel: 2 processes (mpi)"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("[rank 1/2] info"), std::string::npos) << "rank 1 logs progress too:\n" << p.err;
  const std::string metrics = read_file(d.str("run/metrics.jsonl"));
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n'), 7) << "metrics.jsonl written more than once?\n"
                                                                 << metrics;
  // Resume to 30 steps: 2 more progress lines and 1 more evaluation.
  p = run_launched("train --out-dir run --resume --max-iters 30", d);
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.err.find("resumed run at step 20"), std::string::npos) << p.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(d.str("run/checkpoint/state.json"))).at("step").get<int64_t>(), 30);
  EXPECT_EQ(std::count(metrics.begin(), metrics.end(), '\n') + 3, [&] {
    const std::string m = read_file(d.str("run/metrics.jsonl"));
    return std::count(m.begin(), m.end(), '\n');
  }());
  // info names the job.
  p = run_launched("info", d);
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.out.find("processes    : 2 (mpi, this one rank 1;"), std::string::npos) << p.out;
  // A global batch of 1 cannot be shared by 2 processes: usage error (2), naming the rank.
  p = run_launched("train --preset tiny --corpus corpus.txt --out-dir small --batch-size 1", d);
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_NE(p.err.find("--batch-size 1 is smaller than the 2 processes"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("posgrad: error: [rank "), std::string::npos) << p.err;
}

// An MPMD command line that gives the two ranks different options: every rank refuses alike (usage
// error, 2, said once by rank 0, no MPI_Abort) naming the option, before anything is written; the
// OpenMP threads may differ.
TEST(MpiLaunch, RanksGivenDifferentConfigurationsRefuseAlike) {
  if (!dist::mpi_built() || std::string(POSGRAD_TEST_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  POSGRAD_REQUIRE_BIN();
  test::TempDir d;
  {
    std::ofstream corpus(d.str("corpus.txt"));
    for (int i = 0; i < 300; ++i) corpus << "in the beginning " << (i % 9) << " was the word.\n";
  }
  std::string common = " train --preset tiny --corpus corpus.txt --max-iters 2 --out-dir run";
  auto mpmd = [&](const std::string& a, const std::string& b) {
    const std::string cmd = "cd '" + d.str() + "' && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 '" +
                            std::string(POSGRAD_TEST_MPIEXEC) + "' --oversubscribe -np 1 '" + test::bin_path() + "'" +
                            common + a + " : -np 1 '" + test::bin_path() + "'" + common + b +
                            " >out.txt 2>err.txt </dev/null";
    test::Proc p;
    p.status = test::decode_status(std::system(cmd.c_str()));
    p.err = test::slurp(d.str("err.txt"));
    return p;
  };
  test::Proc p = mpmd(" --lr 1e-3 --threads 1", " --lr 2e-3 --threads 1");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_EQ(count_of(p.err, "given different configurations: lr is 0.001 on rank 0 but 0.002 on rank 1"), 1u) << p.err;
  EXPECT_EQ(count_of(p.err, "MPI_ABORT"), 0u) << p.err;
  EXPECT_FALSE(std::filesystem::exists(d.str("run/checkpoint"))) << "a rank trained";
  p = mpmd(" --threads 1", " --threads 2");  // a per-process setting
  EXPECT_EQ(p.status, 0) << p.err;
  // compare: the same, with the threads and the jobs of each process its own.
  common =
      " compare --preset tiny --methods rope --corpus corpus.txt --passkey-iters 0 --addition-iters 0 --out-dir cmp";
  p = mpmd(" --seeds 1,2 --threads 1", " --seeds 1,3 --threads 1");
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_EQ(count_of(p.err, "given different configurations: seeds is [1,2] on rank 0 but [1,3] on rank 1"), 1u)
      << p.err;
  EXPECT_FALSE(std::filesystem::exists(d.str("cmp/rope"))) << "a rank trained";
  p = mpmd(" --seeds 1,2 --threads 1 --jobs 1", " --seeds 1,2 --threads 2 --jobs 2");
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_TRUE(std::filesystem::exists(d.str("cmp/results.csv"))) << p.err;
}

// eval, sample, fill-mask and report run in one process: under a launcher each rank would do the same
// work and write the same files, so they refuse (usage error, 2) before reading anything. Every rank
// refuses alike, so the job ends without MPI_Abort (which can lose the message) and rank 0 says it once.
TEST(MpiLaunch, SingleProcessCommandsRefuseALauncher) {
  if (!dist::mpi_built() || std::string(POSGRAD_TEST_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  POSGRAD_REQUIRE_BIN();
  test::TempDir d;
  for (const char* args : {"report somewhere", "eval --run somewhere", "sample --run somewhere",
                           "fill-mask --run somewhere --text 'a_c' --mask-char _"}) {
    const test::Proc p = run_launched(args, d);
    EXPECT_EQ(p.status, 2) << args << "\n" << p.err;
    EXPECT_EQ(count_of(p.err, "runs in one process"), 1u) << args << "\n" << p.err;
    EXPECT_EQ(count_of(p.err, "MPI_ABORT"), 0u) << args << "\n" << p.err;
    EXPECT_FALSE(std::filesystem::exists(d.str("somewhere"))) << args;
  }
  // A command line that cannot be parsed fails alike on every rank: the same normal ending.
  const test::Proc p = run_launched("train --no-such-option 3", d);
  EXPECT_EQ(p.status, 2) << p.err;
  EXPECT_EQ(count_of(p.err, "--no-such-option"), 1u) << p.err;
  EXPECT_EQ(count_of(p.err, "MPI_ABORT"), 0u) << p.err;
}
