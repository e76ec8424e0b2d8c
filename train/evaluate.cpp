// evaluate.cpp — see evaluate.h.
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops.h"
#include "train/trainer.h"

namespace posgrad::train {

EvalResult evaluate_tokens(nn::GPT& model, const data::TokenSpan& tokens, int64_t context, int64_t max_windows,
                           int64_t pos0, Device dev, int64_t batch) {
  POSGRAD_CHECK(context > 0, ValueError, "evaluation context must be positive, got ", context);
  const int64_t fit = (static_cast<int64_t>(tokens.size()) - 1) / context;
  POSGRAD_CHECK(fit >= 1, ValueError, "validation split has ", tokens.size(), " tokens, too few for one window of ",
                context, "+1 tokens");
  const int64_t nw = std::min(fit, max_windows);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  EvalResult r;
  r.context = context;
  r.windows = nw;
  r.per_position_loss.assign(static_cast<size_t>(context), 0.0);
  double loss_sum = 0, correct = 0;
  for (int64_t w0 = 0; w0 < nw; w0 += batch) {
    const int64_t b = std::min(batch, nw - w0);
    std::vector<int64_t> xs(static_cast<size_t>(b * context)), ys(xs.size());
    for (int64_t i = 0; i < b; ++i) {
      const int64_t start = (w0 + i) * context;
      std::copy_n(tokens.data() + start, context, xs.begin() + i * context);
      std::copy_n(tokens.data() + start + 1, context, ys.begin() + i * context);
    }
    Tensor x = Tensor::from_ints(xs, {b, context}).to(dev), y = Tensor::from_ints(ys, {b, context}).to(dev);
    Tensor logits = model.forward(x, pos0);
    std::vector<double> rows = cross_entropy_rows(logits, y).to_vector();
    std::vector<int64_t> pred = max(logits, -1).second.to_int_vector();
    for (int64_t i = 0; i < b * context; ++i) {
      loss_sum += rows[i];
      r.per_position_loss[i % context] += rows[i];
      correct += pred[i] == ys[i] ? 1.0 : 0.0;
    }
  }
  if (was_training) model.train();
  const double n = static_cast<double>(nw * context);
  r.loss = loss_sum / n;
  r.perplexity = std::exp(r.loss);
  r.accuracy = correct / n;
  for (auto& v : r.per_position_loss) v /= static_cast<double>(nw);
  return r;
}

std::string sample_text(nn::GPT& model, const data::Tokenizer& tok, const std::string& prompt, int64_t n,
                        double temperature, int64_t top_k, uint64_t seed, Device dev) {
  POSGRAD_CHECK(n >= 0, ValueError, "number of tokens to sample must be >= 0, got ", n);
  POSGRAD_CHECK(temperature > 0, ValueError, "temperature must be positive, got ", temperature);
  POSGRAD_CHECK(top_k >= 0, ValueError, "top_k must be >= 0, got ", top_k);
  std::vector<int64_t> ids = tok.encode(prompt.empty() ? "\n" : prompt);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  Generator gen(seed);
  const int64_t block = model.config().block_size;
  std::vector<int64_t> out;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t T = std::min<int64_t>(block, static_cast<int64_t>(ids.size()));
    std::vector<int64_t> ctx(ids.end() - T, ids.end());
    Tensor logits = model.forward(Tensor::from_ints(ctx, {1, T}).to(dev));
    std::vector<double> l = logits.narrow(1, T - 1, 1).to_vector();
    if (top_k > 0 && top_k < static_cast<int64_t>(l.size())) {
      std::vector<double> sorted = l;
      std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
      const double kth = sorted[static_cast<size_t>(top_k - 1)];
      for (auto& v : l)
        if (v < kth) v = -INFINITY;
    }
    const double mx = *std::max_element(l.begin(), l.end());
    if (!std::isfinite(mx))
      throw NonFiniteLoss(detail::concat("the model produced non-finite logits (max ", mx, ") at generated token ", t));
    // exp((l - max) / temperature): every exponent is <= 0 and the maximum's is exactly 0, so a
    // temperature near 0 tends to greedy decoding (underflow to 0, never inf/inf) instead of NaN.
    double z = 0;
    for (auto& v : l) z += (v = std::exp((v - mx) / temperature));
    double u = gen.next_unit() * z, acc = 0;
    int64_t pick = static_cast<int64_t>(l.size()) - 1;
    for (size_t i = 0; i < l.size(); ++i) {
      acc += l[i];
      if (u < acc) {
        pick = static_cast<int64_t>(i);
        break;
      }
    }
    ids.push_back(pick);
    out.push_back(pick);
  }
  if (was_training) model.train();
  return tok.decode(out);
}

}  // namespace posgrad::train
