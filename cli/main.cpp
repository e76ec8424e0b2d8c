// main.cpp — the `posgrad` command-line tool: train, eval, sample, compare, report, fill-mask, gradcheck,
// info.
// Output: results (tables, samples, --dry-run's configuration) on stdout; progress, logs and errors
// on stderr. Every failure ends with one "posgrad: error: ..." line naming the bad input and the
// exit status of exit_status_help().
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "compare/compare_dist.h"
#include "dist/communicator.h"
#include "tensor/errors.h"
#include "train/interrupt.h"
#include "train/trainer.h"

namespace posgrad::cli {

std::string exit_status_help() {
  return "Exit status: 0 success; 1 data or I/O error (a missing, unreadable or corrupt file, an unavailable "
         "device, out of memory); 2 usage error (an unknown option, a value out of range, a bad configuration file, "
         "a configuration too large for this machine); 3 numerical failure (non-finite loss, gradient or logits; "
         "the last good checkpoint is kept); 70 internal error (a bug in posgrad); 130 train, compare or report "
         "interrupted by "
         "SIGINT or SIGTERM (a checkpoint was written; the message says how to resume; other subcommands end with the "
         "signal's own status, 128 + its number).";
}

void require_single_process(const std::string& subcommand) {
  const auto& w = dist::world();
  if (w.size() > 1)
    throw CommandLineError(
        "posgrad " + subcommand + " runs in one process, and this is one of " + std::to_string(w.size()) +
        " started by a launcher (mpirun, srun), which would all do the same work and write the same files: "
        "run it without the launcher");
}

void require_one_configuration(nlohmann::json config, const std::vector<std::string>& per_process) {
  auto& world = dist::world();
  if (world.size() == 1) return;
  for (const auto& key : per_process) config.erase(key);
  const std::vector<std::string> all = world.gather(config.dump(), 0);
  std::string problem;
  if (world.is_root()) {
    for (size_t r = 1; r < all.size() && problem.empty(); ++r) {
      const nlohmann::json other = nlohmann::json::parse(all[r]);
      for (const auto& [key, value] : config.items())
        if (!other.contains(key) || other.at(key) != value) {
          problem = fmt::format(
              "the processes of this job were given different configurations: {} is {} on rank 0 "
              "but {} on rank {} (give every process the same options)",
              key, value.dump(), other.contains(key) ? other.at(key).dump() : "missing", r);
          break;
        }
    }
  }
  problem = world.broadcast(problem, 0);
  if (!problem.empty()) throw CommandLineError(problem);  // every rank alike: no MPI_Abort
}

}  // namespace posgrad::cli

namespace {

// Under a launcher (mpirun, srun) with several processes, the failing rank names itself and ends the
// job (MPI_Abort): the others may be waiting for it inside a collective.
int fail(int status, const std::string& what) {
  auto& w = posgrad::dist::world();
  if (w.size() > 1)
    fmt::print(stderr, "posgrad: error: [rank {}/{}] {}\n", w.rank(), w.size(), what);
  else
    fmt::print(stderr, "posgrad: error: {}\n", what);
  std::fflush(stderr);
  posgrad::dist::abort_world(status);
  return status;
}

// An error every rank reaches alike before any collective (the command line cannot be parsed: CLI11's
// ParseError and cli::CommandLineError): rank 0 says it and every rank ends normally with the status. No
// MPI_Abort, which can end the job before the launcher has forwarded the message (Open MPI 4.1 drops
// an aborting rank's late stderr), and the launcher's exit status is the ranks' common one.
int fail_on_every_rank(int status, const std::string& what) {
  if (posgrad::dist::world().is_root()) fmt::print(stderr, "posgrad: error: {}\n", what);
  std::fflush(stderr);
  return status;
}

int run(int argc, char** argv);

}  // namespace

// MPI starts (MPI_Init_thread) only when a launcher started this process or POSGRAD_DIST=mpi asks
// for it (dist::launch_from_environment); otherwise the tool is one process with no MPI call.
int main(int argc, char** argv) {
  try {
    posgrad::dist::init_world(&argc, &argv);
  } catch (const posgrad::Error& e) {
    fmt::print(stderr, "posgrad: error: {}\n", e.what());
    return dynamic_cast<const posgrad::ValueError*>(&e) ? 2 : 1;
  }
  const int status = run(argc, argv);
  posgrad::dist::finalize_world();
  return status;
}

