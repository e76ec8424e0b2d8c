// options.h — the bridge between the option tables (tensor/option_table.h, train/options.h) and CLI11:
// every row of a table becomes a long option of a subcommand (--name, its help text with unit and
// range, its default), and after parsing the options given are applied to a struct in a fixed
// order: preset (the subcommand's own), then a --config JSON file, then the command line.
// CLI11 only splits argv here; the text of every value is parsed and range-checked by the table
// (UsageError naming the flag).
#pragma once

#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/option_table.h"

namespace posgrad::cli {

// The text of each option given on the command line, by option name.
using GivenText = std::map<std::string, std::string>;

// Adds one option per table row to `sub` (grouped as the table says); `shown` supplies the
// defaults printed by --help. The returned map fills while CLI11 parses.
template <typename S>
std::shared_ptr<GivenText> add_table(CLI::App* sub, const opt::Table<S>& table, const S& shown);
void add_spec(CLI::App* sub, const opt::Spec& spec, const std::string& shown_default, std::shared_ptr<GivenText> given);

// Reads a --config file: a JSON object of option values, at most 1 MiB and 16 levels deep
// (UsageError naming the path, or the key with the nearest known name).
nlohmann::json read_config_file(const std::string& path);

// The explicit settings of a command, in table order: the --config file's keys, then the command
// line's (which win). Each value is parsed and range-checked against its row.
template <typename S>
std::vector<std::pair<std::string, opt::Value>> explicit_values(const opt::Table<S>& table,
                                                                const std::string& config_path,
                                                                const GivenText& given) {
  std::vector<std::pair<std::string, opt::Value>> out;
  auto put = [&](const std::string& name, opt::Value v) {
    for (auto& [n, old] : out)
      if (n == name) {
        old = std::move(v);
        return;
      }
    out.emplace_back(name, std::move(v));
  };
  if (!config_path.empty()) {
    const nlohmann::json j = read_config_file(config_path);
    S scratch;  // not S{}: GCC 12 then warns (falsely) of an uninitialised std::map inside
    for (const std::string& name : opt::from_json(table, scratch, j, "config file '" + config_path + "'"))
      put(name, opt::find(table, name)->get(scratch));
  }
  for (const auto& o : table) {
    auto it = given.find(o.spec.name);
    if (it != given.end()) put(o.spec.name, opt::parse(o.spec, it->second, o.spec.flag()));
  }
  return out;
}

template <typename S>
void apply_values(const opt::Table<S>& table, S& s, const std::vector<std::pair<std::string, opt::Value>>& values) {
  for (const auto& [name, v] : values) opt::find(table, name)->set(s, v);
}

// A usage error in the command line itself (an unknown option or argument, a subcommand that refuses a
// launcher): every rank of a job raises it alike, before any collective, so the job ends without
// MPI_Abort (main.cpp) and rank 0 alone prints it.
struct CommandLineError : UsageError {
  using UsageError::UsageError;
};

// Lets `sub` collect unknown arguments instead of CLI11 rejecting them, so that check_extras can
// name the nearest known option (CommandLineError). Call check_extras first thing in the callback.
void collect_extras(CLI::App* sub);
void check_extras(CLI::App* sub);

// "--pos rope --max-iters 500" for the log.
std::string describe(const std::vector<std::pair<std::string, opt::Value>>& values);

template <typename S>
std::shared_ptr<GivenText> add_table(CLI::App* sub, const opt::Table<S>& table, const S& shown) {
  auto given = std::make_shared<GivenText>();
  for (const auto& o : table) add_spec(sub, o.spec, opt::format(o.get(shown)), given);
  return given;
}

}  // namespace posgrad::cli
