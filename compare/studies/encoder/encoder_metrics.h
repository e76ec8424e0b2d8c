// encoder_metrics.h — the metrics of the encoder track's fine-tuning tasks:
//   accuracy      fraction of predictions equal to the gold label;
//   macro_f1      the unweighted mean over classes of F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c), over
//                 the classes that occur in the gold labels or the predictions (scikit-learn's
//                 f1_score(average="macro") with labels=None);
//   span_f1       CoNLL-2000 chunking F1 (Tjong Kim Sang & Buchholz 2000, the conlleval script):
//                 spans are read from BIO tags, and a predicted span counts only when its start,
//                 end and type all equal those of a gold span; micro-averaged precision
//                 P = correct / predicted, recall R = correct / gold, F1 = 2PR / (P + R)
//                 (P = 0 with no predicted span, F1 = 0 when P + R = 0; with no gold span at all
//                 R and F1 are undefined: NaN, which the reports print as n/a and the claims leave out).
// BIO tag ids: 0 = O; for span type t >= 0, B-t = 1 + 2t and I-t = 2 + 2t. As in conlleval, an I
// that does not continue a span of its type (after O, after another type, at the start) opens one.
#pragma once

#include <cstdint>
#include <vector>

namespace posgrad::train {

// Same length, non-empty (ValueError naming the sizes).
double accuracy(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold);
double macro_f1(const std::vector<int64_t>& pred, const std::vector<int64_t>& gold);

struct Span {
  int64_t begin = 0, end = 0;  // token positions [begin, end)
  int64_t type = 0;
  bool operator==(const Span& o) const { return begin == o.begin && end == o.end && type == o.type; }
};
// Spans of one sequence of BIO tags (ValueError on a negative tag).
std::vector<Span> bio_spans(const std::vector<int64_t>& tags);

struct SpanScore {
  int64_t gold = 0, predicted = 0, correct = 0;
  double precision = 0, recall = 0, f1 = 0;
};
// Over sequences: pred[s] and gold[s] are the tags of sequence s (same lengths; ValueError).
SpanScore span_f1(const std::vector<std::vector<int64_t>>& pred, const std::vector<std::vector<int64_t>>& gold);

}  // namespace posgrad::train
