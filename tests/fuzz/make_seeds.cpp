// make_seeds.cpp — writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/) with
// posgrad's own writers, so that the seeds are real files: `posgrad_fuzz_seeds DIR` (built on
// request only: cmake --build build --target posgrad_fuzz_seeds). Regression inputs that a
// fuzzer found are added to the corpus by hand, beside these.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "compare/compare.h"
#include "compare/options.h"
#include "compare/results.h"
#include "compare/studies/attention/attention.h"
#include "compare/studies/cost/cost.h"
#include "compare/studies/encoder/encoder_track.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/passkey/passkey_config.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/task/task.h"
#include "data/dataset.h"
#include "data/fileio.h"
#include "data/tokenizer.h"
#include "tensor/option_table.h"
#include "tests/fuzz/fuzz_targets.h"
#include "train/options.h"
#include "train/safetensors.h"

using namespace posgrad;
namespace fs = std::filesystem;

static void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// A small comparison that passes check_comparison: the tiny preset with two methods and one seed,
// without suite, PI and passkey rows; `encoder` adds the encoder track (--track both).
static train::ComparisonResult small_comparison(bool encoder) {
  train::ComparisonResult r;
  train::CompareConfig& c = r.config;
  c = train::compare_preset("tiny");
  c.methods = {"alibi", "rope"};
  c.seeds = {1};
  c.of<train::SuiteSettings>().iters = 0;
  c.of<train::PiSettings>().iters = 0;
  c.of<train::PasskeyConfig>().iters = 0;
  c.track = encoder ? "both" : "decoder";
  r.provenance = {"0123456789ab", "fuzz cpu", "portable", "clang", "nlohmann-json", "not built", "00", 2};
  for (const auto& m : c.methods) {
    train::UnitResult u;
    u.method = m;
    u.seed = 1;
    u.parameters = 4000;
    u.position_parameters = 0;
    u.train_curve = {{0, 3.5}, {3, 3.0}, {6, 2.75}};
    u.val_curve = {{6, 2.875}};
    for (int64_t k : c.eval_multipliers) {
      const double loss = 2.5 + 0.25 * static_cast<double>(k);
      u.parts.get<train::LmResult>().lengths.push_back(
          train::LengthResult{k * c.base.model.block_size, 2, loss, std::exp(loss), 0.25});
    }
    for (const auto& row : train::variant_rows(m))  // every derived row the unit measures (compare/studies/lm/lm.h)
      u.parts.get<train::LmResult>().variants[row] = u.parts.get<train::LmResult>().lengths;
    // One loss per position of the per-position window, one attention profile per layer.
    for (int64_t i = 0; i < c.per_position_multiplier * c.base.model.block_size; ++i)
      u.parts.get<train::LmResult>().per_position_loss.push_back(3.0 - 0.03125 * static_cast<double>(i));
    u.parts.get<train::AttentionResult>().over_uniform.assign(static_cast<size_t>(c.base.model.n_layer),
                                                              std::vector<double>{});
    for (auto& layer : u.parts.get<train::AttentionResult>().over_uniform)  // distances 1..T-1, over uniform
      for (int64_t d = 1; d < c.base.model.block_size; ++d) layer.push_back(2.0 / static_cast<double>(d + 1));
    for (int64_t k : c.of<train::TaskSettings>().multipliers)
      u.parts.get<train::TaskResult>().scores.push_back(
          train::TaskScore{k * c.of<train::TaskSettings>().length, 4, 0.25, 0.5, 0.5});
    u.parts.get<train::TaskResult>().final_loss = 1.5;
    u.train_seconds = 1.25;
    r.units.push_back(u);
  }
  r.parts.get<train::CostResult>().rounds = c.of<train::CostSettings>().rounds;
  r.parts.get<train::CostResult>().threads = 2;
  r.parts.get<train::CostResult>().lengths = c.of<train::CostSettings>().lengths;
  for (int64_t T : c.of<train::CostSettings>().lengths)
    for (const auto& m : c.methods)
      for (const char* what : {"attention", "step"})
        r.parts.get<train::CostResult>().rows.push_back(
            {m, what, T, 4, std::vector<double>(static_cast<size_t>(c.of<train::CostSettings>().rounds), 0.125),
             1 << 20, 4000});
  if (encoder) {
    train::EncoderTrackResult e;
    e.config = train::encoder_track_config(c);
    for (const auto& m : c.methods) {
      train::EncoderUnitResult u;
      u.method = m;
      u.seed = 1;
      u.parameters = 3000;
      u.mlm_final_train_loss = 2.5;
      for (size_t i = 0; i < e.config.multipliers.size(); ++i) {
        u.mlm_loss.push_back(2.75);
        u.mlm_accuracy.push_back(0.125);
      }
      for (const auto& t : e.config.tasks)
        for (int64_t k : e.config.multipliers)
          u.tasks.push_back({t, k, k * e.config.length, 8, 0.5, 0.375, 0.25, 0.25, 0.25, 1.0});
      u.seconds = 0.5;
      e.units.push_back(u);
    }
    r.parts.get<train::EncoderTrackResult>() = e;
  }
  return r;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: posgrad_fuzz_seeds DIR\n";
    return 2;
  }
  const fs::path out = argv[1];
  fuzz::quiet_logging();

  // safetensors: files as save_safetensors writes them.
  const fs::path st = out / "safetensors";
  fs::create_directories(st);
  save_safetensors((st / "model.safetensors").string(),
                   {{"wte.weight", Tensor::from_vector(std::vector<float>{0.5f, -1, 2, 0.25f, 3, -0.5f}, {3, 2})},
                    {"ln_f.bias", Tensor::from_vector(std::vector<float>{1, 2}, {2})}},
                   {{"format", "pt"}, {"producer", "posgrad"}});
  save_safetensors((st / "dtypes.safetensors").string(),
                   {{"f64", Tensor::from_vector(std::vector<double>{1.5, -2}, {2})},
                    {"i64", Tensor::from_ints({7, -1, 3}, {3})},
                    {"scalar", Tensor::from_vector(std::vector<float>{4}, {})},
                    {"empty", Tensor::empty({0, 3}, DType::Float32)},
                    {"mask", Tensor::ones({2, 2}, DType::Bool)}});
  save_safetensors((st / "no_tensors.safetensors").string(), {}, {});
  save_safetensors((st / "metadata_only.safetensors").string(), {}, {{"producer", "posgrad"}, {"note", "é ✓"}});

  // checkpoint: the state.json of fuzz_checkpoint's own scratch run.
  put(out / "checkpoint" / "valid_state.json", fuzz::checkpoint_reference_state());

  // config: whole configurations as config.json holds them, a few hand-written files, and single
  // option values ("name\nvalue").
  const fs::path cf = out / "config";
  put(cf / "train_defaults.json", opt::to_json(train::train_options(), train::TrainConfig{}).dump(2));
  put(cf / "compare_defaults.json", opt::to_json(train::compare_options(), train::CompareConfig{}).dump(2));
  put(cf / "eval_defaults.json", opt::to_json(train::eval_options(), train::EvalOptions{}).dump(2));
  put(cf / "sample_defaults.json", opt::to_json(train::sample_options(), train::SampleOptions{}).dump(2));
  put(cf / "small.json", R"({"pos": "rope", "n-layer": 2, "lr": "3e-4", "seeds": "1,2,3", "max_iters": 50})");
  put(cf / "lists.json",
      R"({"methods": ["rope", "alibi"], "eval_multipliers": [1, 2, 4], "seeds": [18446744073709551615]})");
  put(cf / "value_lr.txt", "lr\n3e-4");
  put(cf / "value_seeds.txt", "seeds\n1,2,18446744073709551615");
  put(cf / "value_multipliers.txt", "eval_multipliers\n1,2,4");
  put(cf / "value_methods.txt", "methods\nrope,alibi,t5");
  put(cf / "value_bias.txt", "bias\nfalse");
  put(cf / "value_corpus.txt", "corpus\nshakespeare");
  put(cf / "value_dropout.txt", "dropout\n0.1");

  // tokenizer: "<tokenizer JSON>\n<payload>", and a token cache file.
  const fs::path tk = out / "tokenizer";
  const data::CharTokenizer chars("hello, world\n");
  put(tk / "char.txt", chars.to_json().dump() + "\nhello, world\n");
  put(tk / "byte.txt", data::ByteTokenizer().to_json().dump() + "\n" + std::string("\x00\xff\x7f\n binary", 12));
  put(tk / "char_ids.txt", chars.to_json().dump() + "\n" + std::string("\x01\0\0\0\0\0\0\0\x05\0\0\0\0\0\0\0", 16));
  const data::CharTokenizer cache_tok("hello, world\nthe quick brown fox\n");
  const std::string cache = (tk / "valid.tokens").string();
  (void)data::load_or_build_tokens(cache, "hello, world\nthe quick brown fox\n", cache_tok);
  // results: comparisons as to_json writes them (a real tiny run's results.json is committed beside
  // them: posgrad compare --preset tiny --methods rope --seeds 1).
  put(out / "results" / "decoder.json", train::to_json(small_comparison(false)).dump(1) + "\n");
  put(out / "results" / "both_tracks.json", train::to_json(small_comparison(true)).dump(1) + "\n");

  // encoder_checkpoint: fuzz_encoder_checkpoint's reference encoder.safetensors.
  fuzz::write_reference_encoder((fs::temp_directory_path() / "posgrad-fuzz-seed-encoder").string());
  put(out / "encoder_checkpoint" / "encoder.safetensors",
      read_file((fs::temp_directory_path() / "posgrad-fuzz-seed-encoder" / "encoder.safetensors").string()));
  put(out / "encoder_checkpoint" / "encoder.json",
      read_file((fs::temp_directory_path() / "posgrad-fuzz-seed-encoder" / "encoder.json").string()));
  fs::remove_all(fs::temp_directory_path() / "posgrad-fuzz-seed-encoder");
  return 0;
}
