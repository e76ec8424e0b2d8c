// encoder.cpp — see encoder.h.
#include "compare/studies/encoder/encoder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <limits>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "autograd/ops.h"
#include "compare/method.h"
#include "compare/studies/encoder/encoder_metrics.h"
#include "compare/studies/study_claims.h"
#include "compare/value_check.h"
#include "data/encoder_tasks.h"
#include "data/fileio.h"
#include "data/mlm.h"
#include "data/synthetic.h"
#include "nn/encoder.h"
#include "nn/posenc/position_encoding.h"
#include "tensor/errors.h"
#include "tensor/option_table.h"
#include "train/evaluate.h"
#include "train/finetune.h"
#include "train/optim.h"
#include "train/safetensors.h"
#include "train/seeds.h"

namespace posgrad::train {

namespace fs = std::filesystem;

// ---- configuration -------------------------------------------------------------------------------

std::vector<std::string> EncoderTrackConfig::method_list() const {
  // Default: every encoding defined for bidirectional attention (the causal-only ones, e.g. xpos, are
  // decoders' only; listing one is refused in validate()).
  return methods.empty() ? nn::bidirectional_position_encoding_kinds() : methods;
}

void EncoderTrackConfig::validate() const {
  auto positive = [](int64_t v, const char* flag) {
    POSGRAD_CHECK(v >= 1, UsageError, flag, " must be >= 1, got ", v);
  };
  positive(n_layer, "--encoder-n-layer");
  positive(n_head, "--encoder-n-head");
  positive(n_embd, "--encoder-n-embd");
  positive(mlm_iters, "--encoder-mlm-iters");
  positive(task_iters, "--encoder-task-iters");
  positive(batch, "--encoder-batch");
  positive(eval_examples, "--encoder-eval-examples");
  POSGRAD_CHECK(n_embd % n_head == 0, UsageError, "--encoder-n-embd (", n_embd,
                ") must be a multiple of --encoder-n-head (", n_head, ")");
  POSGRAD_CHECK(length >= 2 && length <= 4096, UsageError, "--encoder-length must be in [2, 4096], got ", length);
  POSGRAD_CHECK(lr > 0 && lr < 1, UsageError, "--encoder-lr must be in (0, 1), got ", lr);
  POSGRAD_CHECK(weight_decay >= 0 && weight_decay < 1, UsageError, "encoder weight decay must be in [0, 1)");
  POSGRAD_CHECK(warmup >= 0, UsageError, "encoder warmup must be >= 0");
  POSGRAD_CHECK(segments >= 2 && segments <= length, UsageError,
                "--encoder-segments must be in [2, --encoder-length], got ", segments);
  POSGRAD_CHECK(word_k >= 1, UsageError, "--encoder-word-k must be >= 1, got ", word_k);
  POSGRAD_CHECK(!seeds.empty(), UsageError, "the encoder track needs at least one seed");
  POSGRAD_CHECK(std::set<uint64_t>(seeds.begin(), seeds.end()).size() == seeds.size(), UsageError,
                "duplicate seeds in the encoder track");
  POSGRAD_CHECK(!tasks.empty(), UsageError, "--encoder-tasks lists no task");
  for (const auto& t : tasks) (void)data::parse_encoder_task(t);  // ValueError naming it
  POSGRAD_CHECK(std::set<std::string>(tasks.begin(), tasks.end()).size() == tasks.size(), UsageError,
                "duplicate tasks in --encoder-tasks");
  POSGRAD_CHECK(!multipliers.empty() && std::find(multipliers.begin(), multipliers.end(), 1) != multipliers.end(),
                UsageError, "the encoder track's multipliers must include 1 (the fine-tuning length)");
  for (int64_t m : multipliers)
    POSGRAD_CHECK(m >= 1 && m <= 64, UsageError, "encoder multiplier ", m, " outside [1, 64]");
  POSGRAD_CHECK(std::set<int64_t>(multipliers.begin(), multipliers.end()).size() == multipliers.size(), UsageError,
                "duplicate multipliers in --encoder-multipliers (each length is evaluated once)");
  const auto ms = method_list();
  for (const auto& m : ms) {
    (void)parse_method(m);  // UsageError naming an unknown encoding or setting
    POSGRAD_CHECK(!nn::position_encoding_entry(method_kind(m)).causal_only, UsageError,
                  "the encoder track cannot train ", m,
                  ": that position encoding is causal only (decoders; its bidirectional form is not defined); drop "
                  "it from --methods");
  }
  // Each encoding's own checks at the encoder's sizes (e.g. RoPE needs 2 rotary channels per head),
  // before anything is trained; the message names the encoder's options.
  for (const auto& m : ms) {
    nn::GPTConfig g;
    apply_method(g, m);
    nn::PosEncConfig pc = g.pos;
    pc.n_embd = n_embd;
    pc.n_head = n_head;
    pc.n_layer = n_layer;
    pc.block_size = length * *std::max_element(multipliers.begin(), multipliers.end());
    pc.causal = false;
    try {
      pc.validate();
    } catch (const ValueError& e) {
      throw UsageError(std::string("the encoder track's ") + m + " encoder (--encoder-n-embd " +
                       std::to_string(n_embd) + ", --encoder-n-head " + std::to_string(n_head) + "): " + e.what());
    }
  }
  POSGRAD_CHECK(std::set<std::string>(ms.begin(), ms.end()).size() == ms.size(), UsageError,
                "duplicate methods in the encoder track");
}

nlohmann::json EncoderTrackConfig::to_json() const {
  return {
      {"methods", method_list()},     {"seeds", seeds},           {"tasks", tasks},   {"multipliers", multipliers},
      {"n_layer", n_layer},           {"n_head", n_head},         {"n_embd", n_embd}, {"length", length},
      {"mlm_iters", mlm_iters},       {"task_iters", task_iters}, {"batch", batch},   {"lr", lr},
      {"weight_decay", weight_decay}, {"grad_clip", grad_clip},   {"warmup", warmup}, {"eval_examples", eval_examples},
      {"segments", segments},         {"word_k", word_k}};
}

EncoderTrackConfig EncoderTrackConfig::from_json(const nlohmann::json& j, const std::string& source) {
  EncoderTrackConfig c;
  try {
    c.methods = json_list<std::string>(j.at("methods"), json_text);
    c.seeds = json_list<uint64_t>(j.at("seeds"), json_uint);
    c.tasks = json_list<std::string>(j.at("tasks"), json_text);
    c.multipliers = json_list<int64_t>(j.at("multipliers"), json_int);
    c.n_layer = json_int(j.at("n_layer"));
    c.n_head = json_int(j.at("n_head"));
    c.n_embd = json_int(j.at("n_embd"));
    c.length = json_int(j.at("length"));
    c.mlm_iters = json_int(j.at("mlm_iters"));
    c.task_iters = json_int(j.at("task_iters"));
    c.batch = json_int(j.at("batch"));
    c.lr = json_real(j.at("lr"));
    c.weight_decay = json_real(j.at("weight_decay"));
    c.grad_clip = json_real(j.at("grad_clip"));
    c.warmup = json_int(j.at("warmup"));
    c.eval_examples = json_int(j.at("eval_examples"));
    c.segments = json_int(j.at("segments"));
    c.word_k = json_int(j.at("word_k"));
  } catch (const nlohmann::json::exception& e) {
    throw IoError(source + ": encoder track configuration: " + e.what());
  }
  return c;
}

EncoderTrackConfig encoder_track_preset(const std::string& name) {
  EncoderTrackConfig c;
  if (name == "quick" || name == "medium") return c;
  if (name == "full") {
    c.seeds = {1, 2, 3, 4, 5};
    c.n_layer = 4;
    c.n_embd = 128;
    c.length = 64;
    c.mlm_iters = 2000;
    c.task_iters = 600;
    c.batch = 32;
    c.lr = 1e-3;
    c.eval_examples = 512;
    return c;
  }
  if (name == "tiny") {
    c.seeds = {1, 2};
    c.n_layer = 1;
    c.n_head = 2;
    c.n_embd = 16;
    c.length = 16;
    c.mlm_iters = 4;
    c.task_iters = 4;
    c.batch = 4;
    c.warmup = 1;
    c.eval_examples = 8;
    return c;
  }
  throw ValueError("unknown encoder preset '" + name + "' (known: quick|medium|full|tiny)");
}

// ---- training ------------------------------------------------------------------------------------

namespace {

// The track's generator seeds per purpose: stream(seed, tag) (train/seeds.h), method-independent.
enum Stream : uint64_t {
  kInit = 1,
  kMlmTrain,
  kMlmMask,
  kMlmEvalWindows,
  kMlmEvalMask,
  kTaskTrain,
  kTaskEval,
  kHeadInit
};

// `iters` steps of loss(step) with the shared loop (train/finetune.h): AdamW (betas 0.9, 0.99), linear
// warm-up over min(cfg.warmup, iters) steps, cosine decay to lr/10, clipping. Returns the mean
// training loss of the last max(1, iters/10) steps; the model is left in eval mode.
double train_steps(nn::Module& model, const EncoderTrackConfig& cfg, int64_t iters,
                   const std::function<Tensor(int64_t)>& loss_of) {
  FinetuneSpec spec;
  spec.label = "encoder track";
  spec.iterations = iters;
  spec.lr = cfg.lr;
  spec.min_lr = cfg.lr / 10;
  spec.warmup = std::min(cfg.warmup, iters);
  spec.schedule = FinetuneSchedule::cosine;
  spec.beta1 = 0.9;
  spec.beta2 = 0.99;
  spec.weight_decay = cfg.weight_decay;
  spec.grad_clip = cfg.grad_clip;
  spec.on_interrupt = "the finished units are kept; the same command measures the rest";
  return finetune(model, spec, loss_of).tail_loss;
}

// `batch` windows of T tokens at uniformly drawn offsets of span: int64 (batch, T).
Tensor windows(const data::TokenSpan& span, int64_t batch, int64_t T, Generator& g) {
  POSGRAD_CHECK(span.size() >= T, ValueError, "encoder track: a split of ", span.size(), " tokens is shorter than ",
                "the length ", T);
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(batch * T));
  const uint64_t starts = static_cast<uint64_t>(span.size() - T + 1);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = static_cast<int64_t>(g.next_u64() % starts);
    ids.insert(ids.end(), span.data() + s, span.data() + s + T);
  }
  return Tensor::from_ints(ids, {batch, T});
}

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

