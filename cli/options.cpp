// options.cpp — see options.h.
#include "cli/options.h"

#include "data/fileio.h"

namespace posgrad::cli {

void add_spec(CLI::App* sub, const opt::Spec& spec, const std::string& shown_default,
              std::shared_ptr<GivenText> given) {
  std::string desc = spec.help;
  if (!spec.unit.empty()) desc += " (" + spec.unit + ")";
  desc += "; " + spec.constraint();
  if (spec.neutral) desc += "; a re-run or resume may change it (no kept result depends on it)";
  const std::string name = spec.name;
  sub->add_option_function<std::string>(
         spec.flag(), [given, name](const std::string& v) { (*given)[name] = v; }, desc)
      ->type_name(spec.type_name())
      ->default_str(shown_default.empty()   ? "\"\""
                    : shown_default == "\n" ? "\"\\n\""
                                            : shown_default)
      ->multi_option_policy(CLI::MultiOptionPolicy::Throw)
      ->group(spec.group.empty() ? "Options" : spec.group);
}

nlohmann::json read_config_file(const std::string& path) {
  const std::string source = "config file '" + path + "'";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    if (!std::filesystem::exists(path, ec)) throw IoError(source + " does not exist");
    throw IoError(source + " is not a regular file");
  }
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > (1u << 20))
    throw UsageError(source + " has " + std::to_string(size) + " bytes; a configuration holds at most 1 MiB");
  return opt::parse_json_limited(read_file(path), source);
}

void collect_extras(CLI::App* sub) { sub->allow_extras(); }

void check_extras(CLI::App* sub) {
  const std::vector<std::string> extras = sub->remaining();
  if (extras.empty()) return;
  const std::string& bad = extras.front();
  const std::string where = sub->get_name();  // main prefixes "posgrad: error: "
  if (bad.size() < 2 || bad[0] != '-') throw CommandLineError(where + ": unexpected argument '" + bad + "'");
  std::string name = bad.substr(0, bad.find('='));
  std::vector<std::string> known;
  for (const CLI::Option* o : sub->get_options())
    for (const auto& l : o->get_lnames()) known.push_back("--" + l);
  const std::string near = opt::nearest(name, known);
  throw CommandLineError(where + ": unknown option '" + name + "'" +
                         (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

std::string describe(const std::vector<std::pair<std::string, opt::Value>>& values) {
  std::string s;
  for (const auto& [name, v] : values) {
    opt::Spec spec;
    spec.name = name;
    s += (s.empty() ? "" : " ") + spec.flag() + " " + opt::format(v);
  }
  return s.empty() ? "(none)" : s;
}

}  // namespace posgrad::cli
