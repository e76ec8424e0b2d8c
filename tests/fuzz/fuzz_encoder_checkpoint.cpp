// fuzz_encoder_checkpoint.cpp — fuzzes the saved-encoder loader (train::load_encoder, which
// `posgrad eval` and `posgrad fill-mask` call on <out_dir>/encoder/<method>/seed<k>/): the input is
// the bytes of encoder.safetensors in a scratch encoder directory. The reference encoder is a tiny
// one written once by save_encoder (weights set by formula, so the file is the same everywhere;
// make_seeds writes the same file as the seed).
// Each input is loaded three ways, so that mutations reach past the checksum:
//   A. beside the reference's encoder.json (the checksum check itself is fuzzed);
//   B. beside an encoder.json holding the input's own checksum (the safetensors header, the
//      metadata, the configuration and the weights are fuzzed);
//   C. when the input is JSON: as encoder.json beside the reference weights (the sidecar's reader).
// Property: an encoder that loads fills a mask (or refuses the text with posgrad::Error).
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "compare/studies/encoder/encoder.h"
#include "data/fileio.h"
#include "data/tokenizer.h"
#include "nn/encoder.h"
#include "tensor/errors.h"
#include "tests/fuzz/fuzz_targets.h"

namespace posgrad::fuzz {

namespace {

struct EncoderDir {
  std::string dir, weights, sidecar;
  EncoderDir() {
    quiet_logging();
    dir = scratch_dir() + "/encoder";
    write_reference_encoder(dir);
    weights = read_file(dir + "/encoder.safetensors");
    sidecar = read_file(dir + "/encoder.json");
  }
};

const EncoderDir& encoder_dir() {
  static const EncoderDir e;
  return e;
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  require(static_cast<bool>(f), "fuzz harness: cannot write " + path);
}

std::string sidecar_for(const std::string& weights) {
  return nlohmann::json{{"format", "posgrad-encoder-checksum-1"},
                        {"checksums", {{"encoder.safetensors", hex64(fnv1a64(weights))}}}}
             .dump(2) +
         "\n";
}

void load(const EncoderDir& e, const std::string& weights, const std::string& sidecar) {
  put(e.dir + "/encoder.safetensors", weights);
  put(e.dir + "/encoder.json", sidecar);
  try {
    const auto enc = train::load_encoder(e.dir);
    try {
      (void)train::fill_mask(*enc, "he_lo", '_', 3);
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
}

}  // namespace

void write_reference_encoder(const std::string& dir) {
  const auto tok = data::make_tokenizer("char", "hello, world\n");
  nn::EncoderConfig ec;
  ec.model.vocab_size = tok->vocab_size() + 2;
  ec.model.block_size = 16;
  ec.model.n_layer = 1;
  ec.model.n_head = 2;
  ec.model.n_embd = 8;
  ec.model.dropout = 0.0;
  ec.model.pos.kind = "rope";
  ec.model.pos.causal = false;
  Generator init(1), drop(0);
  nn::Encoder enc(ec, init, drop);
  nn::NamedTensors weights = enc.state_dict();
  for (auto& [name, t] : weights) {  // exactly representable values: identical files everywhere
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    float* p = c.data<float>();
    for (int64_t i = 0; i < c.numel(); ++i)
      p[i] = static_cast<float>((i * 5 + static_cast<int64_t>(name.size())) % 13) * 0.125f;
    t = c;
  }
  enc.load_state_dict(weights);
  train::save_encoder(dir, enc, "rope", *tok, 8,
                      nlohmann::json{{"corpus", "fuzz"}, {"data_dir", ""}, {"max_corpus_bytes", 0}});
}

int fuzz_encoder_checkpoint(const uint8_t* data, size_t size) {
  const EncoderDir& e = encoder_dir();
  const std::string input(as_text(data, size));
  load(e, input, e.sidecar);                                              // A
  load(e, input, sidecar_for(input));                                     // B
  if (!input.empty() && input.front() == '{') load(e, e.weights, input);  // C
  return 0;
}

}  // namespace posgrad::fuzz