std::vector<int64_t> argmax_last(const Tensor& logits) { return ints(max(logits, -1).second); }

std::atomic<double> g_progress_interval{10.0};

// Progress of a unit's evaluation, in tokens scored: a line (spdlog) at most every
// g_progress_interval seconds, with the share done and the time left at the rate so far.
class EvalProgress {
 public:
  EvalProgress(std::string who, int64_t total_tokens)
      : who_(std::move(who)), total_(std::max<int64_t>(1, total_tokens)) {}
  void advance(int64_t tokens, const std::string& what) {
    done_ += tokens;
    const auto now = std::chrono::steady_clock::now();
    const double since_last = std::chrono::duration<double>(now - last_).count();
    if (since_last < g_progress_interval.load() || done_ >= total_) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    const double frac = static_cast<double>(done_) / static_cast<double>(total_);
    const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0.0;
    spdlog::info("encoder {} | evaluating {}: {:.0f}% of the held-out tokens, {:.0f}s elapsed, ETA {:.0f}s", who_, what,
                 100 * frac, elapsed, eta);
  }

 private:
  std::string who_;
  int64_t total_, done_ = 0;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now(), last_ = t0_;
};

MlmScore evaluate_mlm_impl(const nn::Encoder& enc, const data::TokenSpan& val, int64_t T, int64_t windows_n,
                           int64_t batch, uint64_t seed, const std::function<void(int64_t tokens)>& on_batch);

}  // namespace

void set_encoder_progress_interval(double seconds) { g_progress_interval.store(seconds); }

MlmScore evaluate_mlm(const nn::Encoder& enc, const data::TokenSpan& val, int64_t T, int64_t windows_n, int64_t batch,
                      uint64_t seed) {
  return evaluate_mlm_impl(enc, val, T, windows_n, batch, seed, {});
}

namespace {

MlmScore evaluate_mlm_impl(const nn::Encoder& enc, const data::TokenSpan& val, int64_t T, int64_t windows_n,
                           int64_t batch, uint64_t seed, const std::function<void(int64_t tokens)>& on_batch) {
  POSGRAD_CHECK(T >= 1 && windows_n >= 1 && batch >= 1, ValueError, "evaluate_mlm: length ", T, ", windows ", windows_n,
                " and batch ", batch, " must be positive");
  POSGRAD_CHECK(static_cast<int64_t>(val.size()) >= T, ValueError, "evaluate_mlm: a window of ", T,
                " tokens does not fit in the ", val.size(), " validation tokens");
  const int64_t limit = enc.backbone->position_encoding().max_length();
  POSGRAD_CHECK(limit < 0 || T <= limit, ValueError, "evaluate_mlm: ", T, " positions are beyond the encoder's ",
                limit);
  NoGradGuard ng;
  const int64_t V = enc.config().model.vocab_size - 2, mask_id = V;
  Generator gw(stream(seed, kMlmEvalWindows)), gm(stream(seed, kMlmEvalMask));
  double loss_sum = 0;
  int64_t hits = 0, scored = 0;
  for (int64_t done = 0; done < windows_n; done += batch) {
    const int64_t b = std::min(batch, windows_n - done);
    const data::MlmBatch mb = data::mask_tokens(windows(val, b, T, gw), V, mask_id, gm);
    const Tensor logits = enc.mlm_logits(mb.input);
    const auto rows = cross_entropy_rows(logits, mb.labels).to_vector();
    const auto pred = argmax_last(logits), gold = ints(mb.labels);
    for (size_t i = 0; i < gold.size(); ++i) {
      if (gold[i] == data::kIgnoreIndex) continue;
      ++scored;
      hits += pred[i] == gold[i];
      loss_sum += rows[i];
    }
    if (on_batch) on_batch(b * T);
  }
  MlmScore s;
  s.windows = windows_n;
  s.masked = scored;
  s.loss = scored ? loss_sum / static_cast<double>(scored) : std::numeric_limits<double>::quiet_NaN();
  s.accuracy =
      scored ? static_cast<double>(hits) / static_cast<double>(scored) : std::numeric_limits<double>::quiet_NaN();
  return s;
}

// One task's held-out score at length T of an encoder fine-tuned on it: the same held-out examples
// for every method, seed-independent of training. Sequence tasks use balanced groups (every class
// built from one window, next_balanced), so that an order-blind model scores exactly 1 / classes;
// eval_examples is rounded up to whole groups.
EncoderTaskScore score_task(nn::Encoder& ft, const EncoderTrackConfig& cfg, const std::string& task_name,
                            const data::TokenDataset& data, const data::TaskVocab& vocab, int64_t num_labels, int64_t m,
                            EvalProgress& progress) {
  NoGradGuard ng;
  const data::EncoderTask task = data::parse_encoder_task(task_name);
  const data::TaskOptions topt{cfg.segments, cfg.word_k};
  const bool labelling = data::is_labelling_task(task);
  const int64_t T = cfg.length * m;
  data::EncoderTaskGenerator eval_gen(task, data.val(), vocab, stream(0, kTaskEval + static_cast<uint64_t>(m)), topt);
  std::vector<int64_t> pred, gold;
  std::vector<std::vector<int64_t>> pred_seq, gold_seq;
  const int64_t k = labelling ? 1 : num_labels, per_call = std::max<int64_t>(1, cfg.batch / k);
  const int64_t groups = (cfg.eval_examples + k - 1) / k;
  for (int64_t done = 0; done < groups; done += per_call) {
    const int64_t b = std::min(per_call, groups - done) * k;
    const data::TaskBatch tb = eval_gen.next_balanced(b / k, T);
    const auto p = argmax_last(labelling ? ft.token_logits(tb.input) : ft.sequence_logits(tb.input));
    const auto g = ints(tb.labels);
    pred.insert(pred.end(), p.begin(), p.end());
    gold.insert(gold.end(), g.begin(), g.end());
    progress.advance(b * T, task_name + " x" + std::to_string(m));
    if (labelling)
      for (int64_t r = 0; r < b; ++r) {
        pred_seq.emplace_back(p.begin() + r * T, p.begin() + (r + 1) * T);
        gold_seq.emplace_back(g.begin() + r * T, g.begin() + (r + 1) * T);
      }
  }
  EncoderTaskScore s;
  s.task = task_name;
  s.multiplier = m;
  s.length = T;
  s.examples = static_cast<int64_t>(gold.size()) / (labelling ? T : 1);
  s.accuracy = accuracy(pred, gold);
  s.macro_f1 = macro_f1(pred, gold);
  if (labelling) {
    const SpanScore sp = span_f1(pred_seq, gold_seq);
    s.span_f1 = sp.f1;
    s.span_precision = sp.precision;
    s.span_recall = sp.recall;
  }
  return s;
}

// A fresh head for `task_name` on a copy of the pretrained backbone, fine-tuned for task_iters steps,
// then scored at every multiplier (NaN scores where `untrained(T)`: the encoding's positions were
// never trained there).
std::vector<EncoderTaskScore> fine_tune_and_score(const EncoderTrackConfig& cfg, const nn::EncoderConfig& ec,
                                                  const nn::NamedTensors& backbone, const std::string& task_name,
                                                  uint64_t seed, const data::TokenDataset& data,
                                                  const data::Tokenizer& tok, int64_t marker_id,
                                                  const std::function<bool(int64_t)>& untrained,
                                                  EvalProgress& progress) {
  const data::EncoderTask task = data::parse_encoder_task(task_name);
  const data::TaskVocab vocab = data::task_vocab(tok, marker_id);
  const data::TaskOptions topt{cfg.segments, cfg.word_k};
  const bool labelling = data::is_labelling_task(task);
  data::EncoderTaskGenerator train_gen(task, data.train(), vocab, stream(seed, kTaskTrain), topt);
  nn::EncoderConfig fc = ec;
  (labelling ? fc.num_tags : fc.num_classes) = train_gen.num_labels();
  Generator hinit(stream(seed, kHeadInit)), hdrop(0);
  nn::Encoder ft(fc, hinit, hdrop);
  ft.backbone->load_state_dict(backbone);
  const double final_loss = train_steps(ft, cfg, cfg.task_iters, [&](int64_t) {
    const data::TaskBatch tb = train_gen.next(cfg.batch, cfg.length);
    return cross_entropy(labelling ? ft.token_logits(tb.input) : ft.sequence_logits(tb.input), tb.labels);
  });
  std::vector<EncoderTaskScore> out;
  for (int64_t m : cfg.multipliers) {
    EncoderTaskScore s;
    if (untrained(cfg.length * m)) {
      s.task = task_name;
      s.multiplier = m;
      s.length = cfg.length * m;
      s.accuracy = s.macro_f1 = s.span_f1 = s.span_precision = s.span_recall = std::numeric_limits<double>::quiet_NaN();
    } else {
      s = score_task(ft, cfg, task_name, data, vocab, train_gen.num_labels(), m, progress);
    }
    s.final_train_loss = final_loss;
    out.push_back(s);
  }
  return out;
}

}  // namespace

