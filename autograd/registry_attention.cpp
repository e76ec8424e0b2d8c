// registry_attention.cpp — op-registry cases (filled in by the attention ops).
#include "autograd/registry.h"

namespace posgrad {
void register_attention_cases(std::vector<OpCase>&) {}
}  // namespace posgrad
