// interrupt.cpp — see interrupt.h.
#include "train/interrupt.h"

#include <csignal>

namespace posgrad::train {

namespace {
volatile std::sig_atomic_t g_signal = 0;
// The first SIGINT or SIGTERM is recorded; both then take their default action, so that a second
// one of either kind ends the process at once (SA_RESETHAND alone resets only the one received).
extern "C" void on_signal(int sig) {
  g_signal = sig;
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGINT, &dfl, nullptr);  // async-signal-safe (POSIX.1-2008 §2.4.3)
  sigaction(SIGTERM, &dfl, nullptr);
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // the second signal takes the default action (terminate)
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupt_requested() { return g_signal != 0; }
int interrupt_signal() { return g_signal; }
void clear_interrupt() { g_signal = 0; }

const char* signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace posgrad::train
