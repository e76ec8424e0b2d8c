// trainer.cpp — see trainer.h.
#include "train/trainer.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autograd/ops.h"
#include "data/corpus.h"
#include "data/fileio.h"
#include "dist/communicator.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/interrupt.h"
#include "train/options.h"

namespace posgrad::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- config -----------------------------------------------------------------------------------

void TrainConfig::validate() const {
  opt::check_all(train_options(), *this);
  model.validate();
  POSGRAD_CHECK(min_lr <= lr, UsageError, "--min-lr (", min_lr, ") must not exceed --lr (", lr, ")");
  (void)parse_run_device(device, model.pos.kind);
  check_memory(*this, model.block_size);
}

Device parse_run_device(const std::string& device, const std::string& pos_kind) {
  Device dev = Device::cpu();
  try {
    dev = Device::parse(device);
  } catch (const Error& e) {
    throw UsageError(std::string("--device: ") + e.what());
  }
  POSGRAD_CHECK(!(dev.is_cuda() && nn::position_encoding_entry(pos_kind).cpu_only), UsageError, "--device ", device,
                ": the ", pos_kind, " position encoding has no CUDA attention kernel; use --device cpu");
  return dev;
}

json TrainConfig::to_json() const { return opt::to_json(train_options(), *this); }

TrainConfig TrainConfig::from_json(const json& j, const std::string& source) {
  TrainConfig c;
  opt::from_json(train_options(), c, j, source, /*require_all=*/true);
  return c;
}

std::vector<std::string> apply_resume_overrides(TrainConfig& saved,
                                                const std::vector<std::pair<std::string, opt::Value>>& overrides) {
  std::vector<std::string> changes;
  for (const auto& [name, value] : overrides) {
    const auto* o = opt::find(train_options(), name);
    POSGRAD_CHECK(o, UsageError, "unknown option '", name, "'");
    const opt::Value before = o->get(saved);
    if (before == value) continue;
    POSGRAD_CHECK(o->spec.resumable, UsageError, o->spec.flag(),
                  " cannot change when resuming (the run was trained with ", opt::format(before), ", asked for ",
                  opt::format(value),
                  "): it defines the model or the data; start a new run in another --out-dir instead");
    o->set(saved, value);
    changes.push_back(o->spec.flag() + " " + opt::format(before) + " -> " + opt::format(value));
  }
  return changes;
}

// ---- construction ------------------------------------------------------------------------------

Trainer::~Trainer() = default;

Trainer::Trainer(TrainConfig cfg, bool resume, dist::Communicator* comm) : cfg_(std::move(cfg)) {
  cfg_.validate();
  if (comm && comm->size() > 1) {
    dp_ = std::make_unique<DataParallel>(*comm, cfg_.batch_size);
    writes_ = comm->is_root();
  }
  // One writer per run directory: a second process fails here, before it reads or writes anything.
  if (writes_) lock_ = std::make_unique<DirectoryLock>(cfg_.out_dir);
  if (resume) {
    // The checkpoint defines the model and the data: every option fixed on resume must match.
    const TrainConfig saved = read_checkpoint_config(cfg_.out_dir);
    for (const auto& o : train_options())
      POSGRAD_CHECK(o.spec.resumable || o.get(saved) == o.get(cfg_), UsageError, "resuming ", cfg_.out_dir, ": ",
                    o.spec.flag(), " is ", opt::format(o.get(cfg_)), " but the checkpoint was trained with ",
                    opt::format(o.get(saved)));
  }
  POSGRAD_CHECK(resume || !fs::exists(cfg_.out_dir + "/checkpoint/state.json"), UsageError, "--out-dir ", cfg_.out_dir,
                " already holds a run (its checkpoint would be overwritten): continue it with --resume, or train into "
                "another --out-dir");
  if (writes_) remove_stale_temporaries(cfg_.out_dir);
  // A fresh start in a directory with no checkpoint: what an abandoned attempt left (metrics of steps
  // that no checkpoint holds, a checkpoint folder without its state.json) is discarded, and said so,
  // so that metrics.jsonl never holds two runs.
  if (writes_ && !resume) {
    std::error_code ec;
    const bool partial = fs::exists(cfg_.out_dir + "/checkpoint", ec),
               metrics = fs::exists(cfg_.out_dir + "/metrics.jsonl", ec);
    if (partial || metrics) {
      spdlog::warn(
          "{}: {} of an earlier attempt with no complete checkpoint (no checkpoint/state.json): discarded, "
          "training starts at step 0",
          cfg_.out_dir,
          partial && metrics ? "the checkpoint folder and metrics.jsonl"
          : partial          ? "a checkpoint folder"
                             : "metrics.jsonl");
      fs::remove_all(cfg_.out_dir + "/checkpoint", ec);
      fs::remove(cfg_.out_dir + "/metrics.jsonl", ec);
    }
  }
  // Under a launcher the default starts from this process's share of the node (dist::init_world).
  governor_.emplace(cfg_.threads);
  precision_.emplace(kernels::parse_matmul_precision(cfg_.precision));
  device_ = Device::parse(cfg_.device);
  // Over NCCL each process trains on the GPU the communicator took for it (its rank on the node).
  if (device_.is_cuda() && dp_ && dp_->comm().device().is_cuda()) device_ = dp_->comm().device();
  if (device_.is_cuda()) (void)backend(DeviceType::CUDA);  // clear DeviceError when unavailable
  build();
  if (resume) load_checkpoint();
  if (dp_) dp_->comm().barrier();  // rank 0 has cleaned the run directory before anyone trains
}