namespace {

// %& in the log pattern: the job of a comparison that runs several units at once ("[job 2/2] "), so
// that their interleaved lines say which unit they belong to; nothing elsewhere.
class JobPrefix : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string& p = posgrad::train::job_log_prefix();
    dest.append(p.data(), p.data() + p.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JobPrefix>(); }
};

void set_log_pattern(const std::string& pattern) {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<JobPrefix>('&').set_pattern(pattern);
  spdlog::set_formatter(std::move(f));
}

int run(int argc, char** argv) {
  using namespace posgrad;
  spdlog::set_default_logger(spdlog::stderr_color_mt("posgrad"));
  set_log_pattern("[%H:%M:%S] %&%^%l%$ %v");
  if (dist::world().size() > 1)
    set_log_pattern(fmt::format("[%H:%M:%S] [rank {}/{}] %&%^%l%$ %v", dist::world().rank(), dist::world().size()));
  CLI::App app{"posgrad — train small transformers and compare position encodings, with real measurements"};
  app.require_subcommand(1);
  app.footer(cli::exit_status_help());
  cli::add_train(app);
  cli::add_eval(app);
  cli::add_sample(app);
  cli::add_compare(app);
  cli::add_report(app);
  cli::add_fill_mask(app);
  cli::add_gradcheck(app);
  cli::add_info(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // No first word, a first word that is no subcommand, or an option before the subcommand, is named (CLI11
    // would only say that a subcommand is required).
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || (argc > 1 && sub->check_name(argv[1]));
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (argc == 1) return fail_on_every_rank(2, "a subcommand is required (one of " + names + "; see --help)");
    const std::string first = argv[1];
    if (first.size() > 1 && first[0] == '-')
      return fail_on_every_rank(2, "unknown option '" + first.substr(0, first.find('=')) +
                                       "' before the subcommand (the first word is one of " + names +
                                       "; its options follow it; see --help)");
    if (!known) return fail_on_every_rank(2, "unknown subcommand '" + first + "' (one of " + names + "; see --help)");
    return fail_on_every_rank(2, std::string(e.what()) + " (see --help)");
  } catch (const cli::CommandLineError& e) {
    return fail_on_every_rank(2, e.what());
  } catch (const train::Interrupted& e) {
    // Shell-quoted, so that the line can be pasted whatever the directory is called.
    auto quote = [](const std::string& s) {
      if (!s.empty() &&
          s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=,:+@") ==
              std::string::npos)
        return s;
      std::string q = "'";
      for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
      return q + "'";
    };
    std::string resume;
    if (app.got_subcommand("train")) {
      resume = quote(argv[0]) + " train --out-dir " + quote(e.run_dir) + " --resume";
    } else {
      for (int i = 0; i < argc; ++i) resume += (i ? " " : "") + quote(argv[i]);
    }
    if (dist::world().size() > 1)
      resume += fmt::format("   (with the same launcher and {} processes, e.g. mpirun -np {} ...)",
                            dist::world().size(), dist::world().size());
    if (dist::world().is_root()) fmt::print(stderr, "posgrad: {}\nposgrad: to continue, run: {}\n", e.what(), resume);
    return 130;
  } catch (const train::NonFiniteLoss& e) {
    return fail(3, e.what());
  } catch (const ValueError& e) {  // UsageError included
    return fail(2, e.what());
  } catch (const Error& e) {  // IoError, DeviceError, and errors of shapes or indices that input caused
    return fail(1, e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    return fail(1, e.what());
  } catch (const std::bad_alloc&) {
    return fail(1,
                "out of memory (the configuration's estimate fitted, the allocation did not: reduce --batch-size "
                "or the model size)");
  } catch (const std::exception& e) {
    return fail(70, std::string("internal error (a bug in posgrad; please report it): ") + e.what());
  }
  // Results that could not be written (a full disk, a closed pipe) are a failure, not a success.
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return fail(1, std::string("cannot write the output: ") + std::strerror(errno));
  return 0;
}

}  // namespace
