// test_nccl.cpp — the NCCL communicator in one process (a job of one rank, bootstrapped over the
// single-process communicator): CUDA tensors summed, broadcast and gathered on the device, CPU
// tensors and strings through the host communicator. SKIPPED where posgrad was built without NCCL
// or no GPU is present. Several ranks need several GPUs (NCCL refuses two ranks on one device).
#include <gtest/gtest.h>

#include "dist/communicator.h"
#include "dist/nccl_communicator.h"
#include "support/test_util.h"

using namespace posgrad;

TEST(Nccl, OneRankCollectivesOnTheDevice) {
  if (!dist::nccl_built()) GTEST_SKIP() << "built without NCCL (it is built beside the CUDA backend)";
  POSGRAD_REQUIRE_CUDA();
#if POSGRAD_HAVE_NCCL
  auto host = dist::make_single_communicator();
  auto c = dist::make_nccl_communicator(*host);
  EXPECT_EQ(c->name(), "nccl");
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->rank(), 0);
  for (DType dt : {DType::Float32, DType::Float64}) {
    Tensor t = Tensor::from_vector(std::vector<double>{0.5, -1.25, 3.0}, {3}, dt).to(Device::cuda(0));
    c->all_reduce_sum(t);
    EXPECT_EQ(t.to_vector(), (std::vector<double>{0.5, -1.25, 3.0}));
    c->broadcast(t, 0);
    EXPECT_EQ(t.to_vector(), (std::vector<double>{0.5, -1.25, 3.0}));
  }
  Tensor cpu = Tensor::from_vector(std::vector<float>{2.0f}, {1});
  c->all_reduce_sum(cpu);
  EXPECT_EQ(cpu.item(), 2.0);
  EXPECT_EQ(c->gather("abc", 0), (std::vector<std::string>{"abc"}));
  EXPECT_EQ(c->broadcast(std::string("xy"), 0), "xy");
  c->barrier();
#endif
}

// A job of one process keeps its host communicator, whatever the build.
TEST(Nccl, DeviceCommunicatorOfOneProcessIsTheHost) {
  auto host = dist::make_single_communicator();
  const dist::DeviceCommunicator d = dist::make_device_communicator(*host);
  EXPECT_EQ(d.comm, nullptr);
  EXPECT_EQ(d.why, "one process");
}
