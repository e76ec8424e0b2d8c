// checkpoint.cpp — see checkpoint.h.
#include "train/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <spdlog/spdlog.h>

#include "data/fileio.h"
#include "tensor/option_table.h"
#include "train/config.h"
#include "train/safetensors.h"

namespace posgrad::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

static constexpr int kFormatVersion = 2;  // 2: flat option-table config, state_checksum

static json rng_json(const GeneratorState& g) { return {{"seed", g.seed}, {"offset", g.offset}}; }

// An integer field of state.json: a JSON integer (not a float, boolean or string) that fits T.
// nlohmann's get<T>() would convert 1e300 or -1.5 with undefined behaviour and true as 1.
template <typename T>
static T integer_at(const json& j, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw IoError(where + " is incomplete: no \"" + key + "\"");
  const json& v = j.at(key);
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u <= static_cast<uint64_t>(std::numeric_limits<T>::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (std::is_signed_v<T> || i >= 0) return static_cast<T>(i);
  }
  std::string shown = v.dump();
  if (shown.size() > 64) shown = shown.substr(0, 61) + "...";
  throw IoError(where + ": \"" + key + "\" is " + shown + ", not an integer in the range of " +
                (std::is_signed_v<T> ? "int64" : "uint64"));
}

static GeneratorState rng_from(const json& j, const std::string& where) {
  return {integer_at<uint64_t>(j, "seed", where), integer_at<uint64_t>(j, "offset", where)};
}

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
  json st = {
      {"format_version", kFormatVersion},
      {"track", "decoder"},  // the encoder track saves encoder.safetensors instead (compare/studies/encoder/encoder.h)
      {"step", s.step},
      {"optimizer_steps", s.optimizer_steps},
      {"config", s.config},
      {"tokenizer", s.tokenizer},
      {"rng",
       {{"init", rng_json(s.init_rng)}, {"dropout", rng_json(s.dropout_rng)}, {"sampler", rng_json(s.sampler_rng)}}},
      {"checksums",
       {{"model.safetensors", hex64(fnv1a64(read_file(tmp + "/model.safetensors")))},
        {"optimizer.safetensors", hex64(fnv1a64(read_file(tmp + "/optimizer.safetensors")))}}}};
  if (!s.corpus.is_null()) st["corpus"] = s.corpus;
  st["state_checksum"] = hex64(fnv1a64(st.dump()));  // over the canonical (sorted-key) dump of the rest
  write_file_atomic(tmp + "/state.json", st.dump(2) + "\n");
  fsync_dir(tmp);
  // Swap: cur -> old, tmp -> cur, drop old. Each rename is atomic; readers try cur then old.
  fs::remove_all(old);
  if (fs::exists(cur)) fs::rename(cur, old);
  fs::rename(tmp, cur);
  fsync_dir(run_dir);
  fs::remove_all(old);
}

static TrainConfig config_from_state(const std::string& dir, const json& st) {
  if (!st.contains("config")) throw IoError("checkpoint " + dir + "/state.json has no config");
  try {
    return TrainConfig::from_json(st.at("config"), "checkpoint " + dir + "/state.json: config");
  } catch (const UsageError& e) {
    throw IoError(e.what());
  }
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
  const std::string path = dir + "/state.json";
  json st;
  try {
    st = opt::parse_json_limited(read_file(path), "checkpoint " + path, 64 << 20, 8);
  } catch (const UsageError& e) {
    throw IoError(e.what());
  }
  if (!st.is_object()) throw IoError("checkpoint " + path + " is not a JSON object");
  const json version = st.value("format_version", json(-1));
  if (version != json(kFormatVersion))
    throw IoError("checkpoint " + path + " has format_version " + version.dump() + ", expected " +
                  std::to_string(kFormatVersion) + " (written by another version of posgrad)");
  // Absent in checkpoints written before the track was recorded: those are all decoder runs.
  if (st.contains("track") && st["track"] != json("decoder"))
    throw IoError("checkpoint " + path + " is of track " + st["track"].dump() +
                  "; posgrad train, eval and sample read decoder checkpoints (an encoder: posgrad fill-mask / eval "
                  "on its encoder directory)");
  if (!st.contains("state_checksum") || !st["state_checksum"].is_string())
    throw IoError("checkpoint " + path + " has no state_checksum");
  const std::string want = st["state_checksum"].get<std::string>();
  st.erase("state_checksum");
  const std::string got = hex64(fnv1a64(st.dump()));
  if (got != want)
    throw IoError("checkpoint " + path + " is corrupt or was edited (checksum " + got + ", expected " + want + ")");
  return st;
}

