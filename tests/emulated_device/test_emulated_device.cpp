// test_emulated_device.cpp — the emulated CUDA device itself (fake_device.h), and what only it can
// show without a GPU: the CUDA path of the library runs through the emulated kernels; the fake
// runtime refuses what a driver refuses (a kernel handed host memory, a copy out of its block or
// against its declared direction); backend.cu's caching allocator reuses blocks and, when cudaMalloc
// fails, releases its cache and retries once; and a training step on the device makes no host round
// trip beyond the batch upload and one read (the loss and the gradient norm together), counted.
// The rest of this program is test_cuda.cpp, test_cuda_train.cpp and test_op_registry.cpp's
// CudaMatchesCpu, compiled again against the emulated device (CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "emulated_device/fake_device.h"
#include "nn/gpt.h"
#include "support/test_util.h"
#include "tensor/kernels/kernels.h"
#include "tensor/storage.h"
#include "train/optim.h"
#include "train/trainer.h"

using namespace posgrad;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A small GPT: vocabulary 29, context 16, 2 heads.
nn::GPTConfig small_gpt(const std::string& kind, int64_t n_layer, int64_t n_embd) {
  nn::GPTConfig mc;
  mc.vocab_size = 29;
  mc.block_size = 16;
  mc.n_layer = n_layer;
  mc.n_head = 2;
  mc.n_embd = n_embd;
  mc.pos.kind = kind;
  return mc;
}

// Batches (2, 16) of random ids for small_gpt; the targets are the next id (learnable) when
// `next_id`, else random too.
train::BatchFn small_batches(Generator& data, bool next_id) {
  return [&data, next_id] {
    std::vector<int64_t> xs(2 * 16), ys(2 * 16);
    for (auto& v : xs) v = static_cast<int64_t>(data.next_u64() % 29);
    for (size_t i = 0; i < ys.size(); ++i)
      ys[i] = next_id ? (xs[i] + 1) % 29 : static_cast<int64_t>(data.next_u64() % 29);
    return std::make_pair(Tensor::from_ints(xs, {2, 16}), Tensor::from_ints(ys, {2, 16}));
  };
}

double largest(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}
// The share of entries where a and b differ by more than tol.
double share_beyond(const Tensor& a, const Tensor& b, double tol) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  size_t n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += std::fabs(x[i] - y[i]) > tol;
  return x.empty() ? 0.0 : static_cast<double>(n) / static_cast<double>(x.size());
}
double largest_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::fabs(x[i] - y[i]));
  return m;
}

}  // namespace

TEST(EmulatedDevice, RunsTheLibrarysCudaPathThroughTheEmulatedKernels) {
  ASSERT_TRUE(cuda_available());
  emu_device::reset_counters();
  Tensor a = Tensor::from_vector(std::vector<double>{1, 2, 3}, {3}).to(Device::cuda());
  Tensor b = Tensor::from_vector(std::vector<double>{10, 20, 30}, {3}).to(Device::cuda());
  Tensor c = a * b + a;
  EXPECT_TRUE(c.device().is_cuda());
  EXPECT_EQ(c.to(Device::cpu()).to_vector(), (std::vector<double>{11, 42, 93}));
  const emu_device::Counters n = emu_device::counters();
  EXPECT_GE(n.launches, 2) << "the multiply and the add ran as emulated kernel launches";
  EXPECT_EQ(n.h2d, 2);
  EXPECT_EQ(n.d2h, 1);
}

TEST(EmulatedDevice, KernelGivenHostMemoryThrowsAsTheGpuWouldFault) {
  std::vector<float> host(16, 0.f);
  try {
    kernels::cuda::fill<float>(host.data(), 16, 1.f);
    FAIL() << "a CUDA kernel ran on host memory";
  } catch (const DeviceError& e) {
    EXPECT_TRUE(contains(e.what(), "fill")) << e.what();
    EXPECT_TRUE(contains(e.what(), "host memory")) << e.what();
  }
  Tensor dev = Tensor::zeros({16}, DType::Float32, Device::cuda());
  // cuBLAS too: a device C with a host A.
  EXPECT_THROW(kernels::cuda::gemm<float>(dev.data<float>(), host.data(), dev.data<float>(), 4, 4, 1, 4, 1, 4, false,
                                          false, 1.f, 0.f),
               DeviceError);
}

