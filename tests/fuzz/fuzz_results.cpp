// fuzz_results.cpp — fuzzes what `posgrad report DIR` reads: the input is the text of a comparison's
// results.json, read with train::read_comparison (size- and depth-limited parse, comparison_from_json,
// check_comparison: compare/results.h), as rerender_report does.
// Properties of an accepted input:
//   - it round-trips: to_json of the result is accepted again and gives the same JSON;
//   - the report's computations run on it without an error other than posgrad::Error: every row x
//     metric summary of results.csv, the claims, and report.md written to a scratch file (no plots).
#include <string>

#include <nlohmann/json.hpp>

#include "compare/claims.h"
#include "compare/report.h"
#include "compare/results.h"
#include "tensor/errors.h"
#include "tests/fuzz/fuzz_targets.h"

namespace posgrad::fuzz {

int fuzz_results(const uint8_t* data, size_t size) {
  quiet_logging();
  train::ComparisonResult r;
  try {
    r = train::read_comparison(std::string(as_text(data, size)), "fuzz/results.json");
  } catch (const Error&) {
    return 0;
  }
  const nlohmann::json j = train::to_json(r);
  train::ComparisonResult back;
  try {
    back = train::read_comparison(j.dump(1), "fuzz/round-trip.json");
  } catch (const Error& e) {
    throw Finding(std::string("read_comparison refuses the to_json of a result it accepted: ") + e.what());
  }
  require(train::to_json(back) == j, "results.json does not round-trip through read_comparison and to_json");
  try {
    for (const auto& row : train::rows(r))
      for (const auto& m : train::csv_metrics(r.config)) (void)train::summary(r, row, m);
    (void)train::judge_claims(r);
    train::write_markdown(r, {}, train::ReportDir{scratch_dir(), scratch_dir() + "/plots"});
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace posgrad::fuzz
