// options.h — the option table of the comparison's configuration (compare/config.h; see
// tensor/option_table.h): its own options, then TrainConfig's without pos (--methods), seed (--seeds) and
// out_dir. The CLI flags, --help, compare_config.json, `--config` files, validation and the report's
// settings block are generated from it.
#pragma once

#include "compare/config.h"
#include "tensor/option_table.h"

namespace posgrad::train {

const opt::Table<CompareConfig>& compare_options();

}  // namespace posgrad::train