void Trainer::build() {
  std::string text = data::load_corpus(cfg_.corpus, cfg_.data_dir, cfg_.max_corpus_bytes);
  tok_ = data::make_tokenizer(cfg_.tokenizer, text);
  corpus_record_ = data::corpus_record(cfg_.corpus, cfg_.data_dir, text);
  cfg_.model.vocab_size = tok_->vocab_size();
  check_memory(cfg_, cfg_.model.block_size);  // again, with the real vocabulary
  // Token ids are cached (memory-mapped on reuse) under the data home; the cache header holds
  // hashes of the text and the tokenizer, so a stale file is rebuilt.
  data_ = std::make_unique<data::TokenDataset>(text, *tok_, cfg_.model.block_size,
                                               data::token_cache_path(cfg_.corpus, *tok_));
  sampler_ = std::make_unique<data::BatchSampler>(data_->train(), cfg_.seed);
  init_gen_ = Generator(cfg_.seed);
  dropout_gen_ = Generator(cfg_.seed ^ 0x5eedd0u);
  model_ = std::make_unique<nn::GPT>(cfg_.model, init_gen_, dropout_gen_);
  model_->to(device_);
  auto groups = decay_groups(model_->named_parameters(), cfg_.weight_decay);
  if (cfg_.optimizer == "adamw")
    opt_ = std::make_unique<AdamW>(groups, AdamWOptions(cfg_.lr).betas(cfg_.beta1, cfg_.beta2));
  else
    opt_ = std::make_unique<SGD>(groups, SGDOptions(cfg_.lr).momentum(cfg_.momentum));
  sched_ = LRSchedule{cfg_.lr, cfg_.min_lr, cfg_.warmup_iters,
                      cfg_.lr_decay_iters > 0 ? cfg_.lr_decay_iters : cfg_.max_iters, cfg_.cosine};
}

// ---- the step ------------------------------------------------------------------------------------

