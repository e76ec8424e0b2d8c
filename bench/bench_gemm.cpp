// bench_gemm.cpp — posgrad's CPU sgemm against OpenBLAS, as a comparison table.
//
// What it is: for each shape, validate posgrad against cblas_sgemm (max |diff| relative to
// max |reference|; exit code 1 above 1e-4), then time both with the same thread count,
// alternating posgrad / OpenBLAS samples, and print the median GFLOP/s and their ratio.
// The machine's FP32 FMA peak is measured in the same run (fma_peak below, best of 5), before the
// table and again after it (a gap between the two shows the machine's state changed meanwhile), and
// each shape's posgrad GFLOP/s is printed as a fraction of the first: the anchor a GEMM is judged by.
// What it is not: a Google Benchmark suite or a test. OpenBLAS is linked to this executable
// only, as a yardstick; the posgrad library never uses it.
//
// Usage: bench_gemm [--shapes MxNxK[:ta][:tb],...] [--reps R] [--threads T]
//                   [--isa avx512|avx2|scalar] [--min-ms MS] [--precision fp32|bf16] [--no-bf16-dot]
//                   [--against openblas|torch]
// (--help: the defaults and limits.) Bad options, values or shapes (a dimension below 1, a shape whose
// matrices exceed half this machine's memory) are usage errors, exit 2, before anything runs.
// --precision bf16 times the bf16-operand products (kernels.h, MatmulPrecision), validated against
// OpenBLAS on the bf16-rounded operands, with of_peak against the VDPBF16PS peak where the CPU has
// AVX512-BF16 (--no-bf16-dot: the converting path). --against torch times PyTorch's matmul instead of
// OpenBLAS (fp32, or bf16 tensors with --precision bf16: what torch.autocast runs), through
// bench/torch_matmul.py started once with $POSGRAD_TORCH_PYTHON (default .venv-torch/bin/python,
// which bench/vs_pytorch.sh creates), its samples alternating with posgrad's.
// Default: the square shapes 256/512/1024, M=4096 with K=N in {128,256,512}, 4096x2048x512,
// and the transposed variants of the 4096 x 2048 x 512 transformer projection
// (forward shape with op(A)/op(B) stored transposed, and the backward dW = X^T dY,
// dX = dY W^T shapes).
//
// Fair alternation: after a call, OpenBLAS's pthread workers busy-wait for 2^28 TSC cycles
// (~0.1 s, its THREAD_TIMEOUT default) and libgomp's for a few ms, so whichever library runs
// next shares its cores with the other's spinning threads. Measured here, that cost posgrad
// ~10% right after an OpenBLAS call. The bench therefore re-executes itself with
// OPENBLAS_THREAD_TIMEOUT=20 (~0.4 ms, comparable to libgomp) unless the variable is already
// set, and pauses 10 ms before every sample. Back-to-back calls inside a sample keep both
// thread pools hot, so neither library's throughput is reduced by this.

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <cblas.h>
#include <CLI/CLI.hpp>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "tensor/kernels/cpu/gemm_internal.h"
#include "tensor/kernels/kernels.h"
#include "train/options.h"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" char* openblas_get_corename(void);

namespace posgrad::kernels::cpu {
template <typename T>
void gemm(T* C, const T* A, const T* B, int64_t M, int64_t N, int64_t K, int64_t ldc, int64_t lda, int64_t ldb,
          bool trans_a, bool trans_b, T alpha, T beta);
}  // namespace posgrad::kernels::cpu