LoadedCheckpoint read_checkpoint(const std::string& run_dir, bool with_optimizer) {
  const std::string dir = checkpoint_dir(run_dir);
  json st = read_state_json(dir);
  verify_checksum(dir, st, "model.safetensors");
  if (with_optimizer) verify_checksum(dir, st, "optimizer.safetensors");
  LoadedCheckpoint ck;
  try {
    const std::string where = "checkpoint " + dir + "/state.json";
    ck.state.step = integer_at<int64_t>(st, "step", where);
    ck.state.optimizer_steps = integer_at<int64_t>(st, "optimizer_steps", where);
    ck.state.config = st.at("config");
    ck.state.tokenizer = st.at("tokenizer");
    ck.state.corpus = st.value("corpus", json());
    ck.state.init_rng = rng_from(st.at("rng").at("init"), where + ": rng.init");
    ck.state.dropout_rng = rng_from(st.at("rng").at("dropout"), where + ": rng.dropout");
    ck.state.sampler_rng = rng_from(st.at("rng").at("sampler"), where + ": rng.sampler");
  } catch (const json::exception& e) {
    throw IoError("checkpoint " + dir + "/state.json is incomplete: " + e.what());
  }
  // Every field in range: the configuration through its option table, the counters against it.
  const TrainConfig cfg = config_from_state(dir, st);
  if (ck.state.step < 0 || ck.state.step > cfg.max_iters || ck.state.optimizer_steps < 0 ||
      ck.state.optimizer_steps > ck.state.step)
    throw IoError("checkpoint " + dir + "/state.json: step " + std::to_string(ck.state.step) + " / optimizer_steps " +
                  std::to_string(ck.state.optimizer_steps) + " out of range for a run of max_iters " +
                  std::to_string(cfg.max_iters));
  ck.model = load_safetensors(dir + "/model.safetensors").tensors;
  if (with_optimizer) ck.optimizer = load_safetensors(dir + "/optimizer.safetensors").tensors;
  return ck;
}

TrainConfig read_checkpoint_config(const std::string& run_dir) {
  const std::string dir = checkpoint_dir(run_dir);
  return config_from_state(dir, read_state_json(dir));
}

std::vector<std::string> remove_stale_temporaries(const std::string& run_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(run_dir, ec)) return removed;
  auto is_temp = [](const std::string& name) {
    // write_file_atomic's "<file>.tmp.<pid>.<n>"
    const size_t at = name.rfind(".tmp.");
    if (at == std::string::npos) return false;
    const std::string rest = name.substr(at + 5);
    const size_t dot = rest.find('.');
    auto digits = [](const std::string& s) {
      return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
    };
    return dot != std::string::npos && digits(rest.substr(0, dot)) && digits(rest.substr(dot + 1));
  };
  for (const std::string sub : {"", "/checkpoint"}) {
    if (!fs::is_directory(run_dir + sub, ec)) continue;
    for (const auto& e : fs::directory_iterator(run_dir + sub, ec))
      if (is_temp(e.path().filename().string())) removed.push_back(e.path().string());
  }
  if (fs::exists(run_dir + "/checkpoint.tmp", ec)) removed.push_back(run_dir + "/checkpoint.tmp");
  // checkpoint.old next to a complete checkpoint is a swap that was cut short.
  if (fs::exists(run_dir + "/checkpoint/state.json", ec) && fs::exists(run_dir + "/checkpoint.old", ec))
    removed.push_back(run_dir + "/checkpoint.old");
  for (const auto& p : removed) {
    fs::remove_all(p, ec);
    if (ec) throw IoError("cannot remove the stale temporary '" + p + "': " + ec.message());
    spdlog::warn("removed {} (left by an interrupted run)", p);
  }
  return removed;
}

void truncate_metrics(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return;
  std::istringstream in(read_file(path));
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const json row = json::parse(line);
      if (!row.is_object()) continue;  // damaged
      if (row.contains("step")) {
        const json& s = row["step"];
        if (!s.is_number_integer()) continue;  // damaged (and get<int64_t> of 1e300 is undefined)
        if (s.is_number_unsigned() ? s.get<uint64_t>() > static_cast<uint64_t>(step) : s.get<int64_t>() > step)
          continue;
      }
    } catch (const json::exception&) {
      continue;  // a torn last line of a killed run
    }
    kept += line + "\n";
  }
  write_file_atomic(path, kept);
}

}  // namespace posgrad::train
