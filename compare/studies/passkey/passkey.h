// passkey.h — passkey retrieval for the comparison's language models (Mohtashami & Jaggi 2023,
// "Landmark Attention", §4.2; Chen et al. 2023, "Position Interpolation", §3.3; Peng et al. 2023,
// "YaRN", §4.3). A trained LM learns the task in one of two ways, or both: passkey examples
// (data/passkey.h) mixed into its pretraining batches (--passkey-pretrain-fraction,
// passkey_pretrain_mix), or fine-tuning on them at its training length after pretraining
// (--passkey-iters, finetune_passkey); it is then scored on a grid of (length, depth) cells: does it
// reproduce the key hidden at that depth of that much filler text, at lengths up to many times the
// one it was trained on? With no fine-tuning steps the pretrained model is scored as it is.
//
// Scoring: teacher forcing, the argmax of the logits at each key position given the true prefix;
// an example counts when every key symbol is the argmax. That is exactly when greedy decoding of
// the key reproduces it (each greedy step then sees the true prefix; ties go to the lowest id in
// both), so accuracy = greedy retrieval accuracy. Chance: alphabet_size^-key_length.
//
// The test examples of a cell come from a generator fixed by (multiplier, depth), drawn from the
// validation text: the same for every method and seed, so rows differ only by their models.
// A cell beyond the encoding's max_length() (a learned table) or needing more filler than the
// validation text holds is n/a (accuracy absent), as evaluate_lengths in compare/compare.cpp.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare/studies/passkey/passkey_config.h"
#include "compare/study.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "tensor/dtype.h"
#include "tensor/option_table.h"
#include "train/trainer.h"

