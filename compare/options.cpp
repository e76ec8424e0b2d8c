// options.cpp — see options.h. One row per option: adding an option is one line here (plus its
// member in compare/config.h).
#include "compare/options.h"

#include "data/length_tasks.h"
#include "data/passkey.h"
#include "data/synthetic.h"
#include "nn/posenc/position_encoding.h"
#include "train/options.h"

namespace posgrad::train {

using namespace opt;

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
        .add(result_neutral(text("out_dir", "Experiment directory (one run directory per method and seed inside)", false)),
             POSGRAD_MEMBER(out_dir));
    r.group("Synthetic task")
        .add(choice("task", {"copy", "reverse"}, "Synthetic task"), POSGRAD_MEMBER(task))
        .add(integer("task_length", closed(1, 256), "Training sequence length of the task", "symbols"),
             POSGRAD_MEMBER(task_length))
        .add(integer("task_symbols", closed(2, 1024), "Alphabet size of the task", "symbols"), POSGRAD_MEMBER(task_symbols))
        .add(integer("task_iters", closed(0, kMany), "Training steps of the task", "steps"), POSGRAD_MEMBER(task_iters))
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
        .add(integer("suite_iters", closed(0, kMany), "Training steps per suite task (0: no suite)", "steps"),
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
    r.group("Position interpolation (compare/studies/pi/pi_protocol.h)")
        .add(integer("pi_iters", closed(0, kMany),
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
    r.group("Passkey retrieval (compare/studies/passkey/passkey.h)")
        .add(integer("passkey_iters", closed(0, kMany),
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
    r.group("Encoder track (compare/studies/encoder/encoder.h)")
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
        .add(integer("encoder_mlm_iters", closed(1, kMany), "Encoder: masked-LM pretraining steps", "steps"),
             POSGRAD_MEMBER(encoder.mlm_iters))
        .add(integer("encoder_task_iters", closed(1, kMany), "Encoder: fine-tuning steps per task", "steps"),
             POSGRAD_MEMBER(encoder.task_iters))
        .add(integer("encoder_batch", closed(1, 4096), "Encoder: sequences per step", "sequences"),
             POSGRAD_MEMBER(encoder.batch))
        .add(real("encoder_lr", Interval{0, 1, true, true},  // (0, 1): as EncoderTrackConfig::validate
                         "Encoder: peak learning rate (pretraining and fine-tuning)"),
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
        .add(result_neutral(integer("cost_rounds", closed(1, 1000),
                                    "Interleaved rounds (every method once per round, after a warm-up; the benchmark "
                                    "runs again on every re-run, so a re-run may change it)")),
             POSGRAD_MEMBER(cost_rounds));
    auto base = lift<CompareConfig, TrainConfig>(
        train_options(), [](auto& c) -> auto& { return c.base; }, {"pos", "seed", "out_dir"});
    t.insert(t.end(), base.begin(), base.end());
    return t;
  }();
  return table;
}

}  // namespace posgrad::train