StepStats training_step(nn::GPT& model, Optimizer& opt, const LRSchedule& sched, int64_t step, int64_t grad_accum,
                        double grad_clip, Device dev, const BatchFn& next_batch, DataParallel* dp) {
  auto t0 = std::chrono::steady_clock::now();
  StepStats st;
  st.step = step;
  st.lr = sched.at(step);
  opt.set_lr(st.lr);
  model.train();
  opt.zero_grad();
  double loss_sum = 0;
  const double share = dp ? dp->loss_weight() : 1.0;  // this rank's share of the global batch
  const double scale = share / static_cast<double>(grad_accum);
  // Without data parallelism the micro-batches' losses stay where they were computed and are read with
  // the gradient norm, in one transfer (on a GPU: the step's one synchronisation). A non-finite loss is
  // still reported by micro-batch, before the optimizer moves; its backward has run, which the
  // stopping step discards.
  std::vector<Tensor> losses;
  for (int64_t micro = 0; micro < grad_accum; ++micro) {
    auto [x, y] = dp ? dp->slice(next_batch()) : next_batch();
    x = x.to(dev);
    y = y.to(dev);
    Tensor loss = cross_entropy(model.forward(x), y);
    if (dp) {
      loss_sum += loss.item() * share;  // non-finite: checked after the sum below, so that every rank stops
    } else {
      losses.push_back(loss.detach());
    }
    (scale != 1.0 ? loss * scale : loss).backward();
    st.tokens += x.numel();
  }
  if (dp) {  // the gradients and the loss summed over the ranks, before clipping
    loss_sum = dp->reduce(model.parameters(), loss_sum);
    st.tokens = dp->global_tokens(st.tokens);
    if (!std::isfinite(loss_sum))
      throw NonFiniteLoss(detail::concat("loss is ", loss_sum, " at step ", step + 1, " (summed over ",
                                         dp->comm().size(), " processes)"));
  }
  std::vector<double> loss_values;
  st.grad_norm = clip_grad_norm(model.parameters(), grad_clip, losses, &loss_values);
  for (size_t micro = 0; micro < loss_values.size(); ++micro) {
    const double l = loss_values[micro];
    if (!std::isfinite(l))
      throw NonFiniteLoss(detail::concat("loss is ", l, " at step ", step + 1, " (micro-batch ", micro, ")"));
    loss_sum += l * share;
  }
  if (!std::isfinite(st.grad_norm))
    throw NonFiniteLoss(detail::concat("gradient norm is ", st.grad_norm, " at step ", step + 1));
  opt.step();
  st.loss = loss_sum / static_cast<double>(grad_accum);
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

StepStats Trainer::step() {
  StepStats st;
  try {
    st = training_step(
        *model_, *opt_, sched_, step_, cfg_.grad_accum, cfg_.grad_clip, device_,
        [this, micro = int64_t{0}]() mutable {
          auto batch = sampler_->next(cfg_.batch_size, cfg_.model.block_size);
          if (mix_) mix_(step_, micro++, batch.first, batch.second);
          return batch;
        },
        dp_.get());
  } catch (const NonFiniteLoss& e) {
    throw NonFiniteLoss(std::string(e.what()) + "; stopping — " +
                        (fs::exists(cfg_.out_dir + "/checkpoint/state.json")
                             ? "the last good checkpoint in " + cfg_.out_dir + " is kept"
                             : std::string("no checkpoint had been written yet")));
  }
  ++step_;
  return st;
}

std::vector<std::pair<std::string, double>> Trainer::group_grad_norms() const {
  std::vector<std::pair<std::string, std::vector<Tensor>>> groups;
  for (const auto& [name, p] : model_->named_parameters()) {
    // "blocks.3.attn.qkv.weight" -> "blocks.3.attn"; "wte.weight" -> "wte"
    size_t cut = name.find('.');
    if (name.rfind("blocks.", 0) == 0) cut = name.find('.', name.find('.', 7) + 1);
    std::string g = name.substr(0, cut);
    if (groups.empty() || groups.back().first != g) groups.emplace_back(g, std::vector<Tensor>{});
    groups.back().second.push_back(p);
  }
  std::vector<std::pair<std::string, double>> out;
  for (auto& [g, ps] : groups) out.emplace_back(g, grad_norm(ps));
  return out;
}

// ---- evaluation and loading a trained model -------------------------------------------------------

EvalResult Trainer::evaluate(int64_t context, int64_t max_windows, int64_t pos0) {
  return evaluate_tokens(*model_, data_->val(), context, max_windows, pos0, device_);
}

std::unique_ptr<LoadedModel> load_model(const std::string& run_dir,
                                        const std::function<int64_t(const TrainConfig&)>& longest_context) {
  LoadedCheckpoint ck = read_checkpoint(run_dir, /*with_optimizer=*/false);
  auto r = std::make_unique<LoadedModel>();
  r->config = TrainConfig::from_json(ck.state.config, "checkpoint " + run_dir);
  r->tokenizer = data::Tokenizer::from_json(ck.state.tokenizer);
  r->config.model.vocab_size = r->tokenizer->vocab_size();
  // No training here: the estimate is the model plus one evaluation batch at the longest context.
  TrainConfig sized = r->config;
  sized.batch_size = 1;
  check_memory(sized, longest_context(r->config));
  r->model = std::make_unique<nn::GPT>(r->config.model, r->init, r->dropout);
  r->model->load_state_dict(ck.model);
  r->step = ck.state.step;
  r->corpus = ck.state.corpus;
  return r;
}

// ---- the loop ----------------------------------------------------------------------------------------

void Trainer::log_metrics(const json& row) {
  if (!writes_) return;
  fs::create_directories(cfg_.out_dir);
  std::ofstream(cfg_.out_dir + "/metrics.jsonl", std::ios::app) << row.dump() << "\n";
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", long(s / 3600), long(s % 3600 / 60));
  else
    std::snprintf(buf, sizeof buf, "%ldm%02lds", long(s / 60), long(s % 60));
  return buf;
}

void Trainer::run(int64_t stop_after) {
  if (writes_) {
    fs::create_directories(cfg_.out_dir);
    write_file_atomic(cfg_.out_dir + "/config.json", cfg_.to_json().dump(2) + "\n");
  }
  const int64_t ckpt_every = cfg_.checkpoint_interval > 0 ? cfg_.checkpoint_interval : cfg_.eval_interval;
  spdlog::info("model: {} parameters ({} without position tables), {} layers, {} heads, {} wide, pos={}",
               model_->num_parameters(), model_->num_non_position_parameters(), cfg_.model.n_layer, cfg_.model.n_head,
               cfg_.model.n_embd, cfg_.model.pos.kind);
  spdlog::info("data: {} train / {} val tokens, vocab {}, batch {}x{} (x{} accumulation)", data_->train().size(),
               data_->val().size(), tok_->vocab_size(), cfg_.batch_size, cfg_.model.block_size, cfg_.grad_accum);
  if (cfg_.precision == "bf16")
    spdlog::info("matrix products in bf16 (float accumulation; weights, optimizer, softmax and norms in float): {}",
                 device_.is_cuda() ? "cublasGemmEx with bf16 operands, and the attention kernels' operands rounded"
                                   : kernels::matmul_bf16_path());
  if (dp_)
    spdlog::info("data-parallel: {} processes ({}), this one rank {} with rows {}..{} of each batch on {}",
                 dp_->comm().size(), dp_->comm().name(), dp_->comm().rank(), dp_->first_row(),
                 dp_->first_row() + dp_->rows() - 1, device_.str());
  double window_time = 0;
  int64_t window_tokens = 0, done_here = 0;
  auto start = std::chrono::steady_clock::now();
  while (step_ < cfg_.max_iters) {
    governor_->between_steps();
    StepStats st = step();
    ++done_here;
    window_time += st.seconds;
    window_tokens += st.tokens;
    const bool last = step_ == cfg_.max_iters;
    if (step_ % cfg_.log_interval == 0 || last || step_ == 1) {
      const double tokens_per_s = window_tokens / std::max(window_time, 1e-9);
      double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      double eta = elapsed / static_cast<double>(done_here) * static_cast<double>(cfg_.max_iters - step_);
      spdlog::info("step {:>5}/{} | loss {:.4f} | lr {:.2e} | grad {:.3f} | {:.0f} tok/s | ETA {}", step_,
                   cfg_.max_iters, st.loss, st.lr, st.grad_norm, tokens_per_s, format_eta(eta));
      log_metrics({{"step", step_},
                   {"train_loss", st.loss},
                   {"lr", st.lr},
                   {"grad_norm", st.grad_norm},
                   {"tokens_per_s", tokens_per_s}});
      train_curve_.emplace_back(step_, st.loss);
      window_time = 0;
      window_tokens = 0;
    }
    if (writes_ && (step_ % cfg_.eval_interval == 0 || last)) {  // rank 0 evaluates; the others go on
      auto norms = group_grad_norms();
      EvalResult ev = evaluate(cfg_.model.block_size, cfg_.eval_windows);
      spdlog::info("eval  {:>5} | val loss {:.4f} | ppl {:.3f} | acc {:.4f}", step_, ev.loss, ev.perplexity,
                   ev.accuracy);
      json gn = json::object();
      for (auto& [g, v] : norms) gn[g] = v;
      log_metrics({{"step", step_},
                   {"val_loss", ev.loss},
                   {"val_perplexity", ev.perplexity},
                   {"val_accuracy", ev.accuracy},
                   {"grad_norms", gn}});
      val_curve_.emplace_back(step_, ev.loss);
    }
    if (stop_after >= 0 && done_here >= stop_after) {
      spdlog::warn("stopping after {} steps without a final checkpoint (--stop-after)", done_here);
      if (dp_) dp_->comm().barrier();
      return;
    }
    const bool saved = step_ % ckpt_every == 0 || last;
    if (saved) save_checkpoint();
    if (dp_ ? dp_->interrupt_seen() : interrupt_requested()) {  // data-parallel: any rank's, seen by all
      if (!saved) save_checkpoint();
      throw Interrupted(detail::concat("interrupted by ", signal_name(interrupt_signal()), " at step ", step_, "/",
                                       cfg_.max_iters, "; checkpoint written to ", cfg_.out_dir, "/checkpoint"),
                        cfg_.out_dir, step_, interrupt_signal());
    }
  }
  if (done_here == 0) {
    spdlog::info("nothing to do: {} is at step {} of {}", cfg_.out_dir, step_, cfg_.max_iters);
    if (!fs::exists(cfg_.out_dir + "/checkpoint/state.json")) save_checkpoint();  // --max-iters 0: the initial model
  }
  if (dp_) dp_->comm().barrier();  // rank 0's last checkpoint is complete when run() returns on any rank
}

void Trainer::save_checkpoint() {
  if (!writes_) return;
  CheckpointState s;
  s.step = step_;
  s.config = cfg_.to_json();
  s.tokenizer = tok_->to_json();
  s.corpus = corpus_record_;
  s.init_rng = init_gen_.state();
  s.dropout_rng = dropout_gen_.state();
  s.sampler_rng = sampler_->state();
  s.optimizer_steps = opt_->steps();
  write_checkpoint(cfg_.out_dir, s, model_->state_dict(), opt_->state());
}

void Trainer::load_checkpoint() {
  LoadedCheckpoint ck = read_checkpoint(cfg_.out_dir);
  // The text must be the one the checkpoint was trained on: resuming on other text would make one
  // model of two corpora.
  if (ck.state.corpus.is_object() && ck.state.corpus.contains("fnv1a64") &&
      (ck.state.corpus.value("fnv1a64", "") != corpus_record_.value("fnv1a64", "") ||
       ck.state.corpus.value("bytes", int64_t{-1}) != corpus_record_.value("bytes", int64_t{-1})))
    throw IoError("resuming " + cfg_.out_dir + ": the corpus " + corpus_record_.value("path", cfg_.corpus) +
                  " has changed since the checkpoint was written (recorded " + ck.state.corpus["bytes"].dump() +
                  " bytes, fnv1a64 " + ck.state.corpus.value("fnv1a64", "") + "; now " +
                  corpus_record_["bytes"].dump() + " bytes, " + corpus_record_.value("fnv1a64", "") +
                  "): restore it, or train into another --out-dir");
  model_->load_state_dict(ck.model);
  opt_->load_state(ck.optimizer, ck.state.optimizer_steps);
  step_ = ck.state.step;
  init_gen_.set_state(ck.state.init_rng);
  dropout_gen_.set_state(ck.state.dropout_rng);
  sampler_->set_state(ck.state.sampler_rng);
  if (!writes_) return;  // the metrics and the curves are rank 0's
  // Metrics written after the checkpoint by an interrupted run are dropped: the resumed run
  // writes them again, identically.
  truncate_metrics(cfg_.out_dir + "/metrics.jsonl", step_);
  // The curves so far, from the run's own log (every line up to the checkpoint is complete).
  if (fs::exists(cfg_.out_dir + "/metrics.jsonl")) {
    std::istringstream in(read_file(cfg_.out_dir + "/metrics.jsonl"));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        const json j = json::parse(line);
        if (j.contains("train_loss"))
          train_curve_.emplace_back(j.at("step").get<int64_t>(), j.at("train_loss").get<double>());
        if (j.contains("val_loss"))
          val_curve_.emplace_back(j.at("step").get<int64_t>(), j.at("val_loss").get<double>());
      } catch (const json::exception& e) {
        throw IoError(cfg_.out_dir + "/metrics.jsonl has a damaged line (" + e.what() + ")");
      }
    }
  }
  spdlog::info("resumed {} at step {}", cfg_.out_dir, step_);
}

}  // namespace posgrad::train