namespace posgrad::train {

struct PasskeyCell {
  int64_t multiplier = 1;          // input length = multiplier · block_size tokens
  double depth = 0;                // needle depth in [0, 1]
  int64_t examples = 0;            // 0 when n/a
  std::optional<double> accuracy;  // fraction of examples whose whole key is retrieved; absent: n/a
};

// The cells of one model, multiplier-major in the order of PasskeyConfig::multipliers × depths.
struct PasskeyGrid {
  std::string alphabet;  // "digits" | "letters" (data/passkey.h)
  std::vector<PasskeyCell> cells;
  const PasskeyCell* find(int64_t multiplier, double depth) const;  // nullptr when absent
};

struct PasskeyFinetune {
  double final_loss = 0;  // loss of the last step (answer tokens only)
  double seconds = 0;     // wall time, informational
};

// One row of a unit's results: the model (`rope`: fine-tuned, or as pretrained when there is no
// fine-tuning) or an evaluation-time variant of it ("rope+yarn"); variants share its loss.
struct PasskeyResult {
  // The loss on the key: the last fine-tuning step's, or without fine-tuning passkey_key_loss (the
  // results.json key stays "final_loss").
  double final_loss = 0;
  PasskeyGrid grid;
};
// The study's part of a unit (results.json "passkey"), by row: the method, its evaluation-time
// scalings, and each model an earlier study derived (UnitContext::models). Checks of a result read
// back: rows iff --passkey-iters > 0, the method's own row among them, every row the method or a
// variant of it, cells = --passkey-multipliers x --passkey-depths in order, an accuracy at 1x.
struct PasskeyRows {
  static constexpr const char* kStudy = "passkey";
  std::map<std::string, PasskeyResult> rows;
};

// Fine-tunes `model` in place (it continues from its trained weights) on passkey examples of
// block_size + 1 tokens (inputs of block_size) drawn from `train` with the depth uniform in [0, 1)
// per example: cfg.iters steps of cfg.batch examples with the shared loop (train/finetune.h): AdamW
// (betas 0.9, 0.98, no weight decay) at cfg.lr with a linear warm-up over iters/10 steps (at least
// one) and a cosine decay to lr/10 (as the comparison's synthetic task), gradient norm clipped to 1;
// returns with the model in eval mode. Examples are drawn from generators seeded by `seed` (dropout
// from the model's own). ValueError (data/passkey.h) when the tokenizer cannot write the template or
// block_size + 1 is too short for the template; NonFiniteLoss "passkey fine-tuning (<row> seed <seed>):
// ..." naming the step; Interrupted (train/interrupt.h) when a stop signal arrives. `row` names the
// result row in those messages (`rope`, "rope+linear ft2x"; "": none).
PasskeyFinetune finetune_passkey(nn::GPT& model, const data::TokenSpan& train, const data::Tokenizer& tok,
                                 const PasskeyConfig& cfg, uint64_t seed, Device dev, const std::string& row = "");

// Passkey rows in the pretraining batches (--passkey-pretrain-fraction F > 0): the Trainer's batch
// mix (BatchMix, train/trainer.h) for unit seed `seed`. In step s, micro-batch m, of B rows of T
// tokens, floor(F·B) rows plus one more with probability F·B − floor(F·B) (so that the share is F in
// expectation, and exactly F where F·B is whole), chosen uniformly without replacement, are replaced
// by passkey examples of T + 1 tokens from the filler `train` (x = tokens[0, T), y = tokens[1, T + 1)),
// each with its own key and a needle depth uniform in [0, 1), in cfg's template and key length.
// Draws: a Generator seeded stream(stream(stream(seed, "passkey.pretrain"), s), m) (train/seeds.h),
// so the rows are a function of (seed, s, m) alone: a resumed unit and every data-parallel rank
// see the same batches, and the corpus windows the sampler drew are the same with or without the mix.
// Loss: the whole row's next-token loss, every target kept — a decision of this study. The recipe is a
// data mix: the rows are documents of the pretraining stream under its one objective, as the
// language-modelling literature trains mixed-in synthetic data; the answer-only loss is the
// supervised fine-tuning's (finetune_passkey, the articles' setting). The whole-row loss keeps the
// filler (corpus text) training the language model, so the mix costs it less than its share of
// rows; the question's fixed text is learnt at once, the needle's key symbols are unpredictable
// (a constant ln(alphabet) each in the training loss), and the answer's key symbols carry the
// retrieval signal with the same weight per token as an answer-only loss would give them.
// Returns an empty function when F is 0. ValueError (data/passkey.h) at once when the tokenizer
// cannot write the template or a key alphabet; from the mix, ValueError when T + 1 tokens do not
// hold the template and one filler token or exceed what `train` holds. `train` is shared with the
// mix; `tok` must outlive it.
BatchMix passkey_pretrain_mix(const data::TokenSpan& train, const data::Tokenizer& tok, const PasskeyConfig& cfg,
                              uint64_t seed);

// The mean cross-entropy on the key symbols of `model` (eval mode, no gradients) over cfg.batch
// examples of block_size + 1 tokens from `val`, at depths (i + 0.5) / cfg.batch, drawn from a
// generator of fixed seed (the same examples for every model): the loss on the key a model scored
// without fine-tuning reports.
double passkey_key_loss(nn::GPT& model, const data::TokenSpan& val, const data::Tokenizer& tok,
                        const PasskeyConfig& cfg, Device dev);

// Scores `model` (in eval mode, no gradients) on every (multiplier, depth) cell of cfg: cfg.examples
// examples of multiplier · block_size + 1 tokens from `val`, in forward passes of up to cfg.batch
// examples. Deterministic: no generator of the caller is used.
PasskeyGrid evaluate_passkey(nn::GPT& model, const data::TokenSpan& val, const data::Tokenizer& tok,
                             const PasskeyConfig& cfg, Device dev);

// Examples of a batch whose every scored target (y != -100) is the argmax of its logits row.
// logits (B, T, V) float32/float64 on the CPU, y int64 (B, T) (data::passkey_batch). ShapeError /
// DTypeError on misuse, ValueError for a row with no scored position (data::score_length_logits).
int64_t passkey_correct(const Tensor& logits, const Tensor& y);

// The comparison's passkey test for one (method, seed): a copy of the trained `model` fine-tuned
// (finetune_passkey on `train`; with cfg.iters = 0 not fine-tuned, its loss passkey_key_loss) and
// scored (evaluate_passkey on `val`); for `rope` also the evaluation-time scalings of that model as rows "rope+linear",
// "rope+dynamic" and "rope+yarn" (linear and YaRN at s = multiplier per length; dynamic NTK at s = 1, growing its base
// with the length itself; at 1x all three are the plain model), as rope_variants in compare/compare.cpp. `model` itself
// is left unchanged. Keyed by row. The rows named in `skip` (the derived rows this configuration cannot build:
// skipped_rope_variants, compare/compare_eval.h) are left out, as they are from the evaluation.
std::map<std::string, PasskeyResult> run_passkey(const nn::GPT& model, const data::TokenSpan& train,
                                                 const data::TokenSpan& val, const data::Tokenizer& tok,
                                                 const PasskeyConfig& cfg, const std::string& method, uint64_t seed,
                                                 Device dev, const std::map<std::string, std::string>& skip = {});

// Checks, before any training, that the passkey test can run on this data: the tokenizer writes the
// template and a key alphabet, and the training split holds the filler of a block_size + 1 example
// (ValueError from data/passkey.h naming the problem). A short validation split only makes cells n/a.
void check_passkey_data(const data::TokenSpan& train, const data::Tokenizer& tok, const PasskeyConfig& cfg,
                        int64_t block_size);

// Checks the comparison's passkey options (UsageError naming the option) when the test runs
// (cfg.iters > 0 or cfg.pretrain_fraction > 0): the
// multipliers include 1, the depths lie in [0, 1] without duplicates, and block_size + 1 tokens hold
// the template's needle, question and key plus one filler token (one token per byte, the byte and
// char tokenizers). `block_size` is the comparison's training length.
void validate_passkey(const PasskeyConfig& cfg, int64_t block_size);

// results.json form of a unit's passkey rows; passkey_from_json throws json::exception on a
// malformed entry (unit_from_json turns it into an IoError naming the file).
nlohmann::json passkey_to_json(const std::map<std::string, PasskeyResult>& rows);
std::map<std::string, PasskeyResult> passkey_from_json(const nlohmann::json& j);

StudyEntry passkey_study();

}  // namespace posgrad::train
