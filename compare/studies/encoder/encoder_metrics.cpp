// encoder_metrics.cpp — see encoder_metrics.h.
#include "compare/studies/encoder/encoder_metrics.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "tensor/errors.h"

namespace posgrad::train {

namespace {
void check_pair(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold, const char* what) {
  POSGRAD_CHECK(!gold.empty() && pred.size() == gold.size(), ValueError, what, ": predictions (", pred.size(),
                ") and gold labels (", gold.size(), ") must be non-empty and of the same length");
}
}  // namespace

double accuracy(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold) {
  check_pair(pred, gold, "accuracy");
  int64_t hit = 0;
  for (size_t i = 0; i < gold.size(); ++i) hit += pred[i] == gold[i];
  return static_cast<double>(hit) / static_cast<double>(gold.size());
}

double macro_f1(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold) {
  check_pair(pred, gold, "macro_f1");
  std::set<int64_t> classes(gold.begin(), gold.end());
  classes.insert(pred.begin(), pred.end());
  double total = 0;
  for (int64_t c : classes) {
    int64_t tp = 0, fp = 0, fn = 0;
    for (size_t i = 0; i < gold.size(); ++i) {
      tp += pred[i] == c && gold[i] == c;
      fp += pred[i] == c && gold[i] != c;
      fn += pred[i] != c && gold[i] == c;
    }
    total += 2.0 * double(tp) / double(2 * tp + fp + fn);  // the class occurs, so the denominator > 0
  }
  return total / static_cast<double>(classes.size());
}

std::vector<Span> bio_spans(const std::vector<int64_t>& tags) {
  std::vector<Span> spans;
  bool open = false;
  Span cur;
  for (size_t t = 0; t < tags.size(); ++t) {
    const int64_t tag = tags[t];
    POSGRAD_CHECK(tag >= 0, ValueError, "bio_spans: negative tag ", tag, " at position ", t);
    const bool is_b = tag > 0 && tag % 2 == 1, is_i = tag > 0 && tag % 2 == 0;
    const int64_t type = tag > 0 ? (tag - 1) / 2 : -1;
    const bool continues = is_i && open && cur.type == type;
    if (open && !continues) {
      cur.end = static_cast<int64_t>(t);
      spans.push_back(cur);
      open = false;
    }
    if (is_b || (is_i && !continues)) {
      cur.begin = static_cast<int64_t>(t);
      cur.type = type;
      open = true;
    }
  }
  if (open) {
    cur.end = static_cast<int64_t>(tags.size());
    spans.push_back(cur);
  }
  return spans;
}

SpanScore span_f1(const std::vector<std::vector<int64_t>>& pred, const std::vector<std::vector<int64_t>>& gold) {
  POSGRAD_CHECK(pred.size() == gold.size(), ValueError, "span_f1: ", pred.size(), " predicted sequences but ",
                gold.size(), " gold ones");
  SpanScore s;
  for (size_t i = 0; i < gold.size(); ++i) {
    POSGRAD_CHECK(pred[i].size() == gold[i].size(), ValueError, "span_f1: sequence ", i, " has ", pred[i].size(),
                  " predicted tags and ", gold[i].size(), " gold tags");
    const auto p = bio_spans(pred[i]), g = bio_spans(gold[i]);
    s.predicted += static_cast<int64_t>(p.size());
    s.gold += static_cast<int64_t>(g.size());
    for (const Span& x : p) s.correct += std::find(g.begin(), g.end(), x) != g.end();
  }
  s.precision = s.predicted > 0 ? double(s.correct) / double(s.predicted) : 0.0;
  if (s.gold == 0) {  // nothing to find: recall, and so F1, are undefined (not 0)
    s.recall = s.f1 = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  s.recall = double(s.correct) / double(s.gold);
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  return s;
}

}  // namespace posgrad::train
