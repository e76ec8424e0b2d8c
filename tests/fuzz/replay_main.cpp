// replay_main.cpp — runs files through one fuzz entry function without libFuzzer, with any
// compiler: `posgrad_fuzz_replay TARGET FILE...` (built on request: cmake --build build --target
// posgrad_fuzz_replay). Prints each file's outcome; exit status 1 when any input was a finding
// (an exception that is not a posgrad::Error, or a violated property). Crashes crash it.
#include <cstring>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tests/fuzz/fuzz_targets.h"

int main(int argc, char** argv) {
  using namespace posgrad::fuzz;
  const Target* target = nullptr;
  if (argc >= 2)
    for (const auto& t : kTargets)
      if (std::strcmp(t.name, argv[1]) == 0) target = &t;
  if (!target || argc < 3) {
    std::cerr << "usage: posgrad_fuzz_replay TARGET FILE...   (TARGET:";
    for (const auto& t : kTargets) std::cerr << " " << t.name;
    std::cerr << ")\n";
    return 2;
  }
  quiet_logging();
  int status = 0;
  for (int i = 2; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    if (!f) {
      std::cerr << argv[i] << ": cannot open\n";
      return 2;
    }
    std::ostringstream os;
    os << f.rdbuf();
    const std::string bytes = os.str();
    try {
      target->entry(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      std::cout << argv[i] << ": ok\n";
    } catch (const std::exception& e) {
      std::cout << argv[i] << ": FINDING: " << e.what() << "\n";
      status = 1;
    }
  }
  return status;
}
