// bench_train.cpp — training throughput of the GPT per position encoding: tokens/s and ms per
// optimisation step (forward, backward, clip, AdamW) on random tokens, after warm-up steps, for a
// chosen model size and device. `--size compare` is a small model, `nanogpt` nanoGPT's CPU
// baseline (the quick comparison's model), `cpu` a larger CPU model (6 layers, 384 wide, context
// 256), `gpt2` a GPT-2-small-sized model (12 layers, 768 wide, 12 heads, context 1024; meant for a
// GPU). bench/reference_gpt.py measures the same models in PyTorch (bench/vs_pytorch.sh pairs them).
// --profile then runs as many steps again with the op profiler (autograd/profiler.h) and prints
// where a step's time goes: GEMMs, attention, norms, elementwise, softmax / cross-entropy, views and
// copies, gradient accumulation, the optimizer (clip + AdamW + zero_grad), and the remainder (graph
// building, the engine, allocation outside the ops).
// On the CPU each method's row is followed by a comment line with the work of the step's matrix
// products (kernels::matmul_work: 2 M N K per product, the attention's tiles as computed), per step
// and per token: the FLOPs the step really multiplies, beside the model-FLOP formulas of MFU.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <new>
#include <sstream>

#include "autograd/ops.h"
#include "autograd/profiler.h"
#include "nn/gpt.h"
#include "tensor/kernels/kernels.h"
#include "train/optim.h"
#include "train/options.h"
#include "train/threads.h"

using namespace posgrad;