TEST(EmulatedDevice, CopiesAreCheckedLikeTheDriverDoes) {
  DeviceBackend& be = backend(DeviceType::CUDA);
  void* d = be.allocate(64);
  std::vector<char> h(256, 1);
  // Within the block, each direction.
  be.copy(d, Device::cuda(), h.data(), Device::cpu(), 64);
  be.copy(h.data(), Device::cpu(), d, Device::cuda(), 64);
  // Past the end of the block (rounded to 512 bytes by the caching allocator): refused.
  EXPECT_THROW(be.copy(d, Device::cuda(), h.data(), Device::cpu(), 256 + 512), DeviceError);
  // A "device" side that is host memory: refused, naming the call.
  try {
    be.copy(h.data(), Device::cuda(), h.data() + 64, Device::cpu(), 16);
    FAIL() << "a host-to-host copy passed as a device copy";
  } catch (const DeviceError& e) {
    EXPECT_TRUE(contains(e.what(), "cudaMemcpyAsync")) << e.what();
  }
  be.deallocate(d, 64);
}

TEST(EmulatedDevice, FreshDeviceMemoryIsNaNSoAnUnwrittenReadShows) {
  // A size of its own (12 MiB bucket), so the block is a fresh cudaMalloc, not one the cache hands back.
  emu_device::reset_counters();
  Tensor t = Tensor::empty({3 << 20}, DType::Float32, Device::cuda());
  ASSERT_EQ(emu_device::counters().mallocs, 1);
  const std::vector<double> v = t.narrow(0, 0, 4).to(Device::cpu()).to_vector();
  for (double x : v) EXPECT_TRUE(std::isnan(x));
}

TEST(EmulatedDevice, AllocatorReleasesItsCacheAndRetriesWhenCudaMallocFails) {
  DeviceBackend& be = backend(DeviceType::CUDA);
  // First empty the cache: with no room at all, cudaMalloc fails, the cache goes back (however
  // many blocks earlier tests left in it), the retry fails too, and the request is refused.
  emu_device::set_memory_limit(0);
  EXPECT_THROW((void)be.allocate(1000), OutOfMemoryError);
  const size_t live = emu_device::device_bytes();  // now exactly the blocks of live tensors
  EXPECT_EQ(live, be.current_bytes());
  constexpr size_t kBlock = size_t(4) << 20;  // rounded to 2 MiB steps: exactly 4 MiB
  emu_device::set_memory_limit(live + kBlock + kBlock / 4);
  void* a = be.allocate(kBlock);
  be.deallocate(a, kBlock);  // cached: still cudaMalloc'd
  EXPECT_EQ(emu_device::device_bytes(), live + kBlock);
  emu_device::reset_counters();
  // A different size: the cache has no block of it and the limit leaves no room beside the cached
  // one, so the first cudaMalloc fails, the cache is returned (one cudaFree) and the retry succeeds.
  void* b = be.allocate(kBlock / 2);
  const emu_device::Counters n = emu_device::counters();
  EXPECT_EQ(n.frees, 1);
  EXPECT_EQ(n.mallocs, 1);
  // Beyond the limit altogether: OutOfMemoryError, naming CUDA and the request.
  try {
    (void)be.allocate(2 * kBlock);
    FAIL() << "an allocation beyond the device memory succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_TRUE(contains(e.what(), "CUDA out of memory")) << e.what();
    EXPECT_TRUE(contains(e.what(), std::to_string(2 * kBlock))) << e.what();
  }
  be.deallocate(b, kBlock / 2);
  emu_device::set_memory_limit(std::numeric_limits<size_t>::max());
}

TEST(EmulatedDevice, OpsRefuseInputsOnTwoDevices) {
  Tensor x = Tensor::zeros({3, 3}, DType::Float32, Device::cuda());
  try {
    (void)masked_fill(x, causal_mask(3), -1.0);  // the mask left on the CPU
    FAIL() << "masked_fill ran with its mask on another device";
  } catch (const DeviceError& e) {
    EXPECT_TRUE(contains(e.what(), "masked_fill")) << e.what();
    EXPECT_TRUE(contains(e.what(), "input 1 is on cpu")) << e.what();
  }
  EXPECT_NO_THROW((void)masked_fill(x, causal_mask(3, Device::cuda()), -1.0));
}