namespace {

namespace gd = posgrad::kernels::cpu::gemm_detail;
using clock_type = std::chrono::steady_clock;

struct shape {
  int64_t M, N, K;
  bool ta = false, tb = false;
};

std::vector<shape> default_shapes() {
  return {{256, 256, 256},
          {512, 512, 512},
          {1024, 1024, 1024},
          {4096, 128, 128},
          {4096, 256, 256},
          {4096, 512, 512},
          {4096, 2048, 512},
          {4096, 2048, 512, true},
          {4096, 2048, 512, false, true},
          {512, 2048, 4096, true},
          {4096, 512, 2048, false, true}};
}

// Bytes one shape's buffers take: A, B, posgrad's and the reference's C, and with bf16 the rounded
// copies of A and B. Long double: no product of dimensions can overflow.
long double shape_bytes(const shape& s, bool bf16) {
  const long double M = static_cast<long double>(s.M), N = static_cast<long double>(s.N),
                    K = static_cast<long double>(s.K);
  return 4.0L * ((bf16 ? 2 : 1) * (M * K + K * N) + 2 * M * N);
}

// The shapes of --shapes: comma-separated MxNxK items, each dimension an integer in [1, 2^31 - 1]
// (OpenBLAS takes int), then optionally ":ta" and/or ":tb" once each. Empty text or an empty item is
// refused. Returns "" when every item parsed, otherwise a message naming the bad item.
std::string parse_shapes(const std::string& text, std::vector<shape>& out) {
  out.clear();
  if (text.empty()) return "--shapes is empty";
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const std::string bad = "--shapes item '" + item + "': ";
    if (item.empty()) return "--shapes has an empty item in '" + text + "'";
    // MxNxK: three runs of digits joined by 'x'.
    shape sh{};
    int64_t* dims[3] = {&sh.M, &sh.N, &sh.K};
    std::size_t i = 0;
    for (int d = 0; d < 3; ++d) {
      if (d > 0) {
        if (i >= item.size() || item[i] != 'x') return bad + "want MxNxK[:ta][:tb]";
        ++i;
      }
      const std::size_t first = i;
      while (i < item.size() && item[i] >= '0' && item[i] <= '9') ++i;
      if (i == first) return bad + "want MxNxK[:ta][:tb] with positive integer dimensions";
      if (i - first > 10) return bad + "a dimension exceeds 2147483647";
      const long long v = std::stoll(item.substr(first, i - first));
      if (v < 1) return bad + "dimensions must be at least 1";
      if (v > 2147483647LL) return bad + "a dimension exceeds 2147483647";
      *dims[d] = v;
    }
    // Then ":ta" and ":tb", each at most once, in either order.
    while (i < item.size()) {
      const std::string flag = item.substr(i, 3);
      if (flag == ":ta" && !sh.ta) {
        sh.ta = true;
      } else if (flag == ":tb" && !sh.tb) {
        sh.tb = true;
      } else {
        return bad + "unexpected '" + item.substr(i) + "' (want MxNxK[:ta][:tb])";
      }
      i += 3;
    }
    out.push_back(sh);
    pos = end + 1;
  }
  return "";
}

void run_posgrad(const shape& s, const float* A, const float* B, float* C) {
  posgrad::kernels::cpu::gemm<float>(C, A, B, s.M, s.N, s.K, s.N, s.ta ? s.M : s.K, s.tb ? s.K : s.N, s.ta, s.tb, 1.0f,
                                     0.0f);
}

void run_openblas(const shape& s, const float* A, const float* B, float* C) {
  cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, static_cast<int>(s.M),
              static_cast<int>(s.N), static_cast<int>(s.K), 1.0f, A, static_cast<int>(s.ta ? s.M : s.K), B,
              static_cast<int>(s.tb ? s.K : s.N), 0.0f, C, static_cast<int>(s.N));
}

