// json_config.h — `--config file.json` for a subcommand: a flat JSON object whose keys are option
// long names ("lr", "n-layer", "pos", ...) and whose values are scalars or arrays. Any option may be
// set this way; options given on the command line win over the file. (Applied after parsing,
// because CLI11 2.1 does not read config files for subcommands.)
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "tensor/errors.h"

namespace posgrad::cli {

inline void apply_json_config(CLI::App* sub, const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("cannot read config file '" + path + "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw IoError("config file '" + path + "' is not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw IoError("config file '" + path + "' must hold a JSON object of option values");
  for (auto& [key, value] : j.items()) {
    std::string name = key;
    for (auto& c : name)
      if (c == '_') c = '-';  // accept max_iters as well as max-iters
    CLI::Option* opt = sub->get_option_no_throw("--" + name);
    if (!opt || name == "config")
      throw ValueError("config file '" + path + "': unknown option '" + key + "' for '" + sub->get_name() + "'");
    if (opt->count() > 0) continue;  // the command line wins
    auto scalar = [](const nlohmann::json& v) {
      if (v.is_string()) return v.get<std::string>();
      if (v.is_boolean()) return std::string(v.get<bool>() ? "true" : "false");
      return v.dump();
    };
    try {
      if (value.is_array()) {
        std::string joined;
        for (auto& v : value) joined += (joined.empty() ? "" : ",") + scalar(v);
        opt->add_result(joined);
      } else {
        opt->add_result(scalar(value));
      }
      opt->run_callback();
    } catch (const CLI::Error& e) {
      throw ValueError("config file '" + path + "': invalid value for '" + key + "': " + e.what());
    }
  }
}

}  // namespace posgrad::cli
