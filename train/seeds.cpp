// seeds.cpp — see seeds.h.
#include "train/seeds.h"

#include "data/fileio.h"

namespace posgrad::train {

uint64_t stream(uint64_t seed, std::string_view tag) { return stream(seed, fnv1a64(tag)); }

}  // namespace posgrad::train
