// parts.h — the typed results of the studies (compare/study.h), held by the runner without knowing
// their types. Each study's result type R names its study, `static constexpr const char* kStudy`
// ("suite", "pi", ...); a unit (UnitResult) or the experiment (ComparisonResult) holds at most one
// R per study. The runner, results.json and the report pass Parts along; only the study that owns R
// (and whoever includes its header, e.g. a later study that reads an earlier one's rows) names R.
#pragma once

#include <any>
#include <map>
#include <string>

namespace posgrad::train {

class Parts {
 public:
  // The study's result, or nullptr when this unit or experiment has none (the study did not run,
  // or the result was made before the study existed).
  template <typename R>
  const R* find() const {
    auto it = parts_.find(R::kStudy);
    return it == parts_.end() ? nullptr : std::any_cast<R>(&it->second);
  }
  // The study's result, default-constructed on first use (the study that fills it).
  template <typename R>
  R& get() {
    auto it = parts_.find(R::kStudy);
    if (it == parts_.end()) it = parts_.emplace(R::kStudy, R{}).first;
    return std::any_cast<R&>(it->second);
  }
  // A study's result, or a default one (reading code that needs no "absent" case).
  template <typename R>
  const R& value() const {
    static const R empty{};
    const R* r = find<R>();
    return r ? *r : empty;
  }
  bool has(const std::string& study) const { return parts_.count(study) > 0; }

 private:
  std::map<std::string, std::any> parts_;
};

}  // namespace posgrad::train
