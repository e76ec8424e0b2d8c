// cmd_compare.cpp — `posgrad compare`: the position-encoding comparison experiment.
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "compare/compare.h"
#include "compare/options.h"
#include "compare/report.h"
#include "data/process.h"
#include "dist/communicator.h"
#include "train/interrupt.h"
#include "train/options.h"

namespace posgrad::cli {

namespace {

// A signal after the last point that checks for one (the report's files moving into place): the work
// is complete, but the run still ends as interrupted runs do (130), saying so.
void late_signal(const std::string& dir) {
  if (!train::interrupt_requested()) return;
  throw train::Interrupted(std::string(train::signal_name(train::interrupt_signal())) +
                               " arrived as the report was being put in place; everything in " + dir +
                               " is complete (running the command again re-renders it)",
                           dir, 0, train::interrupt_signal());
}

}  // namespace

void add_compare(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "compare",
      "Train the same model with each position encoding and measure perplexity, accuracy, extrapolation, "
      "speed and memory (writes report.md, results.csv and plots); re-running the same command resumes");
  auto preset = std::make_shared<std::string>("quick");
  auto config = std::make_shared<std::string>();
  std::string presets;
  for (const auto& n : train::compare_preset_names()) presets += (presets.empty() ? "" : ", ") + n;
  sub->add_option("--preset", *preset,
                  "Named configuration that sets the defaults (options given explicitly win): quick (the article's "
                  "eight methods, about 16 minutes on 2 AVX-512 cores, 25 on 2 AVX2-only ones), medium (the same "
                  "methods trained 3x longer, more "
                  "tasks: about 40 minutes), full (every encoding, larger models: many hours), tiny (seconds, for "
                  "tests); docs/presets.md; one of " +
                      presets)
      ->check(CLI::IsMember(train::compare_preset_names()))
      ->capture_default_str();
  sub->add_option("--config", *config, "JSON file of option values (keys: the option names); applied after the preset");
  auto dry_run = std::make_shared<bool>(false);
  sub->add_flag(
      "--dry-run", *dry_run,
      "Resolve and validate the configuration (memory included) and the corpus against it (loaded and tokenised: "
      "every refusal of the real run before training), print it (JSON) and exit");
  auto given = add_table(sub, train::compare_options(), train::compare_preset("quick"));
  sub->footer("Defaults shown are the 'quick' preset's.\n\n" + exit_status_help());
  collect_extras(sub);
  sub->callback([sub, preset, config, given, dry_run] {
    check_extras(sub);
    auto values = explicit_values(train::compare_options(), *config, *given);
    train::CompareConfig cfg = train::compare_preset(*preset);
    apply_values(train::compare_options(), cfg, values);
    spdlog::info("configuration: preset '{}', given: {}", *preset, describe(values));
    if (*dry_run) {
      cfg.validate();
      require_device(Device::parse(cfg.base.device));  // what the run's first allocation would refuse
      train::check_same_experiment(cfg);               // what the run would refuse in an existing --out-dir
      DirectoryLock::check_available(cfg.out_dir);     // writable, and no other process writing there
      train::check_compare_data(cfg);                  // and what it would refuse of the corpus, before training
      train::check_kept_units(cfg);                    // and every finished unit it would keep
      const train::LocalJobs local =
          train::compare_jobs(cfg, dist::world().size(), train::experiment_units(cfg).size());
      if (local.jobs > 1)
        spdlog::info("the run: {} units at once (--jobs {}), {} OpenMP thread{} each", local.jobs, cfg.jobs,
                     local.threads_per_job, local.threads_per_job == 1 ? "" : "s");
      else
        spdlog::info("the run: one unit at a time (--jobs {})", cfg.jobs);
      fmt::print("{}\n", cfg.to_json().dump(2));
      return;
    }
    // Under mpirun / srun with several processes the units are shared among them (rank 0 reports), and
    // every process must run the same experiment (the threads and jobs of each may differ).
    require_one_configuration(cfg.to_json(), {"threads", "jobs"});
    train::install_interrupt_handlers();
    std::string report = train::run_compare(cfg);
    if (!report.empty()) spdlog::info("report: {}", report);
    late_signal(cfg.out_dir);
  });
}

void add_report(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "report",
      "Re-render report.md, results.csv, cost.csv and the plots of a finished comparison from its results.json "
      "(no training)");
  auto dir = std::make_shared<std::string>();
  auto* positional = sub->add_option("RUN_DIR", *dir, "Experiment directory of posgrad compare (holds results.json)");
  // --run as eval, sample and fill-mask take a run directory; one of the two is required.
  auto* flag = sub->add_option("--run", *dir, "The same directory, as a flag (as eval, sample and fill-mask take it)")
                   ->excludes(positional);
  sub->footer(exit_status_help());
  sub->callback([dir, positional, flag] {
    require_single_process("report");
    if (positional->count() + flag->count() == 0)
      throw CommandLineError("report: the experiment directory is required (RUN_DIR or --run)");
    train::install_interrupt_handlers();  // a signal while rendering: exit 130, the previous report kept
    spdlog::info("report: {}", train::rerender_report(*dir));
    late_signal(*dir);
  });
}

}  // namespace posgrad::cli