// Ids and targets on the GPU are checked by the kernels, not read back: a bad one makes the forward
// return (its row NaN) and is raised, naming it, at the next read to the host.
TEST(EmulatedDevice, BadIdsAndTargetsAreRaisedAtTheNextSynchronisation) {
  Tensor table = Tensor::ones({5, 3}, DType::Float32, Device::cuda());
  Tensor ids = Tensor::from_ints({1, 7, 2}, {3}).to(Device::cuda());
  Tensor y = embedding(table, ids);  // no throw yet: nothing was read
  try {
    (void)y.to(Device::cpu());
    FAIL() << "an out-of-range id passed";
  } catch (const IndexError& e) {
    EXPECT_TRUE(contains(e.what(), "embedding: id 7 at position 1 is out of range for vocab size 5")) << e.what();
  }
  // Reported once: the record is cleared, and a clean read passes.
  EXPECT_EQ(embedding(table, Tensor::from_ints({4}, {1}).to(Device::cuda())).to(Device::cpu()).to_vector(),
            (std::vector<double>{1, 1, 1}));
  Tensor logits = Tensor::zeros({2, 4}, DType::Float32, Device::cuda());
  Tensor loss = cross_entropy(logits, Tensor::from_ints({3, -2}, {2}).to(Device::cuda()));
  try {
    (void)loss.item();
    FAIL() << "an out-of-range target passed";
  } catch (const IndexError& e) {
    EXPECT_TRUE(contains(e.what(), "cross_entropy: target -2 at row 1 is out of range for 4 classes")) << e.what();
  }
  // ignore_index rows are not faults, and the mean on the device counts only the others: ln 4.
  Tensor ok = cross_entropy(logits, Tensor::from_ints({3, -100}, {2}).to(Device::cuda()));
  EXPECT_NEAR(ok.item(), std::log(4.0), 1e-6);
  Tensor none = cross_entropy(logits, Tensor::from_ints({-100, -100}, {2}).to(Device::cuda()));
  EXPECT_EQ(none.item(), 0.0);
}

// bf16 mixed precision on the device: the float products round both operands to bf16 (cublasGemmEx,
// float accumulation). Against the CPU's bf16 path (the same rounded operands, another summation
// order) they agree to float rounding; against fp32 they differ by bf16's rounding.
TEST(EmulatedDevice, Bf16ProductsRoundTheOperandsAsTheCpuPathDoes) {
  Generator g(21);
  const int64_t M = 7, N = 9, K = 40;
  for (bool batched : {false, true}) {
    Tensor a = randn({2, M, K}, g), b = randn({2, N, K}, g);  // C = A B^T: a transposed operand
    const auto product = [&](Device dev, kernels::MatmulPrecision p) {
      kernels::MatmulPrecisionScope scope(p);
      Tensor ad = a.to(dev), bd = b.to(dev);
      Tensor c = batched ? matmul(ad, bd.transpose(1, 2))
                         : matmul(ad.narrow(0, 1, 1).view({M, K}), bd.narrow(0, 1, 1).view({N, K}).t());
      return c.to(Device::cpu());
    };
    const Tensor gpu16 = product(Device::cuda(), kernels::MatmulPrecision::bf16);
    const Tensor cpu16 = product(Device::cpu(), kernels::MatmulPrecision::bf16);
    const Tensor gpu32 = product(Device::cuda(), kernels::MatmulPrecision::fp32);
    const double scale = largest(cpu16.to_vector());
    EXPECT_LE(largest_difference(gpu16, cpu16), 2e-6 * scale) << (batched ? "batched" : "single");
    // bf16 keeps 8 significant bits: operands off by up to 2^-9 relative, the products' sums by ~1e-3.
    EXPECT_GE(largest_difference(gpu16, gpu32), 1e-4 * scale) << "the bf16 path multiplied in fp32";
    EXPECT_LE(largest_difference(gpu16, gpu32), 2e-2 * scale);
  }
}