EncoderUnitResult run_encoder_unit(const EncoderTrackConfig& cfg, const std::string& method, uint64_t seed,
                                   const data::TokenDataset& data, const data::Tokenizer& tok,
                                   const std::string& save_dir) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t V = tok.vocab_size(), mask_id = V, marker_id = V + 1;
  const int64_t max_mult = *std::max_element(cfg.multipliers.begin(), cfg.multipliers.end());
  nn::EncoderConfig ec;
  ec.model.vocab_size = V + 2;
  ec.model.block_size = cfg.length * max_mult;
  ec.model.n_layer = cfg.n_layer;
  ec.model.n_head = cfg.n_head;
  ec.model.n_embd = cfg.n_embd;
  ec.model.dropout = 0.0;
  apply_method(ec.model, method);
  ec.model.pos.causal = false;

  EncoderUnitResult u;
  u.method = method;
  u.seed = seed;
  Generator init(stream(seed, kInit)), drop(0);
  nn::Encoder pre(ec, init, drop);
  u.parameters = pre.num_parameters();

  // Masked-LM pretraining on the train split.
  {
    Generator gw(stream(seed, kMlmTrain)), gm(stream(seed, kMlmMask));
    u.mlm_final_train_loss = train_steps(pre, cfg, cfg.mlm_iters, [&](int64_t) {
      const data::MlmBatch mb = data::mask_tokens(windows(data.train(), cfg.batch, cfg.length, gw), V, mask_id, gm);
      return cross_entropy(pre.mlm_logits(mb.input), mb.labels);
    });
  }
  if (!save_dir.empty()) save_encoder(save_dir, pre, method, tok, cfg.length, cfg.corpus);
  // The encoding says up to which length its positions were trained (a learned table: the pretraining
  // length); beyond it every score is NaN (n/a), never a number from untrained parameters.
  const int64_t trained = pre.backbone->position_encoding().trained_max_length(cfg.length);
  auto untrained = [&](int64_t T) { return trained >= 0 && T > trained; };
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  int64_t eval_tokens = 0;
  for (int64_t m : cfg.multipliers)
    if (!untrained(cfg.length * m))
      eval_tokens += cfg.eval_examples * cfg.length * m * (1 + static_cast<int64_t>(cfg.tasks.size()));
  EvalProgress progress(method + " seed " + std::to_string(seed), eval_tokens);
  // Masked-token loss and accuracy on validation windows at each length.
  for (int64_t m : cfg.multipliers) {
    if (untrained(cfg.length * m)) {
      u.mlm_loss.push_back(kNaN);
      u.mlm_accuracy.push_back(kNaN);
      continue;
    }
    const MlmScore sc =
        evaluate_mlm_impl(pre, data.val(), cfg.length * m, cfg.eval_examples, cfg.batch, seed,
                          [&](int64_t tokens) { progress.advance(tokens, "masked LM x" + std::to_string(m)); });
    u.mlm_loss.push_back(sc.loss);
    u.mlm_accuracy.push_back(sc.accuracy);
  }

  // Fine-tuning: a fresh head on a copy of the pretrained backbone, per task.
  const nn::NamedTensors backbone = pre.backbone->state_dict();
  for (const std::string& task_name : cfg.tasks) {
    const std::vector<EncoderTaskScore> scores =
        fine_tune_and_score(cfg, ec, backbone, task_name, seed, data, tok, marker_id, untrained, progress);
    u.tasks.insert(u.tasks.end(), scores.begin(), scores.end());
  }
  u.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return u;
}

nlohmann::json EncoderTrackConfig::settings_json() const {
  nlohmann::json j = to_json();
  j.erase("methods");
  j.erase("seeds");
  return j;
}

void check_encoder_data(const EncoderTrackConfig& cfg, const data::TokenDataset& data, const data::Tokenizer& tok) {
  const int64_t longest = cfg.length * *std::max_element(cfg.multipliers.begin(), cfg.multipliers.end());
  const int64_t train_n = data.train().size(), val_n = data.val().size();
  if (train_n < longest + 1 || val_n < longest + 1)
    throw UsageError("the corpus is too short for the encoder track: its " + std::to_string(train_n) + " train and " +
                     std::to_string(val_n) + " validation tokens must each hold " + std::to_string(longest + 1) +
                     " (--encoder-length " + std::to_string(cfg.length) + " x the largest of --encoder-multipliers, " +
                     std::to_string(longest / cfg.length) +
                     ", + 1); use a longer --corpus, a smaller --encoder-length "
                     "or smaller --encoder-multipliers");
  const int64_t V = tok.vocab_size();
  const data::TaskVocab vocab = data::task_vocab(tok, V + 1);
  for (const std::string& t : cfg.tasks) {
    const data::EncoderTask task = data::parse_encoder_task(t);
    try {
      data::EncoderTaskGenerator a(task, data.train(), vocab, 0, data::TaskOptions{cfg.segments, cfg.word_k});
      data::EncoderTaskGenerator b(task, data.val(), vocab, 0, data::TaskOptions{cfg.segments, cfg.word_k});
    } catch (const ValueError& e) {
      throw UsageError("--encoder-tasks " + t + " cannot run on this corpus (" + e.what() +
                       "); use another --corpus, or leave the task out of --encoder-tasks");
    }
  }
}

