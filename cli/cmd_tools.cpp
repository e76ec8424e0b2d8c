// cmd_tools.cpp — `posgrad gradcheck` (the op registry's checks as a table) and `posgrad info`.
#include <omp.h>
#include <spdlog/spdlog.h>

#include <filesystem>

#include "autograd/registry.h"
#include "cli/commands.h"
#include "data/corpus.h"
#include "dist/communicator.h"
#include "nn/posenc/position_encoding.h"
#include "tensor/kernels/kernels.h"
#include "train/presets.h"

namespace posgrad::cli {

void add_gradcheck(CLI::App& app) {
  auto* sub = app.add_subcommand("gradcheck",
                                 "Check every registered op's backward against central finite differences (double)");
  auto filter = std::make_shared<std::string>("");
  sub->add_option("--filter", *filter, "Only ops whose name contains this text");
  sub->footer(exit_status_help());
  sub->callback([filter] {
    int failed = 0, run = 0;
    fmt::print("{:<48} {:>6} {:>12} {:>12}  {}\n", "op", "inputs", "max_abs_err", "max_rel_err", "status");
    for (size_t i = 0; i < nn::all_op_cases().size(); ++i) {
      const OpCase& c = nn::all_op_cases()[i];
      if (!filter->empty() && c.name.find(*filter) == std::string::npos) continue;
      Generator gen(7 + i);
      GradcheckResult r = gradcheck(c.fn, c.inputs(gen, DType::Float64), c.grad);
      double abs_err = 0, rel_err = 0;
      for (const auto& in : r.inputs) {
        abs_err = std::max(abs_err, in.max_abs_err);
        rel_err = std::max(rel_err, in.max_rel_err);
      }
      ++run;
      failed += r.ok ? 0 : 1;
      fmt::print("{:<48} {:>6} {:>12.3e} {:>12.3e}  {}\n", c.name, r.inputs.size(), abs_err, rel_err,
                 r.ok ? "ok" : "FAILED");
      if (!r.ok) fmt::print("{}", r.summary());
    }
    fmt::print("{} ops checked, {} failed\n", run, failed);
    if (run == 0) throw ValueError("no op matches --filter '" + *filter + "'");
    if (failed) throw Error(std::to_string(failed) + " gradient checks failed");
  });
}

void add_info(CLI::App& app) {
  auto* sub = app.add_subcommand("info", "Show the build, the hardware posgrad sees, and what it can train");
  sub->footer(exit_status_help());
  sub->callback([] {
    fmt::print("posgrad 0.1.0\n");
    std::string cuda = "not built";
    if (POSGRAD_HAVE_CUDA) {
      const int n = cuda_available() ? backend(DeviceType::CUDA).device_count() : 0;
      cuda = n > 0 ? fmt::format("built, {} GPU{} present (cuda:0{})", n, n == 1 ? "" : "s",
                                 n == 1 ? std::string() : fmt::format(" .. cuda:{}", n - 1))
                   : "built, no GPU present";
    }
    fmt::print("CUDA backend : {}\n", cuda);
    fmt::print("OpenMP       : {} threads\n", omp_get_max_threads());
    fmt::print("processes    : {} ({}, this one rank {}; MPI {}, NCCL {})\n", dist::world().size(),
               dist::world().name(), dist::world().rank(), dist::mpi_built() ? "built" : "not built",
               dist::nccl_built() ? "built" : "not built");
    __builtin_cpu_init();
    fmt::print("CPU SIMD     : {}\n", __builtin_cpu_supports("avx512f") ? "AVX-512"
                                      : __builtin_cpu_supports("avx2")  ? "AVX2"
                                                                        : "portable");
    fmt::print("bf16 products: {} (--precision bf16)\n", kernels::matmul_bf16_path());
    std::string kinds, presets;
    for (const auto& k : nn::position_encoding_kinds()) kinds += (kinds.empty() ? "" : " ") + k;
    for (const auto& p : train::train_preset_names()) presets += (presets.empty() ? "" : " ") + p;
    fmt::print("encodings    : {}\ntrain presets: {}\nops          : {} registered cases\n", kinds, presets,
               nn::all_op_cases().size());
    for (const char* corpus : {"kjv", "shakespeare"}) {
      try {
        std::string text = data::load_corpus(corpus, "");
        fmt::print("corpus {:<11}: {} bytes\n", corpus, text.size());
      } catch (const Error& e) {
        fmt::print("corpus {:<11}: unavailable ({})\n", corpus, e.what());
      }
    }
  });
}

}  // namespace posgrad::cli
