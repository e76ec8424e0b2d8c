// bench_attention.cpp — the fused attention against the naive materialising reference, per
// position-encoding method, as one comparison table.
//
// What it is: for each method (none, rope, alibi, t5, deberta) and sequence length T, validate the
// fused op against the naive one (forward max |diff| relative to max |naive|; exit code 1 above
// 1e-4), then time forward + backward of both (float32, B*H fixed; best and median of alternating
// samples) and measure their peak extra memory: backend(CPU).peak_bytes() after reset_peak(), minus the
// bytes held before the call (the inputs). Ratios are naive / fused from the same run.
// "rope" times the two RoPE ops on q and k plus plain attention; t5/deberta take their table /
// projected relative embeddings as inputs (the projections are ordinary linear layers, not
// attention). Per-thread tile buffers of the fused kernel (~50 KB per thread, independent of T)
// are outside the tensor allocator and not counted.
// What it is not: a Google Benchmark suite or a test.
//
// Usage: bench_attention [--T 128,512,2048] [--B 1] [--H 8] [--D 64] [--methods none,rope,...]
//                        [--min-ms 300] [--max-reps 15]
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
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

Problem make_problem(const std::string& method, int64_t B, int64_t H, int64_t T, int64_t D) {
  Generator g(1234);
  auto leaf = [&](const Shape& s, double std = 1.0) {
    Tensor t = randn(s, g, DType::Float32, Device::cpu(), 0.0, std);
    t.set_requires_grad(true);
    return t;
  };
  Problem p;
  Tensor q = leaf({B, H, T, D}), k = leaf({B, H, T, D}), v = leaf({B, H, T, D});
  p.leaves = {q, k, v};
  const double scale = 1.0 / std::sqrt(double(D));
  if (method == "none") {
    p.forward = [=](bool naive) {
      return naive ? attention_reference(q, k, v, {}, true, scale) : attention(q, k, v, {}, true, scale);
    };
  } else if (method == "rope") {
    nn::RopeParams rp;
    rp.rotary_dim = D;
    p.forward = [=](bool naive) {
      Tensor qr = nn::apply_rope(q, rp, false, 0), kr = nn::apply_rope(k, rp, false, 0);
      return naive ? attention_reference(qr, kr, v, {}, true, scale) : attention(qr, kr, v, {}, true, scale);
    };
  } else if (method == "alibi") {
    ScoreModifier m;
    m.kind = ScoreBias::ALiBi;
    m.slopes = nn::alibi_slopes(H);
    p.forward = [=](bool naive) {
      return naive ? attention_reference(q, k, v, m, true, scale) : attention(q, k, v, m, true, scale);
    };
  } else if (method == "t5") {
    Tensor table = leaf({32, H}, 0.1);
    p.leaves.push_back(table);
    const ScoreModifier m = nn::t5_score_modifier(table, false, 32, 128);
    p.forward = [=](bool naive) {
      return naive ? attention_reference(q, k, v, m, true, scale) : attention(q, k, v, m, true, scale);
    };
  } else if (method == "deberta") {
    // DeBERTa defaults of this project: position_buckets 32, max_relative_positions 128 -> 64 rows.
    Tensor kr = leaf({64, H, D}), qr = leaf({64, H, D});
    p.leaves.push_back(kr);
    p.leaves.push_back(qr);
    ScoreModifier m;
    m.kind = ScoreBias::DeBERTa;
    m.kr = kr;
    m.qr = qr;
    m.bucket = [](int64_t r) { return nn::deberta_row(-r, 32, 128); };
    const double s3 = 1.0 / std::sqrt(3.0 * double(D));
    p.forward = [=](bool naive) {
      return naive ? attention_reference(q, k, v, m, true, s3) : attention(q, k, v, m, true, s3);
    };
  } else {
    std::fprintf(stderr, "unknown method '%s' (none,rope,alibi,t5,deberta)\n", method.c_str());
    std::exit(2);
  }
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
  std::vector<std::string> methods = {"none", "rope", "alibi", "t5", "deberta"};
  double min_ms = 300;
  int max_reps = 15;
  std::string ts_arg = "128,512,2048", methods_arg = "none,rope,alibi,t5,deberta";
  CLI::App app{"Fused attention vs the naive materialising reference: forward+backward time and peak memory"};
  app.add_option("--T", ts_arg, "Comma-separated sequence lengths")->capture_default_str();
  app.add_option("--B", B, "Batch")->capture_default_str();
  app.add_option("--H", H, "Heads")->capture_default_str();
  app.add_option("--D", D, "Head dim")->capture_default_str();
  app.add_option("--methods", methods_arg, "Comma-separated score modifiers / encodings")->capture_default_str();
  app.add_option("--min-ms", min_ms, "Minimum timed milliseconds per method and length")->capture_default_str();
  app.add_option("--max-reps", max_reps, "Maximum alternating repetitions")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  Ts.clear();
  for (auto& t : split_csv(ts_arg)) Ts.push_back(std::stoll(t));
  methods = split_csv(methods_arg);
  std::printf("attention forward+backward, float32, B=%lld H=%lld D=%lld, causal, %d OpenMP threads\n",
              (long long)B, (long long)H, (long long)D, omp_get_max_threads());
  std::printf("time: best and median ms of alternating fused/naive samples (best is the robust figure on a\n"
              "shared machine); mem: peak extra MiB beyond the inputs; ratios naive/fused\n\n");
  std::printf("| method  |     T | fused best | naive best | ratio | fused med | naive med | ratio | fused MiB | naive MiB | ratio | max rel diff |\n");
  std::printf("|---------|------:|-----------:|-----------:|------:|----------:|----------:|------:|----------:|----------:|------:|-------------:|\n");
  int status = 0;
  for (const auto& method : methods)
    for (int64_t T : Ts) {
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
        if (rel > 1e-4) status = 1;
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
      std::printf("| %-7s | %5lld | %10.2f | %10.2f | %4.1fx | %9.2f | %9.2f | %4.1fx | %9.2f | %9.2f | %4.1fx | %12.2e |\n",
                  method.c_str(), (long long)T, f_best, n_best, n_best / f_best, f_ms, n_ms, n_ms / f_ms,
                  mf / 1048576.0, mn / 1048576.0, double(mn) / double(mf), rel);
      std::fflush(stdout);
    }
  if (status) std::printf("\nVALIDATION FAILED: fused and naive differ by more than 1e-4 (relative)\n");
  return status;
}
