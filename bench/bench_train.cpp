// bench_train.cpp — training throughput of the GPT per position encoding: tokens/s and ms per
// optimisation step (forward, backward, clip, AdamW) on random tokens, after warm-up steps, for a
// chosen model size and device. `--size compare` is the compare experiment's quick model,
// `--size gpt2` a GPT-2-small-sized model (12 layers, 768 wide, 12 heads, context 1024; meant for
// a GPU). bench/reference_gpt.py measures the same models in PyTorch for a side-by-side table.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "autograd/ops.h"
#include "nn/gpt.h"
#include "train/optim.h"

using namespace posgrad;

int main(int argc, char** argv) {
  CLI::App app{"posgrad training throughput per position encoding"};
  std::string size = "compare", device = "cpu", methods = "none,sinusoidal,learned,t5,deberta,rope,alibi";
  int64_t steps = 10, warmup = 2, batch = 0;
  app.add_option("--size", size, "compare | nanogpt | gpt2")->capture_default_str();
  app.add_option("--device", device, "cpu or cuda[:N]")->capture_default_str();
  app.add_option("--methods", methods, "Comma-separated encodings")->capture_default_str();
  app.add_option("--steps", steps, "Timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")->capture_default_str();
  app.add_option("--batch", batch, "Sequences per step (0: the size's default)");
  CLI11_PARSE(app, argc, argv);
  try {
    nn::GPTConfig mc;
    mc.vocab_size = 65;
    if (size == "compare") {
      mc.n_layer = 2, mc.n_head = 4, mc.n_embd = 64, mc.block_size = 64;
      if (!batch) batch = 16;
    } else if (size == "nanogpt") {
      mc.n_layer = 4, mc.n_head = 4, mc.n_embd = 128, mc.block_size = 64;
      if (!batch) batch = 12;
    } else if (size == "gpt2") {
      mc.n_layer = 12, mc.n_head = 12, mc.n_embd = 768, mc.block_size = 1024, mc.vocab_size = 50304;
      if (!batch) batch = 8;
    } else {
      throw ValueError("unknown --size '" + size + "' (compare, nanogpt, gpt2)");
    }
    Device dev = Device::parse(device);
    std::printf("# size=%s layers=%ld heads=%ld width=%ld context=%ld batch=%ld device=%s, %ld timed steps after %ld\n",
                size.c_str(), long(mc.n_layer), long(mc.n_head), long(mc.n_embd), long(mc.block_size), long(batch),
                device.c_str(), long(steps), long(warmup));
    std::printf("%-11s %12s %12s %12s\n", "method", "params", "tokens/s", "ms/step");
    std::stringstream ss(methods);
    std::string pos;
    while (std::getline(ss, pos, ',')) {
      mc.pos.kind = pos;
      Generator init(1), drop(2), data(3);
      nn::GPT model(mc, init, drop);
      model.to(dev);
      train::AdamW opt(train::decay_groups(model.named_parameters(), 0.1), train::AdamWOptions(1e-4));
      std::vector<double> ms;
      for (int64_t s = 0; s < warmup + steps; ++s) {
        std::vector<int64_t> xs(static_cast<size_t>(batch * mc.block_size)), ys(xs.size());
        for (auto& v : xs) v = static_cast<int64_t>(data.next_u64() % static_cast<uint64_t>(mc.vocab_size));
        for (auto& v : ys) v = static_cast<int64_t>(data.next_u64() % static_cast<uint64_t>(mc.vocab_size));
        auto t0 = std::chrono::steady_clock::now();
        Tensor x = Tensor::from_ints(xs, {batch, mc.block_size}).to(dev);
        Tensor y = Tensor::from_ints(ys, {batch, mc.block_size}).to(dev);
        opt.zero_grad();
        Tensor loss = cross_entropy(model.forward(x), y);
        loss.backward();
        train::clip_grad_norm(model.parameters(), 1.0);
        opt.step();
        (void)loss.item();  // synchronises a device
        if (s >= warmup)
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2];
      std::printf("%-11s %12ld %12.0f %12.2f\n", pos.c_str(), long(model.num_parameters()),
                  1000.0 * static_cast<double>(batch * mc.block_size) / med, med);
      std::fflush(stdout);
    }
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return 0;
}
