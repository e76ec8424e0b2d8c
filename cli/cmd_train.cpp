// cmd_train.cpp — `posgrad train`, `posgrad eval`, `posgrad sample`.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>

#include "cli/commands.h"
#include "cli/options.h"
#include "compare/studies/encoder/encoder.h"
#include "data/corpus.h"
#include "data/dataset.h"
#include "data/process.h"
#include "dist/communicator.h"
#include "dist/nccl_communicator.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/interrupt.h"
#include "train/options.h"
#include "train/presets.h"
#include "train/trainer.h"

namespace posgrad::cli {

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Command-level settings of `train` (not part of the run's configuration).
struct TrainCommand {
  std::string preset = "default", config;
  bool resume = false, dry_run = false;
  int64_t stop_after = -1;
  std::shared_ptr<GivenText> given;
};

// The configuration `train` runs with: without --resume, the preset, then --config, then the
// command line; with --resume, the checkpoint's configuration with the explicit options applied
// (each change logged).
// With --resume and `hold`, the run directory is held (data/process.h) before its checkpoint is read.
train::TrainConfig resolve(const TrainCommand& c, CLI::App* sub, std::unique_ptr<DirectoryLock>* hold) {
  auto values = explicit_values(train::train_options(), c.config, *c.given);
  if (!c.resume) {
    train::TrainConfig cfg = train::train_preset(c.preset);
    apply_values(train::train_options(), cfg, values);
    spdlog::info("configuration: preset '{}', given: {}", c.preset, describe(values));
    return cfg;
  }
  if (sub->get_option("--preset")->count() > 0)
    throw UsageError(
        "--preset cannot be combined with --resume: the run's saved configuration is the base; give "
        "single options to change them");
  std::string dir = train::train_preset(c.preset).out_dir;
  for (const auto& [name, v] : values)
    if (name == "out_dir") dir = std::get<std::string>(v);
  if (hold && std::filesystem::is_directory(dir)) *hold = std::make_unique<DirectoryLock>(dir);
  train::TrainConfig cfg = train::read_checkpoint_config(dir);
  for (const std::string& change : train::apply_resume_overrides(cfg, values))
    spdlog::info("resume: {} (given explicitly)", change);
  cfg.out_dir = dir;
  return cfg;
}

void run_train(const TrainCommand& c, CLI::App* sub) {
  // Under mpirun / srun with several processes: data-parallel over them, rank 0 logging progress.
  dist::Communicator& world = dist::world();
  if (!world.is_root()) spdlog::set_level(spdlog::level::warn);
  std::unique_ptr<DirectoryLock> hold;  // the Trainer holds the directory too; this covers reading it
  train::TrainConfig cfg = resolve(c, sub, c.dry_run || !world.is_root() ? nullptr : &hold);
  if (c.dry_run) {
    cfg.validate();
    require_device(Device::parse(cfg.device));  // what the run's first allocation would refuse
    const std::string corpus = data::corpus_path(cfg.corpus, cfg.data_dir);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(corpus, ec))
      throw IoError("corpus '" + corpus + "' is missing or not a regular file (--corpus " + cfg.corpus + ")");
    const auto e = train::estimate_memory(cfg, cfg.model.block_size);
    spdlog::info("memory estimate: {} (parameters and optimizer state {}, activations {}); this machine has {}",
                 train::format_bytes(e.total()), train::format_bytes(e.parameter_bytes),
                 train::format_bytes(e.activation_bytes), train::format_bytes(train::physical_memory_bytes()));
    fmt::print("{}\n", cfg.to_json().dump(2));
    return;
  }
  if (world.size() > 1) require_one_configuration(cfg.to_json(), {"threads"});
  train::install_interrupt_handlers();
  // CUDA tensors under a launcher: NCCL when every process can start it, else MPI through host memory
  // (the same bits); every rank reaches the same choice (dist::make_device_communicator). Every rank
  // has the same --device here (require_one_configuration), so all of them call it or none.
  dist::DeviceCommunicator nccl;
  if (world.size() > 1 && cfg.device.rfind("cuda", 0) == 0) {
    nccl = dist::make_device_communicator(world);
    if (nccl.comm) {
      spdlog::info("gradients summed over {}", nccl.why);
      if (cfg.device != "cuda")
        spdlog::warn("--device {}: under NCCL each process takes the GPU of its rank on its node instead", cfg.device);
    } else {
      spdlog::info("gradients summed through host memory over MPI, not NCCL: {}; every process on {}", nccl.why,
                   cfg.device);
    }
  }
  train::Trainer t(cfg, c.resume, nccl.comm ? nccl.comm.get() : &world);
  t.run(c.stop_after);
  spdlog::info("done: {} steps, checkpoint in {}/checkpoint", t.current_step(), t.config().out_dir);
}

// Neither kind of run in `dir`: say what each kind would hold (IoError, exit 1).
void require_some_run(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir + "/encoder.safetensors", ec) || fs::exists(dir + "/checkpoint", ec) ||
      fs::exists(dir + "/checkpoint.old", ec))
    return;
  throw IoError("no run in '" + dir + "'" + (fs::exists(dir, ec) ? "" : " (no such directory)") +
                ": a decoder run (posgrad train, or <compare out_dir>/<method>/seed<k>) holds checkpoint/state.json; "
                "an encoder of posgrad compare --track encoder|both holds encoder.safetensors, in "
                "<compare out_dir>/encoder/<method>/seed<k>");
}

