// fuzz_config.cpp — fuzzes the option tables (tensor/option_table.h, train/options.h) on the two kinds
// of text a user gives them. Every input is used both ways:
//   1. as a JSON configuration: opt::parse_json_limited, then opt::from_json into TrainConfig
//      (train_options), CompareConfig (compare_options), EvalOptions and SampleOptions, once
//      leniently and once with every key required (as config.json / state.json are read), then
//      TrainConfig::validate; and as a --config file through cli::read_config_file and
//      cli::explicit_values;
//   2. as one option value: the first line picks the option (its exact name, else the first
//      byte's value modulo the number of options, over every row of the four tables), the rest
//      is the value's text for opt::parse.
// Properties: what a table accepts survives its own round trips — to_json then from_json gives the
// same value, and so does format then parse — and what opt::parse accepts serialises to JSON.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "compare/options.h"
#include "tensor/errors.h"
#include "tensor/option_table.h"
#include "tests/fuzz/fuzz_targets.h"
#include "train/options.h"

namespace posgrad::fuzz {

namespace {

using json = nlohmann::json;

const std::vector<opt::Spec>& all_specs() {
  static const std::vector<opt::Spec> specs = [] {
    std::vector<opt::Spec> v;
    for (const auto& o : train::train_options()) v.push_back(o.spec);
    for (const auto& o : train::compare_options()) v.push_back(o.spec);
    for (const auto& o : train::eval_options()) v.push_back(o.spec);
    for (const auto& o : train::sample_options()) v.push_back(o.spec);
    return v;
  }();
  return specs;
}

// A value accepted for `spec` goes through JSON and through text unchanged.
void round_trip(const opt::Spec& spec, const opt::Value& v) {
  std::string dumped;
  try {
    dumped = opt::to_json(v).dump();
  } catch (const json::exception& e) {
    throw Finding("option '" + spec.name + "' accepted a value that cannot be written as JSON: " + e.what());
  }
  try {
    require(opt::from_json(spec, json::parse(dumped), "fuzz") == v,
            "option '" + spec.name + "': JSON round trip changed the value " + dumped);
    require(opt::parse(spec, opt::format(v), "fuzz") == v,
            "option '" + spec.name + "': format/parse round trip changed the value " + opt::format(v));
  } catch (const Error& e) {
    throw Finding("option '" + spec.name + "': a value it accepted is refused on reading it back: " + e.what());
  }
}

// from_json into a default S, then (on success) every set value round-trips.
template <typename S>
void load_table(const opt::Table<S>& table, const json& j, bool require_all) {
  S s;
  std::vector<std::string> set;
  try {
    set = opt::from_json(table, s, j, "fuzz", require_all);
  } catch (const Error&) {
    return;
  }
  for (const auto& name : set) {
    const auto* o = opt::find(table, name);
    round_trip(o->spec, o->get(s));
  }
  // The whole struct, as config.json is written and read back.
  S back;
  try {
    opt::from_json(table, back, opt::to_json(table, s), "fuzz (reloaded)");
  } catch (const Error& e) {
    throw Finding(std::string("a configuration accepted from JSON does not reload from its own to_json: ") + e.what());
  }
  if constexpr (std::is_same_v<S, train::TrainConfig>) {
    try {
      s.validate();
    } catch (const Error&) {
    }
  }
}

void as_json(std::string_view text) {
  json j;
  try {
    j = opt::parse_json_limited(text, "fuzz");
  } catch (const Error&) {
    return;
  }
  for (const bool all : {false, true}) {
    load_table(train::train_options(), j, all);
    load_table(train::compare_options(), j, all);
    load_table(train::eval_options(), j, all);
    load_table(train::sample_options(), j, all);
  }
}

void as_config_file(std::string_view text) {
  const std::string path = scratch_dir() + "/config.json";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  try {
    (void)cli::explicit_values(train::train_options(), path, {});
  } catch (const Error&) {
  }
  try {
    (void)cli::explicit_values(train::compare_options(), path, {});
  } catch (const Error&) {
  }
}

void as_value(std::string_view text) {
  const auto& specs = all_specs();
  const size_t nl = text.find('\n');
  const std::string_view head = text.substr(0, nl);
  const opt::Spec* spec = nullptr;
  for (const auto& s : specs)
    if (s.name == head) spec = &s;
  if (!spec) spec = &specs[text.empty() ? 0 : static_cast<uint8_t>(text[0]) % specs.size()];
  const std::string_view value = nl == std::string_view::npos ? text : text.substr(nl + 1);
  opt::Value v;
  try {
    v = opt::parse(*spec, value, spec->flag());
  } catch (const Error&) {
    return;
  }
  round_trip(*spec, v);
}

}  // namespace

int fuzz_config(const uint8_t* data, size_t size) {
  const std::string_view text = as_text(data, size);
  as_json(text);
  as_config_file(text);
  as_value(text);
  return 0;
}

}  // namespace posgrad::fuzz