// bf16 inside the CUDA attention kernels: every product's operands (q.k, the c2p / p2c terms, P v,
// dO.v, dS k, dS q, P dO) rounded to bf16 as the CPU's GEMM rounds them in its fused attention.
// The CPU and the GPU round the same values when their running row maxima agree, which the inputs
// make sure of: key 0 scores 3 above the rest for every query (checked below), so it fixes the
// maximum in the first key tile of both and every P_ij = e^{s_ij - s_i0} is the same up to float
// rounding. Then the two bf16 paths agree to float rounding except where that rounding moves a P_ij
// across a bf16 rounding boundary (about one pair in 10^4-10^5: a handful of rows, columns or
// diagonals differ by up to bf16's step), while almost every entry differs from fp32 by bf16's. T = 100 spans four key
// tiles of the emulation and several of the CPU; causal, B = 2, H = 2, D = 16; no bias and a
// distance bias.
TEST(EmulatedDevice, Bf16AttentionRoundsTheOperandsAsTheCpuPathDoes) {
  const int64_t B = 2, H = 2, T = 100, D = 16;
  const double scale = 0.25;
  Generator g(31);
  const Tensor r = randn({B, H, 1, D}, g);
  const Tensor q = r.expand({B, H, T, D}).contiguous();
  std::vector<double> kv = (randn({B, H, T, D}, g) * 0.5).to_vector();
  const std::vector<double> rv = r.to_vector();
  for (int64_t bh = 0; bh < B * H; ++bh) {
    double n2 = 0;
    for (int64_t e = 0; e < D; ++e) n2 += rv[bh * D + e] * rv[bh * D + e];
    for (int64_t e = 0; e < D; ++e) kv[(bh * T) * D + e] = rv[bh * D + e] * 3.0 / (scale * n2);  // s_i0 = 3
  }
  const Tensor k = Tensor::from_vector(kv, {B, H, T, D}, DType::Float32);
  const Tensor v = randn({B, H, T, D}, g), w = randn({B, H, T, D}, g);
  const Tensor bias = randn({H, 2 * T - 1}, g) * 0.1;
  for (bool with_bias : {false, true}) {
    // The precondition: s_i0 exceeds every other visible score by at least 0.5 (bias included).
    const std::vector<double> bv = bias.to_vector();
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < T; ++i) {
        auto s = [&](int64_t j) {
          double d = 0;
          for (int64_t e = 0; e < D; ++e) d += rv[bh * D + e] * kv[(bh * T + j) * D + e];
          return scale * d + (with_bias ? bv[(bh % H) * (2 * T - 1) + (j - i + T - 1)] : 0.0);
        };
        for (int64_t j = 1; j <= i; ++j) ASSERT_GT(s(0) - s(j), 0.5) << bh << " " << i << " " << j;
      }
    const auto run = [&](Device dev, kernels::MatmulPrecision p) {
      kernels::MatmulPrecisionScope scope(p);
      Tensor qd = q.to(dev).detach(), kd = k.to(dev).detach(), vd = v.to(dev).detach(), bd = bias.to(dev).detach();
      for (Tensor* t : {&qd, &kd, &vd, &bd}) t->set_requires_grad(true);
      ScoreModifier m;
      if (with_bias) {
        m.kind = ScoreBias::Distance;
        m.bias_by_distance = bd;
      }
      const Tensor o = attention(qd, kd, vd, m, true, scale);
      sum(o * w.to(dev)).backward();
      std::vector<Tensor> out = {o, qd.grad(), kd.grad(), vd.grad()};
      if (with_bias) out.push_back(bd.grad());
      for (Tensor& t : out) t = t.to(Device::cpu());
      return out;
    };
    const auto gpu16 = run(Device::cuda(), kernels::MatmulPrecision::bf16);
    const auto cpu16 = run(Device::cpu(), kernels::MatmulPrecision::bf16);
    const auto gpu32 = run(Device::cuda(), kernels::MatmulPrecision::fp32);
    const char* names[] = {"O", "dq", "dk", "dv", "dbias"};
    for (size_t t = 0; t < gpu16.size(); ++t) {
      const double big = largest(cpu16[t].to_vector()), tol = 1e-5 * big;
      ASSERT_GT(big, 0) << names[t];
      const std::string what = std::string(names[t]) + (with_bias ? " (distance bias)" : "");
      EXPECT_LE(share_beyond(gpu16[t], cpu16[t], tol), 0.03) << what << ": the two bf16 paths round differently";
      EXPECT_LE(largest_difference(gpu16[t], cpu16[t]), 5e-3 * big) << what;
      EXPECT_GE(share_beyond(gpu16[t], gpu32[t], tol), 0.25) << what << ": the bf16 attention multiplied in fp32";
      EXPECT_LE(largest_difference(gpu16[t], gpu32[t]), 3e-2 * big) << what;
    }
  }
}

