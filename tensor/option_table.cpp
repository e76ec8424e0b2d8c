// option_table.cpp — see option_table.h.
#include "tensor/option_table.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace posgrad::opt {

using json = nlohmann::json;

// ---- intervals -----------------------------------------------------------------------------------

bool Interval::contains(long double v) const {
  if (std::isnan(v)) return false;
  const bool lo_ok = lo_open ? v > lo : v >= lo;
  const bool hi_ok = hi_open ? v < hi : v <= hi;
  return lo_ok && hi_ok;
}

static std::string number_str(long double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e19L) {
    std::ostringstream os;
    if (v < 0)
      os << static_cast<int64_t>(v);
    else
      os << static_cast<uint64_t>(v);
    return os.str();
  }
  std::ostringstream os;
  os << static_cast<double>(v);
  return os.str();
}

std::string Interval::str() const {
  return std::string(lo_open ? "(" : "[") + number_str(lo) + ", " + number_str(hi) + (hi_open ? ")" : "]");
}

Interval closed(long double lo, long double hi) { return {lo, hi, false, false}; }
Interval open_closed(long double lo, long double hi) { return {lo, hi, true, false}; }
Interval closed_open(long double lo, long double hi) { return {lo, hi, false, true}; }

// ---- specs ------------------------------------------------------------------------------------------

std::string Spec::flag() const {
  std::string f = "--" + name;
  for (auto& c : f)
    if (c == '_') c = '-';
  return f;
}

bool Spec::numeric() const {
  return type == Type::Int || type == Type::UInt || type == Type::Float || type == Type::IntList ||
         type == Type::UIntList || type == Type::FloatList;
}

bool Spec::is_list() const {
  return type == Type::IntList || type == Type::UIntList || type == Type::TextList || type == Type::FloatList;
}

std::string Spec::type_name() const {
  switch (type) {
    case Type::Int: return "INT";
    case Type::UInt: return "UINT";
    case Type::Float: return "FLOAT";
    case Type::Bool: return "BOOL";
    case Type::Text: return choices.empty() ? "TEXT" : "CHOICE";
    case Type::IntList: return "INT,...";
    case Type::UIntList: return "UINT,...";
    case Type::TextList: return "NAME,...";
    case Type::FloatList: return "FLOAT,...";
  }
  return "?";
}

static std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string Spec::constraint() const {
  const std::string elems = choices.empty() ? range.str() : join(choices, "|");
  switch (type) {
    case Type::Int:
    case Type::Float: return range.str();
    case Type::UInt: return "[0, 2^64-1]";
    case Type::Bool: return "true|false";
    case Type::Text: return choices.empty() ? (allow_empty_text ? "any text" : "non-empty text") : elems;
    case Type::IntList:
    case Type::FloatList:
      return std::to_string(min_items) + "-" + std::to_string(max_items) + " comma-separated values in " + elems;
    case Type::UIntList:
      return std::to_string(min_items) + "-" + std::to_string(max_items) + " comma-separated values in [0, 2^64-1]";
    case Type::TextList:
      return std::to_string(min_items) + "-" + std::to_string(max_items) + " comma-separated names of " +
             (choices.empty() ? "any text" : elems);
  }
  return "";
}

static Spec make(std::string name, Type type, std::string help, std::string unit = "") {
  Spec s;
  s.name = std::move(name);
  s.type = type;
  s.help = std::move(help);
  s.unit = std::move(unit);
  return s;
}

Spec integer(std::string name, Interval range, std::string help, std::string unit) {
  Spec s = make(std::move(name), Type::Int, std::move(help), std::move(unit));
  s.range = range;
  return s;
}
Spec unsigned_integer(std::string name, std::string help) {
  Spec s = make(std::move(name), Type::UInt, std::move(help));
  s.range = closed(0, static_cast<long double>(std::numeric_limits<uint64_t>::max()));
  return s;
}
Spec real(std::string name, Interval range, std::string help, std::string unit) {
  Spec s = make(std::move(name), Type::Float, std::move(help), std::move(unit));
  s.range = range;
  return s;
}
Spec boolean(std::string name, std::string help) { return make(std::move(name), Type::Bool, std::move(help)); }
Spec text(std::string name, std::string help, bool allow_empty) {
  Spec s = make(std::move(name), Type::Text, std::move(help));
  s.allow_empty_text = allow_empty;
  return s;
}
Spec choice(std::string name, std::vector<std::string> choices, std::string help) {
  Spec s = make(std::move(name), Type::Text, std::move(help));
  s.choices = std::move(choices);
  return s;
}
Spec integer_list(std::string name, Interval range, int64_t min_items, int64_t max_items, std::string help,
                  std::string unit) {
  Spec s = make(std::move(name), Type::IntList, std::move(help), std::move(unit));
  s.range = range;
  s.min_items = min_items;
  s.max_items = max_items;
  return s;
}
Spec unsigned_list(std::string name, int64_t max_items, std::string help) {
  Spec s = make(std::move(name), Type::UIntList, std::move(help));
  s.range = closed(0, static_cast<long double>(std::numeric_limits<uint64_t>::max()));
  s.max_items = max_items;
  return s;
}
Spec real_list(std::string name, Interval range, int64_t min_items, int64_t max_items, std::string help,
               std::string unit) {
  Spec s = make(std::move(name), Type::FloatList, std::move(help), std::move(unit));
  s.range = range;
  s.min_items = min_items;
  s.max_items = max_items;
  return s;
}
Spec choice_list(std::string name, std::vector<std::string> choices, int64_t max_items, std::string help) {
  Spec s = make(std::move(name), Type::TextList, std::move(help));
  s.choices = std::move(choices);
  s.max_items = max_items;
  return s;
}
Spec with_default(Spec spec, Value v) {
  spec.fallback = std::move(v);
  return spec;
}
Spec fixed_on_resume(Spec spec) {
  spec.resumable = false;
  return spec;
}
Spec result_neutral(Spec spec) {
  spec.neutral = true;
  return spec;
}
Spec added_later(Spec spec, Value v) {
  spec.absent_means = std::move(v);
  return spec;
}

