// options.cpp — see options.h. One row per option: adding an option is one line here (plus its
// member in the struct).
#include "train/options.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "nn/posenc/position_encoding.h"

namespace posgrad::train {

using namespace opt;

const Table<TrainConfig>& train_options() {
  static const Table<TrainConfig> table = [] {
    Table<TrainConfig> t;
    Rows<TrainConfig> r(t);
    r.group("Data")
        .add(fixed_on_resume(
                 text("corpus", "Text to train on: a file path, 'kjv' (offline default) or 'shakespeare'", false)),
             POSGRAD_MEMBER(corpus))
        .add(fixed_on_resume(choice("tokenizer", {"char", "byte"},
                                    "Tokenizer: char (vocabulary from the corpus) or byte (256 symbols)")),
             POSGRAD_MEMBER(tokenizer))
        .add(result_neutral(text(
                 "data_dir", "Directory holding tinyshakespeare.txt (empty: $POSGRAD_DATA_DIR, else ../shared/data)")),
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
      t.push_back(bind_value<TrainConfig>(
          s, [](auto& c) -> auto& { return c.model.pos.options; }));
    r.group("Optimisation")
        .add(fixed_on_resume(choice("optimizer", {"adamw", "sgd"}, "Optimizer")), POSGRAD_MEMBER(optimizer))
        .add(real("lr", open_closed(0, 1e6), "Peak learning rate"), POSGRAD_MEMBER(lr))
        .add(real("min_lr", closed(0, 1e6), "Learning rate at the end of the cosine decay (<= lr)"),
             POSGRAD_MEMBER(min_lr))
        .add(integer("warmup_iters", closed(0, kMany), "Linear warm-up", "steps"), POSGRAD_MEMBER(warmup_iters))
        .add(integer("max_iters", closed(0, kMany), "Optimisation steps of the whole run", "steps"),
             POSGRAD_MEMBER(max_iters))
        .add(integer("lr_decay_iters", closed(0, kMany), "Step at which the cosine reaches min_lr (0: max_iters)",
                     "steps"),
             POSGRAD_MEMBER(lr_decay_iters))
        .add(boolean("cosine", "Cosine decay after warm-up (false: constant)"), POSGRAD_MEMBER(cosine))
        .add(real("weight_decay", closed(0, 100), "Decoupled weight decay (matrices only)"),
             POSGRAD_MEMBER(weight_decay))
        .add(real("beta1", closed_open(0, 1), "AdamW beta1"), POSGRAD_MEMBER(beta1))
        .add(real("beta2", closed_open(0, 1), "AdamW beta2"), POSGRAD_MEMBER(beta2))
        .add(real("momentum", closed_open(0, 1), "SGD momentum"), POSGRAD_MEMBER(momentum))
        .add(real("grad_clip", closed(0, 1e9), "Clip the global gradient norm to this (0: off)"),
             POSGRAD_MEMBER(grad_clip))
        .add(integer("batch_size", closed(1, 1 << 20), "Sequences per micro-batch", "sequences"),
             POSGRAD_MEMBER(batch_size))
        .add(integer("grad_accum", closed(1, 1 << 20), "Micro-batches accumulated per step"),
             POSGRAD_MEMBER(grad_accum));
    r.group("Run")
        .add(integer("eval_interval", closed(1, kMany), "Steps between evaluations", "steps"),
             POSGRAD_MEMBER(eval_interval))
        .add(integer("eval_windows", closed(1, 1 << 20), "Validation windows per evaluation", "windows"),
             POSGRAD_MEMBER(eval_windows))
        .add(result_neutral(integer("log_interval", closed(1, kMany), "Steps between progress lines", "steps")),
             POSGRAD_MEMBER(log_interval))
        .add(result_neutral(integer("checkpoint_interval", closed(0, kMany),
                                    "Steps between checkpoints (0: eval_interval)", "steps")),
             POSGRAD_MEMBER(checkpoint_interval))
        .add(fixed_on_resume(unsigned_integer("seed", "Seed of initialisation, data order and dropout")),
             POSGRAD_MEMBER(seed))
        .add(
            text("device",
                 "cpu or cuda[:N] (under mpirun with NCCL every process takes the GPU of its rank on the node)", false),
            POSGRAD_MEMBER(device))
        .add(result_neutral(text("out_dir", "Run directory (checkpoint, metrics.jsonl, config.json)", false)),
             POSGRAD_MEMBER(out_dir))
        .add(result_neutral(integer("threads", closed(0, 1024),
                                    "OpenMP threads (0: all cores, fewer while other processes keep "
                                    "some busy; results do not depend on it)")),
             POSGRAD_MEMBER(threads))
        .add(fixed_on_resume(added_later_default(
                 choice("precision", {"fp32", "bf16"},
                        "Matrix products (linear layers, attention, LM head): fp32, or bf16 mixed precision -- "
                        "operands rounded to bf16, float accumulation, weights, gradients, optimizer state, "
                        "softmax and norms in float (VDPBF16PS where the CPU has AVX512-BF16; with --device cuda, "
                        "cublasGemmEx and the attention kernels round their operands)"),
                 std::string("fp32"))),
             POSGRAD_MEMBER(precision));
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
        .add(integer("windows", closed(1, 1 << 20), "Validation windows per length", "windows"),
             POSGRAD_MEMBER(windows))
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
        .add(integer("top_k", closed(0, 1LL << 30), "Sample among the k most likely tokens (0: all)"),
             POSGRAD_MEMBER(top_k))
        .add(unsigned_integer("seed", "Sampling seed"), POSGRAD_MEMBER(seed))
        .add(text("device", "cpu or cuda[:N]", false), POSGRAD_MEMBER(device))
        .add(boolean("kv_cache",
                     "Reuse the keys and values of earlier tokens while the text fits the training context "
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
    LD span =
        static_cast<LD>(std::max<int64_t>({m.pos.options.integer("deberta_position_buckets"),
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
  // On the CPU the exact GELU also keeps 1 + erf of its 4C input for its backward (UnaryFn<Gelu>).
  const LD gelu_erf = c.device == "cpu" ? 4 * C : 0;
  const LD per_token = 2 * L * (18 * C + H + dropout_masks) + L * gelu_erf + 3 * V + 2 * C;
  e.activation_bytes = B * T * per_token * 4;
  // Evaluation: 8 windows at the longest context, no graph: a few layers' tensors plus logits.
  const LD Te = static_cast<LD>(std::max<int64_t>(longest_context, m.block_size));
  e.evaluation_bytes = 8 * Te * (8 * C + 4 * V) * 4;
  // An encoding whose attention path materialises O(T^2) tensors (PosEncEntry::attention_bytes): every
  // layer's with the graph in training, one layer's at a time in evaluation.
  const auto& entry = nn::position_encoding_entry(kind);
  if (entry.attention_bytes) {
    nn::PosEncConfig pc = m.pos;  // with the model's sizes
    pc.n_embd = m.n_embd, pc.n_head = m.n_head, pc.n_layer = m.n_layer, pc.block_size = m.block_size;
    e.activation_bytes += L * entry.attention_bytes(pc, c.batch_size, m.block_size, true);
    e.evaluation_bytes += entry.attention_bytes(pc, 8, std::max<int64_t>(longest_context, m.block_size), false);
  }
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

namespace {
thread_local int g_skip_memory_checks = 0;
}  // namespace

SkipMemoryChecks::SkipMemoryChecks() { ++g_skip_memory_checks; }
SkipMemoryChecks::~SkipMemoryChecks() { --g_skip_memory_checks; }

void check_memory(const TrainConfig& c, int64_t longest_context, int64_t copies) {
  if (g_skip_memory_checks > 0) return;
  const uint64_t have = physical_memory_bytes();
  if (have == 0) return;
  const MemoryEstimate e = estimate_memory(c, longest_context);
  copies = std::max<int64_t>(1, copies);
  if (e.total() * static_cast<long double>(copies) <= static_cast<long double>(have)) return;
  const auto& m = c.model;
  std::string msg =
      "this configuration needs an estimated " + format_bytes(e.total()) +
      (copies > 1 ? " per unit, " + std::to_string(copies) + " units at once (--jobs " + std::to_string(copies) + ")"
                  : std::string()) +
      " but the machine has " + format_bytes(have) + ": parameters and optimizer state " +
      format_bytes(e.parameter_bytes) + " (--n-layer " + std::to_string(m.n_layer) + ", --n-embd " +
      std::to_string(m.n_embd) + (m.pos.kind == "learned" ? ", --block-size " + std::to_string(m.block_size) : "") +
      "), training activations " + format_bytes(e.activation_bytes) + " (--batch-size " + std::to_string(c.batch_size) +
      " x --block-size " + std::to_string(m.block_size) + " x --n-layer " + std::to_string(m.n_layer) + " x --n-embd " +
      std::to_string(m.n_embd) + ")";
  if (longest_context > m.block_size)
    msg += ", evaluation at " + std::to_string(longest_context) + " tokens " + format_bytes(e.evaluation_bytes);
  throw UsageError(msg + "; reduce the largest of these" + (copies > 1 ? " or --jobs" : ""));
}

}  // namespace posgrad::train
