// test_util.h — shared helpers for the GoogleTest suites: where the shared data, the posgrad binary
// and a scratch data home are (compiled-in defaults from CMake, overridable by the environment),
// and the macro that marks CUDA tests SKIPPED where no GPU exists.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tensor/storage.h"

// Marks a CUDA test SKIPPED (not passed) when no GPU is present.
#define POSGRAD_REQUIRE_CUDA()                                                  \
  do {                                                                          \
    if (!::posgrad::cuda_available()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

namespace posgrad::test {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

#ifndef POSGRAD_TEST_DATA_DIR
#define POSGRAD_TEST_DATA_DIR ""
#endif
#ifndef POSGRAD_TEST_BIN
#define POSGRAD_TEST_BIN ""
#endif
#ifndef POSGRAD_TEST_HOME
#define POSGRAD_TEST_HOME "/tmp/posgrad-test-home"
#endif

// The directory of shared data (tinyshakespeare.txt): $POSGRAD_DATA_DIR, else ../shared/data.
inline std::string data_dir() { return env_or("POSGRAD_DATA_DIR", POSGRAD_TEST_DATA_DIR); }
// The posgrad executable: $POSGRAD_BIN, else the one in the build tree.
inline std::string bin_path() { return env_or("POSGRAD_BIN", POSGRAD_TEST_BIN); }

// Tests never write into the user's data home: POSGRAD_HOME points into the build tree (set once,
// before any test runs; child processes inherit it).
inline const bool kTestHomeSet = [] {
  setenv("POSGRAD_HOME", env_or("POSGRAD_HOME", POSGRAD_TEST_HOME).c_str(), 1);
  setenv("POSGRAD_DATA_DIR", data_dir().c_str(), 1);
  return true;
}();

// A fresh temporary directory, removed with everything in it when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "posgrad-test-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The directory itself, or `name` inside it.
  std::string str(const std::string& name = "") const { return name.empty() ? path.string() : (path / name).string(); }
  std::string file(const std::string& name) const { return str(name); }
  std::vector<std::string> entries() const {  // file names inside, in directory order
    std::vector<std::string> v;
    for (const auto& e : std::filesystem::directory_iterator(path)) v.push_back(e.path().filename().string());
    return v;
  }
  std::filesystem::path path;
};

// A small synthetic corpus file (no external data needed): `lines` repeated, slightly varied lines
// in dir/corpus.txt. Returns its path.
inline std::string write_corpus(const TempDir& dir, int lines = 400) {
  std::string text;
  for (int i = 0; i < lines; ++i)
    text +=
        "the quick brown fox " + std::to_string(i % 7) + " jumps over the lazy dog " + std::to_string(i % 5) + ".\n";
  const std::string path = dir.str("corpus.txt");
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return path;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return path;
}

// Runs fn, expects it to throw E, and returns the message (empty, with a test failure, otherwise).
template <typename E, typename F>
std::string thrown_message(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace posgrad::test
