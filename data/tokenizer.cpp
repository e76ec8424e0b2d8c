// tokenizer.cpp — see tokenizer.h.
#include "data/tokenizer.h"

#include <algorithm>
#include <cstdio>

#include "tensor/errors.h"

namespace posgrad::data {

using json = nlohmann::json;

std::string printable_byte(uint8_t b) {
  switch (b) {
    case '\n': return "'\\n'";
    case '\t': return "'\\t'";
    case '\r': return "'\\r'";
    case '\'': return "'\\''";
    case '\\': return "'\\\\'";
    default: break;
  }
  if (b >= 0x20 && b < 0x7f) return std::string("'") + static_cast<char>(b) + "'";
  char buf[8];
  std::snprintf(buf, sizeof buf, "'\\x%02x'", b);
  return buf;
}

static void check_ids(const std::vector<int64_t>& ids, int64_t vocab, const char* who) {
  for (size_t i = 0; i < ids.size(); ++i)
    POSGRAD_CHECK(ids[i] >= 0 && ids[i] < vocab, IndexError, who, " tokenizer: cannot decode id ", ids[i],
                  " at position ", i, ": the vocabulary has ", vocab, " ids (0..", vocab - 1, ")");
}

// ---- ByteTokenizer --------------------------------------------------------------------------------

std::vector<int64_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<uint8_t>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int64_t>& ids) const {
  check_ids(ids, 256, "byte");
  std::string s(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) s[i] = static_cast<char>(static_cast<uint8_t>(ids[i]));
  return s;
}

json ByteTokenizer::to_json() const { return {{"kind", "byte"}, {"vocab_size", 256}}; }

// ---- CharTokenizer --------------------------------------------------------------------------------

CharTokenizer::CharTokenizer(std::string_view corpus) {
  POSGRAD_CHECK(!corpus.empty(), ValueError, "char tokenizer: cannot build a vocabulary from an empty corpus");
  std::array<bool, 256> seen{};
  for (char c : corpus) seen[static_cast<uint8_t>(c)] = true;
  for (int b = 0; b < 256; ++b)
    if (seen[b]) symbols_.push_back(static_cast<uint8_t>(b));
  build_index();
}

CharTokenizer CharTokenizer::from_symbols(const std::vector<uint8_t>& symbols) {
  POSGRAD_CHECK(!symbols.empty(), ValueError, "char tokenizer: the symbol list is empty");
  for (size_t i = 1; i < symbols.size(); ++i)
    POSGRAD_CHECK(symbols[i - 1] < symbols[i], ValueError, "char tokenizer: symbols must be sorted and distinct, but ",
                  int(symbols[i - 1]), " is followed by ", int(symbols[i]), " at index ", i);
  CharTokenizer t;
  t.symbols_ = symbols;
  t.build_index();
  return t;
}

void CharTokenizer::build_index() {
  index_.fill(-1);
  for (size_t i = 0; i < symbols_.size(); ++i) index_[symbols_[i]] = static_cast<int16_t>(i);
}

std::vector<int64_t> CharTokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    const int16_t id = index_[b];
    if (id < 0)
      throw ValueError(detail::concat("char tokenizer: character ", printable_byte(b), " (byte ", int(b),
                                      ") at offset ", i, " is not in the vocabulary of ", symbols_.size(),
                                      " symbols built from the training corpus"));
    ids[i] = id;
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  check_ids(ids, vocab_size(), "char");
  std::string s(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) s[i] = static_cast<char>(symbols_[static_cast<size_t>(ids[i])]);
  return s;
}

json CharTokenizer::to_json() const {
  json syms = json::array();
  for (uint8_t b : symbols_) syms.push_back(int(b));
  return {{"kind", "char"}, {"vocab_size", vocab_size()}, {"symbols", syms}};
}

// ---- factory and reload ---------------------------------------------------------------------------

const std::vector<std::string>& tokenizer_kinds() {
  static const std::vector<std::string> kinds = {"byte", "char"};
  return kinds;
}

std::unique_ptr<Tokenizer> make_tokenizer(const std::string& kind, std::string_view corpus_text) {
  if (kind == "byte") return std::make_unique<ByteTokenizer>();
  if (kind == "char") return std::make_unique<CharTokenizer>(corpus_text);
  throw ValueError("unknown tokenizer '" + kind + "' (choices: byte, char)");
}

std::unique_ptr<Tokenizer> Tokenizer::from_json(const json& j) {
  POSGRAD_CHECK(j.is_object() && j.contains("kind") && j["kind"].is_string(), ValueError,
                "tokenizer JSON must be an object with a string \"kind\", got: ", j.dump());
  const std::string kind = j["kind"].get<std::string>();
  std::unique_ptr<Tokenizer> tok;
  if (kind == "byte") {
    tok = std::make_unique<ByteTokenizer>();
  } else if (kind == "char") {
    POSGRAD_CHECK(j.contains("symbols") && j["symbols"].is_array(), ValueError,
                  "char tokenizer JSON has no \"symbols\" array");
    std::vector<uint8_t> syms;
    for (const auto& v : j["symbols"]) {
      POSGRAD_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 255, ValueError,
                    "char tokenizer JSON: symbol ", v.dump(), " is not a byte value 0..255");
      syms.push_back(static_cast<uint8_t>(v.get<int64_t>()));
    }
    tok = std::make_unique<CharTokenizer>(CharTokenizer::from_symbols(syms));
  } else {
    throw ValueError("tokenizer JSON has unknown kind '" + kind + "' (choices: byte, char)");
  }
  if (j.contains("vocab_size")) {
    POSGRAD_CHECK(j["vocab_size"].is_number_integer() && j["vocab_size"].get<int64_t>() == tok->vocab_size(),
                  ValueError, "tokenizer JSON: vocab_size ", j["vocab_size"].dump(), " does not match the ",
                  tok->vocab_size(), " symbols it lists");
  }
  return tok;
}

}  // namespace posgrad::data
