// encoder_track.cpp — see encoder_track.h.
#include "compare/studies/encoder/encoder_track.h"

#include "compare/method.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "data/corpus.h"
#include "data/fileio.h"
#include "tensor/errors.h"
#include "train/options.h"

namespace posgrad::train {

namespace fs = std::filesystem;

EncoderTrackConfig encoder_track_config(const CompareConfig& cfg) {
  EncoderTrackConfig e = cfg.of<EncoderTrackConfig>();
  e.methods = cfg.methods;
  // The default --methods (every registered encoding) means every encoding the encoder can use:
  // the causal-only ones (xpos) are left out, by name in the log. Listed explicitly, one of them is
  // refused by EncoderTrackConfig::validate().
  if (e.methods == nn::position_encoding_kinds()) {
    e.methods = nn::bidirectional_position_encoding_kinds();
    for (const auto& m : cfg.methods)
      if (nn::position_encoding_entry(method_kind(m)).causal_only)
        spdlog::info("encoder track: {} is causal only (decoders), not trained as an encoder", m);
  }
  e.seeds = cfg.seeds;
  // The data directory as resolved now (--data-dir, else POSGRAD_DATA_DIR), so that posgrad eval finds
  // the same text without the environment of the run.
  std::string data_dir = cfg.base.data_dir;
  if (data_dir.empty())
    if (const char* env = std::getenv("POSGRAD_DATA_DIR")) data_dir = env;
  e.corpus = {{"corpus", cfg.base.corpus}, {"data_dir", data_dir}, {"max_corpus_bytes", cfg.base.max_corpus_bytes}};
  return e;
}

void check_encoder_memory(const EncoderTrackConfig& ec) {
  const uint64_t have = physical_memory_bytes();
  if (have == 0) return;
  const int64_t longest = ec.length * *std::max_element(ec.multipliers.begin(), ec.multipliers.end());
  TrainConfig t;
  t.model.n_layer = ec.n_layer;
  t.model.n_head = ec.n_head;
  t.model.n_embd = ec.n_embd;
  t.model.vocab_size = 258;  // the byte vocabulary and [MASK], [MARK]: the largest the track builds
  t.model.block_size = ec.length;
  t.model.pos.kind = "learned";  // the largest position table: block_size rows at the longest length
  t.batch_size = ec.batch;
  MemoryEstimate train = estimate_memory(t, ec.length);
  t.model.block_size = longest;
  const MemoryEstimate at_longest = estimate_memory(t, longest);
  // estimate_memory's evaluation is 8 windows; the track evaluates `batch` windows at once.
  const long double eval_bytes = at_longest.evaluation_bytes * static_cast<long double>(ec.batch) / 8.0L;
  const long double total = at_longest.parameter_bytes + std::max(train.activation_bytes, eval_bytes);
  if (total <= static_cast<long double>(have)) return;
  throw UsageError("the encoder track needs an estimated " + format_bytes(total) + " but the machine has " +
                   format_bytes(have) + ": parameters and optimizer state " + format_bytes(at_longest.parameter_bytes) +
                   " (--encoder-n-layer " + std::to_string(ec.n_layer) + ", --encoder-n-embd " +
                   std::to_string(ec.n_embd) + "), pretraining activations " + format_bytes(train.activation_bytes) +
                   " (--encoder-batch " + std::to_string(ec.batch) + " x --encoder-length " +
                   std::to_string(ec.length) + "), evaluation at " + std::to_string(longest) +
                   " tokens (--encoder-length x the largest of "
                   "--encoder-multipliers) " +
                   format_bytes(eval_bytes) + "; reduce the largest of these");
}

EncoderTrackData load_encoder_track_data(const CompareConfig& cfg) {
  const TrainConfig& b = cfg.base;
  EncoderTrackData d;
  d.text = data::load_corpus(b.corpus, b.data_dir, b.max_corpus_bytes);
  d.tokenizer = data::make_tokenizer(b.tokenizer, d.text);
  // Block 1: the splits do not depend on it; check_encoder_data names the --encoder-* options that
  // set the length each split must hold.
  d.dataset = std::make_unique<data::TokenDataset>(d.text, *d.tokenizer, 1);
  check_encoder_data(encoder_track_config(cfg), *d.dataset, *d.tokenizer);
  return d;
}

EncoderTrackConfig encoder_run_config(const CompareConfig& cfg, const EncoderTrackData& d) {
  EncoderTrackConfig ec = encoder_track_config(cfg);
  // The text by absolute path and content hash, saved with each encoder: posgrad eval reads the same
  // file from any directory and refuses it once changed (not a setting: results are unaffected).
  const nlohmann::json record = data::corpus_record(cfg.base.corpus, cfg.base.data_dir, d.text);
  for (const auto& [k, v] : record.items()) ec.corpus[k] = v;
  return ec;
}

std::vector<std::pair<std::string, uint64_t>> encoder_units(const CompareConfig& cfg) {
  const EncoderTrackConfig ec = encoder_track_config(cfg);
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const std::string& m : ec.method_list())
    for (uint64_t seed : ec.seeds) out.emplace_back(m, seed);
  return out;
}

EncoderUnitResult run_compare_encoder_unit(const CompareConfig& cfg, const std::string& method, uint64_t seed) {
  const EncoderTrackData d = load_encoder_track_data(cfg);
  const EncoderTrackConfig ec = encoder_run_config(cfg, d);
  ec.validate();
  spdlog::info("=== encoder track: {} seed {}, masked-LM {} steps, {} tasks x {} steps ===", method, seed, ec.mlm_iters,
               ec.tasks.size(), ec.task_iters);
  return run_or_keep_encoder_unit(ec, method, seed, *d.dataset, *d.tokenizer, true, cfg.out_dir + "/encoder");
}

EncoderTrackResult collect_encoder_track(const CompareConfig& cfg, std::vector<EncoderUnitResult> units) {
  const EncoderTrackData d = load_encoder_track_data(cfg);
  EncoderTrackResult r;
  r.config = encoder_run_config(cfg, d);
  r.config.methods = r.config.method_list();
  r.units = std::move(units);
  write_file_atomic(cfg.out_dir + "/encoder_results.json", to_json(r).dump(1) + "\n");
  return r;
}

}  // namespace posgrad::train