// The decoder run in `dir` (train::load_model) on `device`. longest_context(cfg): the longest sequence
// the caller will run, from the run's configuration.
std::unique_ptr<train::LoadedModel> load_run(const std::string& dir, const std::string& device,
                                             const std::function<int64_t(const train::TrainConfig&)>& longest_context) {
  // An encoder of the comparison's encoder track (compare/studies/encoder/encoder.h) is no decoder run: say what reads
  // it.
  if (std::filesystem::exists(dir + "/encoder.safetensors") && !std::filesystem::exists(dir + "/checkpoint"))
    throw IoError("'" + dir +
                  "' holds a bidirectional encoder of the encoder track, not a decoder run: use "
                  "posgrad fill-mask --run " +
                  dir + " (and posgrad eval --run " + dir + " for its masked-token accuracy)");
  auto r = train::load_model(dir, longest_context);
  const Device dev = train::parse_run_device(device, r->config.model.pos.kind);
  r->model->to(dev);
  return r;
}

// `posgrad eval` on an encoder of the comparison's encoder track: masked-token loss and accuracy
// (BERT's 15% selection and 80/10/10 rule, fixed windows and masks) on the validation split of the
// text it was pretrained on, at the pretraining length and 2x, 4x (or --contexts).
void eval_encoder(const train::EvalOptions& o) {
  if (o.device != "cpu")
    throw UsageError("--device " + o.device + ": an encoder of the encoder track is evaluated on the CPU");
  const auto enc = train::load_encoder(o.run);
  if (enc->corpus.is_null() || enc->length <= 0)
    throw IoError(o.run +
                  "/encoder.safetensors does not record the text it was pretrained on (saved by an older "
                  "posgrad); measure it again with posgrad compare --track encoder");
  const int64_t L = enc->length, positions = enc->model->config().model.block_size;
  const std::vector<int64_t> ctx = o.contexts.empty() ? std::vector<int64_t>{L, 2 * L, 4 * L} : o.contexts;
  std::string text;
  try {
    const int64_t max_bytes = enc->corpus.at("max_corpus_bytes").get<int64_t>();
    // Recorded by absolute path and content hash: read from any directory, refused when it changed.
    text = enc->corpus.contains("path")
               ? data::load_recorded_corpus(enc->corpus, max_bytes, "the encoder in '" + o.run + "'")
               : data::load_corpus(enc->corpus.at("corpus").get<std::string>(), enc->corpus.value("data_dir", ""),
                                   max_bytes);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(o.run + "/encoder.safetensors: malformed corpus record (" + e.what() + ")");
  }
  data::TokenDataset ds(text, *enc->tokenizer, L);
  const int64_t val = static_cast<int64_t>(ds.val().size());
  // Every length checked before anything is printed: those given with --contexts must fit; of the
  // default ones, those longer than the validation split print n/a, and the pretraining length must fit.
  for (int64_t c : ctx) {
    if (val >= c) continue;
    if (!o.contexts.empty())
      throw UsageError("--contexts: a window of " + std::to_string(c) + " tokens does not fit in the " +
                       std::to_string(val) + " validation tokens");
    if (c == L)
      throw UsageError("the validation split of the encoder's text has " + std::to_string(val) +
                       " tokens: too few for one window of its pretraining length " + std::to_string(L));
  }
  fmt::print("run {} (encoder, pos={}, masked LM, pretrained at {} tokens)\n{:>8} {:>10} {:>12} {:>8} {:>8}\n", o.run,
             enc->method, L, "context", "mlm-loss", "mlm-accuracy", "windows", "masked");
  // A learned table's rows past the pretraining length were never trained: no number from them.
  const int64_t trained = enc->model->backbone->position_encoding().trained_max_length(L);
  for (int64_t c : ctx) {
    if (c > positions) {
      fmt::print("{:>8} {:>10} {:>12} {:>8} {:>8}   (beyond the encoder's {} positions)\n", c, "n/a", "n/a", 0, 0,
                 positions);
      continue;
    }
    if (trained >= 0 && c > trained) {
      fmt::print("{:>8} {:>10} {:>12} {:>8} {:>8}   (positions past {} were never trained)\n", c, "n/a", "n/a", 0, 0,
                 trained);
      continue;
    }
    if (val < c) {
      fmt::print("{:>8} {:>10} {:>12} {:>8} {:>8}   (the validation split's {} tokens hold no window of {})\n", c,
                 "n/a", "n/a", 0, 0, val, c);
      continue;
    }
    const train::MlmScore s = train::evaluate_mlm(*enc->model, ds.val(), c, o.windows, 16, 0);
    if (!std::isfinite(s.loss))
      throw train::NonFiniteLoss("the encoder in '" + o.run + "' gives a non-finite masked-token loss (" +
                                 std::to_string(s.loss) + ") at " + std::to_string(c) +
                                 " tokens: its weights or logits are not finite");
    fmt::print("{:>8} {:>10.4f} {:>12.4f} {:>8} {:>8}\n", c, s.loss, s.accuracy, s.windows, s.masked);
  }
}

