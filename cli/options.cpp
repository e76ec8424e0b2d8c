// options.cpp — the training options shared by `train` and `compare`.
#include <cstring>

#include "cli/commands.h"
#include "nn/posenc/position_encoding.h"
#include "train/presets.h"

namespace posgrad::cli {

namespace {
int g_argc = 0;
char** g_argv = nullptr;
}  // namespace

void set_argv(int argc, char** argv) {
  g_argc = argc;
  g_argv = argv;
}
int argc_saved() { return g_argc; }
char** argv_saved() { return g_argv; }

std::string preset_from_argv(int argc, char** argv, const std::string& fallback) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--preset") == 0 && i + 1 < argc) return argv[i + 1];
    if (std::strncmp(argv[i], "--preset=", 9) == 0) return argv[i] + 9;
  }
  return fallback;
}

void bind_train_options(CLI::App* sub, train::TrainConfig& c) {
  auto& m = c.model;
  auto& p = c.model.pos;
  std::string kinds;
  for (const auto& k : nn::position_encoding_kinds()) kinds += (kinds.empty() ? "" : "|") + k;
  sub->option_defaults()->always_capture_default();
  // data
  sub->add_option("--corpus", c.corpus, "Text to train on: a file path, 'kjv' (offline default) or 'shakespeare'")
      ->group("Data");
  sub->add_option("--tokenizer", c.tokenizer, "Tokenizer: char (vocabulary from the corpus) or byte (256)")
      ->check(CLI::IsMember({"char", "byte"}))
      ->group("Data");
  sub->add_option("--data-dir", c.data_dir,
                  "Directory holding tinyshakespeare.txt (default: $POSGRAD_DATA_DIR, else ../shared/data)")
      ->group("Data");
  // model
  sub->add_option("--pos", p.kind, "Position encoding: " + kinds)->group("Model");
  sub->add_option("--n-layer", m.n_layer, "Transformer blocks")->group("Model");
  sub->add_option("--n-head", m.n_head, "Attention heads")->group("Model");
  sub->add_option("--n-embd", m.n_embd, "Model width (divisible by --n-head)")->group("Model");
  sub->add_option("--block-size", m.block_size, "Training context length")->group("Model");
  sub->add_option("--dropout", m.dropout, "Dropout probability")->group("Model");
  sub->add_option("--bias", m.bias, "Biases in Linear layers (true/false)")->group("Model");
  sub->add_option("--t5-buckets", p.t5_num_buckets, "T5: relative-position buckets")->group("Position encodings");
  sub->add_option("--t5-max-distance", p.t5_max_distance, "T5: max distance of the log buckets")
      ->group("Position encodings");
  sub->add_option("--t5-scaled", p.t5_scaled,
                  "T5: add the bias after 1/sqrt(d) scaling (true, default) or use T5's unscaled q.k (false)")
      ->group("Position encodings");
  sub->add_option("--t5-shared", p.t5_shared_layers, "T5: one bias table for all layers (true) or per layer")
      ->group("Position encodings");
  sub->add_option("--deberta-buckets", p.deberta_position_buckets, "DeBERTa: position_buckets")
      ->group("Position encodings");
  sub->add_option("--deberta-max-relative", p.deberta_max_relative_positions, "DeBERTa: max_relative_positions")
      ->group("Position encodings");
  sub->add_option("--deberta-c2p", p.deberta_c2p, "DeBERTa: content-to-position term")->group("Position encodings");
  sub->add_option("--deberta-p2c", p.deberta_p2c, "DeBERTa: position-to-content term")->group("Position encodings");
  sub->add_option("--deberta-layer-norm", p.deberta_layer_norm, "DeBERTa: LayerNorm on the relative table")
      ->group("Position encodings");
  sub->add_option("--deberta-share-att-key", p.deberta_share_att_key,
                  "DeBERTa: project positions with the content query/key weights")
      ->group("Position encodings");
  sub->add_option("--rope-base", p.rope_base, "RoPE: base (theta)")->group("Position encodings");
  sub->add_option("--rope-fraction", p.rope_fraction, "RoPE: fraction of the head dim rotated (partial rotary)")
      ->group("Position encodings");
  sub->add_option("--rope-interleaved", p.rope_interleaved, "RoPE: interleaved (GPT-J) instead of rotate-half layout")
      ->group("Position encodings");
  // optimisation
  sub->add_option("--optimizer", c.optimizer, "adamw or sgd")->check(CLI::IsMember({"adamw", "sgd"}))
      ->group("Optimisation");
  sub->add_option("--lr", c.lr, "Peak learning rate")->group("Optimisation");
  sub->add_option("--min-lr", c.min_lr, "Learning rate at the end of the cosine decay")->group("Optimisation");
  sub->add_option("--warmup-iters", c.warmup_iters, "Linear warm-up steps")->group("Optimisation");
  sub->add_option("--max-iters", c.max_iters, "Optimisation steps")->group("Optimisation");
  sub->add_option("--lr-decay-iters", c.lr_decay_iters, "Step at which the cosine reaches min-lr (-1: max-iters)")
      ->group("Optimisation");
  sub->add_option("--cosine", c.cosine, "Cosine decay after warm-up (false: constant)")->group("Optimisation");
  sub->add_option("--weight-decay", c.weight_decay, "Decoupled weight decay (matrices only)")->group("Optimisation");
  sub->add_option("--beta1", c.beta1, "AdamW beta1")->group("Optimisation");
  sub->add_option("--beta2", c.beta2, "AdamW beta2")->group("Optimisation");
  sub->add_option("--momentum", c.momentum, "SGD momentum")->group("Optimisation");
  sub->add_option("--grad-clip", c.grad_clip, "Clip the global gradient norm (0: off)")->group("Optimisation");
  sub->add_option("--batch-size", c.batch_size, "Sequences per micro-batch")->group("Optimisation");
  sub->add_option("--grad-accum", c.grad_accum, "Micro-batches accumulated per step")->group("Optimisation");
  // run
  sub->add_option("--eval-interval", c.eval_interval, "Steps between evaluations")->group("Run");
  sub->add_option("--eval-windows", c.eval_windows, "Validation windows per evaluation")->group("Run");
  sub->add_option("--log-interval", c.log_interval, "Steps between progress lines")->group("Run");
  sub->add_option("--checkpoint-interval", c.checkpoint_interval, "Steps between checkpoints (-1: eval-interval)")
      ->group("Run");
  sub->add_option("--seed", c.seed, "Seed of initialisation, data order and dropout")->group("Run");
  sub->add_option("--device", c.device, "cpu or cuda[:N]")->group("Run");
  sub->add_option("--out-dir", c.out_dir, "Run directory (checkpoints, metrics, config)")->group("Run");
  sub->add_option("--threads", c.threads, "OpenMP threads (0: all cores)")->group("Run");
}

}  // namespace posgrad::cli