Spec added_later_default(Spec spec, Value v) { return added_later(with_default(std::move(spec), v), v); }

namespace detail {
void type_mismatch(const std::string& name) {
  throw std::logic_error("option table: the member bound to '" + name + "' is not of the declared type");
}
}  // namespace detail

// ---- parsing -------------------------------------------------------------------------------------------

namespace {

[[noreturn]] void fail(const std::string& where, const std::string& what) { throw UsageError(where + ": " + what); }

std::string in_quotes(std::string_view t) {
  std::string s(t.substr(0, 64));
  return "'" + s + (t.size() > 64 ? "...'" : "'");
}

template <typename T>
T parse_integer(const Spec& spec, std::string_view t, const std::string& where) {
  std::string_view digits = t;
  // One optional '+' before the digits (from_chars takes none, and would read "+-5" as -5).
  if (digits.size() >= 2 && digits.front() == '+' && digits[1] >= '0' && digits[1] <= '9') digits.remove_prefix(1);
  T v{};
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, 10);
  if (ec == std::errc::result_out_of_range)
    fail(where, in_quotes(t) + " is out of range of a " + (std::is_signed_v<T> ? "signed" : "unsigned") +
                    " 64-bit integer (valid: " + spec.constraint() + ")");
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.empty())
    fail(where, in_quotes(t) + " is not a base-10 " + (std::is_signed_v<T> ? "integer" : "non-negative integer") +
                    " (valid: " + spec.constraint() + ")");
  return v;
}

double parse_real(const Spec& spec, std::string_view t, const std::string& where) {
  double v = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v, std::chars_format::general);
  if (ec == std::errc::result_out_of_range) fail(where, in_quotes(t) + " is out of the range of a double");
  if (ec != std::errc() || end != t.data() + t.size() || t.empty())
    fail(where, in_quotes(t) + " is not a number (valid: " + spec.constraint() + ")");
  return v == 0.0 ? 0.0 : v;  // "-0" is 0: no signed zero in a configuration, a log or a file name
}

bool parse_bool(std::string_view t, const std::string& where) {
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  fail(where, in_quotes(t) + " is not a boolean (true|false)");
}

std::vector<std::string_view> split(std::string_view t, const std::string& where) {
  std::vector<std::string_view> items;
  if (t.empty()) return items;
  size_t start = 0;
  while (true) {
    size_t comma = t.find(',', start);
    std::string_view item = t.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (item.empty()) fail(where, "empty item in the list " + in_quotes(t));
    items.push_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

}  // namespace

Value parse(const Spec& spec, std::string_view t, const std::string& where) {
  Value v;
  switch (spec.type) {
    case Type::Int: v = parse_integer<int64_t>(spec, t, where); break;
    case Type::UInt: v = parse_integer<uint64_t>(spec, t, where); break;
    case Type::Float: v = parse_real(spec, t, where); break;
    case Type::Bool: v = parse_bool(t, where); break;
    case Type::Text: v = std::string(t); break;
    case Type::IntList: {
      std::vector<int64_t> l;
      for (auto item : split(t, where)) l.push_back(parse_integer<int64_t>(spec, item, where));
      v = std::move(l);
      break;
    }
    case Type::UIntList: {
      std::vector<uint64_t> l;
      for (auto item : split(t, where)) l.push_back(parse_integer<uint64_t>(spec, item, where));
      v = std::move(l);
      break;
    }
    case Type::TextList: {
      std::vector<std::string> l;
      for (auto item : split(t, where)) l.emplace_back(item);
      v = std::move(l);
      break;
    }
    case Type::FloatList: {
      std::vector<double> l;
      for (auto item : split(t, where)) l.push_back(parse_real(spec, item, where));
      v = std::move(l);
      break;
    }
  }
  check(spec, v, where);
  return v;
}

// ---- checking ------------------------------------------------------------------------------------------

static std::string real_str(double x) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, x);  // shortest text that reads back exactly
  return ec == std::errc() ? std::string(buf, end) : std::to_string(x);
}