template <typename S>
S resolve_simple(const opt::Table<S>& table, const std::string& config, const GivenText& given) {
  S s{};
  apply_values(table, s, explicit_values(table, config, given));
  return s;
}

}  // namespace

void add_train(CLI::App& app) {
  auto* sub = app.add_subcommand("train", "Pretrain a small decoder-only language model");
  auto c = std::make_shared<TrainCommand>();
  sub->add_option("--preset", c->preset,
                  "Named configuration that sets the defaults (options given explicitly win): " +
                      join(train::train_preset_names()))
      ->check(CLI::IsMember(train::train_preset_names()))
      ->capture_default_str();
  sub->add_option("--config", c->config,
                  "JSON file of option values, keys as in config.json (e.g. {\"lr\": 0.002, \"pos\": \"t5\"}); "
                  "applied after the preset, before the command line");
  sub->add_flag("--resume", c->resume,
                "Continue the run in --out-dir from its checkpoint: its saved configuration is the base, options "
                "given explicitly change it (logged); model and data options cannot change");
  sub->add_flag(
      "--dry-run", c->dry_run,
      "Resolve and validate the configuration, print it (config.json form) and the memory estimate, and exit");
  sub->add_option("--stop-after", c->stop_after, "Stop after this many steps without a final checkpoint (testing)")
      ->group("");
  c->given = add_table(sub, train::train_options(), train::train_preset("default"));
  sub->footer("Defaults shown are the 'default' preset's.\n\n" + exit_status_help());
  collect_extras(sub);
  sub->callback([c, sub] {
    check_extras(sub);
    run_train(*c, sub);
  });
}

