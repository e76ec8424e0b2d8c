// encoder.h — the encoder track of the comparison: for each position encoding and seed, a
// bidirectional encoder (nn/encoder.h) is pretrained with BERT's masked-LM objective (data/mlm.h,
// Devlin et al. 2019 §3.1) on the corpus, then a copy of it is fine-tuned on each fine-tuning task
// (data/encoder_tasks.h) with a sequence- or token-classification head and scored at 1x, 2x, 4x
// the fine-tuning length on held-out windows of the validation split:
//   masked-token loss and accuracy (the 15% selected positions) per length;
//   accuracy and macro-F1 of the sequence tasks, CoNLL span F1 of the labelling task
//   (compare/studies/encoder/encoder_metrics.h).
// Across seeds each number gets its mean and 95% Student-t interval (compare/stats.h), and the
// article's accuracy/F1 ordering "RoPE > DeBERTa > T5 > absolute" is judged on these measurements
// by the decoder track's rules (a family of pairwise Welch tests, judge_family in compare/claims.h).
// The data order is identical for every method: pretraining windows, masks and task examples are
// drawn from generators seeded by (seed, purpose), never by the method.
// The model's position table covers the longest evaluation (block_size = length x max multiplier):
// a learned table's rows past the fine-tuning length are never trained, so every score at a length
// beyond PositionEncoding::trained_max_length(length) is NaN — n/a in result.json (null), the CSV and
// the report, and left out of every mean and claim — rather than a number from untrained parameters.
// Not here: the decoder track (compare/compare.h), which this file does not touch; resume inside a
// half-finished unit (a unit costs seconds to minutes; finished units are kept, see run_encoder_track).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/claims.h"
#include "compare/stats.h"
#include "compare/studies/encoder/encoder_config.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "nn/encoder.h"