template <typename F>
double seconds_per_call(F&& f, int calls) {
  const auto t0 = clock_type::now();
  for (int i = 0; i < calls; ++i) f();
  return std::chrono::duration<double>(clock_type::now() - t0).count() / calls;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- the FMA peak --------------------------------------------------------------------------------
// Every thread runs independent FMA dependency chains on full-width registers, enough to cover the FMA
// latency times the number of FMA pipes on current x86 cores (4-5 cycles x 2 pipes), for `iters`
// rounds; the result is stored so the compiler keeps the work. FLOPs = threads x iters x chains x
// lanes x 2. AVX-512 runs 16 zmm chains; AVX2 + FMA runs 12 ymm chains, because with 16 ymm registers
// in all, 16 chains and the two operands do not fit: the compiler spilled three chains to the stack
// and the store-to-load latency on them held the "peak" near 63% of the real one (the GEMM then ran at
// 110-125% of it on an AVX2-only AMD EPYC). The widest instruction set the CPU has is used, as the
// GEMM's dispatch does (on a CPU whose 512-bit FMAs are split into two 256-bit halves, the zmm and
// ymm peaks agree). To check that no chain is spilled: `objdump -dC build/bench/bench_gemm`, functions
// run512 and run256, whose loops must hold FMAs only (no vmovaps to or from the stack).
constexpr int kChains512 = 16;
constexpr int kChains256 = 12;

#if defined(__x86_64__)
// The same loop for each width (intrinsics only inline into functions of their own target).
#define POSGRAD_FMA_CHAINS(V, FMA, SET1, kChains)                           \
  V acc[kChains];                                                           \
  for (int c = 0; c < kChains; ++c) acc[c] = SET1(1.0f + 1e-3f * float(c)); \
  const V a = SET1(0.999999f), b = SET1(1e-7f);                             \
  for (int64_t i = 0; i < iters; ++i)                                       \
    for (int c = 0; c < kChains; ++c) acc[c] = FMA(acc[c], a, b);           \
  float sum = 0;                                                            \
  for (int c = 0; c < kChains; ++c) {                                       \
    alignas(64) float out[sizeof(V) / sizeof(float)];                       \
    std::memcpy(out, &acc[c], sizeof(V));                                   \
    sum += out[0];                                                          \
  }                                                                         \
  return sum;

__attribute__((target("avx512f"))) float run512(int64_t iters) {
  POSGRAD_FMA_CHAINS(__m512, _mm512_fmadd_ps, _mm512_set1_ps, kChains512)
}
__attribute__((target("avx2,fma"))) float run256(int64_t iters) {
  POSGRAD_FMA_CHAINS(__m256, _mm256_fmadd_ps, _mm256_set1_ps, kChains256)
}
#undef POSGRAD_FMA_CHAINS

// The bf16 dot-product peak: the same chains with VDPBF16PS (16 lanes x 2 multiply-adds = 64 FLOPs per
// instruction).
__attribute__((target("avx512f,avx512bf16"))) float run512bf16(int64_t iters) {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_set1_ps(1.0f + 1e-3f * float(c));
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3F80));  // bf16 1.0
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3380));  // bf16 ~6e-8
  for (int64_t i = 0; i < iters; ++i)
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  float sum = 0;
  for (int c = 0; c < kChains512; ++c) {
    alignas(64) float out[16];
    std::memcpy(out, &acc[c], sizeof(__m512));
    sum += out[0];
  }
  return sum;
}
#endif

struct fma_peak_result {
  double gflops = 0;
  const char* what = "none";
};

// The FP32 FMA peak of `threads` threads, GFLOP/s (best of 5 runs of about 0.2 s); with bf16_dot, the
// VDPBF16PS peak instead (none where the CPU lacks AVX512-BF16).
fma_peak_result fma_peak(int threads, bool bf16_dot = false) {
  fma_peak_result r;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (bf16_dot) {
    if (!__builtin_cpu_supports("avx512bf16")) return r;
    r.what = "16 zmm VDPBF16PS chains per thread";
    const int64_t iters = 20'000'000;
    volatile float sink = 0;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = clock_type::now();
#pragma omp parallel num_threads(threads)
      {
        const float v = run512bf16(iters);
#pragma omp critical
        sink = sink + v;
      }
      const double sec = std::chrono::duration<double>(clock_type::now() - t0).count();
      r.gflops = std::max(r.gflops, double(threads) * double(iters) * kChains512 * 64.0 / sec * 1e-9);
    }
    return r;
  }
  const bool z = __builtin_cpu_supports("avx512f"), y = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!z && !y) return r;
  const int lanes = z ? 16 : 8, chains = z ? kChains512 : kChains256;
  r.what = z ? "16 zmm FMA chains per thread" : "12 ymm FMA chains per thread";
  const int64_t iters = 20'000'000;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = clock_type::now();
