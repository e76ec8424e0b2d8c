// cmd_train.cpp — `posgrad train`, `posgrad eval`, `posgrad sample`.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <sstream>

#include "cli/commands.h"
#include "cli/json_config.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/presets.h"

namespace posgrad::cli {

namespace {

std::string preset_help() {
  std::string s;
  for (const auto& n : train::train_preset_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Model + tokenizer + validation tokens of a run directory, for eval and sample.
struct RunModel {
  train::TrainConfig cfg;
  std::unique_ptr<data::Tokenizer> tok;
  Generator init{0}, dropout{0};
  std::unique_ptr<nn::GPT> model;
  int64_t step = 0;
};

RunModel load_run(const std::string& dir, const std::string& device) {
  RunModel r;
  train::LoadedCheckpoint ck = train::read_checkpoint(dir, /*with_optimizer=*/false);
  r.cfg = train::TrainConfig::from_json(ck.state.config);
  r.tok = data::Tokenizer::from_json(ck.state.tokenizer);
  r.model = std::make_unique<nn::GPT>(r.cfg.model, r.init, r.dropout);
  r.model->load_state_dict(ck.model);
  r.model->to(Device::parse(device));
  r.step = ck.state.step;
  return r;
}

std::vector<int64_t> parse_int_list(const std::string& s, const char* what) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      int64_t v = std::stoll(item, &used);
      if (used != item.size() || v <= 0) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw ValueError(std::string(what) + ": '" + item + "' is not a positive integer");
    }
  }
  if (out.empty()) throw ValueError(std::string(what) + ": empty list");
  return out;
}

}  // namespace

void add_train(CLI::App& app) {
  auto* sub = app.add_subcommand("train", "Pretrain a small decoder-only language model");
  auto cfg = std::make_shared<train::TrainConfig>(train::train_preset(preset_from_argv(argc_saved(), argv_saved(), "default")));
  auto preset = std::make_shared<std::string>("default");
  auto resume = std::make_shared<bool>(false);
  auto stop_after = std::make_shared<int64_t>(-1);
  sub->add_option("--preset", *preset, "Named configuration setting the defaults: " + preset_help())
      ->check(CLI::IsMember(train::train_preset_names()));
  auto config = std::make_shared<std::string>();
  sub->add_option("--config", *config, "JSON file of option values (keys are option names, e.g. {\"lr\": 0.001})");
  sub->add_flag("--resume", *resume, "Continue the run in --out-dir from its checkpoint");
  sub->add_option("--stop-after", *stop_after, "Stop after this many steps without a final checkpoint (testing)")
      ->group("");
  bind_train_options(sub, *cfg);
  // Every bound variable is owned by the callback (CLI11 writes into them while parsing).
  sub->callback([sub, cfg, config, preset, resume, stop_after] {
    if (!config->empty()) apply_json_config(sub, *config);
    train::Trainer t(*cfg, *resume);
    t.run(*stop_after);
    spdlog::info("done: {} steps, checkpoint in {}/checkpoint", t.current_step(), t.config().out_dir);
  });
}

void add_eval(CLI::App& app) {
  auto* sub = app.add_subcommand("eval", "Evaluate a trained run: loss, perplexity and accuracy at several context lengths");
  auto dir = std::make_shared<std::string>("runs/train");
  auto contexts = std::make_shared<std::string>("");
  auto windows = std::make_shared<int64_t>(64);
  auto device = std::make_shared<std::string>("cpu");
  sub->add_option("--run", *dir, "Run directory")->capture_default_str();
  sub->add_option("--contexts", *contexts, "Comma-separated context lengths (default: 1,2,4x the training length)");
  sub->add_option("--windows", *windows, "Validation windows per length")->capture_default_str();
  sub->add_option("--device", *device, "cpu or cuda[:N]")->capture_default_str();
  sub->callback([=] {
    RunModel r = load_run(*dir, *device);
    const int64_t block = r.cfg.model.block_size;
    std::vector<int64_t> ctx = contexts->empty() ? std::vector<int64_t>{block, 2 * block, 4 * block}
                                                 : parse_int_list(*contexts, "--contexts");
    std::string text = data::load_corpus(r.cfg.corpus, r.cfg.data_dir);
    data::TokenDataset ds(text, *r.tok, block);
    fmt::print("run {} (step {}, pos={})\n{:>8} {:>10} {:>12} {:>10}\n", *dir, r.step, r.cfg.model.pos.kind, "context",
               "loss", "perplexity", "accuracy");
    for (int64_t c : ctx) {
      const int64_t limit = r.model->position_encoding().max_length();
      if (limit >= 0 && c > limit) {
        fmt::print("{:>8} {:>10} {:>12} {:>10}   ({} positions beyond the learned table of {})\n", c, "n/a", "n/a",
                   "n/a", c, limit);
        continue;
      }
      train::EvalResult e = train::evaluate_tokens(*r.model, ds.val(), c, *windows, 0, Device::parse(*device));
      fmt::print("{:>8} {:>10.4f} {:>12.3f} {:>10.4f}\n", c, e.loss, e.perplexity, e.accuracy);
    }
  });
}

void add_sample(CLI::App& app) {
  auto* sub = app.add_subcommand("sample", "Generate text from a trained run");
  auto dir = std::make_shared<std::string>("runs/train");
  auto prompt = std::make_shared<std::string>("\n");
  auto n = std::make_shared<int64_t>(500);
  auto temperature = std::make_shared<double>(0.8);
  auto top_k = std::make_shared<int64_t>(200);
  auto seed = std::make_shared<uint64_t>(1337);
  auto device = std::make_shared<std::string>("cpu");
  sub->add_option("--run", *dir, "Run directory")->capture_default_str();
  sub->add_option("--prompt", *prompt, "Text to continue");
  sub->add_option("--tokens", *n, "Tokens to generate")->capture_default_str();
  sub->add_option("--temperature", *temperature, "Softmax temperature (> 0)")->capture_default_str();
  sub->add_option("--top-k", *top_k, "Sample among the k most likely tokens (0: all)")->capture_default_str();
  sub->add_option("--seed", *seed, "Sampling seed")->capture_default_str();
  sub->add_option("--device", *device, "cpu or cuda[:N]")->capture_default_str();
  sub->callback([=] {
    RunModel r = load_run(*dir, *device);
    fmt::print("{}{}\n", *prompt,
               train::sample_text(*r.model, *r.tok, *prompt, *n, *temperature, *top_k, *seed, Device::parse(*device)));
  });
}

}  // namespace posgrad::cli
