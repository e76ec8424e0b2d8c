// process.h — running the real `posgrad` binary from tests: exit status, stdout and stderr kept
// apart (errors must go to stderr), an optional working directory, and a background start for
// tests that signal a running process.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "test_util.h"

namespace posgrad::test {

struct Proc {
  int status = -1;  // exit status; 128 + signal when killed by one
  std::string out, err;
  std::string all() const { return out + err; }
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline int decode_status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

// Runs `<posgrad> args` through the shell (args may quote), in `cwd` when given.
inline Proc run_posgrad(const std::string& args, const std::string& cwd = "") {
  TempDir io;
  const std::string cmd = (cwd.empty() ? "" : "cd '" + cwd + "' && ") + "'" + bin_path() + "' " + args + " >'" +
                          io.str("out") + "' 2>'" + io.str("err") + "' </dev/null";
  Proc p;
  p.status = decode_status(std::system(cmd.c_str()));
  p.out = slurp(io.str("out"));
  p.err = slurp(io.str("err"));
  return p;
}

// A posgrad process started in the background; stderr goes to a file that can be polled.
struct Background {
  pid_t pid = -1;
  std::string err_path;
  Background(const std::string& args, const std::string& err_file) : err_path(err_file) {
    pid = fork();
    if (pid == 0) {
      const std::string cmd = "exec '" + bin_path() + "' " + args + " >/dev/null 2>'" + err_file + "' </dev/null";
      execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
      _exit(127);
    }
  }
  // Waits (up to `seconds`) until stderr contains `text`.
  bool wait_for(const std::string& text, double seconds = 120) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < until) {
      if (slurp(err_path).find(text) != std::string::npos) return true;
      int st = 0;
      if (waitpid(pid, &st, WNOHANG) == pid) {  // exited early
        exited_status = decode_status(st);
        return slurp(err_path).find(text) != std::string::npos;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  int wait() {
    if (exited_status >= 0) return exited_status;
    int st = 0;
    waitpid(pid, &st, 0);
    exited_status = decode_status(st);
    return exited_status;
  }
  int exited_status = -1;
};

#define POSGRAD_REQUIRE_BIN()                                                                         \
  do {                                                                                                \
    if (::posgrad::test::bin_path().empty() || !std::filesystem::exists(::posgrad::test::bin_path())) \
      GTEST_SKIP() << "the posgrad binary was not found (set POSGRAD_BIN)";                           \
  } while (0)

}  // namespace posgrad::test
