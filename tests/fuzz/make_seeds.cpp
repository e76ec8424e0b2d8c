// make_seeds.cpp — writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/) with
// posgrad's own writers, so that the seeds are real files: `posgrad_fuzz_seeds DIR` (built on
// request only: cmake --build build --target posgrad_fuzz_seeds). Regression inputs that a
// fuzzer found are added to the corpus by hand, beside these.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "data/dataset.h"
#include "data/fileio.h"
#include "data/tokenizer.h"
#include "tensor/options.h"
#include "tests/fuzz/fuzz_targets.h"
#include "train/options.h"
#include "train/safetensors.h"

using namespace posgrad;
namespace fs = std::filesystem;

static void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
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
  put(cf / "lists.json", R"({"methods": ["rope", "alibi"], "eval_multipliers": [1, 2, 4], "seeds": [18446744073709551615]})");
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
  return 0;
}
