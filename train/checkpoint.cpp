// checkpoint.cpp — see checkpoint.h.
#include "train/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/fileio.h"
#include "train/safetensors.h"
#include "train/trainer.h"

namespace posgrad::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

static constexpr int kFormatVersion = 1;

static json rng_json(const GeneratorState& g) { return {{"seed", g.seed}, {"offset", g.offset}}; }
static GeneratorState rng_from(const json& j) { return {j.at("seed").get<uint64_t>(), j.at("offset").get<uint64_t>()}; }

std::string checkpoint_dir(const std::string& run_dir) {
  // After a crash between the two renames of write_checkpoint only checkpoint.old exists.
  std::string cur = run_dir + "/checkpoint", old = run_dir + "/checkpoint.old";
  if (fs::exists(cur + "/state.json")) return cur;
  if (fs::exists(old + "/state.json")) return old;
  throw IoError("no checkpoint in '" + run_dir + "' (expected " + cur + "/state.json); train without --resume first");
}

void write_checkpoint(const std::string& run_dir, const CheckpointState& s, const nn::NamedTensors& model,
                      const nn::NamedTensors& optimizer) {
  const std::string tmp = run_dir + "/checkpoint.tmp", cur = run_dir + "/checkpoint", old = run_dir + "/checkpoint.old";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  save_safetensors(tmp + "/model.safetensors", model, {{"format", "pt"}, {"producer", "posgrad"}});
  save_safetensors(tmp + "/optimizer.safetensors", optimizer, {{"producer", "posgrad"}});
  json st = {{"format_version", kFormatVersion},
             {"step", s.step},
             {"optimizer_steps", s.optimizer_steps},
             {"config", s.config},
             {"tokenizer", s.tokenizer},
             {"rng", {{"init", rng_json(s.init_rng)}, {"dropout", rng_json(s.dropout_rng)}, {"sampler", rng_json(s.sampler_rng)}}},
             {"checksums",
              {{"model.safetensors", hex64(fnv1a64(read_file(tmp + "/model.safetensors")))},
               {"optimizer.safetensors", hex64(fnv1a64(read_file(tmp + "/optimizer.safetensors")))}}}};
  write_file_atomic(tmp + "/state.json", st.dump(2) + "\n");
  fsync_dir(tmp);
  // Swap: cur -> old, tmp -> cur, drop old. Each rename is atomic; readers try cur then old.
  fs::remove_all(old);
  if (fs::exists(cur)) fs::rename(cur, old);
  fs::rename(tmp, cur);
  fsync_dir(run_dir);
  fs::remove_all(old);
}

static void verify_checksum(const std::string& dir, const json& st, const std::string& file) {
  std::string want;
  try {
    want = st.at("checksums").at(file).get<std::string>();
  } catch (const json::exception&) {
    throw IoError("checkpoint " + dir + "/state.json has no checksum for " + file);
  }
  std::string got = hex64(fnv1a64(read_file(dir + "/" + file)));
  if (got != want)
    throw IoError("checkpoint file " + dir + "/" + file + " is corrupt (checksum " + got + ", expected " + want + ")");
}

static json read_state_json(const std::string& dir) {
  json st;
  try {
    st = json::parse(read_file(dir + "/state.json"));
  } catch (const json::exception& e) {
    throw IoError("checkpoint " + dir + "/state.json is not valid JSON: " + e.what());
  }
  int version = st.value("format_version", -1);
  if (version != kFormatVersion)
    throw IoError("checkpoint " + dir + "/state.json has format_version " + std::to_string(version) + ", expected " +
                  std::to_string(kFormatVersion));
  return st;
}

LoadedCheckpoint read_checkpoint(const std::string& run_dir, bool with_optimizer) {
  const std::string dir = checkpoint_dir(run_dir);
  json st = read_state_json(dir);
  verify_checksum(dir, st, "model.safetensors");
  if (with_optimizer) verify_checksum(dir, st, "optimizer.safetensors");
  LoadedCheckpoint ck;
  try {
    ck.state.step = st.at("step");
    ck.state.optimizer_steps = st.at("optimizer_steps");
    ck.state.config = st.at("config");
    ck.state.tokenizer = st.at("tokenizer");
    ck.state.init_rng = rng_from(st.at("rng").at("init"));
    ck.state.dropout_rng = rng_from(st.at("rng").at("dropout"));
    ck.state.sampler_rng = rng_from(st.at("rng").at("sampler"));
  } catch (const json::exception& e) {
    throw IoError("checkpoint " + dir + "/state.json is incomplete: " + e.what());
  }
  ck.model = load_safetensors(dir + "/model.safetensors").tensors;
  if (with_optimizer) ck.optimizer = load_safetensors(dir + "/optimizer.safetensors").tensors;
  return ck;
}

TrainConfig read_checkpoint_config(const std::string& run_dir) {
  const std::string dir = checkpoint_dir(run_dir);
  json st = read_state_json(dir);
  if (!st.contains("config")) throw IoError("checkpoint " + dir + "/state.json has no config");
  return TrainConfig::from_json(st.at("config"));
}

void truncate_metrics(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return;
  std::istringstream in(read_file(path));
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      if (json::parse(line).value("step", int64_t{0}) > step) continue;
    } catch (const json::exception&) {
      continue;  // a torn last line of a killed run
    }
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

}  // namespace posgrad::train
