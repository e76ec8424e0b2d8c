// mpi_collectives.cpp — the MPI communicator between two processes (mpirun -np 2): rank and size,
// all_reduce_sum in float32 and float64 equal on both ranks to x0 + x1 computed here and bit-identical
// between the ranks, a CUDA-less broadcast of a tensor and of strings, a gather of strings of
// different lengths (an empty one included), the barrier, and bad input refused on every rank
// before any collective starts.
#include <cstring>

#include "mpi_support.h"

using namespace posgrad;
using posgrad::test::thrown_message;

namespace {

dist::Communicator& w() { return dist::world(); }

// The values rank r contributes: not exactly representable sums, so rounding shows.
std::vector<double> values_of(int r) { return {0.1 * (r + 1), -1.0 / 3.0 + r, 1e-8 * (r + 7), 12345.678 * (r + 1)}; }

std::string bytes_of(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
}

}  // namespace

TEST(MpiCommunicator, RankSizeAndName) {
  EXPECT_EQ(w().size(), 2);
  EXPECT_TRUE(w().rank() == 0 || w().rank() == 1);
  EXPECT_EQ(w().name(), "mpi");
  EXPECT_GE(w().local_size(), 1);
  EXPECT_LE(w().local_size(), 2);
}

TEST(MpiCommunicator, AllReduceSumIsTheRankOrderSumOnEveryRank) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor t = Tensor::from_vector(values_of(w().rank()), {2, 2}, dt);
    w().all_reduce_sum(t);
    const Tensor a = Tensor::from_vector(values_of(0), {4}, dt), b = Tensor::from_vector(values_of(1), {4}, dt);
    for (int64_t i = 0; i < 4; ++i) {
      if (dt == DType::Float32) {
        EXPECT_EQ(t.data<float>()[i], a.data<float>()[i] + b.data<float>()[i]) << i;
      } else {
        EXPECT_EQ(t.data<double>()[i], a.data<double>()[i] + b.data<double>()[i]) << i;
      }
    }
    const auto all = w().gather(bytes_of(t), 0);
    if (w().is_root()) {
      EXPECT_EQ(all.at(0), all.at(1)) << "the ranks hold different bits";
    }
  }
  EXPECT_EQ(w().all_reduce_sum(0.1 + w().rank()), 0.1 + (0.1 + 1.0));
}

TEST(MpiCommunicator, BroadcastGatherAndBarrier) {
  Tensor t = Tensor::from_vector(std::vector<double>{1.0 + w().rank(), 2.0}, {2}, DType::Float64);
  w().broadcast(t, 1);
  EXPECT_EQ(t.to_vector(), (std::vector<double>{2.0, 2.0}));
  Tensor ids = Tensor::from_ints({w().rank() * 10, 5}, {2});
  w().broadcast(ids, 0);
  EXPECT_EQ(ids.to_int_vector(), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(w().broadcast(w().is_root() ? std::string("from rank 0") : std::string("ignored"), 0), "from rank 0");
  const std::string mine = w().is_root() ? std::string() : std::string(100000, 'x');
  const auto all = w().gather(mine, 0);
  if (w().is_root()) {
    EXPECT_EQ(all.size(), 2u);
    EXPECT_EQ(all.at(0), "");
    EXPECT_EQ(all.at(1), std::string(100000, 'x'));
  } else {
    EXPECT_TRUE(all.empty());
  }
  const auto to_one = w().gather("rank " + std::to_string(w().rank()), 1);
  if (w().rank() == 1) {
    EXPECT_EQ(to_one, (std::vector<std::string>{"rank 0", "rank 1"}));
  }
  w().barrier();
}

TEST(MpiCommunicator, BadInputIsRefusedOnEveryRankBeforeAnyCollective) {
  Tensor t = Tensor::zeros({3});
  EXPECT_NE(thrown_message<ValueError>([&] { w().broadcast(t, 2); }).find("root 2 is not a rank of this job (0 .. 1)"),
            std::string::npos);
  Tensor ints = Tensor::from_ints({1}, {1});
  EXPECT_NE(thrown_message<ValueError>([&] { w().all_reduce_sum(ints); }).find("float32 or float64"),
            std::string::npos);
  w().barrier();  // both ranks are still in step
}

POSGRAD_MPI_TEST_MAIN()
