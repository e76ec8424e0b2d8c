// registry_nn.cpp — op-registry cases (filled in by the nn ops).
#include "autograd/registry.h"

namespace posgrad {
void register_nn_cases(std::vector<OpCase>&) {}
}  // namespace posgrad
