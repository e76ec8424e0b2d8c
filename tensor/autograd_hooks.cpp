// autograd_hooks.cpp — where the autograd layer's hooks are installed (see autograd_hooks.h). The
// pointer is constant-initialised to null, so installing it from another translation unit's static
// initialiser does not depend on the order of static initialisation.
#include "tensor/autograd_hooks.h"

#include <atomic>

#include "tensor/errors.h"

namespace posgrad {

namespace {
constinit std::atomic<const AutogradHooks*> g_hooks{nullptr};
}  // namespace

void set_autograd_hooks(const AutogradHooks* hooks) { g_hooks.store(hooks, std::memory_order_release); }

bool has_autograd_hooks() { return g_hooks.load(std::memory_order_acquire) != nullptr; }

const AutogradHooks& autograd_hooks(const char* op) {
  const AutogradHooks* h = g_hooks.load(std::memory_order_acquire);
  POSGRAD_CHECK(h != nullptr, AutogradError, op,
                ": this tensor needs the autograd layer, which is not linked into this program (no autograd hooks "
                "are installed; link posgrad_autograd)");
  return *h;
}

}  // namespace posgrad
