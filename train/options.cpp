// options.cpp — see options.h. One row per option: adding an option is one line here (plus its
// member in the struct).
#include "train/options.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "data/length_tasks.h"
#include "data/passkey.h"
#include "data/synthetic.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::train {

using namespace opt;

namespace {

// Appends rows to a table under the current --help group.
template <typename S>
class Rows {
 public:
  explicit Rows(Table<S>& t) : t_(t) {}
  Rows& group(std::string g) {
    group_ = std::move(g);
    return *this;
  }
  template <typename F>
  Rows& add(Spec s, F field) {
    s.group = group_;
    t_.push_back(bind<S>(std::move(s), field));
    return *this;
  }

 private:
  Table<S>& t_;
  std::string group_;
};

#define POSGRAD_MEMBER(path) [](auto& s) -> auto& { return s.path; }

constexpr long double kBig = 1e9L;  // "as many as you like" for step counts and intervals

}  // namespace

const Table<TrainConfig>& train_options() {
  static const Table<TrainConfig> table = [] {
    Table<TrainConfig> t;
    Rows<TrainConfig> r(t);
    r.group("Data")
        .add(fixed_on_resume(text("corpus", "Text to train on: a file path, 'kjv' (offline default) or 'shakespeare'",
                                  false)),
             POSGRAD_MEMBER(corpus))
        .add(fixed_on_resume(choice("tokenizer", {"char", "byte"},
                                    "Tokenizer: char (vocabulary from the corpus) or byte (256 symbols)")),
             POSGRAD_MEMBER(tokenizer))
        .add(text("data_dir", "Directory holding tinyshakespeare.txt (empty: $POSGRAD_DATA_DIR, else ../shared/data)"),
             POSGRAD_MEMBER(data_dir))
        .add(integer("max_corpus_bytes", closed(1, 1LL << 40), "Refuse a corpus file larger than this", "bytes"),
             POSGRAD_MEMBER(max_corpus_bytes));
    r.group("Model")
        .add(fixed_on_resume(choice("pos", nn::position_encoding_kinds(), "Position encoding")),
             POSGRAD_MEMBER(model.pos.kind))
        .add(fixed_on_resume(integer("n_layer", closed(1, 1024), "Transformer blocks")), POSGRAD_MEMBER(model.n_layer))
        .add(fixed_on_resume(integer("n_head", closed(1, 1024), "Attention heads")), POSGRAD_MEMBER(model.n_head))
        .add(fixed_on_resume(integer("n_embd", closed(1, 1 << 16), "Model width, divisible by n_head", "channels")),
             POSGRAD_MEMBER(model.n_embd))
        .add(fixed_on_resume(integer("block_size", closed(1, 1 << 20), "Training context length", "tokens")),
             POSGRAD_MEMBER(model.block_size))
        .add(fixed_on_resume(real("dropout", closed_open(0, 1), "Dropout probability")), POSGRAD_MEMBER(model.dropout))
        .add(fixed_on_resume(boolean("bias", "Biases in the Linear layers")), POSGRAD_MEMBER(model.bias))
        .add(fixed_on_resume(boolean("attention_sinks",
                                     "Learnable attention sinks: one logit per head and layer joins every softmax "
                                     "row as a key with value 0 (gpt-oss; StreamingLLM), with any --pos")),
             POSGRAD_MEMBER(model.attention_sinks));
    for (const Spec& s : nn::position_encoding_options())
      t.push_back(bind_value<TrainConfig>(s, [](auto& c) -> auto& { return c.model.pos.options; }));
    r.group("Optimisation")
        .add(fixed_on_resume(choice("optimizer", {"adamw", "sgd"}, "Optimizer")), POSGRAD_MEMBER(optimizer))
        .add(real("lr", open_closed(0, 1e6), "Peak learning rate"), POSGRAD_MEMBER(lr))
        .add(real("min_lr", closed(0, 1e6), "Learning rate at the end of the cosine decay (<= lr)"),
             POSGRAD_MEMBER(min_lr))
        .add(integer("warmup_iters", closed(0, kBig), "Linear warm-up", "steps"), POSGRAD_MEMBER(warmup_iters))
        .add(integer("max_iters", closed(0, kBig), "Optimisation steps of the whole run", "steps"),
             POSGRAD_MEMBER(max_iters))
        .add(integer("lr_decay_iters", closed(0, kBig), "Step at which the cosine reaches min_lr (0: max_iters)", "steps"),
             POSGRAD_MEMBER(lr_decay_iters))
        .add(boolean("cosine", "Cosine decay after warm-up (false: constant)"), POSGRAD_MEMBER(cosine))
        .add(real("weight_decay", closed(0, 100), "Decoupled weight decay (matrices only)"), POSGRAD_MEMBER(weight_decay))
        .add(real("beta1", closed_open(0, 1), "AdamW beta1"), POSGRAD_MEMBER(beta1))
        .add(real("beta2", closed_open(0, 1), "AdamW beta2"), POSGRAD_MEMBER(beta2))
        .add(real("momentum", closed_open(0, 1), "SGD momentum"), POSGRAD_MEMBER(momentum))
        .add(real("grad_clip", closed(0, 1e9), "Clip the global gradient norm to this (0: off)"),
             POSGRAD_MEMBER(grad_clip))
        .add(integer("batch_size", closed(1, 1 << 20), "Sequences per micro-batch", "sequences"),
             POSGRAD_MEMBER(batch_size))
        .add(integer("grad_accum", closed(1, 1 << 20), "Micro-batches accumulated per step"), POSGRAD_MEMBER(grad_accum));
    r.group("Run")
        .add(integer("eval_interval", closed(1, kBig), "Steps between evaluations", "steps"), POSGRAD_MEMBER(eval_interval))
        .add(integer("eval_windows", closed(1, 1 << 20), "Validation windows per evaluation", "windows"),
             POSGRAD_MEMBER(eval_windows))
        .add(integer("log_interval", closed(1, kBig), "Steps between progress lines", "steps"), POSGRAD_MEMBER(log_interval))
        .add(integer("checkpoint_interval", closed(0, kBig), "Steps between checkpoints (0: eval_interval)", "steps"),
             POSGRAD_MEMBER(checkpoint_interval))
        .add(fixed_on_resume(unsigned_integer("seed", "Seed of initialisation, data order and dropout")),
             POSGRAD_MEMBER(seed))
        .add(text("device", "cpu or cuda[:N]", false), POSGRAD_MEMBER(device))
        .add(text("out_dir", "Run directory (checkpoint, metrics.jsonl, config.json)", false), POSGRAD_MEMBER(out_dir))
        .add(integer("threads", closed(0, 1024), "OpenMP threads (0: all cores, fewer while other processes keep some busy; results do not depend on it)"), POSGRAD_MEMBER(threads));
    return t;
  }();
  return table;
}