namespace {

void check_number(const Spec& spec, long double x, const std::string& shown, const std::string& where) {
  if (!std::isfinite(x)) fail(where, shown + " is not a finite number (valid: " + spec.range.str() + ")");
  if (!spec.range.contains(x)) fail(where, shown + " is out of range (valid: " + spec.range.str() + ")");
}

void check_text(const Spec& spec, const std::string& s, const std::string& where) {
  if (s.size() > 4096) fail(where, "text of " + std::to_string(s.size()) + " bytes is too long (at most 4096)");
  // Options are saved in JSON (config.json, state.json), which holds UTF-8 text only.
  // The JSON library's strict serializer is the UTF-8 validator (RFC 3629: no overlong forms, no
  // surrogates, nothing above U+10FFFF); its message names the byte and its index.
  try {
    (void)json(s).dump();
  } catch (const json::type_error& e) {
    const std::string what = e.what();
    fail(where, "text is not valid UTF-8 (" + what.substr(what.find("] ") + 2) +
                    "); options are saved as JSON, which holds UTF-8 only");
  }
  if (!spec.allow_empty_text && s.empty()) fail(where, "must not be empty");
  if (spec.choices.empty() || std::find(spec.choices.begin(), spec.choices.end(), s) != spec.choices.end()) return;
  const std::string near = nearest(s, spec.choices);
  fail(where, in_quotes(s) + " is not one of " + join(spec.choices, "|") +
                  (near.empty() ? "" : " (did you mean '" + near + "'?)"));
}

template <typename T>
void check_count(const Spec& spec, const std::vector<T>& l, const std::string& where) {
  const auto n = static_cast<int64_t>(l.size());
  if (n < spec.min_items || n > spec.max_items)
    fail(where, "a list of " + std::to_string(n) + " items (valid: " + std::to_string(spec.min_items) + " to " +
                    std::to_string(spec.max_items) + ")");
}

}  // namespace

void check(const Spec& spec, const Value& v, const std::string& where) {
  if (static_cast<size_t>(spec.type) != v.index())
    fail(where, "holds a value of the wrong type (expected " + spec.type_name() + ")");
  switch (spec.type) {
    case Type::Int: {
      const int64_t x = std::get<int64_t>(v);
      check_number(spec, static_cast<long double>(x), std::to_string(x), where);
      break;
    }
    case Type::UInt: break;  // every uint64 is valid
    case Type::Float: {
      const double x = std::get<double>(v);
      check_number(spec, x, format(v), where);
      break;
    }
    case Type::Bool: break;
    case Type::Text: check_text(spec, std::get<std::string>(v), where); break;
    case Type::IntList: {
      const auto& l = std::get<std::vector<int64_t>>(v);
      check_count(spec, l, where);
      for (int64_t x : l) check_number(spec, static_cast<long double>(x), std::to_string(x), where);
      break;
    }
    case Type::UIntList: check_count(spec, std::get<std::vector<uint64_t>>(v), where); break;
    case Type::FloatList: {
      const auto& l = std::get<std::vector<double>>(v);
      check_count(spec, l, where);
      for (double x : l) check_number(spec, x, real_str(x), where);
      break;
    }
    case Type::TextList: {
      const auto& l = std::get<std::vector<std::string>>(v);
      check_count(spec, l, where);
      for (const auto& s : l) {
        if (s.empty()) fail(where, "empty name in the list");
        check_text(spec, s, where);
      }
      break;
    }
  }
}

// ---- formatting and JSON ---------------------------------------------------------------------------------

std::string format(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, double>)
          return real_str(x);
        else if constexpr (std::is_same_v<T, bool>)
          return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>)
          return x;
        else if constexpr (std::is_integral_v<T>)
          return std::to_string(x);
        else {
          std::string s;
          for (const auto& e : x) {
            // Appended piece by piece: `"," + std::to_string(e)` makes GCC 12 warn (falsely) of -Wrestrict.
            if (!s.empty()) s += ',';
            if constexpr (std::is_same_v<std::decay_t<decltype(e)>, std::string>)
              s += e;
            else if constexpr (std::is_same_v<std::decay_t<decltype(e)>, double>)
              s += real_str(e);
            else
              s += std::to_string(e);
          }
          return s;
        }
      },
      v);
}

