// test_cuda_train.cpp — end-to-end CUDA parity: ten AdamW steps of a small GPT (five of a smaller one on the emulated
// device) with each position encoding give the same loss trajectory on CPU and CUDA (within 1e-4 relative), and the CLI
// runs train / eval / sample / compare with --device cuda. SKIPPED where no GPU is present; the no-GPU error path is
// tested in test_cuda (CudaBackend.NoDeviceGivesClearError).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "autograd/ops.h"
#include "dist/communicator.h"
#include "nn/gpt.h"
#include "support/process.h"
#include "support/test_util.h"
#include "tensor/storage.h"
#include "train/optim.h"

using namespace posgrad;

namespace {

std::vector<double> trajectory(const std::string& pos, Device dev) {
  Generator init(5), drop(6), data(7);
  nn::GPTConfig mc;
  mc.vocab_size = 37;
#ifdef POSGRAD_EMULATED_DEVICE  // the emulated device (tests/emulated_device/): the same steps, smaller
  constexpr int64_t kBatch = 2, kSteps = 5;
  mc.block_size = 16;
  mc.n_layer = 2;
  mc.n_head = 2;
  mc.n_embd = 32;
#else
  constexpr int64_t kBatch = 4, kSteps = 10;
  mc.block_size = 32;
  mc.n_layer = 2;
  mc.n_head = 4;
  mc.n_embd = 64;
#endif
  mc.pos.kind = pos;
  nn::GPT model(mc, init, drop);
  model.to(dev);
  train::AdamW opt(train::decay_groups(model.named_parameters(), 0.1), train::AdamWOptions(1e-3));
  std::vector<double> losses;
  const int64_t T = mc.block_size;
  for (int64_t step = 0; step < kSteps; ++step) {
    std::vector<int64_t> xs(kBatch * T), ys(kBatch * T);
    for (auto& v : xs) v = static_cast<int64_t>(data.next_u64() % 37);
    for (auto& v : ys) v = static_cast<int64_t>(data.next_u64() % 37);
    Tensor x = Tensor::from_ints(xs, {kBatch, T}).to(dev), y = Tensor::from_ints(ys, {kBatch, T}).to(dev);
    opt.zero_grad();
    Tensor loss = cross_entropy(model.forward(x), y);
    losses.push_back(loss.item());
    loss.backward();
    train::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
  }
  return losses;
}

}  // namespace

class CudaTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTraining, TenStepsMatchCpu) {
  POSGRAD_REQUIRE_CUDA();
  if (nn::position_encoding_entry(GetParam()).cpu_only) {  // refused by name, not run wrongly
    EXPECT_THROW(trajectory(GetParam(), Device::cuda()), DeviceError) << GetParam();
    return;
  }
  auto cpu = trajectory(GetParam(), Device::cpu());
  auto gpu = trajectory(GetParam(), Device::cuda());
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * std::fabs(cpu[i])) << GetParam() << " step " << i;
}

