// tokenizer.h — text <-> token ids for the language-model data pipeline: a byte tokenizer (vocab 256)
// and a character tokenizer whose vocabulary is the sorted set of distinct bytes of the training
// corpus (as nanoGPT's data/shakespeare_char/prepare.py: TinyShakespeare gives 65 symbols). Both
// are saved and reloaded as JSON so a run directory can decode its own samples.
// Deliberately not here: BPE / subword tokenizers, Unicode awareness (the char tokenizer works on
// bytes, so a multi-byte UTF-8 character becomes several symbols), special tokens.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace posgrad::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // ValueError when the text holds a byte outside the vocabulary (naming it and its value).
  virtual std::vector<int64_t> encode(std::string_view text) const = 0;
  // IndexError when an id is outside [0, vocab_size).
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual std::string kind() const = 0;  // "byte" | "char"
  // {"kind": ..., ...}: everything needed to rebuild an identical tokenizer.
  virtual nlohmann::json to_json() const = 0;
  // Rebuilds a tokenizer saved by to_json; ValueError naming the problem on a malformed object.
  static std::unique_ptr<Tokenizer> from_json(const nlohmann::json& j);
};

// Identity on bytes: id = unsigned byte value, vocab 256. Never fails to encode.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return 256; }
  std::string kind() const override { return "byte"; }
  nlohmann::json to_json() const override;
};

// id = rank of the byte in the sorted set of distinct bytes of the corpus it was built from.
class CharTokenizer final : public Tokenizer {
 public:
  // Vocabulary = sorted distinct bytes of `corpus`; ValueError when the corpus is empty.
  explicit CharTokenizer(std::string_view corpus);
  // From an explicit symbol list (sorted, distinct, 1..256 entries) — the to_json form.
  static CharTokenizer from_symbols(const std::vector<uint8_t>& symbols);

  std::vector<int64_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int64_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(symbols_.size()); }
  std::string kind() const override { return "char"; }
  // {"kind": "char", "symbols": [byte values, ascending]} — bytes as integers, so any corpus
  // (including invalid UTF-8) serialises to valid JSON.
  nlohmann::json to_json() const override;
  const std::vector<uint8_t>& symbols() const { return symbols_; }

 private:
  CharTokenizer() = default;
  void build_index();
  std::vector<uint8_t> symbols_;    // id -> byte
  std::array<int16_t, 256> index_;  // byte -> id, -1 when absent
};

// "byte" or "char" (built from corpus_text); any other name is a ValueError listing the choices.
std::unique_ptr<Tokenizer> make_tokenizer(const std::string& kind, std::string_view corpus_text);
const std::vector<std::string>& tokenizer_kinds();  // {"byte", "char"}

// Printable form of a byte for messages: 'a', '\n', '\x00'.
std::string printable_byte(uint8_t b);

}  // namespace posgrad::data
