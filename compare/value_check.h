// value_check.h — range checks of values read back from results files (results.json, a unit's
// result.json): each failed check is an IoError "<source>: <json path> = <value>: <rule><advice>",
// so that a hand-edited or damaged file names the value and where it sits. Shared by the decoder
// track's checks (compare/results_check.cpp) and the encoder track's (compare/studies/encoder/encoder.cpp).
// Not here: the schema (types, missing keys), which the from_json readers check.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor/errors.h"

namespace posgrad::train {

// Typed reads of untrusted JSON: an integer must be a JSON integer in range (converting a float such
// as 1e300 would be undefined behaviour), a real any JSON number; nlohmann::json::type_error
// otherwise ("expected an integer, got 1.5"), which the readers turn into an IoError naming the file.
inline std::string json_shown(const nlohmann::json& j) {
  if (j.is_null()) return "null";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  std::string d = j.dump();
  return d.size() > 32 ? d.substr(0, 29) + "..." : d;
}
inline int64_t json_int(const nlohmann::json& j) {
  if (!j.is_number_integer() || (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    throw nlohmann::json::type_error::create(302, "expected an integer (int64), got " + json_shown(j), &j);
  return j.get<int64_t>();
}
inline uint64_t json_uint(const nlohmann::json& j) {
  if (!j.is_number_unsigned())
    throw nlohmann::json::type_error::create(302, "expected an unsigned integer, got " + json_shown(j), &j);
  return j.get<uint64_t>();
}
inline double json_real(const nlohmann::json& j) {
  if (!j.is_number()) throw nlohmann::json::type_error::create(302, "expected a number, got " + json_shown(j), &j);
  return j.get<double>();
}
inline std::string json_text(const nlohmann::json& j) {
  if (!j.is_string()) throw nlohmann::json::type_error::create(302, "expected a string, got " + json_shown(j), &j);
  return j.get<std::string>();
}
template <typename T, typename F>
std::vector<T> json_list(const nlohmann::json& j, F each) {
  if (!j.is_array()) throw nlohmann::json::type_error::create(302, "expected an array, got " + json_shown(j), &j);
  std::vector<T> v;
  for (const auto& e : j) v.push_back(each(e));
  return v;
}

// JSON paths of the messages: "units[3]", "units[3].lengths".
inline std::string json_path_at(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }
inline std::string json_path_key(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

class ValueCheck {
 public:
  // source: the file; advice: appended to every message (e.g. "; delete it to measure that unit again").
  ValueCheck(std::string source, std::string advice) : source_(std::move(source)), advice_(std::move(advice)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& shown, const std::string& rule) const {
    throw IoError(source_ + ": " + path + (shown.empty() ? "" : " = " + shown) + ": " + rule + advice_);
  }
  // A real in [lo, +inf), finite.
  void at_least(double v, double lo, const std::string& path, const char* what) const {
    if (!std::isfinite(v) || v < lo) fail(path, show(v), std::string(what) + " must be finite and >= " + show(lo));
  }
  void non_negative(double v, const std::string& path) const { at_least(v, 0.0, path, "this value"); }
  // A fraction: accuracy, F1, exact match.
  void fraction(double v, const std::string& path) const {
    if (!(v >= 0.0 && v <= 1.0)) fail(path, show(v), "an accuracy or F1 must lie in [0, 1]");
  }
  // The same for a score that may be n/a (null in JSON, NaN here): an encoder score past a learned
  // table's trained rows, a span F1 without gold spans (compare/studies/encoder/encoder.h).
  void fraction_or_na(double v, const std::string& path) const {
    if (!std::isnan(v)) fraction(v, path);
  }
  void loss_or_na(double v, const std::string& path) const {
    if (!std::isnan(v)) at_least(v, 0.0, path, "a loss");
  }
  void count(int64_t v, const std::string& path) const {
    if (v < 0) fail(path, std::to_string(v), "a count must be >= 0");
  }
  void positive(int64_t v, const std::string& path) const {
    if (v < 1) fail(path, std::to_string(v), "this count must be >= 1");
  }
  void equal(int64_t got, int64_t want, const std::string& path, const std::string& why) const {
    if (got != want) fail(path, std::to_string(got), "expected " + std::to_string(want) + " (" + why + ")");
  }
  void size(size_t got, size_t want, const std::string& path, const std::string& why) const {
    if (got != want)
      fail(path, "", "holds " + std::to_string(got) + " entries, expected " + std::to_string(want) + " (" + why + ")");
  }
  // A next-token loss and its perplexity: loss finite and >= 0, perplexity finite and >= 1, and
  // loss = ln(perplexity) within 1e-6 relative (the evaluation writes perplexity = exp(loss), which
  // round-trips through JSON exactly; editing one of the two breaks the identity).
  void loss_and_perplexity(double loss, double ppl, const std::string& path) const {
    at_least(loss, 0.0, path + ".loss", "a loss");
    at_least(ppl, 1.0, path + ".perplexity", "a perplexity");
    if (std::fabs(std::log(ppl) - loss) > 1e-6 * std::fabs(loss) + 1e-12)
      fail(path + ".perplexity", show(ppl),
           "not exp(loss) = " + show(std::exp(loss)) + " (loss " + show(loss) + "; they are written together)");
  }

  static std::string show(double v) {
    char b[40];
    std::snprintf(b, sizeof b, "%.10g", v);
    return b;
  }
  static std::string quoted(const std::string& s) {
    return "\"" + (s.size() > 64 ? s.substr(0, 61) + "..." : s) + "\"";
  }
  template <typename T>
  static std::string list(const std::vector<T>& v) {
    std::string s;
    for (const auto& x : v) {
      if (!s.empty()) s += ", ";
      if constexpr (std::is_same_v<T, std::string>)
        s += x;
      else
        s += std::to_string(x);
    }
    return s.empty() ? "none" : s;
  }
  const std::string& source() const { return source_; }

 private:
  std::string source_, advice_;
};

}  // namespace posgrad::train