INSTANTIATE_TEST_SUITE_P(AllEncodings, CudaTraining, ::testing::ValuesIn(nn::position_encoding_kinds()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(CudaCli, TrainEvalSampleCompareOnCuda) {
  POSGRAD_REQUIRE_CUDA();
  namespace fs = std::filesystem;
  test::TempDir d;
  const std::string dir = d.str();
  // The shared pangram corpus: every study's text (the pass-key template among them) must be
  // encodable with the char tokenizer built from it.
  const std::string corpus = test::write_corpus(d);
  auto run = [](const std::string& args) {
    const test::Proc p = test::run_posgrad(args);
    EXPECT_EQ(p.status, 0) << "posgrad " << args << "\n" << p.err;
    return p.status;
  };
#ifdef POSGRAD_EMULATED_DEVICE  // bin is posgrad-emulated-cuda: a short run, and no full comparison
  const std::string quick = " --max-iters 4 --eval-interval 2 --eval-windows 2";
#else
  const std::string quick;
#endif
  run("train --preset tiny --device cuda --corpus " + corpus + " --out-dir " + dir + "/r" + quick);
  EXPECT_TRUE(fs::exists(dir + "/r/checkpoint/state.json"));
  run("eval --device cuda --run " + dir + "/r --contexts 16,32 --windows 2");
  run("sample --device cuda --run " + dir + "/r --tokens 10");
  // The tiny preset runs every encoding; those without a CUDA attention kernel (FIRE, FoX) are refused
  // by name before anything trains, and the others compare on the GPU.
  const test::Proc refused =
      test::run_posgrad("compare --preset tiny --device cuda --corpus " + corpus + " --out-dir " + dir + "/refused");
  EXPECT_EQ(refused.status, 2) << refused.err;
  EXPECT_NE(refused.err.find("--device cuda"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(dir + "/refused/compare_config.json"));
  std::string gpu_methods;
  for (const auto& kind : nn::position_encoding_kinds())
    if (!nn::position_encoding_entry(kind).cpu_only) gpu_methods += (gpu_methods.empty() ? "" : ",") + kind;
  const std::string compare =
      "compare --preset tiny --device cuda --methods " + gpu_methods + " --corpus " + corpus + " --out-dir " + dir;
  // Everything the run checks before it trains (the studies' settings against the corpus and the
  // device among them), here too: the emulation does not train the whole comparison.
  run(compare + "/dry --dry-run");
#ifdef POSGRAD_EMULATED_DEVICE
  return;
#endif
  run(compare + "/c");
  EXPECT_TRUE(fs::exists(dir + "/c/report.md"));
}

// `posgrad info` says how many GPUs the CUDA backend sees (the emulated device: POSGRAD_EMU_DEVICES).
TEST(CudaCli, InfoCountsTheGpus) {
  POSGRAD_REQUIRE_CUDA();
  const std::string out = "/tmp/posgrad-cuda-info.txt";
#ifdef POSGRAD_EMULATED_DEVICE
  const std::string env = "POSGRAD_EMU_DEVICES=3 ";
  const std::string want = "CUDA backend : built, 3 GPUs present (cuda:0 .. cuda:2)\n";
#else
  const std::string env;
  const int n = backend(DeviceType::CUDA).device_count();
  const std::string want =
      "CUDA backend : built, " + std::to_string(n) + (n == 1 ? " GPU present (cuda:0)\n" : " GPUs present");
#endif
  ASSERT_EQ(std::system((env + "'" + test::bin_path() + "' info >" + out + " 2>&1").c_str()), 0);
  const std::string text = test::slurp(out);
  EXPECT_NE(text.find(want), std::string::npos) << text;
  std::filesystem::remove(out);
}

#ifndef POSGRAD_TEST_MPIEXEC
#define POSGRAD_TEST_MPIEXEC ""
#endif

// `posgrad train --device cuda` under `mpiexec -np 2`: the gradients go over NCCL when every process has
// a GPU of its own on the node, else through host memory over MPI (two processes sharing one GPU, or
// POSGRAD_NCCL=0), with the same bits either way (the rank-ordered sum on the device). On the emulated
// device POSGRAD_EMU_DEVICES sets the GPUs per node and fake_nccl.h moves the bytes with MPI; on a GPU
// machine the NCCL run happens where it has two GPUs.
TEST(CudaCli, DataParallelOverNcclMatchesTheHostPath) {
  POSGRAD_REQUIRE_CUDA();
  if (!dist::mpi_built() || std::string(POSGRAD_TEST_MPIEXEC).empty()) GTEST_SKIP() << "built without MPI";
  test::TempDir d;
  {
    std::ofstream c(d.str("corpus.txt"));
    for (int i = 0; i < 300; ++i)
      c << "in the beginning " << (i % 9) << " was the word, and the word " << (i % 4) << ".\n";
  }
  auto launch = [&](const std::string& env, const std::string& out_dir) {
    const std::string cmd = "cd '" + d.str() + "' && env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " +
                            env + " '" + std::string(POSGRAD_TEST_MPIEXEC) + "' -np 2 --oversubscribe '" +
                            test::bin_path() + "' train --preset tiny --corpus corpus.txt --device cuda --threads 1" +
                            " --max-iters 4 --eval-interval 4 --eval-windows 2 --out-dir " + out_dir +
                            " >/dev/null 2>err.txt </dev/null";
    test::Proc p;
    p.status = test::decode_status(std::system(cmd.c_str()));
    p.err = test::slurp(d.str("err.txt"));
    return p;
  };
#ifdef POSGRAD_EMULATED_DEVICE
  const bool two_gpus = true;
  const std::string gpus = "POSGRAD_EMU_DEVICES=2";
#else
  const bool two_gpus = backend(DeviceType::CUDA).device_count() >= 2;
  const std::string gpus;
#endif
  test::Proc p = launch(gpus, "nccl");
  ASSERT_EQ(p.status, 0) << p.err;
  if (two_gpus) {
    EXPECT_NE(p.err.find("data-parallel: 2 processes (nccl), this one rank 0 with rows 0..1 of each batch on cuda:0"),
              std::string::npos)
        << p.err;
  } else {
    EXPECT_NE(p.err.find("not NCCL: 2 processes share 1 GPU on a node; NCCL needs one GPU per process"),
              std::string::npos)
        << p.err;
  }
  p = launch(gpus + " POSGRAD_NCCL=0", "host");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.err.find("through host memory over MPI, not NCCL: POSGRAD_NCCL=0"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("data-parallel: 2 processes (mpi)"), std::string::npos) << p.err;
  // The same bits: weights and optimizer state after 4 steps.
  for (const char* f : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string a = test::slurp(d.str(std::string("nccl/checkpoint/") + f)),
                      b = test::slurp(d.str(std::string("host/checkpoint/") + f));
    EXPECT_FALSE(a.empty()) << f;
    EXPECT_TRUE(a == b) << f << " differs between NCCL and the host path";
  }
#ifdef POSGRAD_EMULATED_DEVICE
  // Two processes on one GPU: the host path, said by rank 0 once, before anything trains.
  p = launch("POSGRAD_EMU_DEVICES=1", "shared");
  ASSERT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.err.find("not NCCL: 2 processes share 1 GPU on a node; NCCL needs one GPU per process"),
            std::string::npos)
      << p.err;
  EXPECT_NE(p.err.find("data-parallel: 2 processes (mpi)"), std::string::npos) << p.err;
#endif
}