const Table<CompareConfig>& compare_options() {
  static const Table<CompareConfig> table = [] {
    Table<CompareConfig> t;
    Rows<CompareConfig> r(t);
    r.group("Experiment")
        .add(choice_list("methods", nn::position_encoding_kinds(), 32, "Position encodings to compare"),
             POSGRAD_MEMBER(methods))
        .add(unsigned_list("seeds", 64, "Seeds; every method is trained once per seed (mean ± std over them)"),
             POSGRAD_MEMBER(seeds))
        .add(integer_list("eval_multipliers", closed(1, 64), 1, 16,
                          "Evaluation lengths as multiples of the training length"),
             POSGRAD_MEMBER(eval_multipliers))
        .add(integer("eval_tokens", closed(1, 1 << 24), "Validation tokens scored per evaluation length", "tokens"),
             POSGRAD_MEMBER(eval_tokens))
        .add(integer("per_position_multiplier", closed(1, 64),
                     "Window of the per-position loss, as a multiple of the training length"),
             POSGRAD_MEMBER(per_position_multiplier))
        .add(text("out_dir", "Experiment directory (one run directory per method and seed inside)", false),
             POSGRAD_MEMBER(out_dir));
    r.group("Synthetic task")
        .add(choice("task", {"copy", "reverse"}, "Synthetic task"), POSGRAD_MEMBER(task))
        .add(integer("task_length", closed(1, 256), "Training sequence length of the task", "symbols"),
             POSGRAD_MEMBER(task_length))
        .add(integer("task_symbols", closed(2, 1024), "Alphabet size of the task", "symbols"), POSGRAD_MEMBER(task_symbols))
        .add(integer("task_iters", closed(0, kBig), "Training steps of the task", "steps"), POSGRAD_MEMBER(task_iters))
        .add(integer("task_batch", closed(1, 4096), "Task sequences per step", "sequences"), POSGRAD_MEMBER(task_batch))
        .add(integer("task_examples", closed(1, 1 << 16), "Task examples scored per length", "sequences"),
             POSGRAD_MEMBER(task_examples))
        .add(integer("task_n_layer", closed(1, 64), "Task model: transformer blocks"), POSGRAD_MEMBER(task_n_layer))
        .add(integer("task_n_embd", closed(1, 4096), "Task model: width, divisible by task_n_head", "channels"),
             POSGRAD_MEMBER(task_n_embd))
        .add(integer("task_n_head", closed(1, 64), "Task model: attention heads"), POSGRAD_MEMBER(task_n_head))
        .add(integer_list("task_multipliers", closed(1, 16), 1, 8, "Task lengths scored, as multiples of task_length"),
             POSGRAD_MEMBER(task_multipliers));
    r.group("Length-generalisation suite")
        .add(choice_list("suite_tasks", data::length_task_names(), 16,
                         "Suite tasks (Deletang et al. 2023), each trained on lengths 1..suite_length"),
             POSGRAD_MEMBER(suite_tasks))
        .add(integer("suite_length", closed(1, 256), "Longest training input length N of the suite", "symbols"),
             POSGRAD_MEMBER(suite_length))
        .add(integer("suite_iters", closed(0, kBig), "Training steps per suite task (0: no suite)", "steps"),
             POSGRAD_MEMBER(suite_iters))
        .add(integer("suite_batch", closed(1, 4096), "Suite sequences per step", "sequences"), POSGRAD_MEMBER(suite_batch))
        .add(integer("suite_examples", closed(1, 1 << 16), "Suite test examples per length bucket", "sequences"),
             POSGRAD_MEMBER(suite_examples))
        .add(integer("suite_max_multiplier", closed(1, 16), "Suite buckets [1,N], [N+1,2N], ... up to this multiple of N"),
             POSGRAD_MEMBER(suite_max_multiplier))
        .add(real("suite_lr", open_closed(0, 1), "Peak learning rate of the suite's models"), POSGRAD_MEMBER(suite_lr))
        .add(
            [] {
              auto s = choice_list("suite_randomized", nn::position_encoding_kinds(), 32,
                                   "Methods also trained with randomized positions (Ruoss et al. 2023) where among "
                                   "--methods; every encoding but none takes them (t5, alibi, kerple, sandwich, deberta: "
                                   "CPU only)");
              s.min_items = 0;
              return s;
            }(),
            POSGRAD_MEMBER(suite_randomized));
    r.group("Position interpolation (train/pi_protocol.h)")
        .add(integer("pi_iters", closed(0, kBig),
                     "Fine-tuning steps of each trained RoPE model per scaling and multiplier, at multiplier x "
                     "block_size tokens (Chen et al. 2023; 0: off)",
                     "steps"),
             POSGRAD_MEMBER(pi_iters))
        .add(real("pi_lr", open_closed(0, 1), "Learning rate of the fine-tuning (after a linear warm-up of a tenth "
                                              "of pi_iters, constant, as Chen et al. 2023 §3.1)"),
             POSGRAD_MEMBER(pi_lr))
        .add(integer_list("pi_multipliers", closed(2, 64), 1, 8,
                          "Fine-tuning lengths M as multiples of the training length (scaling factor s = M), each once"),
             POSGRAD_MEMBER(pi_multipliers))
        .add(choice_list("pi_scalings", {"none", "linear", "ntk", "yarn"}, 4,
                         "RoPE scalings fine-tuned, each once: none (plain RoPE), linear (position interpolation), "
                         "ntk (static NTK-aware), yarn"),
             POSGRAD_MEMBER(pi_scalings));
    r.group("Passkey retrieval (train/passkey.h)")
        .add(integer("passkey_iters", closed(0, kBig),
                     "Fine-tuning steps of each trained LM on passkey examples at the training length (0: no passkey test)",
                     "steps"),
             POSGRAD_MEMBER(passkey.iters))
        .add(real("passkey_lr", open_closed(0, 1), "Peak learning rate of the passkey fine-tuning"), POSGRAD_MEMBER(passkey.lr))
        .add(integer("passkey_batch", closed(1, 4096), "Passkey examples per fine-tuning step and per scoring pass",
                     "sequences"),
             POSGRAD_MEMBER(passkey.batch))
        .add(integer("passkey_examples", closed(1, 1 << 16), "Passkey test examples per (length, depth) cell", "sequences"),
             POSGRAD_MEMBER(passkey.examples))
        .add(integer_list("passkey_multipliers", closed(1, 64), 1, 16,
                          "Passkey test lengths as multiples of the training length (must include 1)"),
             POSGRAD_MEMBER(passkey.multipliers))
        .add(real_list("passkey_depths", closed(0, 1), 1, 21,
                       "Needle depths: the fraction of the filler before the needle (0: at the start, 1: before the question)"),
             POSGRAD_MEMBER(passkey.depths))
        .add(integer("passkey_key_length", closed(1, 64), "Symbols of the pass key (digits, else lowercase letters)",
                     "symbols"),
             POSGRAD_MEMBER(passkey.key_length))
        .add(choice("passkey_template", data::passkey_template_names(),
                    "Needle and question: standard (Mohtashami & Jaggi 2023, about 100 tokens with a char tokenizer) or "
                    "short (' key K.' / ' key ', for short training contexts)"),
             POSGRAD_MEMBER(passkey.template_name));
    r.group("Encoder track (train/encoder.h)")
        .add(choice("track", {"decoder", "encoder", "both"},
                    "Models compared: causal decoder (language modelling), bidirectional encoder (masked-LM "
                    "pretraining, then classification and labelling tasks), or both"),
             POSGRAD_MEMBER(track))
        .add(integer("encoder_n_layer", closed(1, 64), "Encoder: transformer blocks"),
             POSGRAD_MEMBER(encoder.n_layer))
        .add(integer("encoder_n_embd", closed(1, 4096), "Encoder: width, divisible by encoder_n_head", "channels"),
             POSGRAD_MEMBER(encoder.n_embd))
        .add(integer("encoder_n_head", closed(1, 64), "Encoder: attention heads"),
             POSGRAD_MEMBER(encoder.n_head))
        .add(integer("encoder_length", closed(2, 4096), "Encoder: pretraining and fine-tuning length", "tokens"),
             POSGRAD_MEMBER(encoder.length))
        .add(integer("encoder_mlm_iters", closed(1, kBig), "Encoder: masked-LM pretraining steps", "steps"),
             POSGRAD_MEMBER(encoder.mlm_iters))
        .add(integer("encoder_task_iters", closed(1, kBig), "Encoder: fine-tuning steps per task", "steps"),
             POSGRAD_MEMBER(encoder.task_iters))
        .add(integer("encoder_batch", closed(1, 4096), "Encoder: sequences per step", "sequences"),
             POSGRAD_MEMBER(encoder.batch))
        .add(real("encoder_lr", open_closed(0, 1), "Encoder: peak learning rate (pretraining and fine-tuning)"),
             POSGRAD_MEMBER(encoder.lr))
        .add(integer("encoder_eval_examples", closed(1, 1 << 20),
                     "Encoder: held-out examples per task and length (and masked-LM windows per length)", "sequences"),
             POSGRAD_MEMBER(encoder.eval_examples))
        .add(choice_list("encoder_tasks", {"reversed", "marker_segment", "line_word"}, 3,
                         "Encoder fine-tuning tasks: reversed (was the window reversed), marker_segment (which segment "
                         "holds the marker), line_word (BIO-tag the k-th word of each line)"),
             POSGRAD_MEMBER(encoder.tasks))
        .add(integer_list("encoder_multipliers", closed(1, 64), 1, 8,
                          "Encoder evaluation lengths as multiples of encoder_length"),
             POSGRAD_MEMBER(encoder.multipliers))
        .add(integer("encoder_segments", closed(2, 1024), "Encoder marker_segment task: segments (classes)"),
             POSGRAD_MEMBER(encoder.segments))
        .add(integer("encoder_word_k", closed(1, 64), "Encoder line_word task: which word of each line is tagged"),
             POSGRAD_MEMBER(encoder.word_k));
    r.group("Cost benchmark")
        .add(integer_list("cost_lengths", closed(1, 1 << 16), 1, 8, "Sequence lengths timed", "tokens"),
             POSGRAD_MEMBER(cost_lengths))
        .add(integer("cost_rounds", closed(1, 1000), "Interleaved rounds (every method once per round, after a warm-up)"),
             POSGRAD_MEMBER(cost_rounds));
    auto base = lift<CompareConfig, TrainConfig>(
        train_options(), [](auto& c) -> auto& { return c.base; }, {"pos", "seed", "out_dir"});
    t.insert(t.end(), base.begin(), base.end());
    return t;
  }();
  return table;
}

