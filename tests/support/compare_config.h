// compare_config.h — the comparison tests' tiny experiment: the tiny preset on a small corpus written
// into the test's directory (every lowercase letter once, so the passkey test's short template and its
// letter keys exist), two threads, in <dir>/<out>.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "compare/compare.h"
#include "test_util.h"

namespace posgrad::test {

inline train::CompareConfig tiny_compare(const TempDir& d, const std::string& out) {
  const std::string corpus = d.str("corpus.txt");
  if (!std::filesystem::exists(corpus)) {
    std::ostringstream os;
    os << "the quick brown fox jumps over the lazy dog.\n";
    for (int i = 0; i < 300; ++i)
      os << "in the beginning " << (i % 9) << " was the word, and the word " << (i % 4) << ".\n";
    std::ofstream(corpus) << os.str();
  }
  train::CompareConfig c = train::compare_preset("tiny");
  c.base.corpus = corpus;
  c.base.threads = 2;
  c.out_dir = d.str(out);
  return c;
}

}  // namespace posgrad::test
