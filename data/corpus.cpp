// corpus.cpp — see corpus.h.
#include "data/corpus.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/fileio.h"
#include "tensor/errors.h"

namespace posgrad::data {

namespace fs = std::filesystem;

static std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string default_data_home() {
  std::string h = env_or_empty("POSGRAD_HOME");
  if (!h.empty()) return h;
  std::string home = env_or_empty("HOME");
  if (home.empty()) home = "/root";  // matches scripts/extract_kjv.sh
  return home + "/.local/share/posgrad";
}

std::string resolve_data_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  std::string env = env_or_empty("POSGRAD_DATA_DIR");
  if (!env.empty()) return env;
  return "../shared/data";
}

static bool is_shakespeare(const std::string& spec) { return spec == "shakespeare" || spec == "tinyshakespeare"; }

std::string corpus_path(const std::string& spec, const std::string& data_dir) {
  if (spec == "kjv") return default_data_home() + "/kjv.txt";
  if (is_shakespeare(spec)) return resolve_data_dir(data_dir) + "/tinyshakespeare.txt";
  return spec;
}

// Whole-file read; every failure names the path. `hint` is appended to "missing" errors.
static std::string read_corpus_file(const std::string& path, const std::string& hint, int64_t max_bytes) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw IoError("corpus file '" + path + "' does not exist" + hint);
  if (fs::is_directory(st)) throw IoError("corpus '" + path + "' is a directory, not a text file");
  if (!fs::is_regular_file(st)) {
    const char* what = fs::is_fifo(st)                                      ? "a FIFO"
                       : fs::is_block_file(st) || fs::is_character_file(st) ? "a device"
                       : fs::is_socket(st)                                  ? "a socket"
                                                                            : "not a regular file";
    throw IoError("corpus '" + path + "' is " + what + ", not a regular text file");
  }
  const auto size = fs::file_size(path, ec);
  if (ec) throw IoError("cannot read the size of corpus file '" + path + "': " + ec.message());
  if (size > static_cast<uintmax_t>(max_bytes))
    throw IoError("corpus file '" + path + "' has " + std::to_string(size) + " bytes, more than --max-corpus-bytes " +
                  std::to_string(max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot open corpus file '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw IoError("error while reading corpus file '" + path + "'");
  std::string text = ss.str();
  if (text.empty()) throw IoError("corpus file '" + path + "' is empty");
  return text;
}

std::string load_corpus(const std::string& spec, const std::string& data_dir, int64_t max_bytes) {
  POSGRAD_CHECK(!spec.empty(), ValueError, "empty corpus spec (give a file path, \"kjv\" or \"shakespeare\")");
  const std::string path = corpus_path(spec, data_dir);
  if (spec == "kjv")
    return read_corpus_file(path,
                            " — the King James Bible corpus is extracted by ./scripts/setup.sh (or "
                            "./scripts/extract_kjv.sh); set POSGRAD_HOME to look elsewhere",
                            max_bytes);
  if (is_shakespeare(spec)) {
    std::string where = !data_dir.empty() ? "the --data-dir flag"
                        : !env_or_empty("POSGRAD_DATA_DIR").empty()
                            ? "$POSGRAD_DATA_DIR"
                            : "the default ../shared/data (POSGRAD_DATA_DIR unset)";
    return read_corpus_file(path,
                            " (looked in " + where +
                                "; put tinyshakespeare.txt there, or set "
                                "POSGRAD_DATA_DIR / --data-dir to its directory)",
                            max_bytes);
  }
  return read_corpus_file(path, " (corpus names: kjv, shakespeare; anything else is a file path)", max_bytes);
}

nlohmann::json corpus_record(const std::string& spec, const std::string& data_dir, std::string_view text) {
  std::error_code ec;
  fs::path abs = fs::absolute(corpus_path(spec, data_dir), ec);
  if (ec) throw IoError("cannot resolve the corpus path '" + corpus_path(spec, data_dir) + "': " + ec.message());
  return {{"path", abs.lexically_normal().string()},
          {"bytes", static_cast<int64_t>(text.size())},
          {"fnv1a64", hex64(fnv1a64(text))}};
}

std::string load_recorded_corpus(const nlohmann::json& record, int64_t max_bytes, const std::string& who) {
  std::string path, want_hash;
  int64_t want_bytes = 0;
  try {
    path = record.at("path").get<std::string>();
    want_bytes = record.at("bytes").get<int64_t>();
    want_hash = record.at("fnv1a64").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw IoError(who + ": malformed corpus record (" + e.what() + ")");
  }
  std::string text = read_corpus_file(path, " (the corpus " + who + " was trained on)", max_bytes);
  const std::string got_hash = hex64(fnv1a64(text));
  const int64_t got_bytes = static_cast<int64_t>(text.size());
  if (got_bytes != want_bytes || got_hash != want_hash)
    throw IoError("corpus '" + path + "' has changed since " + who + " was trained on it: recorded " +
                  std::to_string(want_bytes) + " bytes, fnv1a64 " + want_hash + "; now " + std::to_string(got_bytes) +
                  " bytes, fnv1a64 " + got_hash +
                  " (the scores would be of other text: restore the file, or train again)");
  return text;
}

}  // namespace posgrad::data
