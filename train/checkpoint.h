// checkpoint.h — a run directory's checkpoint: model weights in safetensors (model.safetensors,
// loadable by PyTorch's safetensors), optimizer moments (optimizer.safetensors), and state.json
// (config, tokenizer, step, RNG states, FNV-1a checksums of both tensor files, and a checksum of
// state.json itself: "state_checksum", over the canonical dump of everything else).
// Written as a new directory (checkpoint.tmp) whose files are fsynced, then swapped in by renames,
// so a crash at any moment leaves either the old or the new checkpoint complete. A truncated,
// corrupt or mismatched checkpoint is an IoError naming the file and the problem.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/module.h"
#include "tensor/random.h"

namespace posgrad::train {

struct TrainConfig;

struct CheckpointState {
  int64_t step = 0;
  int64_t optimizer_steps = 0;
  nlohmann::json config;     // TrainConfig::to_json()
  nlohmann::json tokenizer;  // Tokenizer::to_json()
  // The text trained on: data::corpus_record (absolute path, bytes, FNV-1a); null in checkpoints
  // written before it was recorded (state.json "corpus", absent then). posgrad eval reads it.
  nlohmann::json corpus;
  GeneratorState init_rng, dropout_rng, sampler_rng;
};

struct LoadedCheckpoint {
  CheckpointState state;
  nn::NamedTensors model, optimizer;
};

void write_checkpoint(const std::string& run_dir, const CheckpointState& s, const nn::NamedTensors& model,
                      const nn::NamedTensors& optimizer);
// Reads and verifies (checksums, shapes, JSON) the checkpoint of run_dir.
LoadedCheckpoint read_checkpoint(const std::string& run_dir, bool with_optimizer = true);
// The saved configuration, every option range-checked (IoError naming state.json and the key).
TrainConfig read_checkpoint_config(const std::string& run_dir);
// Removes what a killed run can leave in run_dir: checkpoint.tmp/ and atomic-write temporaries
// ("<file>.tmp.<pid>.<n>"). Returns the paths removed (each is also logged).
std::vector<std::string> remove_stale_temporaries(const std::string& run_dir);
std::string checkpoint_dir(const std::string& run_dir);  // the directory that holds the current checkpoint
// Drops metrics lines whose "step" is beyond `step` (rewritten atomically).
void truncate_metrics(const std::string& path, int64_t step);

}  // namespace posgrad::train