namespace posgrad::train {

// Presets matching the comparison's (quick | full | tiny): tiny is for tests (seconds).
EncoderTrackConfig encoder_track_preset(const std::string& name);

// One task at one length.
struct EncoderTaskScore {
  std::string task;
  int64_t multiplier = 1, length = 0, examples = 0;
  // NaN (n/a) at a length past the encoding's trained positions; span F1 and recall also NaN when the
  // held-out set has no gold span (span_f1 in compare/studies/encoder/encoder_metrics.h).
  double accuracy = 0, macro_f1 = 0;                        // sequence tasks (token accuracy for labelling)
  double span_f1 = 0, span_precision = 0, span_recall = 0;  // labelling task
  double final_train_loss = 0;                              // of the fine-tuning (same for every length)
};

struct EncoderUnitResult {
  std::string method;
  uint64_t seed = 0;
  int64_t parameters = 0;
  double mlm_final_train_loss = 0;
  // Index-aligned with multipliers: masked-token loss and accuracy on validation windows (NaN past the
  // trained positions).
  std::vector<double> mlm_loss, mlm_accuracy;
  std::vector<EncoderTaskScore> tasks;  // task-major, then multiplier
  double seconds = 0;
};

struct EncoderTrackResult {
  static constexpr const char* kStudy = "encoder";  // the comparison's part (compare/parts.h): results.json "encoder"
  EncoderTrackConfig config;
  std::vector<EncoderUnitResult> units;
};

nlohmann::json to_json(const EncoderTrackResult& r);
EncoderTrackResult encoder_track_from_json(const nlohmann::json& j, const std::string& source);  // IoError
nlohmann::json encoder_unit_to_json(const EncoderUnitResult& u);
EncoderUnitResult encoder_unit_from_json(const nlohmann::json& j, const std::string& source);  // IoError
// A unit's result file <dir>/result.json, {"settings": EncoderTrackConfig::settings_json(), "unit": ...}.
// IoError naming the file when it is not valid JSON or not such a result; UsageError naming the
// differing --encoder-* options when its settings are not cfg.settings_json() (units of other settings are
// never mixed into one table).
// The file must also hold the unit of (method, seed) — the folder it sits in — with values that pass
// check_encoder_unit against cfg: otherwise an IoError naming the file, the JSON path of the value and
// telling to delete the file to measure that unit again (a copied or edited file is refused, never
// silently re-measured: the user decides whether its numbers go).
EncoderUnitResult load_encoder_unit(const std::string& path, const EncoderTrackConfig& cfg, const std::string& method,
                                    uint64_t seed);
// Range and shape checks of one unit against the track's settings, IoError "<source>: <path>.<key> =
// <value>: <rule><advice>": method and seed among cfg's, parameters >= 0, MLM loss finite >= 0 and
// accuracy in [0, 1] per multiplier (one each), tasks exactly cfg.tasks x cfg.multipliers in that
// order with length = length x multiplier, examples >= 0, accuracy / F1 / precision / recall in
// [0, 1], losses finite >= 0, seconds finite >= 0.
// The length up to which `method`'s positions are trained in this track's encoders
// (PositionEncoding::trained_max_length of the pretraining length; -1: every position).
int64_t encoder_trained_limit(const EncoderTrackConfig& cfg, const std::string& method);
void check_encoder_unit(const EncoderUnitResult& u, const EncoderTrackConfig& cfg, const std::string& source,
                        const std::string& path, const std::string& advice);

// ---- saved encoders and fill-mask -------------------------------------------------------------------
// A pretrained encoder is saved as <dir>/encoder.safetensors: the weights (names of nn::Encoder),
// and metadata {"format": "posgrad-encoder-1", "track": "encoder", "config": the model's sizes and
// position encoding (JSON), "tokenizer": Tokenizer::to_json()}; then <dir>/encoder.json,
// {"format": "posgrad-encoder-checksum-1", "checksums": {"encoder.safetensors": FNV-1a 64 hex}},
// both written atomically (as the decoder's checkpoint records its files' checksums in state.json).
// Every load (posgrad eval, fill-mask, a resumed comparison keeping the unit) verifies the checksum. The decoder's run
// directories hold checkpoint/ instead (train/checkpoint.h): the track of a run is the file it holds. A type of its own
// beside train::LoadedModel (the loaded decoder, train/trainer.h): another model (nn::Encoder and its MLM head, no
// TrainConfig) in another file, scored by evaluate_mlm / fill_mask.
struct LoadedEncoder {
  Generator dropout{0};  // the model's dropout generator (dropout is 0; kept alive with the model)
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<nn::Encoder> model;
  std::string method;
  int64_t length = 0;  // pretraining length in tokens (0: not recorded)
  // {"corpus", "data_dir", "max_corpus_bytes"} of the pretraining text and, since they are recorded,
  // data::corpus_record's "path" (absolute), "bytes", "fnv1a64" (null: not recorded)
  nlohmann::json corpus;
};
// length: the pretraining length (tokens); corpus: where the text came from (EncoderTrackConfig::corpus),
// so that posgrad eval can score the encoder on the same validation split.
void save_encoder(const std::string& dir, const nn::Encoder& enc, const std::string& method, const data::Tokenizer& tok,
                  int64_t length = 0, const nlohmann::json& corpus = {});
// IoError naming the path: no encoder.safetensors there (a decoder run: the message says so), a
// checksum that differs from encoder.json's or no encoder.json (verify_encoder_checksum), another format, a missing or
// malformed metadata key, weights that do not match the configuration.
std::unique_ptr<LoadedEncoder> load_encoder(const std::string& dir);
// IoError naming the file: <dir>/encoder.json missing or malformed, or encoder.safetensors' checksum
// not the recorded one (the message gives both checksums).
void verify_encoder_checksum(const std::string& dir);
// Fills every `mask_char` of `text` with the encoder's most likely token at that position (all
// masks predicted at once, as BERT does); `top` (>= 1) candidates with probabilities per mask.
// ValueError: no mask in the text, a character outside the tokenizer's vocabulary, a text longer
// than the model's positions.
struct FillMaskResult {
  std::string filled;
  std::vector<std::vector<std::pair<std::string, double>>> candidates;  // per mask, best first
};
// NonFiniteLoss (exit 3) when the logits at a mask are not finite (a corrupt or diverged encoder).
FillMaskResult fill_mask(const LoadedEncoder& enc, const std::string& text, char mask_char = '_', int64_t top = 5);

// Masked-token loss (nats) and accuracy of an encoder on `windows` windows of T tokens drawn from
// `val`, masked with BERT's rule (data/mlm.h); windows and masks come from generators seeded by `seed`
// alone, so every method is scored on the same windows. Vocabulary: the encoder's minus [MASK] and
// [MARK]. ValueError: a non-positive size, T longer than `val` or than the encoder's positions.
struct MlmScore {
  int64_t windows = 0, masked = 0;
  double loss = 0, accuracy = 0;
};
MlmScore evaluate_mlm(const nn::Encoder& enc, const data::TokenSpan& val, int64_t T, int64_t windows, int64_t batch,
                      uint64_t seed);

// One (method, seed) unit on the given data (train split for pretraining and fine-tuning, val split
// for every evaluation). tok gives the whitespace and newline ids; the encoder's vocabulary is the
// tokenizer's plus [MASK] (= V) and [MARK] (= V + 1). Deterministic for a given thread count.
// save_dir non-empty: the pretrained encoder (before fine-tuning) is saved there (save_encoder).
// While the evaluation runs, a progress line (spdlog: share of the held-out tokens scored, elapsed
// time, ETA) at most every set_encoder_progress_interval seconds (default 10; 0: after every batch).
EncoderUnitResult run_encoder_unit(const EncoderTrackConfig& cfg, const std::string& method, uint64_t seed,
                                   const data::TokenDataset& data, const data::Tokenizer& tok,
                                   const std::string& save_dir = "");
void set_encoder_progress_interval(double seconds);
// What a unit needs of the data, checked before anything trains: each split at least
// length x the largest multiplier + 1 tokens, and every task able to draw its examples from both splits
// (line_word needs a newline in the vocabulary). UsageError naming the --encoder-* options (and --corpus).
void check_encoder_data(const EncoderTrackConfig& cfg, const data::TokenDataset& data, const data::Tokenizer& tok);
// Every unit (methods x seeds, in that order); `log` true prints one line per unit (spdlog). out_dir
// non-empty: each unit's directory <out_dir>/<method>/seed<seed>/ receives the pretrained encoder
// and, once the unit has finished, its result.json; a unit whose result.json exists is read back
// (load_encoder_unit: same settings or UsageError) instead of measured, so an interrupted track
// resumes unit by unit and a new method or seed measures only its own units.
EncoderTrackResult run_encoder_track(const EncoderTrackConfig& cfg, const data::TokenDataset& data,
                                     const data::Tokenizer& tok, bool log = true, const std::string& out_dir = "");
// One unit of run_encoder_track: kept from <out_dir>/<method>/seed<seed>/ when finished there, else
// measured (and saved there when out_dir is not empty). The comparison's runner calls it per unit.
EncoderUnitResult run_or_keep_encoder_unit(const EncoderTrackConfig& cfg, const std::string& method, uint64_t seed,
                                           const data::TokenDataset& data, const data::Tokenizer& tok, bool log,
                                           const std::string& out_dir);

// ---- statistics and report ---------------------------------------------------------------------
// A metric of the track: "mlm_accuracy", "mlm_loss", or "<task>/<accuracy|macro_f1|span_f1>", at a
// multiplier. Values over the seeds of one method (units without it left out).
std::vector<double> encoder_values(const EncoderTrackResult& r, const std::string& method, const std::string& metric,
                                   int64_t multiplier);
// The chance level of a task metric on the balanced held-out groups: 1/classes for accuracy (what an
// order-blind model scores exactly) and for macro-F1 (its maximum for an order-blind model);
// labelling: NaN (no chance level for span F1).
double encoder_chance(const EncoderTrackConfig& c, const std::string& task, const std::string& metric);

// Whether `method`'s score on `task` is fixed by construction rather than learned: the `reversed`
// task (a window or its reversal, in balanced groups) with an encoding whose only position signal is
// a bias of |i - j| alone (PosEncEntry::symmetric_bias: ALiBi, KERPLE, Sandwich). Such an encoder
// maps the mirror image of a window to the mirror image of its hidden states, so mean pooling gives
// a window and its reversal the same logits and the group one prediction: accuracy 0.5 exactly (in
// exact arithmetic; rounding can split a group whose two logits tie to 1e-7). NoPE's order-blindness
// is its own control (below), not counted here. ValueError for an unregistered method or task.
bool encoder_score_is_structural(const std::string& method, const std::string& task);
// The tasks of cfg.tasks on which some method of `methods` is structural (in cfg.tasks order).
std::vector<std::string> encoder_structural_tasks(const EncoderTrackConfig& cfg,
                                                  const std::vector<std::string>& methods);

// The article's claim (b) "accuracy and F1: RoPE > DeBERTa > T5 > absolute" on the encoder track's
// accuracy (mean over the sequence tasks) and F1 (mean of the macro-F1s and the span F1), at 1x, as
// one claim, id "b" (the article's claims table reads it from here: compare/studies/article/article.h): one family
// (judge_family, compare/claims.h) of both orderings' adjacent pairs, each a Welch t-test on the per-seed composites
// (rope vs deberta, deberta vs t5, t5 vs each of sinusoidal and learned that has values). A task on which a method of
// the claim is structural (encoder_structural_tasks) is left out of every method's composite, so that all are compared
// on the same tasks and no score fixed by construction counts as evidence; the metric says which. A link without
// values: not measured, naming it.
std::vector<ClaimVerdict> judge_encoder_claims(const EncoderTrackResult& r);

// The markdown section of report.md: settings, MLM table, the task tables (mean [95% CI] over seeds
// per length, chance row), the NoPE control check beside the structural scores (each at 0.5 or not)
// and the claim verdicts.
std::string encoder_report_markdown(const EncoderTrackResult& r);
// encoder_results.csv: one row per (method, seed, metric, multiplier).
std::string encoder_results_csv(const EncoderTrackResult& r);

}  // namespace posgrad::train
