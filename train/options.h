// options.h — the option tables of the train layer's configuration structs (see tensor/option_table.h):
// TrainConfig (`posgrad train`), EvalOptions (`posgrad eval`) and SampleOptions (`posgrad sample`)
// (the comparison's table is compare/options.h). Each row names a member, its range or choices, its unit
// and its help; the defaults are the structs' member initialisers (or a preset). The CLI flags,
// --help, config.json, `--config` files, validation and the report's settings block are generated
// from these tables.
//
// Also here: the memory estimate that every configuration passes before anything is allocated,
// so that a run that cannot fit this machine fails at once, naming the options responsible.
#pragma once

#include <cstdint>
#include <string>

#include "tensor/option_table.h"
#include "train/config.h"
#include "train/evaluate.h"

namespace posgrad::train {

const opt::Table<TrainConfig>& train_options();
const opt::Table<EvalOptions>& eval_options();
const opt::Table<SampleOptions>& sample_options();

// Bytes a run needs, estimated from the configuration alone (within about a factor of two of
// posgrad's allocator peak; the point is to refuse impossible runs, not to budget exactly).
//   parameters: the model's parameter count × (value + gradient + optimizer moments)
//   activations: what one training micro-batch keeps for backward, plus the logits
//   evaluation: one evaluation batch of 8 windows at the longest evaluated context, without a graph
struct MemoryEstimate {
  long double parameters = 0;  // count
  long double parameter_bytes = 0, activation_bytes = 0, evaluation_bytes = 0;
  long double total() const {
    return parameter_bytes + (activation_bytes > evaluation_bytes ? activation_bytes : evaluation_bytes);
  }
};
// The model in `c` trained with c.batch_size sequences of c.model.block_size tokens, evaluated at
// up to `longest_context` tokens. Long double arithmetic: no product of sizes can overflow.
MemoryEstimate estimate_memory(const TrainConfig& c, int64_t longest_context);
// This machine's physical memory in bytes (sysconf), or 0 when unknown.
uint64_t physical_memory_bytes();
// UsageError when `copies` times estimate_memory(c, longest_context) exceeds physical memory (copies:
// runs at once, compare --jobs): the message gives the estimate, the machine's memory, and the options
// that drive each part, with their values.
void check_memory(const TrainConfig& c, int64_t longest_context, int64_t copies = 1);
std::string format_bytes(long double bytes);  // "1.5 GiB"

// While one is alive (in this thread), check_memory checks nothing: for checking a configuration
// made elsewhere for consistency (posgrad report re-validating a results.json), not for this machine.
class SkipMemoryChecks {
 public:
  SkipMemoryChecks();
  ~SkipMemoryChecks();
  SkipMemoryChecks(const SkipMemoryChecks&) = delete;
  SkipMemoryChecks& operator=(const SkipMemoryChecks&) = delete;
};

}  // namespace posgrad::train
