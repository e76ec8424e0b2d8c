// passkey.h — passkey retrieval examples in real text (Mohtashami & Jaggi 2023, "Landmark Attention",
// §4.2 and App. C; the test Chen et al. 2023, "Extending Context Window of Large Language Models via
// Positional Interpolation", §3.3, and Peng et al. 2023, "YaRN", §4.3, also use). A key of random
// symbols is hidden at a chosen depth in filler text; the question at the end asks for it, and the
// model must reproduce it. Here the filler is a span of the corpus (the articles repeat a fixed
// garbage sentence; real text makes the key the only thing worth copying rather than the only thing
// that differs).
//
// One example of exactly `length` tokens:
//     filler[0, b)  NEEDLE  filler[b, F)  QUESTION  KEY
// with the templates (K = the key's symbols):
//     standard  NEEDLE   = " The pass key is K. Remember it. K is the pass key. "
//               QUESTION = " What is the pass key? The pass key is "
//     short     NEEDLE   = " key K."      QUESTION = " key "
//     marker    NEEDLE   = " (K)"         QUESTION = " ("
// The standard template is the articles' text; with a character tokenizer it alone takes about
// 100 tokens, more than a 64-token training context holds, so the short one keeps its structure
// (a marked key, filler, the marker again, the key) for small models, in characters almost any
// English text has (space, e, k, y and the full stop). The marker template keeps that structure
// with a one-token marker that filler text seldom holds (an opening parenthesis: 221 in the KJV's
// 4.1 million characters), so that finding the key is the simplest retrieval, attending to the
// token after the earlier occurrence of the current one (an induction head, Olsson et al. 2022),
// instead of matching the several tokens of a word that the filler is full of.
// F = length - |NEEDLE| - |QUESTION| - |KEY| filler tokens are a contiguous span of the filler text
// at an offset drawn from the generator; b = round(depth · F) of them come before the needle
// (depth 0: the needle right after the start; depth 1: just before the question).
//
// KEY: key_length symbols drawn uniformly from the digits 0-9 when the tokenizer encodes all ten,
// else from the lowercase letters a-z (the character tokenizers of TinyShakespeare and of the KJV
// have no digits). Each symbol must be one token.
//
// As next-token data (the convention of data/length_tasks.h): x = tokens[0, length-1),
// y = tokens[1, length) with kPasskeyIgnore (-100, cross-entropy's ignore index) except at the last
// key_length positions, which predict the key: the loss and the score cover the answer only.
//
// Texts are encoded piece by piece (filler, needle parts, key symbols, question) and the ids
// concatenated: for the byte and character tokenizers (one token per byte) that equals encoding the
// joined text. Draws come from a posgrad::Generator, so (seed, offset) is the whole state.
// Deliberately not here: the model, training, scoring (compare/studies/passkey/passkey.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/tokenizer.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

namespace posgrad::data {

constexpr int64_t kPasskeyIgnore = -100;

enum class PasskeyTemplate { Standard, Short, Marker };
const std::vector<std::string>& passkey_template_names();         // {"standard", "short", "marker"}
PasskeyTemplate parse_passkey_template(const std::string& name);  // ValueError listing the names
// Tokens an example spends on needle, question and key with a one-token-per-byte tokenizer (the
// byte and char tokenizers): the shortest example holds this plus one filler token.
int64_t passkey_overhead_bytes(PasskeyTemplate t, int64_t key_length);

struct PasskeyExample {
  std::vector<int64_t> tokens;  // exactly `length` ids
  std::vector<int64_t> key;     // key_length ids: the answer, the last key_length tokens
  std::string key_text;         // the key as text
  int64_t needle_start = 0;     // token offset of the needle (= filler tokens before it)
  int64_t needle_length = 0, filler_length = 0;
  double depth = 0;
};

class PasskeyGenerator {
 public:
  // ValueError naming the input when: key_length < 1; the tokenizer cannot encode the template text
  // or neither all of 0-9 nor all of a-z (each as one token); the filler span is empty.
  PasskeyGenerator(TokenSpan filler, const Tokenizer& tok, int64_t key_length, PasskeyTemplate t, uint64_t seed);

  // One example of `length` tokens with the needle at `depth` in [0, 1]. ValueError when depth is
  // outside [0, 1] or not finite, when length < min_length() (too short for needle, question, key
  // and one filler token) or when the filler span holds fewer than the F filler tokens needed.
  PasskeyExample example(int64_t length, double depth);

  const std::string& alphabet() const { return alphabet_name_; }  // "digits" | "letters"
  int64_t alphabet_size() const { return static_cast<int64_t>(symbols_.size()); }
  int64_t key_length() const { return key_length_; }
  int64_t overhead() const;  // needle + question + key tokens
  int64_t min_length() const { return overhead() + 1; }
  // The longest example the filler span allows (overhead + its size).
  int64_t max_length() const { return overhead() + filler_.size(); }
  GeneratorState state() const { return gen_.state(); }

 private:
  TokenSpan filler_;
  int64_t key_length_;
  Generator gen_;
  std::string alphabet_name_;
  std::vector<char> symbol_chars_;
  std::vector<int64_t> symbols_;  // token id of each key symbol
  // needle = pre K mid K post (standard) or pre K post (short: mid empty, one K)
  std::vector<int64_t> pre_, mid_, post_, question_;
  bool key_twice_ = true;
};

// Examples of one length as next-token data (B = examples, T = length - 1).
struct PasskeyBatch {
  Tensor x;  // int64 (B, T): tokens[0, length-1)
  Tensor y;  // int64 (B, T): tokens[1, length), kPasskeyIgnore except the last key_length positions
};
// ValueError when `examples` is empty or their lengths or key lengths differ.
PasskeyBatch passkey_batch(const std::vector<PasskeyExample>& examples);

}  // namespace posgrad::data