#pragma omp parallel num_threads(threads)
    {
      const float v = z ? run512(iters) : run256(iters);
#pragma omp critical
      sink = sink + v;
    }
    const double sec = std::chrono::duration<double>(clock_type::now() - t0).count();
    r.gflops = std::max(r.gflops, double(threads) * double(iters) * chains * lanes * 2.0 / sec * 1e-9);
  }
#else
  (void)threads;
#endif
  return r;
}

// ---- PyTorch as the anchor (--against torch) ------------------------------------------------------
// bench/torch_matmul.py runs as a child over two pipes; each of its samples is requested between two
// of posgrad's, so the alternation is the same as with OpenBLAS.
class torch_peer {
 public:
  bool start(const std::string& python, std::string& error) {
    // A helper that died (no PyTorch) must give an error message and exit 2, not kill the bench with
    // SIGPIPE on the next write to its pipe.
    std::signal(SIGPIPE, SIG_IGN);
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) {
      error = "pipe failed";
      return false;
    }
    pid_ = fork();
    if (pid_ < 0) {
      error = "fork failed";
      return false;
    }
    if (pid_ == 0) {
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      close(to_child[1]);
      close(from_child[0]);
      const std::string script = std::string(POSGRAD_BENCH_DIR) + "/torch_matmul.py";
      execl(python.c_str(), python.c_str(), script.c_str(), static_cast<char*>(nullptr));
      std::fprintf(stderr, "bench_gemm: cannot run %s\n", python.c_str());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    from_ = fdopen(from_child[0], "r");
    return to_ != nullptr && from_ != nullptr;
  }
  // Sends one command and returns the reply line ("" when the child is gone).
  std::string ask(const std::string& line) {
    std::fprintf(to_, "%s\n", line.c_str());
    std::fflush(to_);
    char buf[512];
    if (std::fgets(buf, sizeof buf, from_) == nullptr) return "";
    std::string reply(buf);
    while (!reply.empty() && (reply.back() == '\n' || reply.back() == '\r')) reply.pop_back();
    return reply;
  }
  ~torch_peer() {
    if (to_ != nullptr) {
      std::fprintf(to_, "quit\n");
      std::fclose(to_);
    }
    if (from_ != nullptr) std::fclose(from_);
    if (pid_ > 0) waitpid(pid_, nullptr, 0);
  }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

// x rounded to bf16 (nearest, ties to even; denormals to zero), written here independently of the
// library for the bf16 validation reference.
float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7F800000u) == 0) {
    u &= 0x80000000u;
  } else if ((u & 0x7FFFFFFFu) <= 0x7F800000u) {
    const uint32_t lsb = (u >> 16) & 1u;
    u = (u + 0x7FFFu + lsb) & 0xFFFF0000u;
  }
  std::memcpy(&x, &u, 4);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS reads its spin timeout when the library loads, hence the re-exec.
  if (std::getenv("OPENBLAS_THREAD_TIMEOUT") == nullptr) {
    setenv("OPENBLAS_THREAD_TIMEOUT", "20", 1);
    execv("/proc/self/exe", argv);  // returns only on failure: carry on with the default
  }

  std::vector<shape> shapes = default_shapes();
  int reps = 11;
  int threads = 2;
  double min_ms = 25.0;
  std::string shapes_arg, isa, precision = "fp32", against = "openblas";
  bool no_bf16_dot = false;
  CLI::App app{
      "posgrad's CPU sgemm against OpenBLAS (or PyTorch's matmul): median GFLOP/s of alternating samples, "
      "their ratio, and the fraction of the FP32 FMA peak measured in the same run"};
  app.add_option("--shapes", shapes_arg,
                 "Comma-separated MxNxK[:ta][:tb] (:ta / :tb: A / B stored transposed); dimensions in "
                 "[1, 2147483647], and one shape's buffers (A, B, two C, with bf16 the rounded A and B) at most "
                 "half this machine's memory (default: 256^3, 512^3, 1024^3, 4096xNxN for N = 128, 256, 512, "
                 "4096x2048x512, 4096x2048x512:ta, 4096x2048x512:tb, 512x2048x4096:ta, 4096x512x2048:tb)");
  app.add_option("--reps", reps, "Alternating samples per shape (the median is printed)")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--threads", threads, "Threads for both libraries")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--isa", isa,
                 "posgrad's instruction set (default: the best the CPU has); one the CPU lacks runs as the best it "
                 "has, with a warning on stderr (the header line names the one that ran)")
      ->check(CLI::IsMember({"avx512", "avx2", "scalar"}));
  app.add_option("--min-ms", min_ms, "Minimum milliseconds of one sample (calls per sample are chosen to reach it)")
      ->check(CLI::Range(0.0, 60000.0))
      ->capture_default_str();
  app.add_option("--precision", precision, "fp32, or bf16 operands with float accumulation")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->capture_default_str();
  app.add_flag("--no-bf16-dot", no_bf16_dot, "With --precision bf16: the converting path, not VDPBF16PS");
  app.add_option("--against", against,
                 "The anchor: OpenBLAS's cblas_sgemm, or PyTorch's matmul through bench/torch_matmul.py run by "
                 "$POSGRAD_TORCH_PYTHON (default .venv-torch/bin/python)")
      ->check(CLI::IsMember({"openblas", "torch"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a bad option or value: usage error, 2
  }
  // CLI11's ranges let NaN through (no comparison holds for it).
  if (std::isnan(min_ms)) {
    std::fprintf(stderr, "bench_gemm: --min-ms: NaN is not a number of milliseconds\n");
    return 2;
  }
  const bool bf16 = precision == "bf16";
  if (app.count("--shapes")) {
    const std::string error = parse_shapes(shapes_arg, shapes);
    if (!error.empty()) {
      std::fprintf(stderr, "bench_gemm: %s\n", error.c_str());
      return 2;
    }
  }
  // A shape that cannot fit is refused before anything runs (half the machine: the rest is the OS's,
  // and a GEMM timed while swapping says nothing).
  const long double memory_limit = static_cast<long double>(posgrad::train::physical_memory_bytes()) / 2;
  for (const shape& s : shapes)
    if (memory_limit > 0 && shape_bytes(s, bf16) > memory_limit) {
      std::fprintf(stderr,
                   "bench_gemm: --shapes item %lldx%lldx%lld needs %s for its matrices, more than half this "
                   "machine's memory (%s)\n",
                   static_cast<long long>(s.M), static_cast<long long>(s.N), static_cast<long long>(s.K),
                   posgrad::train::format_bytes(shape_bytes(s, bf16)).c_str(),
                   posgrad::train::format_bytes(memory_limit).c_str());
      return 2;
    }
  if (no_bf16_dot) gd::gemm_set_bf16_dot(false);
  if (!isa.empty()) {
    const gd::gemm_isa wanted = isa == "scalar" ? gd::gemm_isa::scalar
                                : isa == "avx2" ? gd::gemm_isa::avx2
                                                : gd::gemm_isa::avx512;
    if (gd::gemm_set_isa(wanted) != wanted)
      std::fprintf(stderr, "bench_gemm: warning: --isa %s: this CPU lacks it, running %s\n", isa.c_str(),
                   gd::gemm_isa_name(gd::gemm_active_isa()));
  }

  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  if (bf16) posgrad::kernels::set_matmul_precision(posgrad::kernels::MatmulPrecision::bf16);
  torch_peer torch;
  std::string torch_version;
  if (against == "torch") {
    const char* env = std::getenv("POSGRAD_TORCH_PYTHON");
    const std::string python = env != nullptr ? env : ".venv-torch/bin/python";
    std::string error;
    if (!torch.start(python, error)) {
      std::fprintf(stderr, "bench_gemm: cannot start %s: %s\n", python.c_str(), error.c_str());
      return 2;
    }
    // Wait until PyTorch is imported, so that the import does not run beside the peak measurement.
    if (torch.ask("ping") != "pong") {
      std::fprintf(stderr, "bench_gemm: the PyTorch helper did not start (%s bench/torch_matmul.py)\n", python.c_str());
      return 2;
    }
  }
  std::printf(
      "# posgrad %s (isa=%s%s) vs %s, %d thread(s), median of %d alternating samples of >= %.0f ms, "
      "OPENBLAS_THREAD_TIMEOUT=%s\n",
      bf16 ? "bf16-operand sgemm" : "sgemm", gd::gemm_isa_name(gd::gemm_active_isa()),
      bf16 ? (std::string(", bf16 path ") + posgrad::kernels::matmul_bf16_path()).c_str() : "",
      against == "torch" ? (bf16 ? "PyTorch bf16 matmul" : "PyTorch fp32 matmul") : "OpenBLAS cblas_sgemm", threads,
      reps, min_ms, std::getenv("OPENBLAS_THREAD_TIMEOUT") ? std::getenv("OPENBLAS_THREAD_TIMEOUT") : "default");
  std::printf("# OpenBLAS core type (validation reference%s): %s\n", against == "openblas" ? " and anchor" : "",
              openblas_get_corename());
  const bool bf16_peak = bf16 && gd::gemm_bf16_dot_available();
  const fma_peak_result peak_before = fma_peak(threads, bf16_peak);
  if (peak_before.gflops > 0)
    std::printf("# %s peak measured before the table (%s, %d thread(s)): %.1f GFLOP/s\n",
                bf16_peak ? "BF16 dot-product" : "FP32 FMA", peak_before.what, threads, peak_before.gflops);
  const char* anchor_col = against == "torch" ? "torch_GFLOPs" : "openblas_GFLOPs";
  std::printf("# %5s %5s %5s %-5s %15s %16s  %s  %s  %s\n", "M", "N", "K", "op", "posgrad_GFLOPs", anchor_col, "ratio",
              "of_peak", "max_rel_err");

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  bool ok = true;
  // The shapes were checked against the machine's memory, but what is free may be less: a failed
  // allocation ends the table with an error, exit 1.
  try {
    for (const shape& s : shapes) {
      std::vector<float> A(static_cast<std::size_t>(s.M * s.K));
      std::vector<float> B(static_cast<std::size_t>(s.K * s.N));
      for (auto& x : A) x = dist(rng);
      for (auto& x : B) x = dist(rng);
      std::vector<float> c_posgrad(static_cast<std::size_t>(s.M * s.N), NAN);
      std::vector<float> c_openblas(c_posgrad.size(), 0.0f);

      // Validation (also the warm-up: pack buffers, thread pools, page faults). In bf16 the reference is
      // OpenBLAS on the bf16-rounded operands: only the float accumulation differs.
      run_posgrad(s, A.data(), B.data(), c_posgrad.data());
      if (bf16) {
        std::vector<float> Ar(A), Br(B);
        for (auto& x : Ar) x = round_bf16(x);
        for (auto& x : Br) x = round_bf16(x);
        run_openblas(s, Ar.data(), Br.data(), c_openblas.data());
      } else {
        run_openblas(s, A.data(), B.data(), c_openblas.data());
      }
      if (against == "torch") {
        const std::string reply = torch.ask("shape " + std::to_string(s.M) + " " + std::to_string(s.N) + " " +
                                            std::to_string(s.K) + " " + (s.ta ? "1 " : "0 ") + (s.tb ? "1 " : "0 ") +
                                            (bf16 ? "bfloat16 " : "float32 ") + std::to_string(threads));
        if (reply.rfind("ok ", 0) != 0) {
          std::fprintf(stderr, "bench_gemm: the PyTorch helper failed (%s)\n", reply.c_str());
          return 2;
        }
        if (torch_version.empty()) {
          torch_version = reply.substr(3);
          std::printf("# PyTorch %s\n", torch_version.c_str());
        }
      }
      double max_diff = 0.0, max_ref = 0.0;
      for (std::size_t i = 0; i < c_posgrad.size(); ++i) {
        const double d = std::fabs(double(c_posgrad[i]) - double(c_openblas[i]));
        max_diff = std::isnan(d) ? INFINITY : std::max(max_diff, d);
        max_ref = std::max(max_ref, std::fabs(double(c_openblas[i])));
      }
      const double rel_err = max_ref > 0 ? max_diff / max_ref : max_diff;
      if (!(rel_err <= 1e-4)) ok = false;

      // Calls per sample so that one sample lasts >= min_ms (same count for both).
      const double t_once = seconds_per_call([&] { run_posgrad(s, A.data(), B.data(), c_posgrad.data()); }, 1);
      const int calls = std::max(1, static_cast<int>(std::ceil(min_ms * 1e-3 / std::max(t_once, 1e-7))));

      std::vector<double> t_posgrad, t_openblas;
      for (int r = 0; r < reps; ++r) {
        // A pause lets the other library's spinning workers go idle first.
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        t_posgrad.push_back(seconds_per_call([&] { run_posgrad(s, A.data(), B.data(), c_posgrad.data()); }, calls));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (against == "torch") {
          const std::string reply = torch.ask("time " + std::to_string(calls));
          if (reply.empty()) {
            std::fprintf(stderr, "bench_gemm: the PyTorch helper stopped\n");
            return 2;
          }
          t_openblas.push_back(std::atof(reply.c_str()));
        } else {
          t_openblas.push_back(
              seconds_per_call([&] { run_openblas(s, A.data(), B.data(), c_openblas.data()); }, calls));
        }
      }
      const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
      const double gf_posgrad = flops / median(t_posgrad) * 1e-9;
      const double gf_openblas = flops / median(t_openblas) * 1e-9;
      const std::string op = std::string(s.ta ? "T" : "N") + (s.tb ? "T" : "N");
      std::printf("%7lld %5lld %5lld %-5s %15.1f %16.1f  ratio=%.2f  %6.1f%%  %.2e%s\n", static_cast<long long>(s.M),
                  static_cast<long long>(s.N), static_cast<long long>(s.K), op.c_str(), gf_posgrad, gf_openblas,
                  gf_posgrad / gf_openblas, peak_before.gflops > 0 ? 100.0 * gf_posgrad / peak_before.gflops : NAN,
                  rel_err, rel_err <= 1e-4 ? "" : "  VALIDATION FAILED");
      std::fflush(stdout);
    }
  } catch (const std::bad_alloc&) {
    std::fflush(stdout);
    std::fprintf(stderr, "bench_gemm: out of memory allocating a shape's matrices\n");
    return 1;
  }
  // The peak again after the table: a slower machine state during the table shows as a gap here.
  const fma_peak_result peak_after = fma_peak(threads, bf16_peak);
  if (peak_after.gflops > 0)
    std::printf("# %s peak measured after the table: %.1f GFLOP/s (of_peak above uses the one before: %.1f)\n",
                bf16_peak ? "BF16 dot-product" : "FP32 FMA", peak_after.gflops, peak_before.gflops);
  return ok ? 0 : 1;
}
