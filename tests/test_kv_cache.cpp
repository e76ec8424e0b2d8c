// test_kv_cache.cpp — incremental decoding with a key/value cache against the full forward: the
// logits of each new position are bit-identical to the full forward's row for every encoding that
// supports the cache; generate() returns the same tokens with and without the cache (greedy and
// sampled, batch of two, past the context where the window slides); and the cache's errors.
#include <gtest/gtest.h>

#include "autograd/node.h"
#include "nn/gpt.h"
#include "train/evaluate.h"

using namespace posgrad;

namespace {

// kind, or "<kind>_sinks" for the same encoding with attention sinks.
nn::GPTConfig tiny_config(const std::string& name) {
  const bool sinks = name.size() > 6 && name.substr(name.size() - 6) == "_sinks";
  const std::string kind = sinks ? name.substr(0, name.size() - 6) : name;
  nn::GPTConfig c;
  c.attention_sinks = sinks;
  c.vocab_size = 13;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.pos.kind = kind;
  c.pos.set("t5_num_buckets", int64_t{8});
  c.pos.set("t5_max_distance", int64_t{12});
  c.pos.set("deberta_position_buckets", int64_t{4});
  c.pos.set("deberta_max_relative_positions", int64_t{8});
  return c;
}

std::vector<int64_t> ids(int64_t B, int64_t T, uint64_t seed) {
  Generator g(seed);
  std::vector<int64_t> v;
  for (int64_t i = 0; i < B * T; ++i) v.push_back(static_cast<int64_t>(g.next_u64() % 13));
  return v;
}

// Rows [from, to) of logits (B, T, V) as a flat vector.
std::vector<float> rows(const Tensor& logits, int64_t from, int64_t to) {
  return logits.narrow(1, from, to - from).contiguous().to_float_vector();
}

class KVCacheEveryEncoding : public ::testing::TestWithParam<std::string> {};

// Prompt of 5, then one token at a time up to the context (16): each step's logits equal the full
// forward's rows for the same positions, bit for bit.
TEST_P(KVCacheEveryEncoding, IncrementalLogitsEqualTheFullForward) {
  Generator g(1), d(2);
  nn::GPT model(tiny_config(GetParam()), g, d);
  model.eval();
  if (!model.position_encoding().supports_kv_cache()) GTEST_SKIP() << GetParam() << " recomputes every window";
  NoGradGuard no_grad;
  const int64_t B = 2, T = 16;
  const std::vector<int64_t> all = ids(B, T, 7);
  const Tensor full = model.forward(Tensor::from_ints(all, {B, T}));
  nn::KVCache cache = model.make_kv_cache(T);
  int64_t pos = 0;
  for (int64_t step : {5, 1, 1, 2, 1, 1, 1, 1, 1, 1, 1}) {  // 16 positions in all
    std::vector<int64_t> chunk;
    for (int64_t b = 0; b < B; ++b)
      chunk.insert(chunk.end(), all.begin() + b * T + pos, all.begin() + b * T + pos + step);
    const Tensor got = model.forward(Tensor::from_ints(chunk, {B, step}), cache);
    EXPECT_EQ(rows(got, 0, step), rows(full, pos, pos + step))
        << GetParam() << " positions " << pos << ".." << pos + step - 1;
    pos += step;
  }
  EXPECT_EQ(cache.length, T);
  // The cache is full: one more position is an IndexError naming the capacity.
  EXPECT_THROW(model.forward(Tensor::from_ints({1, 2}, {B, 1}), cache), IndexError);
}

// generate() with and without the cache: the same tokens, greedy and sampled, for 30 new tokens
// after a prompt of 3 (so the window slides past the context of 16 halfway).
TEST_P(KVCacheEveryEncoding, GenerateIsTheSameWithAndWithoutTheCache) {
  Generator g(3), d(4);
  nn::GPT model(tiny_config(GetParam()), g, d);
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5, 6}};
  for (double temperature : {0.0, 1.0}) {
    Generator s1(11), s2(11);
    const auto cached = train::generate(model, prompts, 30, temperature, 5, &s1, 16, Device::cpu(), true);
    const auto plain = train::generate(model, prompts, 30, temperature, 5, &s2, 16, Device::cpu(), false);
    EXPECT_EQ(cached, plain) << GetParam() << " temperature " << temperature;
    EXPECT_EQ(cached.front().size(), 30u);
  }
}