void add_eval(CLI::App& app) {
  auto* sub = app.add_subcommand("eval",
                                 "Evaluate a trained run: loss, perplexity and accuracy at several context lengths "
                                 "(an encoder of compare --track encoder|both: masked-token loss and accuracy)");
  auto config = std::make_shared<std::string>();
  sub->add_option("--config", *config, "JSON file of option values (keys: the option names)");
  auto given = add_table(sub, train::eval_options(), train::EvalOptions{});
  sub->footer(
      "The run's corpus is read from the absolute path recorded at training, from any working directory; "
      "when that file's size or FNV-1a hash differs from the recorded ones, eval refuses it (exit 1, naming "
      "both). Non-finite scores (a NaN weight) exit 3. A learned table's positions past the training "
      "length print n/a.\n\n" +
      exit_status_help());
  collect_extras(sub);
  sub->callback([sub, config, given] {
    check_extras(sub);
    require_single_process("eval");
    const auto o = resolve_simple(train::eval_options(), *config, *given);
    require_some_run(o.run);
    if (std::filesystem::exists(o.run + "/encoder.safetensors") && !std::filesystem::exists(o.run + "/checkpoint"))
      return eval_encoder(o);
    // The default lengths are 1, 2 and 4 times the run's training length.
    std::vector<int64_t> ctx;
    const auto r = load_run(o.run, o.device, [&](const train::TrainConfig& cfg) {
      const int64_t b = cfg.model.block_size;
      ctx = o.contexts.empty() ? std::vector<int64_t>{b, 2 * b, 4 * b} : o.contexts;
      return *std::max_element(ctx.begin(), ctx.end());
    });
    const train::TrainConfig& cfg = r->config;
    const int64_t block = cfg.model.block_size;
    // Recorded by absolute path and content hash: read from any directory, refused when it changed.
    std::string text = r->corpus.is_null()
                           ? data::load_corpus(cfg.corpus, cfg.data_dir, cfg.max_corpus_bytes)
                           : data::load_recorded_corpus(r->corpus, cfg.max_corpus_bytes, "the run in '" + o.run + "'");
    data::TokenDataset ds(text, *r->tokenizer, block);
    const int64_t val = static_cast<int64_t>(ds.val().size());
    // Every length checked before anything is printed. Lengths given with --contexts must fit; of the
    // default ones, those longer than the validation split print n/a, and only the training length
    // itself must fit.
    for (int64_t c : ctx) {
      if (val >= c + 1) continue;
      if (!o.contexts.empty())
        throw UsageError("--contexts: a window of " + std::to_string(c) + " tokens needs " + std::to_string(c + 1) +
                         " validation tokens; the validation split has " + std::to_string(val));
      if (c == block)
        throw UsageError("the validation split of the run's text has " + std::to_string(val) +
                         " tokens: too few for one window of its training length " + std::to_string(block) +
                         " (it needs " + std::to_string(block + 1) + ")");
    }
    fmt::print("run {} (step {}, pos={})\n{:>8} {:>10} {:>12} {:>10} {:>8}\n", o.run, r->step, cfg.model.pos.kind,
               "context", "loss", "perplexity", "accuracy", "windows");
    for (int64_t c : ctx) {
      const int64_t limit = r->model->position_encoding().max_length();
      if (limit >= 0 && c > limit) {
        fmt::print("{:>8} {:>10} {:>12} {:>10} {:>8}   ({} positions past the learned table's {})\n", c, "n/a", "n/a",
                   "n/a", 0, c - limit, limit);
        continue;
      }
      if (val < c + 1) {
        fmt::print("{:>8} {:>10} {:>12} {:>10} {:>8}   (the validation split's {} tokens hold no window of {})\n", c,
                   "n/a", "n/a", "n/a", 0, val, c);
        continue;
      }
      train::EvalResult e = train::evaluate_tokens(*r->model, ds.val(), c, o.windows, 0, Device::parse(o.device));
      if (!std::isfinite(e.loss))
        throw train::NonFiniteLoss("the run in '" + o.run + "' gives a non-finite loss (" + std::to_string(e.loss) +
                                   ") at context " + std::to_string(c) + ": its weights or logits are not finite");
      fmt::print("{:>8} {:>10.4f} {:>12.3f} {:>10.4f} {:>8}\n", c, e.loss, e.perplexity, e.accuracy, e.windows);
    }
  });
}

void add_sample(CLI::App& app) {
  auto* sub =
      app.add_subcommand("sample", "Generate text from a trained run (the text goes to stdout, the log to stderr)");
  auto config = std::make_shared<std::string>();
  sub->add_option("--config", *config, "JSON file of option values (keys: the option names)");
  auto given = add_table(sub, train::sample_options(), train::SampleOptions{});
  sub->footer(exit_status_help());
  collect_extras(sub);
  sub->callback([sub, config, given] {
    check_extras(sub);
    require_single_process("sample");
    const auto o = resolve_simple(train::sample_options(), *config, *given);
    const auto r = load_run(o.run, o.device, [](const train::TrainConfig& cfg) { return cfg.model.block_size; });
    const auto t0 = std::chrono::steady_clock::now();
    const std::string text = train::sample_text(*r->model, *r->tokenizer, o.prompt, o.tokens, o.temperature, o.top_k,
                                                o.seed, Device::parse(o.device), o.kv_cache);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("{}{}\n", o.prompt, text);
    spdlog::info("{} tokens in {:.2f} s ({:.0f} tokens/s)", o.tokens, s,
                 static_cast<double>(o.tokens) / std::max(s, 1e-9));
  });
}

}  // namespace posgrad::cli
