// interrupt.h — SIGINT and SIGTERM as a request to stop cleanly. The handler only records the
// signal; the training loop polls interrupt_requested() after each step, writes a checkpoint and
// throws Interrupted, so nothing is ever left half-written. The first signal resets both SIGINT and
// SIGTERM to their default action: a second one of either kills at once, and the next start removes
// whatever temporary files that left.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/errors.h"

namespace posgrad::train {

// Thrown by the training loop after an interrupt, once the checkpoint of `step` is written.
struct Interrupted : Error {
  Interrupted(const std::string& msg, std::string run_dir, int64_t step, int signal)
      : Error(msg), run_dir(std::move(run_dir)), step(step), signal(signal) {}
  std::string run_dir;
  int64_t step;
  int signal;
};

void install_interrupt_handlers();  // for SIGINT and SIGTERM
bool interrupt_requested();
int interrupt_signal();  // the signal received (0: none)
void clear_interrupt();
const char* signal_name(int signal);  // "SIGINT", "SIGTERM", ...

}  // namespace posgrad::train