EncoderUnitResult run_or_keep_encoder_unit(const EncoderTrackConfig& cfg, const std::string& m, uint64_t seed,
                                           const data::TokenDataset& data, const data::Tokenizer& tok, bool log,
                                           const std::string& out_dir) {
  const std::string dir = out_dir.empty() ? "" : out_dir + "/" + m + "/seed" + std::to_string(seed);
  const std::string result_path = dir + "/result.json";
  // A finished unit is its result and its saved encoder; with the encoder gone it is measured again.
  if (!dir.empty() && fs::exists(result_path) && fs::exists(dir + "/encoder.safetensors")) {
    // A kept unit's saved encoder is intact (load_encoder verifies its checksum) and is this folder's.
    const std::string saved = load_encoder(dir)->method;
    if (saved != m)
      throw IoError(dir + "/encoder.safetensors is an encoder of method \"" + saved +
                    "\", but this is the folder of \"" + m +
                    "\" (copied from another unit?); delete the folder to measure that unit again");
    EncoderUnitResult u = load_encoder_unit(result_path, cfg, m, seed);
    if (log) spdlog::info("encoder {:>10} seed {} | finished earlier — kept ({})", m, seed, result_path);
    return u;
  }
  EncoderUnitResult u = run_encoder_unit(cfg, m, seed, data, tok, dir);
  // The unit's result beside its saved encoder: an interrupted track keeps its finished units.
  if (!dir.empty())
    write_file_atomic(
        result_path,
        nlohmann::json{{"settings", cfg.settings_json()}, {"unit", encoder_unit_to_json(u)}}.dump(1) + "\n");
  if (log) {
    std::string tasks;
    for (const auto& s : u.tasks)
      if (s.multiplier == 1)
        tasks += " | " + s.task + " " +
                 std::to_string(data::is_labelling_task(data::parse_encoder_task(s.task)) ? s.span_f1 : s.accuracy)
                     .substr(0, 5);
    // The masked-token accuracy at 1x (validate() requires 1 among the multipliers), like the tasks'.
    const size_t one =
        static_cast<size_t>(std::find(cfg.multipliers.begin(), cfg.multipliers.end(), 1) - cfg.multipliers.begin());
    spdlog::info("encoder {:>10} seed {} | mlm acc {:.4f}{} | {:.1f}s", m, seed, u.mlm_accuracy.at(one), tasks,
                 u.seconds);
  }
  return u;
}

EncoderTrackResult run_encoder_track(const EncoderTrackConfig& cfg, const data::TokenDataset& data,
                                     const data::Tokenizer& tok, bool log, const std::string& out_dir) {
  cfg.validate();
  check_encoder_data(cfg, data, tok);
  EncoderTrackResult r;
  r.config = cfg;
  r.config.methods = cfg.method_list();
  for (const std::string& m : r.config.methods)
    for (uint64_t seed : cfg.seeds) r.units.push_back(run_or_keep_encoder_unit(cfg, m, seed, data, tok, log, out_dir));
  return r;
}

EncoderUnitResult load_encoder_unit(const std::string& path, const EncoderTrackConfig& cfg, const std::string& method,
                                    uint64_t seed) {
  const nlohmann::json settings = cfg.settings_json();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw IoError("'" + path + "' is not valid JSON (" + e.what() + "); delete it to measure that unit again");
  }
  if (!j.is_object() || !j.contains("settings") || !j.contains("unit"))
    throw IoError("'" + path +
                  "' is not an encoder unit result (no \"settings\" and \"unit\"); delete it to measure "
                  "that unit again");
  if (j["settings"] != settings) {
    std::string diff;
    for (const auto& [key, now] : settings.items()) {
      const nlohmann::json there = j["settings"].contains(key) ? j["settings"][key] : nlohmann::json();
      if (there != now)
        diff += (diff.empty() ? "" : ", ") + std::string("--encoder-") +
                [name = key] {
                  std::string f = name;  // a copy: clang before 16 cannot capture a structured binding
                  std::replace(f.begin(), f.end(), '_', '-');
                  return f;
                }() +
                " " + there.dump() + " there, " + now.dump() + " now";
    }
    throw UsageError("'" + path + "' was measured with other encoder settings (" + diff +
                     "); its unit cannot be mixed with new ones: use another --out-dir, or the same settings");
  }
  const std::string advice = "; delete it to measure that unit again";
  EncoderUnitResult u;
  try {
    u = encoder_unit_from_json(j["unit"], path);
  } catch (const IoError& e) {
    throw IoError(e.what() + advice);
  }
  const ValueCheck c(path, advice);
  if (u.method != method)
    c.fail("unit.method", ValueCheck::quoted(u.method),
           "this is the folder of method " + ValueCheck::quoted(method) + " (a result copied from another unit?)");
  if (u.seed != seed)
    c.fail("unit.seed", std::to_string(u.seed),
           "this is the folder of seed " + std::to_string(seed) + " (a result copied from another unit?)");
  EncoderTrackConfig with_unit = cfg;
  with_unit.methods = cfg.method_list();
  check_encoder_unit(u, with_unit, path, "unit", advice);
  return u;
}

int64_t encoder_trained_limit(const EncoderTrackConfig& cfg, const std::string& method) {
  nn::GPTConfig g0;  // as run_encoder_unit builds the encoder's
  apply_method(g0, method);
  nn::PosEncConfig pc = g0.pos;
  pc.causal = false;
  pc.n_embd = cfg.n_embd;
  pc.n_head = cfg.n_head;
  pc.n_layer = cfg.n_layer;
  pc.block_size = cfg.length * *std::max_element(cfg.multipliers.begin(), cfg.multipliers.end());
  Generator g(0);
  return nn::make_position_encoding(pc, g)->trained_max_length(cfg.length);
}

void check_encoder_unit(const EncoderUnitResult& u, const EncoderTrackConfig& cfg, const std::string& source,
                        const std::string& path, const std::string& advice) {
  const ValueCheck c(source, advice);
  auto key = [&](const std::string& k) { return path.empty() ? k : path + "." + k; };
  auto idx = [](const std::string& p, size_t i) { return p + "[" + std::to_string(i) + "]"; };
  const auto ms = cfg.method_list();
  if (std::find(ms.begin(), ms.end(), u.method) == ms.end())
    c.fail(key("method"), ValueCheck::quoted(u.method),
           "not among the encoder track's methods (" + ValueCheck::list(ms) + ")");
  if (std::find(cfg.seeds.begin(), cfg.seeds.end(), u.seed) == cfg.seeds.end())
    c.fail(key("seed"), std::to_string(u.seed),
           "not among the encoder track's seeds (" + ValueCheck::list(cfg.seeds) + ")");
  c.count(u.parameters, key("parameters"));
  c.at_least(u.mlm_final_train_loss, 0.0, key("mlm_final_train_loss"), "a loss");
  const std::string per = "one per encoder multiplier " + ValueCheck::list(cfg.multipliers);
  c.size(u.mlm_loss.size(), cfg.multipliers.size(), key("mlm_loss"), per);
  c.size(u.mlm_accuracy.size(), cfg.multipliers.size(), key("mlm_accuracy"), per);
  // n/a (null) exactly where the encoding's trained positions end (a learned table past the
  // pretraining length), a number everywhere else; span F1 and recall may also be n/a (no gold span).
  const int64_t limit = encoder_trained_limit(cfg, u.method);
  auto untrained = [&](int64_t m) { return limit >= 0 && cfg.length * m > limit; };
  auto score = [&](double v, int64_t m, const std::string& p, bool loss) {
    if (untrained(m)) {
      if (!std::isnan(v))
        c.fail(
            p, ValueCheck::show(v),
            "must be n/a (null): " + u.method + "'s positions past " + std::to_string(limit) + " were never trained");
      return;
    }
    if (std::isnan(v))
      c.fail(p, "null",
             "must be a number: " + u.method + " is scored at " + std::to_string(cfg.length * m) + " tokens");
    loss ? c.at_least(v, 0.0, p, "a loss") : c.fraction(v, p);
  };
  for (size_t i = 0; i < u.mlm_loss.size(); ++i)
    score(u.mlm_loss[i], cfg.multipliers[i], idx(key("mlm_loss"), i), true);
  for (size_t i = 0; i < u.mlm_accuracy.size(); ++i)
    score(u.mlm_accuracy[i], cfg.multipliers[i], idx(key("mlm_accuracy"), i), false);
  c.size(u.tasks.size(), cfg.tasks.size() * cfg.multipliers.size(), key("tasks"),
         "--encoder-tasks " + ValueCheck::list(cfg.tasks) + " x the multipliers");
  for (size_t i = 0; i < u.tasks.size(); ++i) {
    const EncoderTaskScore& s = u.tasks[i];
    const std::string p = idx(key("tasks"), i);
    const std::string& task = cfg.tasks[i / cfg.multipliers.size()];
    const int64_t m = cfg.multipliers[i % cfg.multipliers.size()];
    if (s.task != task)
      c.fail(p + ".task", ValueCheck::quoted(s.task),
             "expected " + ValueCheck::quoted(task) + " (task-major, in the order of --encoder-tasks)");
    c.equal(s.multiplier, m, p + ".multiplier", "the encoder multipliers, in order");
    c.equal(s.length, cfg.length * m, p + ".length", "--encoder-length x the multiplier");
    c.count(s.examples, p + ".examples");
    score(s.accuracy, m, p + ".accuracy", false);
    score(s.macro_f1, m, p + ".macro_f1", false);
    c.fraction_or_na(s.span_f1, p + ".span_f1");
    c.fraction_or_na(s.span_precision, p + ".span_precision");
    c.fraction_or_na(s.span_recall, p + ".span_recall");
    c.at_least(s.final_train_loss, 0.0, p + ".final_train_loss", "a loss");
  }
  c.non_negative(u.seconds, key("seconds"));
}

