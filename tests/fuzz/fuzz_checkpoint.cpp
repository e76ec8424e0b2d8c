// fuzz_checkpoint.cpp — fuzzes the checkpoint reader (train/checkpoint.h) through state.json: the
// input is the bytes of <run>/checkpoint/state.json in a scratch run directory whose
// model.safetensors and optimizer.safetensors are real files written once by write_checkpoint
// (a tiny GPT, values set by formula so the files are the same under every compiler).
//
// Each input is read three ways, so that mutations reach past the checksums:
//   A. as given (the state_checksum is then almost always wrong: the check itself is fuzzed);
//   B. when it is a JSON object, re-signed: "state_checksum" recomputed over the rest, as
//      write_checkpoint does (everything after the checksum is fuzzed);
//   C. also with the checksums of the two tensor files set to the real ones (the fields after
//      them are fuzzed).
// Each read runs what `posgrad train --resume`, `eval` and `sample` run on a checkpoint:
// read_checkpoint, read_checkpoint_config, TrainConfig::from_json and validate,
// Tokenizer::from_json. Property: when read_checkpoint accepts the state, its config reloads
// through TrainConfig::from_json without error.
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "data/fileio.h"
#include "data/tokenizer.h"
#include "nn/gpt.h"
#include "tensor/errors.h"
#include "tensor/option_table.h"
#include "tests/fuzz/fuzz_targets.h"
#include "train/checkpoint.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace posgrad::fuzz {

namespace {

using json = nlohmann::json;

// The scratch run directory with a complete checkpoint, and its real state.json.
struct RunDir {
  std::string dir, state;
  std::string model_sum, optimizer_sum;
  RunDir() {
    quiet_logging();
    dir = scratch_dir() + "/run";
    const auto tok = data::make_tokenizer("char", "hello, world\n");
    train::TrainConfig cfg;
    cfg.out_dir = "runs/fuzz";
    cfg.max_iters = 10;
    cfg.model.vocab_size = tok->vocab_size();
    cfg.model.block_size = 8;
    cfg.model.n_layer = 1;
    cfg.model.n_head = 2;
    cfg.model.n_embd = 8;
    Generator init(1), dropout(2);
    nn::GPT model(cfg.model, init, dropout);
    nn::NamedTensors weights = model.state_dict();
    for (auto& [name, t] : weights) {  // exactly representable values: identical files everywhere
      Tensor c = Tensor::empty(t.shape(), t.dtype());
      float* p = c.data<float>();
      for (int64_t i = 0; i < c.numel(); ++i)
        p[i] = static_cast<float>((i * 7 + static_cast<int64_t>(name.size())) % 17) * 0.25f;
      t = c;
    }
    nn::NamedTensors moments;
    for (const auto& [name, t] : weights) {
      moments.emplace_back("exp_avg." + name, Tensor::zeros(t.shape(), t.dtype()));
      moments.emplace_back("exp_avg_sq." + name, Tensor::zeros(t.shape(), t.dtype()));
    }
    train::CheckpointState s;
    s.step = 5;
    s.optimizer_steps = 5;
    s.config = cfg.to_json();
    s.tokenizer = tok->to_json();
    s.init_rng = {1, 40};
    s.dropout_rng = {2, 0};
    s.sampler_rng = {1337, 5};
    train::write_checkpoint(dir, s, weights, moments);
    state = read_file(dir + "/checkpoint/state.json");
    model_sum = hex64(fnv1a64(read_file(dir + "/checkpoint/model.safetensors")));
    optimizer_sum = hex64(fnv1a64(read_file(dir + "/checkpoint/optimizer.safetensors")));
  }
};

const RunDir& run_dir() {
  static const RunDir r;
  return r;
}

void read_all(const RunDir& r, const std::string& state_text) {
  {
    std::ofstream f(r.dir + "/checkpoint/state.json", std::ios::binary | std::ios::trunc);
    f.write(state_text.data(), static_cast<std::streamsize>(state_text.size()));
    require(static_cast<bool>(f), "fuzz harness: cannot write state.json");
  }
  for (const bool with_optimizer : {true, false}) {
    try {
      const train::LoadedCheckpoint ck = train::read_checkpoint(r.dir, with_optimizer);
      train::TrainConfig cfg;
      try {
        cfg = train::TrainConfig::from_json(ck.state.config, "fuzz");
      } catch (const Error& e) {
        throw Finding(std::string("read_checkpoint accepted a config that TrainConfig::from_json refuses: ") +
                      e.what());
      }
      try {
        (void)data::Tokenizer::from_json(ck.state.tokenizer);
      } catch (const Error&) {
      }
      try {
        cfg.validate();
      } catch (const Error&) {
      }
    } catch (const Error&) {
    }
  }
  try {
    (void)train::read_checkpoint_config(r.dir);
  } catch (const Error&) {
  }
}

std::string resign(json st) {
  st.erase("state_checksum");
  st["state_checksum"] = hex64(fnv1a64(st.dump()));
  return st.dump(2) + "\n";
}

}  // namespace

// The real state.json of the scratch run (the committed seed tests/fuzz/corpus/checkpoint/valid).
std::string checkpoint_reference_state() { return run_dir().state; }
std::string checkpoint_run_dir() { return run_dir().dir; }

int fuzz_checkpoint(const uint8_t* data, size_t size) {
  const RunDir& r = run_dir();
  const std::string text(as_text(data, size));
  read_all(r, text);  // A
  json st;
  try {
    // The limits read_checkpoint applies, so that B and C see what it would.
    st = opt::parse_json_limited(text, "fuzz", 64 << 20, 8);
  } catch (const Error&) {
    return 0;
  }
  if (!st.is_object()) return 0;
  read_all(r, resign(st));  // B
  if (st.contains("checksums") && st["checksums"].is_object()) {
    json fixed = st;
    fixed["checksums"]["model.safetensors"] = r.model_sum;
    fixed["checksums"]["optimizer.safetensors"] = r.optimizer_sum;
    if (fixed != st) read_all(r, resign(fixed));  // C
  }
  return 0;
}

}  // namespace posgrad::fuzz
