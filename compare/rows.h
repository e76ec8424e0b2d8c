// rows.h — the identity of a row of the comparison's tables, typed: one method's measurements, or a
// row derived from them — an evaluation-time variant ("rope+yarn", "rope@bf16"), a model fine-tuned
// at M x the training length with a scaling (the position-interpolation rows, "rope+linear ft2x",
// "rope ft2x"), or a model trained with randomized positions (the suite's "rope+randomized").
// Row::name() is the one place that spells these names and Row::parse the one that reads them, so
// results.json, results.csv, the report and the claims agree on them.
#pragma once

#include <cstdint>
#include <string>

namespace posgrad::train {

struct Row {
  std::string method;
  // "" (the method itself), "+<scaling>" (linear, dynamic, yarn, ntk: a RoPE scaling) or "@<precision>"
  // (bf16, fp16: the rotary arithmetic rounded).
  std::string variant;
  int64_t finetune = 0;     // M > 0: fine-tuned at M x the training length (with `variant`'s scaling)
  bool randomized = false;  // trained with randomized positions (Ruoss et al. 2023)

  // "<method><variant>[ ft<M>x][+randomized]": `rope`, "rope+yarn", "rope@bf16", "rope+linear ft2x",
  // "rope ft4x", "learned+randomized", "rope[rope_fraction=0.5]+yarn" (a method variant's settings in
  // brackets, compare/method.h).
  std::string name() const;
  // The inverse of name() for every name it writes; a name it does not write reads as a method with
  // what parses of the rest (no error: rows are read back from checked files).
  static Row parse(const std::string& name);
};

}  // namespace posgrad::train