const Table<EvalOptions>& eval_options() {
  static const Table<EvalOptions> table = [] {
    Table<EvalOptions> t;
    Rows<EvalOptions>(t)
        .group("Evaluation")
        .add(text("run", "Run directory (written by posgrad train)", false), POSGRAD_MEMBER(run))
        .add(integer_list("contexts", closed(1, 1 << 20), 0, 32,
                          "Context lengths to evaluate (empty: 1, 2 and 4 times the training length)", "tokens"),
             POSGRAD_MEMBER(contexts))
        .add(integer("windows", closed(1, 1 << 20), "Validation windows per length", "windows"), POSGRAD_MEMBER(windows))
        .add(text("device", "cpu or cuda[:N]", false), POSGRAD_MEMBER(device));
    return t;
  }();
  return table;
}

const Table<SampleOptions>& sample_options() {
  static const Table<SampleOptions> table = [] {
    Table<SampleOptions> t;
    Rows<SampleOptions>(t)
        .group("Sampling")
        .add(text("run", "Run directory (written by posgrad train)", false), POSGRAD_MEMBER(run))
        .add(text("prompt", "Text to continue (empty: a newline)"), POSGRAD_MEMBER(prompt))
        .add(integer("tokens", closed(0, 1 << 20), "Tokens to generate", "tokens"), POSGRAD_MEMBER(tokens))
        .add(real("temperature", open_closed(0, 1e6), "Softmax temperature; towards 0 sampling becomes greedy"),
             POSGRAD_MEMBER(temperature))
        .add(integer("top_k", closed(0, 1LL << 30), "Sample among the k most likely tokens (0: all)"), POSGRAD_MEMBER(top_k))
        .add(unsigned_integer("seed", "Sampling seed"), POSGRAD_MEMBER(seed))
        .add(text("device", "cpu or cuda[:N]", false), POSGRAD_MEMBER(device))
        .add(boolean("kv_cache", "Reuse the keys and values of earlier tokens while the text fits the training context "
                                 "(the same tokens as without; false recomputes the window every token)"),
             POSGRAD_MEMBER(kv_cache));
    return t;
  }();
  return table;
}

