// cmd_compare.cpp — `posgrad compare`: the position-encoding comparison experiment.
#include <spdlog/spdlog.h>

#include <sstream>

#include "cli/commands.h"
#include "cli/json_config.h"
#include "train/compare.h"

namespace posgrad::cli {

namespace {

template <typename T>
std::vector<T> parse_list(const std::string& s, const char* what) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    if constexpr (std::is_same_v<T, std::string>) {
      out.push_back(item);
    } else {
      try {
        size_t used = 0;
        long long v = std::stoll(item, &used);
        if (used != item.size() || v <= 0) throw std::invalid_argument(item);
        out.push_back(static_cast<T>(v));
      } catch (const std::exception&) {
        throw ValueError(std::string(what) + ": '" + item + "' is not a positive integer");
      }
    }
  }
  if (out.empty()) throw ValueError(std::string(what) + " is empty");
  return out;
}

template <typename T>
std::string join(const std::vector<T>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str();
}

}  // namespace

void add_compare(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "compare", "Train the same model with each position encoding and measure perplexity, accuracy, extrapolation, "
                 "speed and memory (writes report.md, results.csv and plots)");
  const std::string preset_name = preset_from_argv(argc_saved(), argv_saved(), "quick");
  auto cfg = std::make_shared<train::CompareConfig>();
  try {
    *cfg = train::compare_preset(preset_name);
  } catch (const ValueError&) {
    *cfg = train::compare_preset("quick");  // CLI11's check below reports the bad --preset
  }
  // --out-dir binds to cfg->base.out_dir; the experiment uses it as its own directory.
  cfg->base.out_dir = cfg->out_dir;
  auto preset = std::make_shared<std::string>("quick");
  auto methods = std::make_shared<std::string>(join(cfg->methods));
  auto seeds = std::make_shared<std::string>(join(cfg->seeds));
  auto mults = std::make_shared<std::string>(join(cfg->eval_multipliers));
  sub->add_option("--preset", *preset, "quick (default: all seven methods in <= 15 min on 2 cores), full (hours), tiny (tests)")
      ->check(CLI::IsMember(train::compare_preset_names()));
  auto config = std::make_shared<std::string>();
  sub->add_option("--config", *config, "JSON file of option values (keys are option names)");
  sub->add_option("--methods", *methods, "Comma-separated encodings to compare")->capture_default_str();
  sub->add_option("--seeds", *seeds, "Comma-separated seeds (results are mean ± std over them)")->capture_default_str();
  sub->add_option("--eval-multipliers", *mults, "Evaluation lengths as multiples of the training length")
      ->capture_default_str();
  sub->add_option("--eval-tokens", cfg->eval_tokens, "Validation tokens scored per evaluation length")
      ->capture_default_str();
  sub->add_option("--task", cfg->task, "Synthetic task: copy or reverse")->capture_default_str()->group("Synthetic task");
  sub->add_option("--task-length", cfg->task_length, "Synthetic task: training sequence length")
      ->capture_default_str()->group("Synthetic task");
  sub->add_option("--task-iters", cfg->task_iters, "Synthetic task: training steps")->capture_default_str()
      ->group("Synthetic task");
  bind_train_options(sub, cfg->base);
  sub->get_option("--out-dir")->description("Experiment directory (one run directory per method and seed inside)");
  // Every bound variable is owned by the callback (CLI11 writes into them while parsing).
  sub->callback([sub, cfg, config, preset, methods, seeds, mults] {
    if (!config->empty()) apply_json_config(sub, *config);
    cfg->out_dir = cfg->base.out_dir;
    cfg->methods = parse_list<std::string>(*methods, "--methods");
    cfg->seeds = parse_list<uint64_t>(*seeds, "--seeds");
    cfg->eval_multipliers = parse_list<int64_t>(*mults, "--eval-multipliers");
    std::string report = train::run_compare(*cfg);
    spdlog::info("report: {}", report);
  });
}

}  // namespace posgrad::cli
