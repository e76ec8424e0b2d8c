// support.cpp — the scratch directory and logging switch shared by the fuzz entry functions
// (see fuzz_targets.h).
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "tests/fuzz/fuzz_targets.h"

namespace posgrad::fuzz {

namespace fs = std::filesystem;

namespace {
struct Scratch {
  std::string path;
  Scratch() {
    std::error_code ec;
    const fs::path base = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    std::string tmpl = (base / "posgrad-fuzz-XXXXXX").string();
    if (!::mkdtemp(tmpl.data()))
      throw std::runtime_error("fuzz: cannot create a scratch directory under " + base.string());
    path = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
}  // namespace

const std::string& scratch_dir() {
  static const Scratch s;
  return s.path;
}

void quiet_logging() { spdlog::set_level(spdlog::level::off); }

}  // namespace posgrad::fuzz
