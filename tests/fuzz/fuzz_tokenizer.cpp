// fuzz_tokenizer.cpp — fuzzes the tokenizers (data/tokenizer.h) and the token cache reader
// (data/dataset.h), the two places where data/ reads bytes it did not write in this process.
//
// An input that starts with the cache magic "PGTOKENS" is a token cache file: it is written to a
// scratch path and load_or_build_tokens reads it for a fixed text and char tokenizer. Unless its
// reserved header field is non-zero, the header's text and tokenizer hashes are first set to the
// right values, so that mutations reach the count, size and id checks. Properties: a rebuilt
// cache returns exactly tok.encode(text); a reused one returns ids inside the vocabulary; and
// the next load of the same path reuses the file and returns tok.encode(text).
//
// Any other input: its first line is tokenizer JSON for Tokenizer::from_json (as state.json holds
// it), the rest is a payload. Properties: for the loaded tokenizer, the byte tokenizer and a char
// tokenizer built from the payload, decode(encode(payload)) == payload whenever encode succeeds,
// to_json/from_json rebuilds the same tokenizer, and ids read from the payload (little-endian
// int64) decode without error exactly when they are in the vocabulary, and re-encode to themselves.
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/fileio.h"
#include "data/tokenizer.h"
#include "tensor/errors.h"
#include "tensor/option_table.h"
#include "tests/fuzz/fuzz_targets.h"

namespace posgrad::fuzz {

namespace {

using json = nlohmann::json;

void check_tokenizer(const data::Tokenizer& tok, std::string_view payload) {
  // to_json -> from_json is the identity.
  std::unique_ptr<data::Tokenizer> back;
  try {
    back = data::Tokenizer::from_json(json::parse(tok.to_json().dump()));
  } catch (const Error& e) {
    throw Finding(std::string("Tokenizer::from_json refuses what to_json wrote: ") + e.what());
  }
  require(back->to_json() == tok.to_json() && back->kind() == tok.kind() && back->vocab_size() == tok.vocab_size(),
          "Tokenizer::from_json(to_json()) is a different tokenizer");

  // decode(encode(text)) == text.
  try {
    const std::vector<int64_t> ids = tok.encode(payload);
    require(ids.size() == payload.size(), tok.kind() + " tokenizer: encode returned a different number of ids");
    for (int64_t id : ids)
      require(id >= 0 && id < tok.vocab_size(), tok.kind() + " tokenizer: encode gave an id outside the vocabulary");
    require(tok.decode(ids) == payload, tok.kind() + " tokenizer: decode(encode(text)) != text");
  } catch (const ValueError&) {
    // a byte outside a char vocabulary
  }

  // Arbitrary ids: decode succeeds exactly when all are in range, and then re-encodes to them.
  std::vector<int64_t> ids(payload.size() / 8);
  if (!ids.empty()) std::memcpy(ids.data(), payload.data(), ids.size() * 8);
  bool in_range = true;
  for (int64_t id : ids) in_range = in_range && id >= 0 && id < tok.vocab_size();
  try {
    const std::string text = tok.decode(ids);
    require(in_range, tok.kind() + " tokenizer: decode accepted an id outside the vocabulary");
    require(tok.encode(text) == ids, tok.kind() + " tokenizer: encode(decode(ids)) != ids");
  } catch (const IndexError&) {
    require(!in_range, tok.kind() + " tokenizer: decode refused ids that are all in the vocabulary");
  }
}

void tokenizers(std::string_view text) {
  const size_t nl = text.find('\n');
  const std::string_view head = text.substr(0, nl);
  const std::string_view payload = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  try {
    // state.json is read with a depth limit of 8; so is this.
    const json j = opt::parse_json_limited(head, "fuzz", 1 << 20, 8);
    check_tokenizer(*data::Tokenizer::from_json(j), payload);
  } catch (const Error&) {
  }
  check_tokenizer(data::ByteTokenizer(), payload);
  if (!payload.empty()) check_tokenizer(data::CharTokenizer(payload), payload);
}

constexpr char kText[] = "hello, world\nthe quick brown fox\n";

void token_cache(std::string_view bytes) {
  static const data::CharTokenizer tok(kText);
  static const std::vector<int64_t> want = tok.encode(kText);
  // The header fields the reader compares with the text and tokenizer (see dataset.h).
  static const std::string good_header = [] {
    const std::string path = scratch_dir() + "/reference.tokens";
    (void)data::load_or_build_tokens(path, kText, tok);
    return read_file(path).substr(0, 64);
  }();
  std::string file(bytes);
  uint64_t reserved = 0;
  if (file.size() >= 64) std::memcpy(&reserved, file.data() + 56, 8);
  if (file.size() >= 64 && reserved == 0) {
    std::memcpy(file.data() + 24, good_header.data() + 24, 8);   // vocab size
    std::memcpy(file.data() + 32, good_header.data() + 32, 24);  // text hash, text bytes, tokenizer hash
  }
  const std::string path = scratch_dir() + "/input.tokens";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(file.data(), static_cast<std::streamsize>(file.size()));
  }
  data::CacheStatus status = data::CacheStatus::None;
  const data::TokenSpan got = data::load_or_build_tokens(path, kText, tok, &status);
  if (status == data::CacheStatus::Reused) {
    for (int64_t i = 0; i < got.size(); ++i)
      require(got[i] >= 0 && got[i] < tok.vocab_size(), "a reused token cache holds an id outside the vocabulary");
  } else {
    require(got.to_vector() == want, std::string("a token cache ") + data::cache_status_name(status) +
                                         " from the text does not hold tok.encode(text)");
  }
  const data::TokenSpan again = data::load_or_build_tokens(path, kText, tok, &status);
  if (got.to_vector() == want)
    require(status == data::CacheStatus::Reused && again.to_vector() == want,
            std::string("the token cache just written is not reused as is (status ") + data::cache_status_name(status) +
                ")");
}

}  // namespace

int fuzz_tokenizer(const uint8_t* data, size_t size) {
  const std::string_view text = as_text(data, size);
  try {
    if (text.substr(0, 8) == "PGTOKENS")
      token_cache(text);
    else
      tokenizers(text);
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace posgrad::fuzz