namespace {

// The breakdown's category of an op (Function::kName).
std::string category(const std::string& op) {
  if (op == "matmul" || op == "linear") return "GEMM (matmul, linear)";
  if (op == "attention") return "attention";
  if (op == "layer_norm" || op == "rms_norm") return "norms";
  if (op == "add" || op == "sub" || op == "mul" || op == "div" || op == "unary" || op == "masked_fill" ||
      op == "dropout")
    return "elementwise (incl. GELU)";
  if (op == "cross_entropy" || op == "softmax" || op == "log_softmax") return "softmax / cross-entropy";
  if (op == "embedding" || op == "rope") return "embedding, rope";
  if (op == "accumulate_grad") return "gradient accumulation";
  if (op == "sum" || op == "max") return "reductions";
  return "views and copies";  // view, permute, narrow, expand, copy, cat, split, to_dtype, to_device
}

void print_profile(const std::vector<profiler::Entry>& entries, double step_ms, double optim_ms, int64_t steps) {
  std::vector<std::string> order;
  std::map<std::string, std::pair<double, double>> cat;  // forward, backward ms per step
  for (const auto& e : entries) {
    const std::string c = category(e.op);
    if (!cat.count(c)) order.push_back(c);
    cat[c].first += 1e3 * e.forward_s / double(steps);
    cat[c].second += 1e3 * e.backward_s / double(steps);
  }
  double ops = 0;
  std::printf("  %-34s %10s %10s %10s %7s\n", "where (per step)", "fwd ms", "bwd ms", "total ms", "share");
  for (const auto& c : order) {
    const double t = cat[c].first + cat[c].second;
    ops += t;
    std::printf("  %-34s %10.3f %10.3f %10.3f %6.1f%%\n", c.c_str(), cat[c].first, cat[c].second, t, 100 * t / step_ms);
    for (const auto& e : entries)  // its ops, with calls per step
      if (category(e.op) == c)
        std::printf("    %-32s %10.3f %10.3f %10.3f %7s  %lld + %lld calls\n", e.op.c_str(),
                    1e3 * e.forward_s / double(steps), 1e3 * e.backward_s / double(steps),
                    1e3 * (e.forward_s + e.backward_s) / double(steps), "", (long long)(e.forward_calls / steps),
                    (long long)(e.backward_calls / steps));
  }
  std::printf("  %-34s %10s %10s %10.3f %6.1f%%\n", "optimizer (clip, AdamW, zero_grad)", "", "", optim_ms,
              100 * optim_ms / step_ms);
  const double rest = step_ms - ops - optim_ms;
  std::printf("  %-34s %10s %10s %10.3f %6.1f%%\n", "graph, engine, allocation, other", "", "", rest,
              100 * rest / step_ms);
  std::printf("  %-34s %10s %10s %10.3f\n", "step", "", "", step_ms);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"posgrad training throughput per position encoding"};
  std::string size = "compare", device = "cpu", methods;
  for (const auto& k : nn::position_encoding_kinds()) methods += (methods.empty() ? "" : ",") + k;
  int64_t steps = 10, warmup = 2, batch = 0, threads = 0, context = 0;
  bool profile = false;
  std::string precision = "fp32";
  app.add_option("--size", size, "compare | nanogpt | cpu | gpt2")
      ->check(CLI::IsMember({"compare", "nanogpt", "cpu", "gpt2"}))
      ->capture_default_str();
  app.add_option("--device", device, "cpu or cuda[:N]")->capture_default_str();
  app.add_option("--methods", methods, "Comma-separated encodings (registered kinds)")->capture_default_str();
  app.add_option("--steps", steps, "Timed steps")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--context", context,
                 "Sequence length T of each step (0: the size's default; the comparison's cost "
                 "benchmark runs the nanogpt size at its --cost-lengths)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
  app.add_option("--batch", batch, "Sequences per step (0: the size's default)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 16));
  app.add_option("--threads", threads,
                 "OpenMP threads (0: like `posgrad train`'s default, all cores, fewer while other processes keep some "
                 "busy)")
      ->check(CLI::Range(int64_t{0}, int64_t{1024}))
      ->capture_default_str();
  app.add_option("--precision", precision,
                 "Matrix products: fp32, or bf16 mixed precision (bf16 operands, float accumulation; "
                 "train --precision)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--profile", profile, "Then run the timed steps again with the op profiler and print the breakdown");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad option or value: usage error, 2
  }
  const std::vector<std::string> kinds = nn::position_encoding_kinds();
  // Every name before any work (usage error, exit 2): no empty list, no empty item, registered kinds.
  std::vector<std::string> method_list;
  {
    if (methods.empty()) {
      std::fprintf(stderr, "bench_train: --methods is empty\n");
      return 2;
    }
    std::stringstream ss(methods + ",");  // the added comma: a trailing empty item is read too
    std::string m;
    while (std::getline(ss, m, ',')) {
      if (m.empty()) {
        std::fprintf(stderr, "bench_train: --methods has an empty item in '%s'\n", methods.c_str());
        return 2;
      }
      if (std::find(kinds.begin(), kinds.end(), m) == kinds.end()) {
        std::fprintf(stderr, "bench_train: unknown encoding '%s' in --methods (known: %s)\n", m.c_str(),
                     app.get_option("--methods")->get_default_str().c_str());
        return 2;
      }
      method_list.push_back(m);
    }
  }
  int64_t tokens_context = context;  // for the out-of-memory message: the size's context unless --context
  try {
    nn::GPTConfig mc;
    mc.vocab_size = 65;
    if (size == "compare") {
      mc.n_layer = 2, mc.n_head = 4, mc.n_embd = 64, mc.block_size = 64;
      if (!batch) batch = 16;
    } else if (size == "nanogpt") {
      mc.n_layer = 4, mc.n_head = 4, mc.n_embd = 128, mc.block_size = 64;
      if (!batch) batch = 12;
    } else if (size == "cpu") {
      mc.n_layer = 6, mc.n_head = 6, mc.n_embd = 384, mc.block_size = 256;
      if (!batch) batch = 16;
    } else if (size == "gpt2") {
      mc.n_layer = 12, mc.n_head = 12, mc.n_embd = 768, mc.block_size = 1024, mc.vocab_size = 50304;
      if (!batch) batch = 8;
    } else {
      throw UsageError("unknown --size '" + size + "' (compare, nanogpt, cpu, gpt2)");
    }
    if (context) mc.block_size = context;
    tokens_context = mc.block_size;
    // Before anything is printed: the device parses and suits every encoding (usage error, 2), it
    // exists here (exit 1), and on the CPU each model fits this machine's memory (train::estimate_memory,
    // the estimate `posgrad train` checks; exit 1). A CUDA device's own allocator reports running out.
    Device dev = Device::cpu();
    for (const auto& m : method_list) dev = train::parse_run_device(device, m);
    require_device(dev);
    if (dev.is_cpu())
      for (const auto& m : method_list) {
        train::TrainConfig tc;
        tc.model = mc;
        tc.model.pos.kind = m;
        tc.batch_size = batch;
        tc.device = "cpu";
        const long double need = train::estimate_memory(tc, mc.block_size).total();
        const uint64_t have = train::physical_memory_bytes();
        if (have > 0 && need > static_cast<long double>(have))
          throw OutOfMemoryError("out of memory: --size " + size + " with --batch " + std::to_string(batch) +
                                 " x --context " + std::to_string(mc.block_size) + " (" + m + ") needs an estimated " +
                                 train::format_bytes(need) + " but the machine has " + train::format_bytes(have) +
                                 "; reduce --batch or --context");
      }
    train::ThreadGovernor governor(threads);
    const kernels::MatmulPrecisionScope matmul_precision(kernels::parse_matmul_precision(precision));
    std::printf("# threads=%d%s, matrix products in %s%s\n", governor.threads(),
                governor.adaptive() ? " (following the load)" : "", precision.c_str(),
                precision == "bf16" ? (std::string(" (") + kernels::matmul_bf16_path() + ")").c_str() : "");
    std::printf("# size=%s layers=%ld heads=%ld width=%ld context=%ld batch=%ld device=%s, %ld timed steps after %ld\n",
                size.c_str(), long(mc.n_layer), long(mc.n_head), long(mc.n_embd), long(mc.block_size), long(batch),
                device.c_str(), long(steps), long(warmup));
    std::printf("%-11s %12s %12s %12s\n", "method", "params", "tokens/s", "ms/step");
    for (const std::string& pos : method_list) {
      mc.pos.kind = pos;
      Generator init(1), drop(2), data(3);
      nn::GPT model(mc, init, drop);
      model.to(dev);
      train::AdamW opt(train::decay_groups(model.named_parameters(), 0.1), train::AdamWOptions(1e-4));
      std::vector<double> ms;
      double optim_ms = 0;
      // One optimisation step on fresh random tokens; returns its wall milliseconds (and adds the
      // optimizer's part to optim_ms).
      auto step = [&]() {
        std::vector<int64_t> xs(static_cast<size_t>(batch * mc.block_size)), ys(xs.size());
        for (auto& v : xs) v = static_cast<int64_t>(data.next_u64() % static_cast<uint64_t>(mc.vocab_size));
        for (auto& v : ys) v = static_cast<int64_t>(data.next_u64() % static_cast<uint64_t>(mc.vocab_size));
        const auto t0 = std::chrono::steady_clock::now();
        Tensor x = Tensor::from_ints(xs, {batch, mc.block_size}).to(dev);
        Tensor y = Tensor::from_ints(ys, {batch, mc.block_size}).to(dev);
        const auto z0 = std::chrono::steady_clock::now();
        opt.zero_grad();
        const auto z1 = std::chrono::steady_clock::now();
        Tensor loss = cross_entropy(model.forward(x), y);
        loss.backward();
        const auto o0 = std::chrono::steady_clock::now();
        train::clip_grad_norm(model.parameters(), 1.0);
        opt.step();
        (void)loss.item();  // synchronises a device
        const auto t1 = std::chrono::steady_clock::now();
        optim_ms += std::chrono::duration<double, std::milli>((z1 - z0) + (t1 - o0)).count();
        return std::chrono::duration<double, std::milli>(t1 - t0).count();
      };
      const kernels::MatmulWork work0 = kernels::matmul_work();
      for (int64_t s = 0; s < warmup + steps; ++s) {
        governor.between_steps();
        const double t = step();
        if (s >= warmup) ms.push_back(t);
      }
      const kernels::MatmulWork work = kernels::matmul_work() - work0;
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      std::printf("%-11s %12ld %12.0f %12.2f\n", pos.c_str(), long(model.num_parameters()),
                  1000.0 * static_cast<double>(batch * mc.block_size) / med, med);
      if (dev.is_cpu()) {  // every step runs the same products (kernels::matmul_work)
        const double per_step = double(work.fp32 + work.bf16) / static_cast<double>(warmup + steps);
        std::printf("# %s: matrix products %.4f GFLOP per step, %.3f MFLOP per token\n", pos.c_str(), per_step * 1e-9,
                    per_step / static_cast<double>(batch * mc.block_size) * 1e-6);
      }
      if (governor.adaptive()) {
        if (governor.last_others_busy() >= 0)
          std::printf("# %s: threads=%d at the end, other processes' load %.2f cores\n", pos.c_str(),
                      governor.threads(), governor.last_others_busy());
        else  // the run ended before the governor's first measuring window (threads.h)
          std::printf("# %s: threads=%d, other processes' load not measured (the run was shorter than 0.5 s)\n",
                      pos.c_str(), governor.threads());
      }
      if (profile) {
        profiler::Session session;
        optim_ms = 0;
        double total = 0;
        for (int64_t s = 0; s < steps; ++s) total += step();
        print_profile(session.entries(), total / double(steps), optim_ms / double(steps), steps);
      }
      std::fflush(stdout);
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {  // a host allocation outside the tensor allocator (the token batches)
    std::fflush(stdout);
    std::fprintf(stderr, "bench_train: error: out of memory (--batch %ld x --context %ld tokens per step)\n",
                 long(batch), long(tokens_context));
    return 1;
  }
  return 0;
}
