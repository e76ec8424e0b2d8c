// profiler.cpp — see profiler.h.
#include "autograd/profiler.h"

#include <algorithm>

#include "tensor/errors.h"

namespace posgrad::profiler {

namespace {

struct State {
  bool on = false;
  std::vector<Entry> entries;
  Scope* top = nullptr;  // innermost running op
};
thread_local State g_state;

Entry& entry(const char* op) {
  auto& v = g_state.entries;
  auto it = std::find_if(v.begin(), v.end(), [&](const Entry& e) { return e.op == op; });
  if (it != v.end()) return *it;
  v.push_back(Entry{op});
  return v.back();
}

}  // namespace

Session::Session() {
  POSGRAD_CHECK(!g_state.on, ValueError, "profiler sessions do not nest");
  g_state = State{};
  g_state.on = true;
}
Session::~Session() { g_state.on = false; }
std::vector<Entry> Session::entries() const { return g_state.entries; }
void Session::clear() { g_state.entries.clear(); }

bool enabled() { return g_state.on; }

Scope::Scope(const char* op, bool backward) {
  if (!g_state.on) return;
  op_ = op;
  backward_ = backward;
  parent_ = g_state.top;
  g_state.top = this;
  start_ = std::chrono::steady_clock::now();
}

Scope::~Scope() {
  if (!op_) return;
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  g_state.top = parent_;
  if (parent_) parent_->child_s_ += total;
  if (!g_state.on) return;  // the session ended inside the op
  Entry& e = entry(op_);
  (backward_ ? e.backward_s : e.forward_s) += total - child_s_;
  ++(backward_ ? e.backward_calls : e.forward_calls);
}

}  // namespace posgrad::profiler
