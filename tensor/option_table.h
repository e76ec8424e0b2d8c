// option_table.h — declarative option tables: the one description of every configuration setting
// (name, type, default, help, unit, valid range or choices) from which the command line, --help,
// JSON load and save, validation and the report's settings block are all generated. Adding an
// option is one line in a table. It lives in the foundation layer because every layer above has
// settings: position encodings declare theirs beside their code (nn/posenc), the trainer and the
// comparison theirs (train/), and the CLI binds them (cli/).
//
// What it deliberately is not: a command-line parser (CLI11 splits argv; this file turns the text
// of one value into a checked typed value), a general JSON schema, or anything like libtorch's
// TensorOptions (a tensor's dtype and device: tensor/tensor.h).
//
// Parsing is strict: integers are base 10 and an overflow is an error, never a saturation;
// floating-point values must be finite; every number is checked against its interval; texts
// against their choices. Errors are UsageError (exit status 2 in the CLI) naming the option as
// the user wrote it (--flag on the command line, "key" in a JSON file) and the offending value.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor/errors.h"

namespace posgrad::opt {

enum class Type { Int, UInt, Float, Bool, Text, IntList, UIntList, TextList, FloatList };

// A value of an option; the alternative's index is the Type.
using Value = std::variant<int64_t, uint64_t, double, bool, std::string, std::vector<int64_t>, std::vector<uint64_t>,
                           std::vector<std::string>, std::vector<double>>;

// The interval a number (or each element of a number list) must lie in. Bounds are long double,
// which holds every int64 and uint64 exactly on x86-64 (64-bit mantissa).
struct Interval {
  long double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  bool contains(long double v) const;
  std::string str() const;  // "[1, 1024]", "(0, 100]"
};
Interval closed(long double lo, long double hi);       // [lo, hi]
Interval open_closed(long double lo, long double hi);  // (lo, hi]
Interval closed_open(long double lo, long double hi);  // [lo, hi)

// The description of one option, independent of where its value is stored.
struct Spec {
  std::string name;  // snake_case key of JSON files and config.json; the flag is --name with '_' -> '-'
  Type type = Type::Int;
  std::string help;
  std::string unit;                       // "tokens", "steps", "bytes", ... ("" when dimensionless)
  std::string group;                      // --help section
  Interval range;                         // numbers and number-list elements
  std::vector<std::string> choices;       // texts and text-list elements: the allowed values (empty: any text)
  int64_t min_items = 1, max_items = 64;  // lists
  bool allow_empty_text = true;           // texts
  // false: part of the model's or the data's identity, so `train --resume` refuses to change it.
  bool resumable = true;
  // true: changes no result (where files go, how often it logs or checkpoints, threads): a re-run of
  // an experiment may change it, and a finished unit made with another value is kept.
  bool neutral = false;
  std::optional<Value> fallback;  // the default of an option that no struct member initialises
  // An option added after files were written without it: the value such a file stands for (what the
  // program did before the option existed). from_json with require_all accepts its absence and sets it.
  std::optional<Value> absent_means;

