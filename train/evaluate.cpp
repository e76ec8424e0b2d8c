// evaluate.cpp — see evaluate.h.
#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "autograd/ops.h"

namespace posgrad::train {

namespace {

// The one scoring loop of both protocols: windows of `context` input tokens starting at starts[w]
// (inputs tokens[s, s + context), targets tokens[s + 1, s + context]), window w scoring only its
// positions >= first[w], `batch` windows per forward pass. The loss is summed target by target in
// window order, so the same windows give the same bits whichever protocol placed them.
EvalResult score_windows(nn::GPT& model, const data::TokenSpan& tokens, int64_t context,
                         const std::vector<int64_t>& starts, const std::vector<int64_t>& first, bool per_position,
                         int64_t pos0, Device dev, int64_t batch) {
  POSGRAD_CHECK(batch >= 1, ValueError, "evaluation batch must be >= 1 windows, got ", batch);
  const int64_t nw = static_cast<int64_t>(starts.size());
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  EvalResult r;
  r.context = context;
  r.windows = nw;
  if (per_position) r.per_position_loss.assign(static_cast<size_t>(context), 0.0);
  r.window_loss.assign(static_cast<size_t>(nw), 0.0);
  r.window_tokens.assign(static_cast<size_t>(nw), 0);
  double loss_sum = 0, correct = 0;
  for (int64_t w0 = 0; w0 < nw; w0 += batch) {
    const int64_t b = std::min(batch, nw - w0);
    Tensor x = Tensor::empty({b, context}, DType::Int64);  // (b, context)
    Tensor y = Tensor::empty({b, context}, DType::Int64);  // (b, context), x shifted by one
    for (int64_t k = 0; k < b; ++k) {
      const int64_t* src = tokens.data() + starts[static_cast<size_t>(w0 + k)];
      std::memcpy(x.data<int64_t>() + k * context, src, static_cast<size_t>(context) * sizeof(int64_t));
      std::memcpy(y.data<int64_t>() + k * context, src + 1, static_cast<size_t>(context) * sizeof(int64_t));
    }
    const std::vector<int64_t> ys = y.to_int_vector();
    Tensor logits = model.forward(x.to(dev), pos0);
    std::vector<double> rows = cross_entropy_rows(logits, y.to(dev)).to_vector();
    std::vector<int64_t> pred = max(logits, -1).second.to_int_vector();
    for (int64_t i = 0; i < b * context; ++i) {
      const size_t w = static_cast<size_t>(w0 + i / context);
      const int64_t p = i % context;
      if (p < first[w]) continue;
      loss_sum += rows[i];
      r.window_loss[w] += rows[i];
      ++r.window_tokens[w];
      if (per_position) r.per_position_loss[p] += rows[i];
      correct += pred[i] == ys[i] ? 1.0 : 0.0;
    }
  }
  if (was_training) model.train();
  for (int64_t n : r.window_tokens) r.tokens += n;
  const double n = static_cast<double>(r.tokens);
  r.loss = loss_sum / n;
  r.perplexity = std::exp(r.loss);
  r.accuracy = correct / n;
  for (auto& v : r.per_position_loss) v /= static_cast<double>(nw);
  return r;
}

}  // namespace

EvalResult evaluate_tokens(nn::GPT& model, const data::TokenSpan& tokens, int64_t context, int64_t max_windows,
                           int64_t pos0, Device dev, int64_t batch) {
  const data::EvalWindows windows(tokens, context, max_windows);
  std::vector<int64_t> starts;
  for (int64_t k = 0; k < windows.size(); ++k) starts.push_back(windows.start(k));
  EvalResult r =
      score_windows(model, tokens, context, starts, std::vector<int64_t>(starts.size(), 0), true, pos0, dev, batch);
  r.stride = context;
  return r;
}

int64_t sliding_windows(int64_t context, int64_t stride, int64_t scored) {
  POSGRAD_CHECK(stride >= 1 && stride <= context && context <= scored, ValueError,
                "sliding-window evaluation needs 1 <= stride <= context <= scored targets, got stride ", stride,
                ", context ", context, ", scored ", scored);
  return 1 + (scored - context + stride - 1) / stride;
}

EvalResult evaluate_sliding(nn::GPT& model, const data::TokenSpan& tokens, int64_t context, int64_t stride,
                            int64_t scored, int64_t pos0, Device dev, int64_t batch) {
  const int64_t n = sliding_windows(context, stride, scored);
  POSGRAD_CHECK(scored + 1 <= tokens.size(), ValueError, "sliding-window evaluation: ", scored, " scored targets need ",
                scored + 1, " tokens, the text has ", tokens.size());
  std::vector<int64_t> starts = {0}, first = {0};
  for (int64_t w = 1; w < n; ++w) {
    starts.push_back(std::min(w * stride, scored - context));
    // The targets after the previous window's last: its last s_w - s_{w-1} positions.
    first.push_back(context - (starts[static_cast<size_t>(w)] - starts[static_cast<size_t>(w - 1)]));
  }
  EvalResult r = score_windows(model, tokens, context, starts, first, false, pos0, dev, batch);
  r.stride = stride;
  return r;
}

std::vector<std::vector<int64_t>> generate(nn::GPT& model, const std::vector<std::vector<int64_t>>& prompts, int64_t n,
                                           double temperature, int64_t top_k, Generator* gen, int64_t context_limit,
                                           Device dev, bool use_kv_cache) {
  POSGRAD_CHECK(n >= 0, ValueError, "number of tokens to generate must be >= 0, got ", n);
  POSGRAD_CHECK(temperature >= 0 && std::isfinite(temperature), ValueError, "temperature must be finite and >= 0, got ",
                temperature);
  POSGRAD_CHECK(top_k >= 0, ValueError, "top_k must be >= 0, got ", top_k);
  POSGRAD_CHECK(!prompts.empty() && !prompts.front().empty(), ValueError,
                "generate needs at least one non-empty prompt");
  POSGRAD_CHECK(temperature == 0 || gen, ValueError, "sampling (temperature > 0) needs a generator");
  const size_t B = prompts.size();
  for (const auto& p : prompts)
    POSGRAD_CHECK(p.size() == prompts.front().size(), ShapeError, "generate: prompts of different lengths (", p.size(),
                  " and ", prompts.front().size(), ")");
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  std::vector<std::vector<int64_t>> seq = prompts, out(B);
  const nn::PositionEncoding& pe = model.position_encoding();
  const int64_t total = static_cast<int64_t>(prompts.front().size()) + n;
  const int64_t capacity = context_limit > 0 ? std::min(context_limit, total) : total;
  std::optional<nn::KVCache> cache;
  if (use_kv_cache && n > 0 && pe.causal() && pe.supports_kv_cache() &&
      (pe.max_length() < 0 || capacity <= pe.max_length()))
    cache = model.make_kv_cache(capacity);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t len = static_cast<int64_t>(seq.front().size());
    // The tokens to feed: those the cache has not seen, or the whole window (past the context: the
    // last context_limit tokens).
    const bool incremental = cache && len <= cache->capacity;
    const int64_t T = incremental ? len - cache->length : context_limit > 0 ? std::min(context_limit, len) : len;
    std::vector<int64_t> ids;
    ids.reserve(B * static_cast<size_t>(T));
    for (const auto& s : seq) ids.insert(ids.end(), s.end() - T, s.end());
    const Tensor input = Tensor::from_ints(ids, {static_cast<int64_t>(B), T}).to(dev);
    const Tensor logits = (incremental ? model.forward(input, *cache) : model.forward(input)).narrow(1, T - 1, 1);
    const std::vector<double> all = logits.to_vector();  // (B, V)
    const size_t V = all.size() / B;
    for (size_t b = 0; b < B; ++b) {
      std::vector<double> l(all.begin() + b * V, all.begin() + (b + 1) * V);
      const double mx = *std::max_element(l.begin(), l.end());
      if (!std::isfinite(mx))
        throw NonFiniteLoss(
            detail::concat("the model produced non-finite logits (max ", mx, ") at generated token ", t));
      int64_t pick = static_cast<int64_t>(std::max_element(l.begin(), l.end()) - l.begin());  // greedy
      if (temperature > 0) {
        if (top_k > 0 && top_k < static_cast<int64_t>(V)) {
          std::vector<double> sorted = l;
          std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
          const double kth = sorted[static_cast<size_t>(top_k - 1)];
          for (auto& v : l)
            if (v < kth) v = -INFINITY;
        }
        // exp((l - max) / temperature): every exponent is <= 0 and the maximum's is exactly 0, so a
        // temperature near 0 tends to greedy decoding (underflow to 0, never inf/inf) instead of NaN.
        double z = 0;
        for (auto& v : l) z += (v = std::exp((v - mx) / temperature));
        const double u = gen->next_unit() * z;
        double acc = 0;
        pick = static_cast<int64_t>(V) - 1;
        for (size_t i = 0; i < V; ++i) {
          acc += l[i];
          if (u < acc) {
            pick = static_cast<int64_t>(i);
            break;
          }
        }
      }
      seq[b].push_back(pick);
      out[b].push_back(pick);
    }
  }
  if (was_training) model.train();
  return out;
}

std::string sample_text(nn::GPT& model, const data::Tokenizer& tok, const std::string& prompt, int64_t n,
                        double temperature, int64_t top_k, uint64_t seed, Device dev, bool use_kv_cache) {
  POSGRAD_CHECK(temperature > 0, ValueError, "temperature must be positive, got ", temperature);
  Generator gen(seed);
  const std::vector<int64_t> ids = tok.encode(prompt.empty() ? "\n" : prompt);
  return tok.decode(
      generate(model, {ids}, n, temperature, top_k, &gen, model.config().block_size, dev, use_kv_cache).front());
}

}  // namespace posgrad::train