// ---- saved encoders and fill-mask ----------------------------------------------------------------

void save_encoder(const std::string& dir, const nn::Encoder& enc, const std::string& method, const data::Tokenizer& tok,
                  int64_t length, const nlohmann::json& corpus) {
  const nn::GPTConfig& m = enc.config().model;
  const nlohmann::json config = {{"method", method},     {"vocab_size", m.vocab_size}, {"block_size", m.block_size},
                                 {"n_layer", m.n_layer}, {"n_head", m.n_head},         {"n_embd", m.n_embd},
                                 {"bias", m.bias},       {"length", length},           {"corpus", corpus}};
  std::filesystem::create_directories(dir);
  save_safetensors(dir + "/encoder.safetensors", enc.state_dict(),
                   {{"format", "posgrad-encoder-1"},
                    {"track", "encoder"},
                    {"config", config.dump()},
                    {"tokenizer", tok.to_json().dump()}});
  // The checksum beside the weights, written (atomically) after them: an encoder.json that names
  // encoder.safetensors' checksum means the weights were completely written.
  write_file_atomic(
      dir + "/encoder.json",
      nlohmann::json{{"format", "posgrad-encoder-checksum-1"},
                     {"checksums", {{"encoder.safetensors", hex64(fnv1a64(read_file(dir + "/encoder.safetensors")))}}}}
              .dump(2) +
          "\n");
}

void verify_encoder_checksum(const std::string& dir) {
  const std::string weights = dir + "/encoder.safetensors", sidecar = dir + "/encoder.json";
  if (!std::filesystem::exists(sidecar))
    throw IoError("no checksum for " + weights + ": " + sidecar +
                  " is missing (saved by an older posgrad, or the save "
                  "was cut short); re-measure that unit (delete its folder and run posgrad compare again)");
  std::string want;
  try {
    const nlohmann::json j = opt::parse_json_limited(read_file(sidecar), sidecar, 1 << 16, 4);
    if (!j.is_object() || j.value("format", nlohmann::json()) != nlohmann::json("posgrad-encoder-checksum-1"))
      throw IoError(sidecar + ": not a posgrad encoder checksum file (format " +
                    (j.is_object() && j.contains("format") ? j["format"].dump() : std::string("missing")) +
                    ", expected \"posgrad-encoder-checksum-1\")");
    want = json_text(j.at("checksums").at("encoder.safetensors"));
  } catch (const UsageError& e) {
    throw IoError(e.what());
  } catch (const nlohmann::json::exception& e) {
    throw IoError(sidecar + ": no checksum for encoder.safetensors (" + e.what() + ")");
  }
  const std::string got = hex64(fnv1a64(read_file(weights)));
  if (got != want)
    throw IoError("saved encoder " + weights + " is corrupt (checksum " + got + ", expected " + want + " from " +
                  sidecar + ")");
}

std::unique_ptr<LoadedEncoder> load_encoder(const std::string& dir) {
  const std::string path = dir + "/encoder.safetensors";
  if (!std::filesystem::exists(path)) {
    const bool decoder = std::filesystem::exists(dir + "/checkpoint/state.json");
    throw IoError("no encoder in '" + dir + "' (" + path + " is missing)" +
                  (decoder ? "; it holds a decoder run (posgrad train): use posgrad sample / eval"
                           : "; posgrad compare --track encoder|both saves one per method and seed in "
                             "<out_dir>/encoder/<method>/seed<k>"));
  }
  verify_encoder_checksum(dir);
  SafetensorsFile f = load_safetensors(path);
  auto meta = [&](const std::string& key) {
    auto it = f.metadata.find(key);
    if (it == f.metadata.end()) throw IoError(path + ": metadata has no '" + key + "'");
    return it->second;
  };
  if (meta("format") != "posgrad-encoder-1" || meta("track") != "encoder")
    throw IoError(path + ": not a posgrad encoder (format '" + meta("format") + "', track '" + meta("track") + "')");
  auto out = std::make_unique<LoadedEncoder>();
  try {
    const nlohmann::json c = nlohmann::json::parse(meta("config"));
    out->tokenizer = data::Tokenizer::from_json(nlohmann::json::parse(meta("tokenizer")));
    nn::EncoderConfig ec;
    ec.model.vocab_size = json_int(c.at("vocab_size"));
    ec.model.block_size = json_int(c.at("block_size"));
    ec.model.n_layer = json_int(c.at("n_layer"));
    ec.model.n_head = json_int(c.at("n_head"));
    ec.model.n_embd = json_int(c.at("n_embd"));
    ec.model.bias = c.at("bias").get<bool>();
    out->method = json_text(c.at("method"));
    try {
      apply_method(ec.model, out->method);
    } catch (const UsageError& e) {
      throw IoError(path + ": method: " + e.what());
    }
    out->length =
        c.contains("length") ? json_int(c.at("length")) : 0;  // absent in encoders saved before it was recorded
    out->corpus = c.value("corpus", nlohmann::json());
    if (ec.model.vocab_size != out->tokenizer->vocab_size() + 2)
      throw IoError(path + ": vocabulary " + std::to_string(ec.model.vocab_size) + " is not the tokenizer's + 2");
    // Sizes before any allocation: the model's token table and attention weights (at least
    // vocab x C + layers x 4 C^2 values) must be in the file, and the positions within the track's range.
    auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
    if (!in(ec.model.n_layer, 1, 256) || !in(ec.model.n_embd, 1, 1 << 16) || !in(ec.model.n_head, 1, ec.model.n_embd) ||
        !in(ec.model.block_size, 1, 1 << 18) || out->length < 0)
      throw IoError(path + ": configuration out of range (n_layer " + std::to_string(ec.model.n_layer) + ", n_embd " +
                    std::to_string(ec.model.n_embd) + ", n_head " + std::to_string(ec.model.n_head) + ", block_size " +
                    std::to_string(ec.model.block_size) + ", length " + std::to_string(out->length) + ")");
    long double stored = 0;
    for (const auto& [name, t] : f.tensors) stored += static_cast<long double>(t.numel());
    const long double C = static_cast<long double>(ec.model.n_embd);
    const long double least = static_cast<long double>(ec.model.vocab_size) * C + ec.model.n_layer * 4 * C * C;
    if (least > stored)
      throw IoError(path + ": the configuration needs at least " + std::to_string(static_cast<int64_t>(least)) +
                    " weights, the file holds " + std::to_string(static_cast<int64_t>(stored)));
    Generator init(0);
    out->model = std::make_unique<nn::Encoder>(ec, init, out->dropout);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(path + ": malformed metadata (" + e.what() + ")");
  } catch (const ValueError& e) {
    throw IoError(path + ": " + e.what());
  }
  nn::NamedTensors state(f.tensors.begin(), f.tensors.end());
  out->model->load_state_dict(state);
  out->model->eval();
  return out;
}