// At the comparison's model size (4 layers, 128 wide, 4 heads, context 64; the GEMMs take their
// blocked paths), one token at a time after a prompt of 10: still the full forward's rows exactly.
TEST_P(KVCacheEveryEncoding, ComparisonSizedModel) {
  nn::GPTConfig c = tiny_config(GetParam());
  c.vocab_size = 65;
  c.block_size = 64;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 128;
  Generator g(8), d(9);
  nn::GPT model(c, g, d);
  model.eval();
  if (!model.position_encoding().supports_kv_cache()) GTEST_SKIP();
  NoGradGuard no_grad;
  const int64_t B = 3, T = 64;
  std::vector<int64_t> all = ids(B, T, 10);
  for (auto& v : all) v = v * 5 % 65;
  const Tensor full = model.forward(Tensor::from_ints(all, {B, T}));
  nn::KVCache cache = model.make_kv_cache(T);
  for (int64_t pos = 0; pos < T;) {
    const int64_t step = pos == 0 ? 10 : 1;
    std::vector<int64_t> chunk;
    for (int64_t b = 0; b < B; ++b)
      chunk.insert(chunk.end(), all.begin() + b * T + pos, all.begin() + b * T + pos + step);
    const Tensor got = model.forward(Tensor::from_ints(chunk, {B, step}), cache);
    ASSERT_EQ(rows(got, 0, step), rows(full, pos, pos + step)) << GetParam() << " position " << pos;
    pos += step;
  }
}

INSTANTIATE_TEST_SUITE_P(All, KVCacheEveryEncoding, ::testing::ValuesIn(nn::position_encoding_kinds()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
// Attention sinks with a rotation, a distance bias, the causal-only xPos and no encoding.
INSTANTIATE_TEST_SUITE_P(Sinks, KVCacheEveryEncoding,
                         ::testing::Values("none_sinks", "rope_sinks", "alibi_sinks", "xpos_sinks", "sandwich_sinks"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(KVCache, Errors) {
  Generator g(5), d(6);
  nn::GPT model(tiny_config("rope"), g, d);
  nn::KVCache cache = model.make_kv_cache(8);
  EXPECT_THROW(model.forward(Tensor::from_ints({1, 2}, {1, 2}), cache), AutogradError);  // gradient mode on
  NoGradGuard no_grad;
  EXPECT_THROW(model.make_kv_cache(0), ValueError);
  EXPECT_THROW(model.forward(Tensor::from_ints(std::vector<int64_t>(9, 1), {1, 9}), cache), IndexError);
  nn::KVCache wrong;  // not made for this model
  EXPECT_THROW(model.forward(Tensor::from_ints({1}, {1, 1}), wrong), ValueError);

  nn::GPTConfig dyn = tiny_config("rope");  // dynamic NTK: every position's frequencies change with the length
  dyn.pos.set("rope_scaling", std::string("dynamic"));
  dyn.pos.set("rope_scaling_factor", 2.0);
  nn::GPT dyn_model(dyn, g, d);
  EXPECT_FALSE(dyn_model.position_encoding().supports_kv_cache());
  nn::KVCache dc = dyn_model.make_kv_cache(8);
  EXPECT_THROW(dyn_model.forward(Tensor::from_ints({1}, {1, 1}), dc), ValueError);

  nn::GPTConfig learned = tiny_config("learned");  // a learned table bounds the capacity
  nn::GPT learned_model(learned, g, d);
  EXPECT_THROW(learned_model.make_kv_cache(17), ValueError);
}

}  // namespace
