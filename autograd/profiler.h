// profiler.h — where a training step's time goes, op by op: the wall time of every Function's
// forward and of every node's backward, summed by op name (Function::kName) while a
// profiler::Session is alive on the calling thread. Times are exclusive: an op that runs other ops
// inside (attention making its inputs contiguous) is charged without them. What is not inside an
// op — building the graph, the engine's bookkeeping, allocation outside the ops, the optimizer
// unless timed by the caller — is the step's remainder. Off by default: a disabled check is one
// thread-local load. Not here: per-kernel device timing (CUDA ops are charged their launch and
// synchronisation on the host).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace posgrad::profiler {

struct Entry {
  std::string op;
  double forward_s = 0, backward_s = 0;  // exclusive seconds
  int64_t forward_calls = 0, backward_calls = 0;
};

// Enables recording on this thread for its lifetime (sessions do not nest); entries() reads what it
// has recorded so far, in first-seen order.
class Session {
 public:
  Session();
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  std::vector<Entry> entries() const;
  void clear();
};

bool enabled();

// RAII timer of one op call (forward or backward); a no-op unless a Session is alive.
class Scope {
 public:
  Scope(const char* op, bool backward);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* op_ = nullptr;
  bool backward_ = false;
  std::chrono::steady_clock::time_point start_;
  double child_s_ = 0;  // time of ops nested inside this one
  Scope* parent_ = nullptr;
};

}  // namespace posgrad::profiler