FillMaskResult fill_mask(const LoadedEncoder& enc, const std::string& text, char mask_char, int64_t top) {
  POSGRAD_CHECK(top >= 1, ValueError, "fill-mask: --top must be >= 1, got ", top);
  const int64_t V = enc.tokenizer->vocab_size(), mask_id = V;
  std::vector<int64_t> ids;
  std::vector<size_t> masks;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == mask_char) {
      masks.push_back(i);
      ids.push_back(mask_id);
      continue;
    }
    try {
      ids.push_back(enc.tokenizer->encode(std::string_view(&text[i], 1)).at(0));
    } catch (const ValueError&) {  // the tokenizer saw one byte: name its place in the whole text
      throw ValueError(detail::concat("fill-mask: byte ", int(static_cast<uint8_t>(text[i])), " at offset ", i,
                                      " of the text is not in this encoder's vocabulary (", V,
                                      " symbols of its training corpus)"));
    }
  }
  POSGRAD_CHECK(!masks.empty(), ValueError, "fill-mask: the text has no mask character '", std::string(1, mask_char),
                "'");
  const int64_t T = static_cast<int64_t>(ids.size()), limit = enc.model->config().model.block_size;
  POSGRAD_CHECK(T <= limit, ValueError, "fill-mask: the text has ", T, " tokens; this encoder's positions end at ",
                limit);
  // A learned table's rows past the pretraining length were never trained: no prediction from them.
  const int64_t trained = enc.length > 0 ? enc.model->backbone->position_encoding().trained_max_length(enc.length) : -1;
  POSGRAD_CHECK(trained < 0 || T <= trained, ValueError, "fill-mask: the text has ", T, " tokens, but this ",
                enc.method, " encoder was pretrained at ", enc.length, " and its position rows beyond ", trained,
                " were never trained; give a text of at most ", trained, " bytes");
  NoGradGuard ng;
  const Tensor probs = softmax(enc.model->mlm_logits(Tensor::from_ints(ids, {1, T})), -1);  // (1, T, V + 2)
  const auto p = probs.to_vector();
  const int64_t W = V + 2;
  for (size_t m : masks)
    for (int64_t v = 0; v < W; ++v)
      if (!std::isfinite(p[static_cast<size_t>(m) * W + v]))
        throw NonFiniteLoss(
            detail::concat("fill-mask: the encoder's logits at mask position ", m,
                           " are not finite: its weights are not finite (a diverged or corrupt model)"));
  FillMaskResult r;
  r.filled = text;
  for (size_t m : masks) {
    std::vector<std::pair<double, int64_t>> row;
    for (int64_t v = 0; v < V; ++v) row.push_back({p[static_cast<size_t>(m) * W + v], v});  // corpus tokens only
    std::stable_sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<std::pair<std::string, double>> cand;
    for (int64_t k = 0; k < std::min<int64_t>(top, V); ++k)
      cand.push_back({enc.tokenizer->decode({row[k].second}), row[k].first});
    r.filled.replace(m, 1, cand.front().first);
    r.candidates.push_back(cand);
  }
  return r;
}

// ---- results as JSON -----------------------------------------------------------------------------

nlohmann::json encoder_unit_to_json(const EncoderUnitResult& u) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const auto& s : u.tasks)
    tasks.push_back({{"task", s.task},
                     {"multiplier", s.multiplier},
                     {"length", s.length},
                     {"examples", s.examples},
                     {"accuracy", s.accuracy},
                     {"macro_f1", s.macro_f1},
                     {"span_f1", s.span_f1},
                     {"span_precision", s.span_precision},
                     {"span_recall", s.span_recall},
                     {"final_train_loss", s.final_train_loss}});
  return {{"method", u.method},
          {"seed", u.seed},
          {"parameters", u.parameters},
          {"mlm_final_train_loss", u.mlm_final_train_loss},
          {"mlm_loss", u.mlm_loss},
          {"mlm_accuracy", u.mlm_accuracy},
          {"tasks", tasks},
          {"seconds", u.seconds}};
}

namespace {

// A score: a number, or null for n/a (nlohmann writes NaN as null).
double score_at(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : json_real(v);
}
std::vector<double> scores_at(const nlohmann::json& j, const char* key) {
  std::vector<double> out;
  if (!j.at(key).is_array()) json_list<double>(j.at(key), json_real);  // the typed error ("expected an array, got ...")
  for (const auto& v : j.at(key)) out.push_back(v.is_null() ? std::numeric_limits<double>::quiet_NaN() : json_real(v));
  return out;
}

}  // namespace

EncoderUnitResult encoder_unit_from_json(const nlohmann::json& ju, const std::string& source) {
  EncoderUnitResult u;
  try {
    u.method = json_text(ju.at("method"));
    u.seed = json_uint(ju.at("seed"));
    u.parameters = json_int(ju.at("parameters"));
    u.mlm_final_train_loss = json_real(ju.at("mlm_final_train_loss"));
    u.mlm_loss = scores_at(ju, "mlm_loss");
    u.mlm_accuracy = scores_at(ju, "mlm_accuracy");
    u.seconds = json_real(ju.at("seconds"));
    for (const auto& js : ju.at("tasks")) {
      EncoderTaskScore s;
      s.task = json_text(js.at("task"));
      s.multiplier = json_int(js.at("multiplier"));
      s.length = json_int(js.at("length"));
      s.examples = json_int(js.at("examples"));
      s.accuracy = score_at(js, "accuracy");
      s.macro_f1 = score_at(js, "macro_f1");
      s.span_f1 = score_at(js, "span_f1");
      s.span_precision = score_at(js, "span_precision");
      s.span_recall = score_at(js, "span_recall");
      s.final_train_loss = json_real(js.at("final_train_loss"));
      u.tasks.push_back(s);
    }
  } catch (const nlohmann::json::exception& e) {
    throw IoError(source + ": encoder track results: " + e.what());
  }
  return u;
}

nlohmann::json to_json(const EncoderTrackResult& r) {
  nlohmann::json units = nlohmann::json::array();
  for (const auto& u : r.units) units.push_back(encoder_unit_to_json(u));
  return {{"config", r.config.to_json()}, {"units", units}};
}

EncoderTrackResult encoder_track_from_json(const nlohmann::json& j, const std::string& source) {
  EncoderTrackResult r;
  r.config = EncoderTrackConfig::from_json(j.at("config"), source);
  try {
    for (const auto& ju : j.at("units")) r.units.push_back(encoder_unit_from_json(ju, source));
  } catch (const nlohmann::json::exception& e) {
    throw IoError(source + ": encoder track results: " + e.what());
  }
  return r;
}

// ---- statistics ----------------------------------------------------------------------------------

std::vector<double> encoder_values(const EncoderTrackResult& r, const std::string& method, const std::string& metric,
                                   int64_t multiplier) {
  std::vector<double> v;
  const auto& mults = r.config.multipliers;
  const auto at = std::find(mults.begin(), mults.end(), multiplier);
  for (const auto& u : r.units) {
    if (u.method != method) continue;
    if (metric == "mlm_accuracy" || metric == "mlm_loss") {
      const auto& src = metric == "mlm_accuracy" ? u.mlm_accuracy : u.mlm_loss;
      const size_t i = static_cast<size_t>(at - mults.begin());
      if (at != mults.end() && i < src.size() && std::isfinite(src[i])) v.push_back(src[i]);
      continue;
    }
    const size_t slash = metric.find('/');
    if (slash == std::string::npos) continue;
    const std::string task = metric.substr(0, slash), what = metric.substr(slash + 1);
    for (const auto& s : u.tasks)
      if (s.task == task && s.multiplier == multiplier) {
        const double x = what == "accuracy" ? s.accuracy : what == "macro_f1" ? s.macro_f1 : s.span_f1;
        if (std::isfinite(x)) v.push_back(x);  // n/a (untrained positions, no gold span) left out
      }
  }
  return v;
}

double encoder_chance(const EncoderTrackConfig& c, const std::string& task, const std::string& metric) {
  const data::EncoderTask t = data::parse_encoder_task(task);
  if (data::is_labelling_task(t)) return std::numeric_limits<double>::quiet_NaN();
  const double k = t == data::EncoderTask::Reversed ? 2.0 : static_cast<double>(c.segments);
  // An order-blind model on the balanced held-out groups (next_balanced) predicts one class per group.
  // Accuracy: exactly 1/k. Macro-F1: with a fraction q_c of the groups predicted c, TP_c = q_c G,
  // FP_c = (k - 1) q_c G, FN_c = (1 - q_c) G, so F1_c = 2 q_c / (k q_c + 1), concave in q_c: the
  // macro mean is at most 1/k (q_c = 1/k) and 2 / (k (k + 1)) for a constant prediction.
  (void)metric;
  return 1.0 / k;
}

