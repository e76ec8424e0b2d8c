// synthetic.cpp — see synthetic.h.
#include "data/synthetic.h"

#include <algorithm>
#include <unordered_map>

#include "tensor/errors.h"

namespace posgrad::data {

SyntheticTask parse_synthetic_task(const std::string& name) {
  if (name == "copy") return SyntheticTask::Copy;
  if (name == "reverse") return SyntheticTask::Reverse;
  throw ValueError("unknown synthetic task '" + name + "' (choices: copy, reverse)");
}

const char* synthetic_task_name(SyntheticTask t) { return t == SyntheticTask::Copy ? "copy" : "reverse"; }

SyntheticTaskGenerator::SyntheticTaskGenerator(SyntheticTask task, int64_t num_symbols, uint64_t seed)
    : task_(task), num_symbols_(num_symbols), gen_(seed) {
  POSGRAD_CHECK(num_symbols >= 2, ValueError, "synthetic task: num_symbols must be >= 2, got ", num_symbols);
}

SyntheticBatch SyntheticTaskGenerator::next(int64_t batch, int64_t length) {
  POSGRAD_CHECK(batch >= 1 && length >= 1, ValueError, "synthetic task: batch and length must be >= 1, got batch ",
                batch, ", length ", length);
  const int64_t L = length, T = 2 * L + 1;
  SyntheticBatch out;
  out.length = L;
  out.x = Tensor::empty({batch, T}, DType::Int64);           // (B, 2L+1)
  out.y = Tensor::empty({batch, T}, DType::Int64);           // (B, 2L+1)
  out.prompt = Tensor::empty({batch, L + 2}, DType::Int64);  // (B, L+2)
  out.target = Tensor::empty({batch, L}, DType::Int64);      // (B, L)
  int64_t* px = out.x.data<int64_t>();
  int64_t* py = out.y.data<int64_t>();
  int64_t* pp = out.prompt.data<int64_t>();
  int64_t* pt = out.target.data<int64_t>();
  std::vector<int64_t> seq(static_cast<size_t>(2 * L + 2));
  const uint64_t n = static_cast<uint64_t>(num_symbols_);
  for (int64_t b = 0; b < batch; ++b) {
    seq[0] = bos();
    for (int64_t i = 0; i < L; ++i) seq[1 + i] = static_cast<int64_t>(gen_.next_u64() % n);
    seq[L + 1] = sep();
    for (int64_t i = 0; i < L; ++i)
      seq[L + 2 + i] = task_ == SyntheticTask::Copy ? seq[1 + i] : seq[L - i];  // reverse: t_i = s_{L+1-i}
    for (int64_t j = 0; j < T; ++j) {
      px[b * T + j] = seq[j];
      // Position j predicts seq[j+1]; j = 0..L predict s_1..s_L and SEP (the prompt): not scored.
      py[b * T + j] = j <= L ? kIgnoreIndex : seq[j + 1];
    }
    std::copy(seq.begin(), seq.begin() + L + 2, pp + b * (L + 2));
    std::copy(seq.begin() + L + 2, seq.end(), pt + b * L);
  }
  return out;
}

// ---- scoring --------------------------------------------------------------------------------------

double token_f1(const std::vector<int64_t>& predicted, const std::vector<int64_t>& target) {
  // SQuAD v1.1 evaluate script, f1_score: Counter(pred) & Counter(gold) -> num_same.
  if (predicted.empty() || target.empty()) return predicted.empty() && target.empty() ? 1.0 : 0.0;
  std::unordered_map<int64_t, int64_t> counts;
  for (int64_t t : target) ++counts[t];
  int64_t common = 0;
  for (int64_t p : predicted) {
    auto it = counts.find(p);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  const double precision = static_cast<double>(common) / static_cast<double>(predicted.size());
  const double recall = static_cast<double>(common) / static_cast<double>(target.size());
  return 2.0 * precision * recall / (precision + recall);
}

SyntheticScore score_predictions(const std::vector<std::vector<int64_t>>& predicted,
                                 const std::vector<std::vector<int64_t>>& target) {
  POSGRAD_CHECK(predicted.size() == target.size(), ValueError, "score_predictions: ", predicted.size(),
                " predictions for ", target.size(), " targets");
  SyntheticScore s;
  s.examples = static_cast<int64_t>(target.size());
  if (target.empty()) return s;
  for (size_t e = 0; e < target.size(); ++e) {
    const auto& p = predicted[e];
    const auto& t = target[e];
    s.exact_match += p == t ? 1.0 : 0.0;
    s.token_f1 += token_f1(p, t);
    const size_t longest = std::max(p.size(), t.size());
    if (longest == 0) {
      s.token_accuracy += 1.0;
    } else {
      size_t hits = 0;
      for (size_t i = 0; i < std::min(p.size(), t.size()); ++i) hits += p[i] == t[i];
      s.token_accuracy += static_cast<double>(hits) / static_cast<double>(longest);
    }
  }
  const double n = static_cast<double>(target.size());
  s.exact_match /= n;
  s.token_f1 /= n;
  s.token_accuracy /= n;
  return s;
}

static std::vector<std::vector<int64_t>> rows_of(const Tensor& t, const char* what) {
  POSGRAD_CHECK(t.defined() && t.dim() == 2, ShapeError, "score_predictions: ", what, " must be 2-d (B, L), got ",
                t.defined() ? t.str() : std::string("an undefined tensor"));
  POSGRAD_CHECK(t.dtype() == DType::Int64, DTypeError, "score_predictions: ", what, " must be int64, got ",
                dtype_name(t.dtype()));
  const std::vector<int64_t> flat = t.to_int_vector();
  const int64_t B = t.size(0), L = t.size(1);
  std::vector<std::vector<int64_t>> rows(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) rows[b].assign(flat.begin() + b * L, flat.begin() + (b + 1) * L);
  return rows;
}

SyntheticScore score_predictions(const Tensor& predicted, const Tensor& target) {
  auto p = rows_of(predicted, "predicted");
  auto t = rows_of(target, "target");
  POSGRAD_CHECK(p.size() == t.size(), ShapeError, "score_predictions: predicted ", predicted.str(), " and target ",
                target.str(), " differ in batch size");
  return score_predictions(p, t);
}

}  // namespace posgrad::data