json to_json(const Value& v) {
  return std::visit([](const auto& x) { return json(x); }, v);
}

namespace {

// What a JSON value of the wrong type was, for "expected X, got <this>": the value itself when it is
// short and scalar (null, true, 1.5, "abc"), else its kind ("an array", "a string of 300 bytes").
std::string got_json(const json& j) {
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  const std::string d = j.dump();
  if (j.is_string())
    return d.size() <= 40 ? "the string " + d
                          : "a string of " + std::to_string(j.get_ref<const std::string&>().size()) + " bytes";
  return d.substr(0, 40);
}

template <typename T>
T integer_from_json(const Spec& spec, const json& j, const std::string& where) {
  if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    if (std::is_signed_v<T> && u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(where, std::to_string(u) + " is out of range (valid: " + spec.constraint() + ")");
    return static_cast<T>(u);
  }
  if (j.is_number_integer()) {
    const int64_t i = j.get<int64_t>();
    if (std::is_unsigned_v<T> && i < 0)
      fail(where, std::to_string(i) + " is negative (valid: " + spec.constraint() + ")");
    return static_cast<T>(i);
  }
  fail(where, "expected an integer, got " + got_json(j));
}

}  // namespace

Value from_json(const Spec& spec, const json& j, const std::string& where) {
  // A string is read as the command line would read it ("seeds": "1,2,3", "lr": "1e-3").
  if (j.is_string() && spec.type != Type::Text) return parse(spec, j.get<std::string>(), where);
  Value v;
  switch (spec.type) {
    case Type::Int: v = integer_from_json<int64_t>(spec, j, where); break;
    case Type::UInt: v = integer_from_json<uint64_t>(spec, j, where); break;
    case Type::Float:
      if (!j.is_number()) fail(where, "expected a number, got " + got_json(j));
      v = j.get<double>();
      break;
    case Type::Bool:
      if (!j.is_boolean()) fail(where, "expected true or false, got " + got_json(j));
      v = j.get<bool>();
      break;
    case Type::Text:
      if (!j.is_string()) fail(where, "expected a string, got " + got_json(j));
      v = j.get<std::string>();
      break;
    case Type::IntList:
    case Type::UIntList:
    case Type::TextList:
    case Type::FloatList: {
      if (!j.is_array()) fail(where, "expected an array, got " + got_json(j));
      if (j.size() > static_cast<size_t>(spec.max_items))
        fail(where,
             "a list of " + std::to_string(j.size()) + " items (at most " + std::to_string(spec.max_items) + ")");
      if (spec.type == Type::IntList) {
        std::vector<int64_t> l;
        for (const auto& e : j) l.push_back(integer_from_json<int64_t>(spec, e, where));
        v = std::move(l);
      } else if (spec.type == Type::UIntList) {
        std::vector<uint64_t> l;
        for (const auto& e : j) l.push_back(integer_from_json<uint64_t>(spec, e, where));
        v = std::move(l);
      } else if (spec.type == Type::FloatList) {
        std::vector<double> l;
        for (const auto& e : j) {
          if (!e.is_number()) fail(where, "expected an array of numbers, got " + got_json(e) + " in it");
          l.push_back(e.get<double>());
        }
        v = std::move(l);
      } else {
        std::vector<std::string> l;
        for (const auto& e : j) {
          if (!e.is_string()) fail(where, "expected an array of strings, got " + got_json(e) + " in it");
          l.push_back(e.get<std::string>());
        }
        v = std::move(l);
      }
      break;
    }
  }
  check(spec, v, where);
  return v;
}

// ---- names and JSON files --------------------------------------------------------------------------------

static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest(const std::string& name, const std::vector<std::string>& known) {
  if (name.size() > 256) return "";
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& k : known) {
    const size_t d = edit_distance(name, k);
    if (d < best_d) best_d = d, best = k;
  }
  const size_t limit = std::max<size_t>(2, name.size() / 3);
  return best_d <= limit ? best : "";
}

json parse_json_limited(std::string_view text, const std::string& source, size_t max_bytes, int max_depth) {
  if (text.size() > max_bytes)
    throw UsageError(source + ": " + std::to_string(text.size()) +
                     " bytes is too large for a JSON configuration (at most " + std::to_string(max_bytes) + ")");
  // The depth is checked as each object or array opens, so a hostile file never builds (or
  // recurses into) a deep value.
  json::parser_callback_t limit = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= max_depth)
      throw UsageError(source + ": JSON nested deeper than " + std::to_string(max_depth) + " levels");
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), limit);
  } catch (const json::exception& e) {
    throw UsageError(source + ": not valid JSON (" + e.what() + ")");
  }
}

const Value& Values::at(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw ValueError("no option named '" + name + "' is declared");
  return it->second;
}

}  // namespace posgrad::opt
