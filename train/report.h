// report.h — turns the comparison's per-unit results into report.md (the article's table with
// measured numbers, extrapolation, synthetic-task and cost tables, configuration, commit and a
// plain-words reading), results.csv (deterministic metrics only: byte-identical for the same seed
// and thread count), timing.csv (speed and memory), results.json, and gnuplot PNG plots.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace posgrad::train {

struct CompareConfig;

std::string write_report(const CompareConfig& cfg, const std::vector<nlohmann::json>& results);

}  // namespace posgrad::train
