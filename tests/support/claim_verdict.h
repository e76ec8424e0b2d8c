// claim_verdict.h — the verdict of one claim, by id, in a claims table (compare/claims.h): the tests
// of the comparison's report, the length suite's and the passkey test's claims read it.
#pragma once

#include <string>
#include <vector>

#include "compare/claims.h"

namespace posgrad::test {

// "supported" | "contradicted" | "inconclusive" | "not measured", or "missing" when no claim has that id.
inline std::string verdict(const std::vector<train::ClaimVerdict>& claims, const std::string& id) {
  for (const auto& c : claims)
    if (c.id == id) return c.verdict;
  return "missing";
}

}  // namespace posgrad::test
