// mlm.cpp — see mlm.h.
#include "data/mlm.h"

#include "data/synthetic.h"
#include "tensor/errors.h"

namespace posgrad::data {

MlmBatch mask_tokens(const Tensor& ids, int64_t vocab_size, int64_t mask_id, Generator& gen, const MlmOptions& opt) {
  POSGRAD_CHECK(ids.dim() == 2 && ids.dtype() == DType::Int64 && ids.numel() > 0, ShapeError,
                "mask_tokens: ids must be non-empty int64 (B, T), got ", ids.str());
  POSGRAD_CHECK(opt.select_prob > 0 && opt.select_prob <= 1, ValueError,
                "mask_tokens: select_prob must be in (0, 1], got ", opt.select_prob);
  POSGRAD_CHECK(opt.mask_prob >= 0 && opt.random_prob >= 0 && opt.mask_prob + opt.random_prob <= 1, ValueError,
                "mask_tokens: mask_prob (", opt.mask_prob, ") and random_prob (", opt.random_prob,
                ") must be >= 0 and sum to at most 1");
  POSGRAD_CHECK(vocab_size >= 1, ValueError, "mask_tokens: vocab_size must be >= 1, got ", vocab_size);
  const int64_t B = ids.size(0), T = ids.size(1);
  const std::vector<double> v = ids.to_vector();
  std::vector<int64_t> in(v.size()), lab(v.size(), kIgnoreIndex);
  for (size_t i = 0; i < v.size(); ++i) {
    in[i] = static_cast<int64_t>(v[i]);
    POSGRAD_CHECK(in[i] >= 0 && in[i] < vocab_size, ValueError, "mask_tokens: id ", in[i], " at flat position ", i,
                  " is outside [0, ", vocab_size, ")");
  }
  MlmBatch out;
  auto corrupt = [&](size_t i) {  // position i is selected: label it, then 80/10/10
    lab[i] = in[i];
    ++out.selected;
    const double u = gen.next_unit();
    const int64_t r = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(vocab_size));
    if (u < opt.mask_prob) {
      in[i] = mask_id;
      ++out.masked;
    } else if (u < opt.mask_prob + opt.random_prob) {
      in[i] = r;
      ++out.randomised;
    } else {
      ++out.kept;
    }
  };
  for (int64_t b = 0; b < B; ++b) {
    bool any = false;
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(b * T + t);
      if (gen.next_unit() < opt.select_prob) {
        corrupt(i);
        any = true;
      }
    }
    if (!any) corrupt(static_cast<size_t>(b * T) + static_cast<size_t>(gen.next_u64() % static_cast<uint64_t>(T)));
  }
  out.input = Tensor::from_ints(in, {B, T});
  out.labels = Tensor::from_ints(lab, {B, T});
  return out;
}

}  // namespace posgrad::data