  std::string flag() const;        // "--rope-scaling-factor"
  std::string type_name() const;   // "INT", "FLOAT", "BOOL", "TEXT", "INT,..."
  std::string constraint() const;  // "[1, 1024]", "char|byte", "1-64 items in [1, 64]", "any text"
  bool numeric() const;            // Int, UInt, Float and their lists
  bool is_list() const;
};

// Spec constructors used by the tables (type + constraint + help [+ unit]).
Spec integer(std::string name, Interval range, std::string help, std::string unit = "");
Spec unsigned_integer(std::string name, std::string help);  // the whole uint64 range (seeds)
Spec real(std::string name, Interval range, std::string help, std::string unit = "");
Spec boolean(std::string name, std::string help);
Spec text(std::string name, std::string help, bool allow_empty = true);
Spec choice(std::string name, std::vector<std::string> choices, std::string help);
Spec integer_list(std::string name, Interval range, int64_t min_items, int64_t max_items, std::string help,
                  std::string unit = "");
Spec unsigned_list(std::string name, int64_t max_items, std::string help);
Spec real_list(std::string name, Interval range, int64_t min_items, int64_t max_items, std::string help,
               std::string unit = "");
Spec choice_list(std::string name, std::vector<std::string> choices, int64_t max_items, std::string help);

// `spec` with a default value (for options stored in a map, see Values).
Spec with_default(Spec spec, Value v);
Spec fixed_on_resume(Spec spec);
Spec result_neutral(Spec spec);
// `spec` with Spec::absent_means = v (files written before the option existed read as v).
Spec added_later(Spec spec, Value v);
// An option added after results were first written, whose default is what every earlier file meant:
// added_later(with_default(spec, v), v) (the options of the encodings added later).
Spec added_later_default(Spec spec, Value v);

// Parses the text of a value ("12", "1e-3", "true", "1,2,4") as `spec` declares it and checks its
// range. `where` names the option in messages ("--lr", "config.json: key 'lr'"). UsageError.
Value parse(const Spec& spec, std::string_view text, const std::string& where);
// Checks a typed value against the spec (type, range, choices, list length). UsageError.
void check(const Spec& spec, const Value& v, const std::string& where);
std::string format(const Value& v);  // the text parse() reads back: "0.001", "true", "1,2,4"
nlohmann::json to_json(const Value& v);
// JSON -> value of the spec's type, range-checked. UsageError naming `where` and the JSON type.
Value from_json(const Spec& spec, const nlohmann::json& j, const std::string& where);

// The known name closest to `name` (Levenshtein distance), or "" when none is close.
std::string nearest(const std::string& name, const std::vector<std::string>& known);

// Parses JSON text with a limit on nesting depth and size; UsageError naming `source` on syntax
// errors, too deep nesting or too many bytes (the size is checked before parsing).
nlohmann::json parse_json_limited(std::string_view text, const std::string& source, size_t max_bytes = 1 << 20,
                                  int max_depth = 16);

// Options stored by name (position-encoding options: each encoding declares its own; see
// nn/posenc/position_encoding.h). Typed access throws UsageError naming an unknown option.
class Values {
 public:
  void set(const std::string& name, Value v) { values_[name] = std::move(v); }
  const Value& at(const std::string& name) const;
  bool contains(const std::string& name) const { return values_.count(name) > 0; }
  int64_t integer(const std::string& name) const { return get<int64_t>(name); }
  double real(const std::string& name) const { return get<double>(name); }
  bool boolean(const std::string& name) const { return get<bool>(name); }
  const std::string& text(const std::string& name) const { return get<std::string>(name); }
  bool operator==(const Values& o) const { return values_ == o.values_; }

 private:
  template <typename T>
  const T& get(const std::string& name) const {
    const Value& v = at(name);
    if (!std::holds_alternative<T>(v)) throw ValueError("option '" + name + "' does not hold a value of that type");
    return std::get<T>(v);
  }
  std::map<std::string, Value> values_;
};

// ---- tables: specs bound to the members of a configuration struct --------------------------------

template <typename S>
struct Option {
  Spec spec;
  std::function<Value(const S&)> get;
  std::function<void(S&, Value)> set;
};
template <typename S>
using Table = std::vector<Option<S>>;

namespace detail {
template <typename T>
constexpr Type type_of() {
  if constexpr (std::is_same_v<T, int64_t>)
    return Type::Int;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return Type::UInt;
  else if constexpr (std::is_same_v<T, double>)
    return Type::Float;
  else if constexpr (std::is_same_v<T, bool>)
    return Type::Bool;
  else if constexpr (std::is_same_v<T, std::string>)
    return Type::Text;
  else if constexpr (std::is_same_v<T, std::vector<int64_t>>)
    return Type::IntList;
  else if constexpr (std::is_same_v<T, std::vector<uint64_t>>)
    return Type::UIntList;
  else if constexpr (std::is_same_v<T, std::vector<double>>)
    return Type::FloatList;
  else {
    static_assert(std::is_same_v<T, std::vector<std::string>>, "unsupported option member type");
    return Type::TextList;
  }
}
[[noreturn]] void type_mismatch(const std::string& name);
}  // namespace detail

// Binds `spec` to the member that `field(s)` returns by reference, e.g.
//   bind<TrainConfig>(integer("n_layer", closed(1, 1024), "Transformer blocks"),
//                     [](auto& c) -> auto& { return c.model.n_layer; });
// The member's C++ type must be the spec's type (std::logic_error otherwise, found by any test
// that builds the table).
template <typename S, typename F>
Option<S> bind(Spec spec, F field) {
  using T = std::remove_cvref_t<decltype(field(std::declval<S&>()))>;
  if (spec.type != detail::type_of<T>()) detail::type_mismatch(spec.name);
  Option<S> o;
  o.spec = std::move(spec);
  o.get = [field](const S& s) { return Value(std::in_place_type<T>, field(const_cast<S&>(s))); };
  o.set = [field](S& s, Value v) { field(s) = std::get<T>(std::move(v)); };
  return o;
}

// Binds `spec` to the entry of the same name in the Values that `values(s)` returns.
template <typename S, typename F>
Option<S> bind_value(Spec spec, F values) {
  Option<S> o;
  const std::string name = spec.name;
  o.spec = std::move(spec);
  o.get = [values, name](const S& s) { return values(const_cast<S&>(s)).at(name); };
  o.set = [values, name](S& s, Value v) { values(s).set(name, std::move(v)); };
  return o;
}

// The options of an inner struct as options of an outer one (`inner(outer)` returns a reference),
// leaving out the names in `skip`.
template <typename Outer, typename Inner, typename F>
Table<Outer> lift(const Table<Inner>& table, F inner, const std::vector<std::string>& skip = {}) {
  Table<Outer> out;
  for (const auto& o : table) {
    bool skipped = false;
    for (const auto& n : skip) skipped = skipped || n == o.spec.name;
    if (skipped) continue;
    auto get = o.get;
    auto set = o.set;
    out.push_back({o.spec, [get, inner](const Outer& s) { return get(inner(const_cast<Outer&>(s))); },
                   [set, inner](Outer& s, Value v) { set(inner(s), std::move(v)); }});
  }
  return out;
}

// Appends rows to a table under the current --help group:
//   Rows<TrainConfig>(t).group("Model").add(integer("n_layer", ...), POSGRAD_MEMBER(model.n_layer));
template <typename S>
class Rows {
 public:
  explicit Rows(Table<S>& t) : t_(t) {}
  Rows& group(std::string g) {
    group_ = std::move(g);
    return *this;
  }
  template <typename F>
  Rows& add(Spec s, F field) {
    s.group = group_;
    t_.push_back(bind<S>(std::move(s), field));
    return *this;
  }

