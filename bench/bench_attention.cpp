// bench_attention.cpp — the fused attention against the naive materialising reference, per
// registered position encoding, as one comparison table.
//
// What it is: for each encoding of the registry (or those given with --methods) and sequence length
// T, one causal attention layer's worth of work: the encoding rotates q, k and builds its score
// modifier from its parameters (T5's gather, ALiBi's and KERPLE's bias by distance, DeBERTa's
// projections of its relative table), then the attention runs fused or naive. The fused op is
// validated against the naive one (forward max |diff| relative to max |naive|; exit code 1 above
// 1e-4), then forward + backward of both are timed (float32, B*H fixed; best and median of
// alternating samples) and their peak extra memory measured: backend(CPU).peak_bytes() after
// reset_peak(), minus the bytes held before the call (the inputs). Ratios are naive / fused from the
// same run. Encodings that act on the embeddings only (none, sinusoidal, learned) time plain
// attention. Per-thread tile buffers of the fused kernel (~50 KB per thread, independent of T)
// are outside the tensor allocator and not counted.
// What it is not: a Google Benchmark suite or a test.
//
// Usage: bench_attention [--T 128,512,2048] [--B 1] [--H 8] [--D 64] [--methods none,rope,...]
//                        [--min-ms 300] [--max-reps 15]
#include <omp.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/ops/attention.h"
#include "nn/posenc/position_encoding.h"
#include "tensor/storage.h"

using namespace posgrad;

