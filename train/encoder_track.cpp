// encoder_track.cpp — see encoder_track.h.
#include "train/encoder_track.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "data/corpus.h"
#include "data/fileio.h"
#include "tensor/errors.h"

namespace posgrad::train {

namespace fs = std::filesystem;

EncoderTrackConfig encoder_track_config(const CompareConfig& cfg) {
  EncoderTrackConfig e = cfg.encoder;
  e.methods = cfg.methods;
  e.seeds = cfg.seeds;
  return e;
}

EncoderTrackResult run_compare_encoder_track(const CompareConfig& cfg) {
  const EncoderTrackConfig ec = encoder_track_config(cfg);
  ec.validate();
  const std::string path = cfg.out_dir + "/encoder_results.json";
  if (fs::exists(path)) {
    try {
      EncoderTrackResult saved = encoder_track_from_json(nlohmann::json::parse(read_file(path)), path);
      if (saved.config.to_json() == ec.to_json()) {
        spdlog::info("[encoder track] finished earlier — kept ({})", path);
        return saved;
      }
      spdlog::info("[encoder track] {} was measured with other settings — measuring again", path);
    } catch (const nlohmann::json::exception& e) {
      throw IoError("'" + path + "' is not valid JSON (" + e.what() + "); delete it to measure the encoder track again");
    }
  }
  const TrainConfig& b = cfg.base;
  const std::string text = data::load_corpus(b.corpus, b.data_dir, b.max_corpus_bytes);
  auto tok = data::make_tokenizer(b.tokenizer, text);
  const int64_t longest = ec.length * *std::max_element(ec.multipliers.begin(), ec.multipliers.end());
  data::TokenDataset ds(text, *tok, longest);
  spdlog::info("=== encoder track: {} methods x {} seeds, masked-LM {} steps, {} tasks x {} steps ===",
               ec.methods.size(), ec.seeds.size(), ec.mlm_iters, ec.tasks.size(), ec.task_iters);
  EncoderTrackResult r = run_encoder_track(ec, ds, *tok, true, cfg.out_dir + "/encoder");
  fs::create_directories(cfg.out_dir);
  write_file_atomic(path, to_json(r).dump(1) + "\n");
  return r;
}

}  // namespace posgrad::train
