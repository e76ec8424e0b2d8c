// test_readme.cpp — the documentation cannot rot: every `./build/posgrad ...` command line shown in
// a code block of README.md runs, in order, in one scratch directory (so `train --out-dir runs/rope`
// then `eval --run runs/rope` chain as they do for a reader), and must exit 0. Sizes are shrunk to
// the `tiny` presets by appending the tiny value of every size option the command does not set
// itself; a `--resume` command runs exactly as written (that is what it documents). The README's
// two setup commands are what CI runs; this test covers the rest, `mpirun ... ./build/posgrad ...`
// lines included (with their launcher, where this build has MPI).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "compare/compare.h"
#include "compare/options.h"
#include "data/fileio.h"
#include "dist/communicator.h"
#include "support/process.h"
#include "train/options.h"
#include "train/presets.h"

using namespace posgrad;
namespace fs = std::filesystem;

#ifndef POSGRAD_TEST_SOURCE_DIR
#define POSGRAD_TEST_SOURCE_DIR ""
#endif

namespace {

struct Command {
  std::string line;      // as in the README, comment removed
  std::string launcher;  // "mpirun -np 2 " before ./build/posgrad, or ""
  std::string args;      // after ./build/posgrad, before any redirection
  std::string redirect;  // "> sample.txt" or ""
};

std::vector<Command> readme_commands(const std::string& text) {
  std::vector<Command> out;
  std::istringstream in(text);
  std::string line;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block;
      continue;
    }
    const std::string prefix = "./build/posgrad ";
    if (!in_block) continue;
    // A launcher before the tool (mpirun ... ./build/posgrad ...) is kept and run too.
    std::string launcher;
    if (line.rfind("mpirun ", 0) == 0 && line.find(" " + prefix) != std::string::npos) {
      launcher = line.substr(0, line.find(" " + prefix) + 1);
      line = line.substr(launcher.size());
    }
    if (line.rfind(prefix, 0) != 0) continue;
    // Cut the comment (a '#' outside quotes) and the redirection ('>' outside quotes).
    bool quoted = false;
    size_t comment = std::string::npos, redirect = std::string::npos;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '"') quoted = !quoted;
      if (!quoted && line[i] == '#' && comment == std::string::npos) comment = i;
      if (!quoted && line[i] == '>' && redirect == std::string::npos && i < comment) redirect = i;
    }
    Command c;
    c.launcher = launcher;
    std::string cmd = line.substr(0, comment);
    while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
    const size_t end = std::min(redirect, cmd.size());
    c.args = line.substr(prefix.size(), end - prefix.size());
    c.redirect = redirect < cmd.size() ? cmd.substr(redirect) : "";
    c.line = launcher + cmd;
    out.push_back(c);
  }
  return out;
}

bool gives(const std::string& args, const std::string& flag) {
  std::istringstream ss(args);
  std::string tok;
  while (ss >> tok)
    if (tok == flag || tok.rfind(flag + "=", 0) == 0) return true;
  return false;
}

// The tiny preset's value of every option the command leaves alone, except those that say what is
// trained or where (kept as the README chose them).
template <typename S>
std::string tiny_overrides(const std::string& args, const opt::Table<S>& table, const S& tiny) {
  static const std::set<std::string> keep = {
      "out_dir", "corpus",  "data_dir",     "tokenizer",          "methods", "seeds", "pos",
      "device",  "threads", "rope_scaling", "rope_scaling_factor"};
  std::string extra;
  for (const auto& o : table) {
    if (keep.count(o.spec.name) || gives(args, o.spec.flag()) || o.spec.group.rfind("Position encoding", 0) == 0)
      continue;
    // Appended piece by piece: one `" " + ... + "'"` expression makes GCC 12 warn (falsely) of -Wrestrict.
    extra += ' ';
    extra += o.spec.flag();
    extra += " '";
    extra += opt::format(o.get(tiny));
    extra += '\'';
  }
  return extra;
}

}  // namespace

TEST(Readme, EveryDocumentedCommandRuns) {
  POSGRAD_REQUIRE_BIN();
  const char* home_env = std::getenv("HOME");
  const std::string data_home = std::string(home_env ? home_env : "") + "/.local/share/posgrad";
  if (!fs::exists(data_home + "/kjv.txt"))
    GTEST_SKIP() << "the offline KJV corpus is not in " << data_home << " (./scripts/setup.sh extracts it)";
  const std::string readme = read_file(std::string(POSGRAD_TEST_SOURCE_DIR) + "/README.md");
  const std::vector<Command> cmds = readme_commands(readme);
  ASSERT_GE(cmds.size(), 10u) << "README.md lost its commands?";
  test::TempDir cwd;
  std::set<std::string> subcommands;
  for (const Command& c : cmds) {
    std::istringstream ss(c.args);
    std::string sub;
    ss >> sub;
    subcommands.insert(sub);
    std::string args = c.args;
    if (sub == "train" && !gives(args, "--resume"))
      args += tiny_overrides(args, train::train_options(), train::train_preset("tiny"));
    if (sub == "compare") args += tiny_overrides(args, train::compare_options(), train::compare_preset("tiny"));
    if (sub == "eval" && !gives(args, "--windows")) args += " --windows 2";
    // A launched command runs with its launcher as written; as root, Open MPI wants to be told that
    // this is fine (the README says so too). Without MPI in this build it is not run.
    std::string env;
    if (!c.launcher.empty()) {
      if (!dist::mpi_built() || std::system("command -v mpirun >/dev/null 2>&1") != 0) continue;
      env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
    }
    const std::string cmd = "cd '" + cwd.str() + "' && " + env + "POSGRAD_HOME='" + data_home + "' " + c.launcher +
                            "'" + test::bin_path() + "' " + args + " " +
                            (c.redirect.empty() ? ">/dev/null" : c.redirect) + " 2>'" + cwd.str("stderr.txt") +
                            "' </dev/null";
    const int status = test::decode_status(std::system(cmd.c_str()));
    EXPECT_EQ(status, 0) << "README command failed: " << c.line << "\n  ran: " << cmd << "\n"
                         << test::slurp(cwd.str("stderr.txt"));
  }
  // The tour covers every subcommand.
  for (const char* s : {"train", "eval", "sample", "compare", "gradcheck", "info"})
    EXPECT_TRUE(subcommands.count(s)) << s;
  // The documented outputs exist where the README says.
  EXPECT_TRUE(fs::exists(cwd.str("runs/compare-quick/report.md")));
  EXPECT_TRUE(fs::exists(cwd.str("runs/rope/checkpoint/state.json")));
  EXPECT_GT(fs::file_size(cwd.str("sample.txt")), 0u);
}