namespace {

std::string fmt(double v, int prec = 3) {
  if (!std::isfinite(v)) return "n/a";
  std::ostringstream o;
  o << std::fixed << std::setprecision(prec) << v;
  return o.str();
}

// Mean [95% interval] over seeds; `unit` (accuracy, F1): the interval's ends clipped to [0, 1], which
// the quantity cannot leave.
std::string cell(const std::vector<double>& v, bool unit, int prec = 3) {
  const Summary s = summarize(v);
  if (s.n == 0) return "n/a";
  if (!s.has_interval()) return fmt(s.mean, prec);
  const double lo = unit ? std::max(0.0, s.ci_low) : s.ci_low, hi = unit ? std::min(1.0, s.ci_high) : s.ci_high;
  return fmt(s.mean, prec) + " [" + fmt(lo, prec) + ", " + fmt(hi, prec) + "]";
}

bool is_labelling(const std::string& task) { return data::is_labelling_task(data::parse_encoder_task(task)); }

// Per seed of a method: the mean accuracy over the sequence tasks, or the mean F1 over every task
// (macro-F1 of the sequence tasks, span F1 of the labelling task), at multiplier 1; the tasks in
// `left_out` do not take part.
std::vector<double> composite(const EncoderTrackResult& r, const std::string& method, bool f1,
                              const std::vector<std::string>& left_out) {
  std::vector<double> out;
  for (const auto& u : r.units) {
    if (u.method != method) continue;
    double sum = 0;
    int n = 0;
    for (const auto& s : u.tasks) {
      if (s.multiplier != 1) continue;
      if (std::find(left_out.begin(), left_out.end(), s.task) != left_out.end()) continue;
      const double x = is_labelling(s.task) ? (f1 ? s.span_f1 : std::numeric_limits<double>::quiet_NaN())
                                            : (f1 ? s.macro_f1 : s.accuracy);
      if (!std::isfinite(x)) continue;  // n/a: not averaged in (a labelling task without gold spans)
      sum += x;
      ++n;
    }
    if (n) out.push_back(sum / n);
  }
  return out;
}

bool has_method(const EncoderTrackResult& r, const std::string& m) {
  return std::find(r.config.methods.begin(), r.config.methods.end(), m) != r.config.methods.end();
}

// The links of the article's ordering; "absolute" is each of sinusoidal and learned that has values
// (each must be beaten, as the article's claims read it).
const std::vector<std::pair<std::string, std::vector<std::string>>>& ordering_links() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> links = {
      {"rope", {"rope"}}, {"deberta", {"deberta"}}, {"t5", {"t5"}}, {"absolute", {"sinusoidal", "learned"}}};
  return links;
}

// The pairs of the ordering on one composite (Welch, as better() in compare/claims.h): each link
// better than the next; the links without values are appended to `missing`, in chain order.
std::vector<ClaimTest> ordering_tests(const EncoderTrackResult& r, bool f1, const std::vector<std::string>& left_out,
                                      std::string& missing) {
  std::vector<std::vector<std::string>> present;
  for (const auto& [name, members] : ordering_links()) {
    present.emplace_back();
    for (const auto& m : members)
      if (!composite(r, m, f1, left_out).empty()) present.back().push_back(m);
    if (present.back().empty()) missing += (missing.empty() ? "" : ", ") + name;
  }
  std::vector<ClaimTest> tests;
  for (size_t i = 0; i + 1 < present.size(); ++i)
    for (const auto& a : present[i])
      for (const auto& b : present[i + 1])
        tests.push_back(better_values(std::string(f1 ? "F1 " : "accuracy ") + a + " vs " + b,
                                      composite(r, a, f1, left_out), composite(r, b, f1, left_out),
                                      /*lower_is_better=*/false));
  return tests;
}

std::string composites_text(const EncoderTrackResult& r, bool f1, const std::vector<std::string>& left_out) {
  std::string s;
  for (const auto& [name, members] : ordering_links())
    for (const auto& m : members)
      if (has_method(r, m) || !composite(r, m, f1, left_out).empty())
        s += (s.empty() ? "" : "; ") + m + " " + cell(composite(r, m, f1, left_out), true);
  return s.empty() ? "n/a" : s;
}

}  // namespace

bool encoder_score_is_structural(const std::string& method, const std::string& task) {
  return data::parse_encoder_task(task) == data::EncoderTask::Reversed &&
         nn::position_encoding_entry(method_kind(method)).symmetric_bias;
}

std::vector<std::string> encoder_structural_tasks(const EncoderTrackConfig& cfg,
                                                  const std::vector<std::string>& methods) {
  std::vector<std::string> out;
  for (const auto& t : cfg.tasks)
    for (const auto& m : methods)
      if (encoder_score_is_structural(m, t)) {
        out.push_back(t);
        break;
      }
  return out;
}

std::vector<ClaimVerdict> judge_encoder_claims(const EncoderTrackResult& r) {
  const EncoderTrackConfig& c = r.config;
  // Tasks whose score some method of the claim has by construction leave every method's composite.
  std::vector<std::string> compared;
  for (const auto& [name, members] : ordering_links()) compared.insert(compared.end(), members.begin(), members.end());
  const std::vector<std::string> left_out = encoder_structural_tasks(c, compared);
  std::string left_text;
  for (const auto& t : left_out) {
    std::string who;
    for (const auto& m : compared)
      if (encoder_score_is_structural(m, t)) who += (who.empty() ? "" : ", ") + m;
    left_text +=
        "; " + t + " left out (structural for " + who + ": a bias of |i - j| alone reads 0.5 there by construction)";
  }
  std::string missing_acc, missing_f1;
  std::vector<ClaimTest> tests = ordering_tests(r, false, left_out, missing_acc);
  for (auto& t : ordering_tests(r, true, left_out, missing_f1)) tests.push_back(std::move(t));
  std::string missing = missing_acc;
  if (!missing_f1.empty() && missing_f1 != missing_acc)
    missing += (missing.empty() ? "" : "; ") + ("F1 of " + missing_f1);
  if (!missing.empty()) missing += " with values at 1x (--methods; absolute: sinusoidal or learned)";
  const Judgement j = judge_family(tests, missing);
  const size_t n = c.seeds.size();
  const std::string budget = std::to_string(c.mlm_iters) + " masked-LM steps and " + std::to_string(c.task_iters) +
                             " fine-tuning steps per task of " + std::to_string(c.batch) + "x" +
                             std::to_string(c.length) + " tokens x " + std::to_string(n) + " seed" +
                             (n == 1 ? "" : "s") + "; " + std::to_string(c.eval_examples) +
                             " held-out examples per task";
  const std::string protocol =
      "at the fine-tuning length " + std::to_string(c.length) + " (1x); intervals: seed noise only";
  return {
      claim_from("b", "accuracy and F1: RoPE > DeBERTa > T5 > absolute",
                 "accuracy at 1x (mean over the sequence-classification tasks; higher is better); F1 at 1x (mean of "
                 "the sequence tasks' macro-F1 and the labelling task's span F1) — one family: both orderings, "
                 "Welch's t-test per adjacent pair, each absolute encoding run" +
                     left_text,
                 "accuracy: " + composites_text(r, false, left_out) + " — F1: " + composites_text(r, true, left_out), j,
                 budget, protocol)};
}

namespace {

// The article's ordering claim on this track, as a table of its own (the report's claims table
// holds it too, as claim (b): compare/studies/article/article.h).
std::string claim_section(const EncoderTrackResult& r) {
  std::ostringstream o;
  o << "### The article's accuracy/F1 claim on the encoder track\n\nJudged as the article's claims are "
       "(compare/claims.h): "
       "supported when every pair is significant at 5% as claimed, contradicted when one is significant the other way "
       "after Holm over the family.\n\n| claim | metric | tests | budget | measured | verdict | why |\n"
       "|---|---|---|---|---|---|---|\n";
  for (const auto& v : judge_encoder_claims(r))
    o << "| " << v.claim << " | " << v.metric << " | " << v.family << " | " << v.budget << " | " << v.measured
      << " | **" << v.verdict << "** | " << v.why << " |\n";
  o << "\n";
  return o.str();
}

}  // namespace