 private:
  Table<S>& t_;
  std::string group_;
};

// The member accessor that Rows::add and bind take: POSGRAD_MEMBER(model.n_layer).
#define POSGRAD_MEMBER(path) \
  [](auto& s) -> auto& { return s.path; }

// "As many as you like": the upper bound of step counts and intervals.
constexpr long double kMany = 1e9L;

template <typename S>
const Option<S>* find(const Table<S>& table, const std::string& name) {
  for (const auto& o : table)
    if (o.spec.name == name) return &o;
  return nullptr;
}

template <typename S>
std::vector<std::string> names(const Table<S>& table) {
  std::vector<std::string> n;
  for (const auto& o : table) n.push_back(o.spec.name);
  return n;
}

// Every value of `s` in range (after presets, JSON files or a checkpoint set it). UsageError.
template <typename S>
void check_all(const Table<S>& table, const S& s, const std::string& source = "") {
  for (const auto& o : table)
    check(o.spec, o.get(s), source.empty() ? o.spec.flag() : source + ": key '" + o.spec.name + "'");
}

// The flat JSON object {name: value} of every option, in the table's order of keys (sorted by
// nlohmann::json). This is config.json, and what a --config file may hold.
template <typename S>
nlohmann::json to_json(const Table<S>& table, const S& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& o : table) j[o.spec.name] = to_json(o.get(s));
  return j;
}

// Sets the options named in the JSON object `j` (keys: the names, '-' accepted for '_'). An
// unknown key is a UsageError that names the nearest known one; with require_all, so is a missing
// one, unless the option has Spec::absent_means (an option added since the file was written), which
// is then set to that value. Returns the names that were set (from the file).
template <typename S>
std::vector<std::string> from_json(const Table<S>& table, S& s, const nlohmann::json& j, const std::string& source,
                                   bool require_all = false) {
  if (!j.is_object()) throw UsageError(source + ": expected a JSON object of option values, got " + j.type_name());
  std::vector<std::string> set;
  for (const auto& [key, value] : j.items()) {
    std::string name = key;
    for (auto& c : name)
      if (c == '-') c = '_';
    const Option<S>* o = find(table, name);
    if (!o) {
      const std::string near = nearest(name, names(table));
      throw UsageError(source + ": unknown key '" + key + "'" +
                       (near.empty() ? "" : " (did you mean '" + near + "'?)"));
    }
    o->set(s, from_json(o->spec, value, source + ": key '" + key + "'"));
    set.push_back(name);
  }
  if (require_all)
    for (const auto& o : table)
      if (!j.contains(o.spec.name)) {
        if (!o.spec.absent_means) throw UsageError(source + ": missing key '" + o.spec.name + "'");
        o.set(s, *o.spec.absent_means);
      }
  return set;
}

}  // namespace posgrad::opt