TEST(EmulatedDevice, Bf16TrainingOnTheDeviceStaysCloseToFp32) {
  const auto losses = [](Device dev, kernels::MatmulPrecision p) {
    kernels::MatmulPrecisionScope scope(p);
    Generator init(5), drop(6), data(7);
    nn::GPT model(small_gpt("rope", 2, 32), init, drop);
    model.to(dev);
    train::AdamW opt(train::decay_groups(model.named_parameters(), 0.1), train::AdamWOptions(3e-3));
    const train::LRSchedule sched{3e-3, 3e-4, 1, 10, true};
    const train::BatchFn batch = small_batches(data, true);
    std::vector<double> out;
    for (int64_t step = 0; step < 6; ++step)
      out.push_back(train::training_step(model, opt, sched, step, 1, 1.0, dev, batch, nullptr).loss);
    return out;
  };
  const std::vector<double> fp32 = losses(Device::cpu(), kernels::MatmulPrecision::fp32);
  const std::vector<double> bf16 = losses(Device::cuda(), kernels::MatmulPrecision::bf16);
  ASSERT_EQ(fp32.size(), bf16.size());
  EXPECT_LT(fp32.back(), fp32.front()) << "the reference run does not learn";
  bool differs = false;
  for (size_t i = 0; i < fp32.size(); ++i) {
    EXPECT_NEAR(bf16[i], fp32[i], 0.01 * fp32[i]) << "step " << i;
    differs = differs || bf16[i] != fp32[i];
  }
  EXPECT_TRUE(differs) << "bf16 on the device gave fp32's losses exactly";
}

// A training step (forward, backward, clipping, AdamW) of a small GPT on the device, after warm-up:
// the batch goes up (two copies, no wait), the loss and the gradient norm come down together (one
// copy, one wait), and nothing else crosses: no index array, table or per-parameter value is copied
// or read, and the caching allocator serves every tensor without a cudaMalloc.
class EmulatedDeviceStep : public ::testing::TestWithParam<std::string> {};

TEST_P(EmulatedDeviceStep, OnlyTheBatchUploadAndOneReadCrossTheBus) {
  Generator init(5), drop(6), data(7);
  nn::GPT model(small_gpt(GetParam(), 1, 16), init, drop);
  model.to(Device::cuda());
  train::AdamW opt(train::decay_groups(model.named_parameters(), 0.1), train::AdamWOptions(1e-3));
  const train::LRSchedule sched{1e-3, 1e-4, 1, 10, true};
  const train::BatchFn batch = small_batches(data, false);
  for (int64_t step = 0; step < 2; ++step)  // warm-up: tables, index arrays and allocator blocks
    (void)train::training_step(model, opt, sched, step, 1, 1.0, Device::cuda(), batch, nullptr);
  emu_device::reset_counters();
  const train::StepStats st = train::training_step(model, opt, sched, 2, 1, 1.0, Device::cuda(), batch, nullptr);
  const emu_device::Counters n = emu_device::counters();
  EXPECT_TRUE(std::isfinite(st.loss) && st.loss > 0) << st.loss;
  EXPECT_GT(st.grad_norm, 0);
  EXPECT_EQ(n.h2d, 2) << GetParam() << ": host-to-device copies beyond the batch's x and y";
  EXPECT_EQ(n.d2h, 1) << GetParam() << ": reads beyond the one of the loss and the gradient norm";
  EXPECT_EQ(n.syncs, 1) << GetParam() << ": host waits beyond the one read";
  EXPECT_EQ(n.mallocs, 0) << GetParam() << ": cudaMalloc inside a warmed-up step";
  EXPECT_GT(n.launches, 20) << GetParam();
}

namespace {
std::vector<std::string> device_encodings() {  // those with CUDA kernels (the others are refused by name)
  std::vector<std::string> out;
  for (const auto& kind : nn::position_encoding_kinds())
    if (!nn::position_encoding_entry(kind).cpu_only) out.push_back(kind);
  return out;
}
}  // namespace

INSTANTIATE_TEST_SUITE_P(Encodings, EmulatedDeviceStep, ::testing::ValuesIn(device_encodings()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
