// passkey.cpp — see passkey.h.
#include "data/passkey.h"

#include <cmath>

#include "tensor/errors.h"

namespace posgrad::data {

namespace {

struct TemplateText {
  const char* pre;
  const char* mid;  // nullptr: the key appears once in the needle
  const char* post;
  const char* question;
};

TemplateText template_text(PasskeyTemplate t) {
  // Mohtashami & Jaggi 2023 App. C (the prompt Chen et al. 2023 §3.3 and Peng et al. 2023 reuse).
  if (t == PasskeyTemplate::Standard)
    return {" The pass key is ", ". Remember it. ", " is the pass key. ", " What is the pass key? The pass key is "};
  if (t == PasskeyTemplate::Marker) return {" (", nullptr, ")", " ("};
  return {" key ", nullptr, ".", " key "};
}

}  // namespace

const std::vector<std::string>& passkey_template_names() {
  static const std::vector<std::string> n = {"standard", "short", "marker"};
  return n;
}

PasskeyTemplate parse_passkey_template(const std::string& name) {
  if (name == "standard") return PasskeyTemplate::Standard;
  if (name == "short") return PasskeyTemplate::Short;
  if (name == "marker") return PasskeyTemplate::Marker;
  throw ValueError("unknown passkey template '" + name + "' (known: standard, short, marker)");
}

int64_t passkey_overhead_bytes(PasskeyTemplate t, int64_t key_length) {
  const TemplateText s = template_text(t);
  const int64_t keys = s.mid ? 3 : 2;  // twice in the needle (standard) or once, plus the answer
  int64_t n =
      static_cast<int64_t>(std::string(s.pre).size() + std::string(s.post).size() + std::string(s.question).size());
  if (s.mid) n += static_cast<int64_t>(std::string(s.mid).size());
  return n + keys * key_length;
}

PasskeyGenerator::PasskeyGenerator(TokenSpan filler, const Tokenizer& tok, int64_t key_length, PasskeyTemplate t,
                                   uint64_t seed)
    : filler_(std::move(filler)), key_length_(key_length), gen_(seed) {
  POSGRAD_CHECK(key_length >= 1, ValueError, "passkey: key_length must be at least 1, got ", key_length);
  POSGRAD_CHECK(!filler_.empty(), ValueError, "passkey: the filler text is empty");
  const TemplateText s = template_text(t);
  auto encode = [&](const char* text) {
    try {
      return tok.encode(text);
    } catch (const ValueError& e) {
      throw ValueError(std::string("passkey: the ") + tok.kind() + " tokenizer cannot encode the template text '" +
                       text + "' (" + e.what() + "); use a corpus that contains it or the byte tokenizer");
    }
  };
  pre_ = encode(s.pre);
  if (s.mid) mid_ = encode(s.mid);
  key_twice_ = s.mid != nullptr;
  post_ = encode(s.post);
  question_ = encode(s.question);
  // The key's alphabet: digits when every one is a single token, else lowercase letters.
  auto alphabet = [&](char lo, char hi) {
    std::vector<int64_t> ids;
    for (char c = lo; c <= hi; ++c) {
      std::vector<int64_t> one;
      try {
        one = tok.encode(std::string(1, c));
      } catch (const ValueError&) {
        return std::vector<int64_t>{};
      }
      if (one.size() != 1) return std::vector<int64_t>{};
      ids.push_back(one[0]);
    }
    return ids;
  };
  symbols_ = alphabet('0', '9');
  if (!symbols_.empty()) {
    alphabet_name_ = "digits";
    for (char c = '0'; c <= '9'; ++c) symbol_chars_.push_back(c);
  } else {
    symbols_ = alphabet('a', 'z');
    POSGRAD_CHECK(!symbols_.empty(), ValueError, "passkey: the ", tok.kind(),
                  " tokenizer encodes neither all digits 0-9 nor all lowercase letters a-z as single tokens, so a key "
                  "cannot be drawn");
    alphabet_name_ = "letters";
    for (char c = 'a'; c <= 'z'; ++c) symbol_chars_.push_back(c);
  }
}

int64_t PasskeyGenerator::overhead() const {
  const int64_t keys = key_twice_ ? 3 : 2;
  return static_cast<int64_t>(pre_.size() + mid_.size() + post_.size() + question_.size()) + keys * key_length_;
}

PasskeyExample PasskeyGenerator::example(int64_t length, double depth) {
  POSGRAD_CHECK(std::isfinite(depth) && depth >= 0 && depth <= 1, ValueError, "passkey: depth must lie in [0, 1], got ",
                depth);
  POSGRAD_CHECK(length >= min_length(), ValueError, "passkey: length ", length,
                " is too short: the needle, question and ", key_length_, "-symbol key take ", overhead(),
                " tokens, and at least one filler token is needed (length >= ", min_length(), ")");
  const int64_t F = length - overhead();
  POSGRAD_CHECK(F <= filler_.size(), ValueError, "passkey: length ", length, " needs ", F,
                " filler tokens but the filler text holds ", filler_.size());
  PasskeyExample e;
  e.depth = depth;
  e.filler_length = F;
  const int64_t start = static_cast<int64_t>(gen_.next_u64() % static_cast<uint64_t>(filler_.size() - F + 1));
  for (int64_t i = 0; i < key_length_; ++i) {
    const size_t s = static_cast<size_t>(gen_.next_u64() % symbols_.size());
    e.key.push_back(symbols_[s]);
    e.key_text.push_back(symbol_chars_[s]);
  }
  const int64_t before = std::llround(depth * static_cast<double>(F));
  auto append = [&](const std::vector<int64_t>& v) { e.tokens.insert(e.tokens.end(), v.begin(), v.end()); };
  e.tokens.reserve(static_cast<size_t>(length));
  e.tokens.insert(e.tokens.end(), filler_.data() + start, filler_.data() + start + before);
  e.needle_start = before;
  append(pre_);
  append(e.key);
  if (key_twice_) {
    append(mid_);
    append(e.key);
  }
  append(post_);
  e.needle_length = static_cast<int64_t>(e.tokens.size()) - before;
  e.tokens.insert(e.tokens.end(), filler_.data() + start + before, filler_.data() + start + F);
  append(question_);
  append(e.key);
  return e;
}

PasskeyBatch passkey_batch(const std::vector<PasskeyExample>& examples) {
  POSGRAD_CHECK(!examples.empty(), ValueError, "passkey batch: no examples");
  const int64_t L = static_cast<int64_t>(examples.front().tokens.size());
  const int64_t K = static_cast<int64_t>(examples.front().key.size());
  POSGRAD_CHECK(L >= K + 1 && K >= 1, ValueError, "passkey batch: an example of ", L, " tokens with a key of ", K);
  const int64_t B = static_cast<int64_t>(examples.size()), T = L - 1;
  PasskeyBatch out;
  out.x = Tensor::empty({B, T}, DType::Int64);  // (B, T)
  out.y = Tensor::empty({B, T}, DType::Int64);  // (B, T)
  int64_t* px = out.x.data<int64_t>();
  int64_t* py = out.y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const PasskeyExample& e = examples[static_cast<size_t>(b)];
    POSGRAD_CHECK(static_cast<int64_t>(e.tokens.size()) == L && static_cast<int64_t>(e.key.size()) == K, ValueError,
                  "passkey batch: example ", b, " has ", e.tokens.size(), " tokens and a key of ", e.key.size(),
                  ", example 0 ", L, " and ", K);
    for (int64_t j = 0; j < T; ++j) {
      px[b * T + j] = e.tokens[static_cast<size_t>(j)];
      // Position j predicts tokens[j + 1]; the last K positions predict the key.
      py[b * T + j] = j >= T - K ? e.tokens[static_cast<size_t>(j + 1)] : kPasskeyIgnore;
    }
  }
  return out;
}

}  // namespace posgrad::data