#undef POSGRAD_MEMBER

// ---- memory ------------------------------------------------------------------------------------------

MemoryEstimate estimate_memory(const TrainConfig& c, int64_t longest_context) {
  using LD = long double;
  const auto& m = c.model;
  const LD C = static_cast<LD>(m.n_embd), L = static_cast<LD>(m.n_layer), H = static_cast<LD>(m.n_head);
  const LD V = static_cast<LD>(std::max<int64_t>(m.vocab_size, 256));
  const LD T = static_cast<LD>(m.block_size), B = static_cast<LD>(c.batch_size);
  // Parameters: embedding, per block 12C² + 13C (qkv, proj, fc, proj, two LayerNorms), final LayerNorm,
  // plus the position encoding's own tables (the largest of any kind, an upper bound).
  LD pos = 0;
  const std::string& kind = m.pos.kind;
  if (kind == "learned") pos = T * C;
  if (kind == "t5") pos = static_cast<LD>(m.pos.options.integer("t5_num_buckets")) * H * L;
  if (kind == "deberta") {
    LD span = static_cast<LD>(std::max<int64_t>({m.pos.options.integer("deberta_position_buckets"),
                                                 m.pos.options.integer("deberta_max_relative_positions"), m.block_size}));
    pos = 2 * span * C + 2 * L * (C * C + C);
  }
  MemoryEstimate e;
  e.parameters = V * C + L * (12 * C * C + 13 * C) + 2 * C + pos;
  const LD state = c.optimizer == "adamw" ? 4 : 3;  // value, gradient (+ momentum) (+ second moment)
  e.parameter_bytes = e.parameters * state * 4;
  // Activations kept for backward per token and layer: LayerNorm outputs and statistics, q/k/v,
  // attention output and log-sum-exp (the fused kernel keeps O(T), not O(T²)), the MLP's 4C input
  // and activation, residuals: about 18C + H floats; backward holds about as much again.
  const LD dropout_masks = m.dropout > 0 ? 3 * C : 0;
  const LD per_token = 2 * L * (18 * C + H + dropout_masks) + 3 * V + 2 * C;
  e.activation_bytes = B * T * per_token * 4;
  // Evaluation: 8 windows at the longest context, no graph: a few layers' tensors plus logits.
  const LD Te = static_cast<LD>(std::max<int64_t>(longest_context, m.block_size));
  e.evaluation_bytes = 8 * Te * (8 * C + 4 * V) * 4;
  return e;
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

std::string format_bytes(long double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (b >= 1024 && u < 6) b /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0Lf %s" : "%.1Lf %s", b, units[u]);
  return buf;
}

void check_memory(const TrainConfig& c, int64_t longest_context) {
  const uint64_t have = physical_memory_bytes();
  if (have == 0) return;
  const MemoryEstimate e = estimate_memory(c, longest_context);
  if (e.total() <= static_cast<long double>(have)) return;
  const auto& m = c.model;
  std::string msg = "this configuration needs an estimated " + format_bytes(e.total()) + " but the machine has " +
                    format_bytes(have) + ": parameters and optimizer state " + format_bytes(e.parameter_bytes) +
                    " (--n-layer " + std::to_string(m.n_layer) + ", --n-embd " + std::to_string(m.n_embd) +
                    (m.pos.kind == "learned" ? ", --block-size " + std::to_string(m.block_size) : "") +
                    "), training activations " + format_bytes(e.activation_bytes) + " (--batch-size " +
                    std::to_string(c.batch_size) + " x --block-size " + std::to_string(m.block_size) + " x --n-layer " +
                    std::to_string(m.n_layer) + " x --n-embd " + std::to_string(m.n_embd) + ")";
  if (longest_context > m.block_size)
    msg += ", evaluation at " + std::to_string(longest_context) + " tokens " + format_bytes(e.evaluation_bytes);
  throw UsageError(msg + "; reduce the largest of these");
}

}  // namespace posgrad::train