namespace {

using clock_type = std::chrono::steady_clock;

std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

struct Problem {
  TensorList leaves;  // q, k, v (+ table / kr, qr)
  std::function<Tensor(bool naive)> forward;
};

Problem make_problem(const std::string& kind, int64_t B, int64_t H, int64_t T, int64_t D) {
  Generator g(1234);
  auto leaf = [&](const Shape& s, double std = 1.0) {
    Tensor t = randn(s, g, DType::Float32, Device::cpu(), 0.0, std);
    t.set_requires_grad(true);
    return t;
  };
  Problem p;
  Tensor q = leaf({B, H, T, D}), k = leaf({B, H, T, D}), v = leaf({B, H, T, D});
  p.leaves = {q, k, v};
  nn::PosEncConfig cfg;  // the encoding's default options, one layer of this size
  cfg.kind = kind;
  cfg.n_embd = H * D;
  cfg.n_head = H;
  cfg.n_layer = 1;
  cfg.block_size = T;
  cfg.validate();
  std::shared_ptr<nn::PositionEncoding> pe = nn::make_position_encoding(cfg, g);
  for (auto& [name, t] : pe->named_parameters()) p.leaves.push_back(t);
  // The layer's query/key projections (DeBERTa's share_att_key projects positions with them).
  nn::LayerProjections proj;
  proj.w_q = leaf({H * D, H * D}, 0.02);
  proj.w_k = leaf({H * D, H * D}, 0.02);
  p.leaves.push_back(proj.w_q);
  p.leaves.push_back(proj.w_k);
  // The layer's input (FoX's forget gates read it) and, after rotate(), its queries and keys (CoPE's
  // gates read them), as CausalSelfAttention::heads passes them.
  proj.input = leaf({B, T, H * D});
  p.leaves.push_back(proj.input);
  const double scale = pe->attention_scale(D);
  p.forward = [=](bool naive) {
    auto [qr, kr] = pe->rotate(0, q, k, 0);
    nn::LayerProjections lp = proj;
    lp.q = qr;
    lp.k = kr;
    const ScoreModifier m = pe->scores(0, lp, T, T, 0);
    return naive ? attention_reference(qr, kr, v, m, true, scale) : attention(qr, kr, v, m, true, scale);
  };
  return p;
}

struct Sample {
  double ms = 0;
  size_t peak = 0;
};

// One forward + backward; returns wall time and peak extra bytes.
Sample run_once(Problem& p, bool naive, const Tensor& dy) {
  for (auto& t : p.leaves) t.zero_grad();
  auto& be = backend(DeviceType::CPU);
  be.reset_peak();
  const size_t base = be.current_bytes();
  const auto t0 = clock_type::now();
  {
    Tensor y = p.forward(naive);
    y.backward(dy);
  }
  const auto t1 = clock_type::now();
  return {std::chrono::duration<double, std::milli>(t1 - t0).count(), be.peak_bytes() - base};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> Ts = {128, 512, 2048};
  int64_t B = 1, H = 8, D = 64;
  std::vector<std::string> methods = nn::position_encoding_kinds();
  double min_ms = 300;
  int max_reps = 15;
  std::string ts_arg = "128,512,2048", methods_arg;
  for (const auto& m : methods) methods_arg += (methods_arg.empty() ? "" : ",") + m;
  CLI::App app{"Fused attention vs the naive materialising reference: forward+backward time and peak memory"};
  app.add_option("--T", ts_arg, "Comma-separated sequence lengths")->capture_default_str();
  app.add_option("--B", B, "Batch")->check(CLI::Range(int64_t{1}, int64_t{1} << 12))->capture_default_str();
  app.add_option("--H", H, "Heads")->check(CLI::Range(int64_t{1}, int64_t{1} << 10))->capture_default_str();
  app.add_option("--D", D, "Head dim")->check(CLI::Range(int64_t{1}, int64_t{1} << 12))->capture_default_str();
  app.add_option("--methods", methods_arg, "Comma-separated position encodings (registered kinds)")
      ->capture_default_str();
  app.add_option("--min-ms", min_ms, "Minimum timed milliseconds per method and length")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  app.add_option("--max-reps", max_reps, "Maximum alternating repetitions")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad option or value: usage error, 2
  }
  // Lists: no empty list, no empty item (usage error, exit 2).
  for (const auto& [name, text] :
       {std::pair<const char*, const std::string&>{"--T", ts_arg}, {"--methods", methods_arg}})
    if (text.empty() || text.front() == ',' || text.back() == ',' || text.find(",,") != std::string::npos) {
      std::fprintf(stderr, "bench_attention: %s %s\n", name,
                   text.empty() ? "is empty" : ("has an empty item in '" + text + "'").c_str());
      return 2;
    }
  // CLI11's range lets NaN through (no comparison holds for it).
  if (std::isnan(min_ms)) {
    std::fprintf(stderr, "bench_attention: --min-ms: NaN is not a number of milliseconds\n");
    return 2;
  }
  Ts.clear();
  bool lengths_ok = true;
  for (const auto& t : split_csv(ts_arg)) {
    char* end = nullptr;
    const long long v = std::strtoll(t.c_str(), &end, 10);
    lengths_ok = lengths_ok && *end == '\0' && v >= 1 && v <= (1 << 20);
    Ts.push_back(v);
  }
  if (!lengths_ok) {
    std::fprintf(stderr, "bench_attention: --T wants comma-separated lengths in [1, 1048576], got '%s'\n",
                 ts_arg.c_str());
    return 2;
  }
  methods = split_csv(methods_arg);
  const std::vector<std::string> kinds = nn::position_encoding_kinds();
  for (const auto& m : methods)
    if (std::find(kinds.begin(), kinds.end(), m) == kinds.end()) {
      std::string known;
      for (const auto& k : kinds) known += (known.empty() ? "" : ",") + k;
      std::fprintf(stderr, "bench_attention: unknown encoding '%s' in --methods (known: %s)\n", m.c_str(),
                   known.c_str());
      return 2;
    }
  std::printf("attention forward+backward, float32, B=%lld H=%lld D=%lld, causal, %d OpenMP threads\n", (long long)B,
              (long long)H, (long long)D, omp_get_max_threads());
  std::printf(
      "time: best and median ms of alternating fused/naive samples (best is the robust figure on a\n"
      "shared machine); mem: peak extra MiB beyond the inputs; ratios naive/fused\n\n");
  std::printf(
      "| method     |     T | fused best | naive best | ratio | fused med | naive med | ratio | fused MiB | naive MiB "
      "| ratio | max rel diff |\n");
  std::printf(
      "|------------|------:|-----------:|-----------:|------:|----------:|----------:|------:|----------:|----------:|"
      "------:|-------------:|\n");
  // Exit 1 for either; the closing line says which happened (a failure to set up or run a case is no
  // verdict on the fused op's accuracy).
  int validation_failures = 0, run_failures = 0;
  for (const auto& method : methods)
    for (int64_t T : Ts) try {
        Problem p = make_problem(method, B, H, T, D);
        Generator g(77);
        const Tensor dy = randn({B, H, T, D}, g);
        // Validate before timing.
        double rel;
        {
          NoGradGuard ng;
          auto a = p.forward(false).to_vector(), b = p.forward(true).to_vector();
          double md = 0, mr = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            md = std::max(md, double(std::fabs(a[i] - b[i])));
            mr = std::max(mr, double(std::fabs(b[i])));
          }
          rel = md / std::max(mr, 1e-30);
          if (!(rel <= 1e-4)) ++validation_failures;
        }
        run_once(p, false, dy);  // warm-up (thread pools, pack buffers, page faults of the allocator)
        run_once(p, true, dy);
        std::vector<double> tf, tn;
        size_t mf = 0, mn = 0;
        double spent = 0;
        for (int r = 0; r < max_reps && (r < 3 || spent < min_ms); ++r) {
          Sample f = run_once(p, false, dy), n = run_once(p, true, dy);
          tf.push_back(f.ms);
          tn.push_back(n.ms);
          mf = std::max(mf, f.peak);
          mn = std::max(mn, n.peak);
          spent += f.ms + n.ms;
        }
        const double f_ms = median(tf), n_ms = median(tn);
        const double f_best = *std::min_element(tf.begin(), tf.end()), n_best = *std::min_element(tn.begin(), tn.end());
        std::printf(
            "| %-10s | %5lld | %10.2f | %10.2f | %4.1fx | %9.2f | %9.2f | %4.1fx | %9.2f | %9.2f | %4.1fx | %12.2e |\n",
            method.c_str(), (long long)T, f_best, n_best, n_best / f_best, f_ms, n_ms, n_ms / f_ms, mf / 1048576.0,
            mn / 1048576.0, double(mn) / double(mf), rel);
        std::fflush(stdout);
      } catch (const std::bad_alloc&) {  // a host allocation outside the tensor allocator
        std::fflush(stdout);
        std::fprintf(stderr, "bench_attention: %s at T = %lld failed: out of memory\n", method.c_str(), (long long)T);
        ++run_failures;
      } catch (const std::exception& e) {  // an encoding this bench cannot set up: say so, go on, exit 1
        std::fflush(stdout);
        std::fprintf(stderr, "bench_attention: %s at T = %lld failed: %s\n", method.c_str(), (long long)T, e.what());
        ++run_failures;
      }
  if (validation_failures)
    std::printf("\nVALIDATION FAILED: fused and naive differ by more than 1e-4 (relative) in %d case(s)\n",
                validation_failures);
  if (run_failures)
    std::printf("\nFAILED: %d case(s) could not be set up or run (the errors are on stderr)\n", run_failures);
  return validation_failures || run_failures ? 1 : 0;
}