namespace {

// The masked-token accuracy and loss per method and length.
void mlm_table(std::ostringstream& o, const EncoderTrackResult& r) {
  const EncoderTrackConfig& c = r.config;
  // MLM table
  o << "### Masked-token accuracy and loss (validation)\n\n| method |";
  for (int64_t m : c.multipliers) o << " accuracy x" << m << " |";
  for (int64_t m : c.multipliers) o << " loss x" << m << " |";
  o << "\n|---|";
  for (size_t i = 0; i < 2 * c.multipliers.size(); ++i) o << "---|";
  o << "\n";
  for (const auto& m : c.methods) {
    o << "| " << m << " |";
    for (int64_t k : c.multipliers) o << " " << cell(encoder_values(r, m, "mlm_accuracy", k), true) << " |";
    for (int64_t k : c.multipliers) o << " " << cell(encoder_values(r, m, "mlm_loss", k), false) << " |";
    o << "\n";
  }
  o << "\n";
}

// One table per task: its metrics per method and length, with the chance row of a sequence task.
void task_tables(std::ostringstream& o, const EncoderTrackResult& r) {
  const EncoderTrackConfig& c = r.config;
  // Task tables
  for (const auto& task : c.tasks) {
    const bool lab = is_labelling(task);
    const std::vector<std::string> metrics =
        lab ? std::vector<std::string>{"span_f1", "accuracy"} : std::vector<std::string>{"accuracy", "macro_f1"};
    o << "### Task " << task
      << (lab ? " (token labelling; span F1 = CoNLL exact span and label)" : " (sequence classification)")
      << "\n\n| method |";
    for (const auto& met : metrics)
      for (int64_t k : c.multipliers)
        o << " " << (met == "accuracy" && lab ? "token accuracy" : met) << " x" << k << " |";
    o << "\n|---|";
    for (size_t i = 0; i < metrics.size() * c.multipliers.size(); ++i) o << "---|";
    o << "\n";
    for (const auto& m : c.methods) {
      o << "| " << m << " |";
      for (const auto& met : metrics)
        for (int64_t k : c.multipliers) o << " " << cell(encoder_values(r, m, task + "/" + met, k), true) << " |";
      o << "\n";
    }
    if (!lab) {
      // Accuracy: what an order-blind model scores exactly; macro-F1: the most it can score (encoder_chance).
      o << "| *chance (order-blind)* |";
      for (const auto& met : metrics)
        for (size_t i = 0; i < c.multipliers.size(); ++i)
          o << " " << (met == "macro_f1" ? "≤ " : "") << fmt(encoder_chance(c, task, met)) << " |";
      o << "\n";
    }
    o << "\n";
  }
}

// The NoPE control and the scores other encodings have by construction (encoder_score_is_structural).
void control_section(std::ostringstream& o, const EncoderTrackResult& r) {
  const EncoderTrackConfig& c = r.config;
  // NoPE control, and the scores other encodings have by construction (encoder_score_is_structural)
  std::vector<std::pair<std::string, std::string>> structural;  // (task, method)
  for (const auto& task : c.tasks)
    for (const auto& m : c.methods)
      if (encoder_score_is_structural(m, task)) structural.emplace_back(task, m);
  // At the level: the interval contains it, or every seed equals it.
  auto at_level = [](const std::vector<double>& v, double level) {
    const Summary s = summarize(v);
    if (s.n == 0) return false;
    if (s.has_interval() && s.ci_low <= level && level <= s.ci_high) return true;
    return std::all_of(v.begin(), v.end(), [&](double x) { return std::fabs(x - level) < 1e-9; });
  };
  if (has_method(r, "none") || !structural.empty()) {
    o << "### NoPE control" << (structural.empty() ? "" : " and scores fixed by construction") << "\n\n";
  }
  if (has_method(r, "none")) {
    o << "A bidirectional encoder without position information sees a multiset of tokens. "
         "The held-out examples of a sequence task come in balanced groups (every class built from one window), "
         "so an order-blind model gives a group one prediction and scores exactly the chance level 1/classes; "
         "NoPE must sit there (its interval contains it, or every seed equals it). Its macro-F1 is at most "
         "that level too (chance row: ≤): 1/classes when its group predictions are spread evenly over the classes, "
         "2 / (classes (classes + 1)) when it always predicts one class.\n\n";
    for (const auto& task : c.tasks) {
      if (is_labelling(task)) continue;
      const double ch = encoder_chance(c, task, "accuracy");
      const std::vector<double> v = encoder_values(r, "none", task + "/accuracy", 1);
      o << "- " << task << ": NoPE accuracy " << cell(v, true) << ", chance " << fmt(ch) << " — "
        << (at_level(v, ch) ? "at chance" : "NOT at chance") << "\n";
    }
    o << "\n";
  }
  if (!structural.empty()) {
    o << "A bias that depends only on |i − j| (the same on both sides of the query; the encodings listed here, "
         "whose registry entries say so) is unchanged when a window is mirrored, so the encoder's hidden states are "
         "mirrored too and their mean is the same: with mean pooling the model cannot tell a window of `reversed` "
         "from its reversal, gives the pair one prediction and scores exactly 0.5 (up to rounding, which can split "
         "a pair whose two logits tie). That score is structural, not a failure to learn, and never counts as "
         "evidence: a task on which a method of a claim below is structural is left out of that claim for every "
         "method.\n\n";
    for (const auto& [task, m] : structural) {
      const std::vector<double> v = encoder_values(r, m, task + "/accuracy", 1);
      o << "- " << task << ": " << m << " accuracy " << cell(v, true) << " — structural (0.5 by construction"
        << (at_level(v, 0.5) ? ")" : "; NOT at 0.5: check the encoding's symmetry)") << "\n";
    }
    o << "\n";
  }
}

}  // namespace

std::string encoder_report_markdown(const EncoderTrackResult& r) {
  const EncoderTrackConfig& c = r.config;
  std::ostringstream o;
  o << "## Encoder track: masked-LM pretraining, classification and labelling\n\n";
  o << "Bidirectional encoders (no mask; T5 with bidirectional buckets, ALiBi symmetric −m|i−j|, DeBERTa's "
       "c2p and p2c in both directions) pretrained with BERT's masked-LM objective (15% of the tokens selected; "
       "80% [MASK], 10% random, 10% unchanged), then fine-tuned per task with a fresh head on a copy of the "
       "pretrained weights. "
    << c.n_layer << " layers, " << c.n_embd << " channels, " << c.n_head << " heads; length " << c.length << "; "
    << c.mlm_iters << " masked-LM steps and " << c.task_iters << " fine-tuning steps per task, batch " << c.batch
    << ", lr " << c.lr << "; " << c.eval_examples << " held-out examples per task and length; seeds " << c.seeds.size()
    << ". Cells: mean [95% Student-t interval] over seeds.\n\n";
  mlm_table(o, r);
  task_tables(o, r);
  control_section(o, r);
  o << claim_section(r);
  return o.str();
}

std::string encoder_results_csv(const EncoderTrackResult& r) {
  std::ostringstream o;
  o << "method,seed,metric,multiplier,value\n";
  o << std::setprecision(10);
  // A number, or n/a where nothing was measured (untrained positions, a labelling set without gold span).
  auto val = [](double v) {
    if (!std::isfinite(v)) return std::string("n/a");
    std::ostringstream x;
    x << std::setprecision(10) << v;
    return x.str();
  };
  for (const auto& u : r.units) {
    for (size_t i = 0; i < r.config.multipliers.size() && i < u.mlm_accuracy.size(); ++i) {
      o << u.method << "," << u.seed << ",mlm_accuracy," << r.config.multipliers[i] << "," << val(u.mlm_accuracy[i])
        << "\n";
      o << u.method << "," << u.seed << ",mlm_loss," << r.config.multipliers[i] << "," << val(u.mlm_loss[i]) << "\n";
    }
    for (const auto& s : u.tasks) {
      o << u.method << "," << u.seed << "," << s.task << "/accuracy," << s.multiplier << "," << val(s.accuracy) << "\n";
      o << u.method << "," << u.seed << "," << s.task << "/macro_f1," << s.multiplier << "," << val(s.macro_f1) << "\n";
      if (is_labelling(s.task))
        o << u.method << "," << u.seed << "," << s.task << "/span_f1," << s.multiplier << "," << val(s.span_f1) << "\n";
    }
  }
  return o.str();
}

}  // namespace posgrad::train
