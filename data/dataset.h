// dataset.h — the token side of the data pipeline: a corpus tokenised once into int64 ids (optionally
// cached on disk and memory-mapped on reuse), split contiguously into train (first 90%) and
// validation (last 10%), a seeded sampler of random training windows, and deterministic
// non-overlapping evaluation windows.
//
// Token cache file (all little-endian; the data section starts at byte 64, so it is 8-aligned):
//   0  char[8]  magic "PGTOKENS"         32  u64 FNV-1a 64 of the source text
//   8  u32      version (1)              40  u64 source text length in bytes
//   12 u32      header bytes (64)        48  u64 FNV-1a 64 of tokenizer.to_json().dump()
//   16 u64      token count              56  u64 reserved (0)
//   24 u64      vocab size               64  int64[count] token ids
// A cache whose header, size, hashes or ids do not match is rebuilt: written to a temp file in the
// same directory, fsynced, renamed over the old one (so readers never see half a file).
//
// Produces int64 Tensors only; deliberately knows nothing about models or autograd. Not here:
// shuffling of documents, padding/packing of variable-length examples (see synthetic.h), sharding
// across data-parallel ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/tokenizer.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

namespace posgrad::data {

// A read-only, contiguous run of token ids that keeps its backing memory (a vector or a mapped
// cache file) alive, so samplers and eval windows can outlive the dataset that made them.
class TokenSpan {
 public:
  TokenSpan() = default;
  TokenSpan(std::shared_ptr<const void> owner, const int64_t* data, int64_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}
  static TokenSpan from_vector(std::vector<int64_t> ids);

  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const int64_t* data() const { return data_; }
  int64_t operator[](int64_t i) const { return data_[i]; }
  // [begin, begin+len) of this span; IndexError when out of range.
  TokenSpan sub(int64_t begin, int64_t len) const;
  std::vector<int64_t> to_vector() const { return {data_, data_ + size_}; }

 private:
  std::shared_ptr<const void> owner_;
  const int64_t* data_ = nullptr;
  int64_t size_ = 0;
};

enum class CacheStatus {
  None,     // no cache path given (or the cache could not be written: a warning is logged)
  Built,    // no cache file existed; tokenised and written
  Reused,   // a matching cache file was mapped
  Rebuilt,  // a cache file existed but did not match (or was corrupt); tokenised and rewritten
};
const char* cache_status_name(CacheStatus s);

// A stable cache location for a corpus spec and tokenizer kind:
// default_data_home()/cache/<spec with every byte outside [A-Za-z0-9.-] as '_'>.<kind>.tokens.
// Stale contents are harmless: the header's hashes decide whether the file is reused.
std::string token_cache_path(const std::string& corpus_spec, const Tokenizer& tok);

// Token ids of `text` under `tok`, from the cache at `path` when it matches, else tokenised (and,
// unless `path` is empty, written there atomically). `status` (optional) says which happened.
TokenSpan load_or_build_tokens(const std::string& path, std::string_view text, const Tokenizer& tok,
                               CacheStatus* status = nullptr);

// Deterministic non-overlapping evaluation windows over a split: window k has inputs
// x = split[k*block, (k+1)*block) and targets y = x shifted by one, for k = 0..size()-1 — the
// FIRST N windows from the start of the split (N = all that fit, capped by max_windows), not a
// random or evenly spaced choice. Hence windows at block k*L cover exactly the text of k*N windows
// at block L: to compare perplexity across lengths 1x..16x on the same text, give each length
// max_windows = token_budget / block. (The first tokens of each window have little context;
// that is the standard non-overlapping evaluation, and it is the same for every model compared.)
class EvalWindows {
 public:
  EvalWindows(TokenSpan split, int64_t block, int64_t max_windows);  // ValueError when no window fits
  int64_t block() const { return block_; }
  int64_t size() const { return count_; }
  int64_t tokens() const { return count_ * block_; }     // scored targets
  int64_t start(int64_t k) const { return k * block_; }  // offset of window k in the split
  // Windows [first, first+count) as x, y: int64 (count, block). IndexError when out of range.
  std::pair<Tensor, Tensor> batch(int64_t first, int64_t count) const;

 private:
  TokenSpan split_;
  int64_t block_ = 0, count_ = 0;
};

class TokenDataset {
 public:
  static constexpr int64_t kTrainPercent = 90;  // contiguous split: first 90% train, rest val

  // Tokenises `text` (or maps the cache at cache_path, see load_or_build_tokens) and splits it.
  // ValueError when either split is shorter than block_size + 1 tokens (one training window).
  TokenDataset(std::string_view text, const Tokenizer& tok, int64_t block_size, const std::string& cache_path = "");
  // From ids directly (synthetic data, tests); ids must lie in [0, vocab_size).
  TokenDataset(std::vector<int64_t> ids, int64_t vocab_size, int64_t block_size);

  const TokenSpan& tokens() const { return all_; }
  const TokenSpan& train() const { return train_; }
  const TokenSpan& val() const { return val_; }
  int64_t vocab_size() const { return vocab_; }
  CacheStatus cache_status() const { return cache_status_; }
  // ValueError naming both split lengths unless each holds at least block + 1 tokens.
  void check_block(int64_t block) const;
  // Validation windows of `block` tokens (max_windows <= 0: all that fit). See EvalWindows.
  EvalWindows eval_windows(int64_t block, int64_t max_windows) const { return EvalWindows(val_, block, max_windows); }

 private:
  void split(int64_t block_size);
  TokenSpan all_, train_, val_;
  int64_t vocab_ = 0;
  CacheStatus cache_status_ = CacheStatus::None;
};

// Random training windows: each row starts at a uniformly drawn offset in [0, size - block] of the
// split; x = split[s, s+block), y = split[s+1, s+block+1). Draws come from a posgrad::Generator
// (one counter per row), so the whole sampler state is (seed, offset): checkpoint state() and
// set_state() it to continue the exact same batch sequence after a resume.
class BatchSampler {
 public:
  BatchSampler(TokenSpan split, uint64_t seed);
  // x, y: int64 (batch, block) on the CPU. ValueError when the split holds fewer than block + 1
  // tokens, or batch/block < 1.
  std::pair<Tensor, Tensor> next(int64_t batch, int64_t block);
  GeneratorState state() const { return gen_.state(); }
  void set_state(const GeneratorState& s) { gen_.set_state(s); }
  const TokenSpan& split() const { return split_; }

 private:
  TokenSpan split_;
  Generator gen_;
};

}  // namespace posgrad::data
