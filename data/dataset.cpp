// dataset.cpp — see dataset.h.
#include "data/dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "data/corpus.h"
#include "data/fileio.h"
#include "tensor/errors.h"

namespace posgrad::data {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "the token cache stores little-endian int64 and is mapped as is: big-endian hosts are unsupported");

// ---- TokenSpan ------------------------------------------------------------------------------------

TokenSpan TokenSpan::from_vector(std::vector<int64_t> ids) {
  auto owned = std::make_shared<const std::vector<int64_t>>(std::move(ids));
  const int64_t* p = owned->data();
  const int64_t n = static_cast<int64_t>(owned->size());
  return TokenSpan(std::move(owned), p, n);
}

TokenSpan TokenSpan::sub(int64_t begin, int64_t len) const {
  POSGRAD_CHECK(begin >= 0 && len >= 0 && begin + len <= size_, IndexError, "token span [", begin, ", ", begin + len,
                ") is out of range for a span of ", size_, " tokens");
  return TokenSpan(owner_, data_ + begin, len);
}

// ---- token cache ----------------------------------------------------------------------------------

namespace {

constexpr char kMagic[8] = {'P', 'G', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kHeaderBytes = 64;

struct CacheHeader {  // the first 64 bytes of a cache file, see dataset.h
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t count;
  uint64_t vocab_size;
  uint64_t text_hash;
  uint64_t text_bytes;
  uint64_t tokenizer_hash;
  uint64_t reserved;
};
static_assert(sizeof(CacheHeader) == kHeaderBytes, "cache header must be exactly 64 bytes");

CacheHeader expected_header(std::string_view text, const Tokenizer& tok, uint64_t count) {
  CacheHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.header_bytes = kHeaderBytes;
  h.count = count;
  h.vocab_size = static_cast<uint64_t>(tok.vocab_size());
  h.text_hash = fnv1a64(text);
  h.text_bytes = text.size();
  h.tokenizer_hash = fnv1a64(tok.to_json().dump());
  h.reserved = 0;
  return h;
}

// A read-only private mapping of a whole file; unmapped when the last TokenSpan lets go.
struct Mapping {
  void* addr = nullptr;
  size_t len = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, len);
  }
};

// Maps `path` and checks it against `want` (count excepted). Returns an empty span with `why` set
// when the file is absent, unreadable or does not match — the caller then rebuilds it.
TokenSpan try_map_cache(const std::string& path, const CacheHeader& want, std::string& why) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = errno == ENOENT ? "absent" : std::string("cannot open: ") + std::strerror(errno);
    return {};
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    why = "not a regular file";
    return {};
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    ::close(fd);
    why = "shorter than its header";
    return {};
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (addr == MAP_FAILED) {
    why = std::string("mmap failed: ") + std::strerror(errno);
    return {};
  }
  auto map = std::make_shared<Mapping>();
  map->addr = addr;
  map->len = size;

  CacheHeader got;
  std::memcpy(&got, addr, sizeof got);
  if (std::memcmp(got.magic, kMagic, sizeof kMagic) != 0)
    why = "bad magic";
  else if (got.version != kVersion)
    why = "version " + std::to_string(got.version);
  else if (got.header_bytes != kHeaderBytes)
    why = "header size " + std::to_string(got.header_bytes);
  else if (got.count > (size - kHeaderBytes) / 8 || kHeaderBytes + got.count * 8 != size)
    why = "file size " + std::to_string(size) + " does not match " + std::to_string(got.count) + " tokens";
  else if (got.text_hash != want.text_hash || got.text_bytes != want.text_bytes)
    why = "the corpus text changed";
  else if (got.tokenizer_hash != want.tokenizer_hash || got.vocab_size != want.vocab_size)
    why = "the tokenizer changed";
  if (!why.empty()) return {};

  const int64_t* ids = reinterpret_cast<const int64_t*>(static_cast<const char*>(addr) + kHeaderBytes);
  const int64_t n = static_cast<int64_t>(got.count);
  // One pass over the ids (memory-bound, milliseconds): a flipped bit in the cache would otherwise
  // surface later as an out-of-range embedding index, far from its cause.
  const int64_t vocab = static_cast<int64_t>(got.vocab_size);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      why = "token " + std::to_string(i) + " has id " + std::to_string(ids[i]) + " outside the vocabulary";
      return {};
    }
  }
  return TokenSpan(std::move(map), ids, n);
}

// Writes header + ids atomically (see data/fileio.h); `path` is untouched on failure.
void write_cache_atomic(const std::string& path, const CacheHeader& h, const std::vector<int64_t>& ids) {
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);  // a failure surfaces as the write's IoError
  write_file_atomic(path, [&](const ByteSink& sink) {
    sink(&h, sizeof h);
    sink(ids.data(), ids.size() * sizeof(int64_t));
  });
}

}  // namespace

const char* cache_status_name(CacheStatus s) {
  switch (s) {
    case CacheStatus::None: return "none";
    case CacheStatus::Built: return "built";
    case CacheStatus::Reused: return "reused";
    case CacheStatus::Rebuilt: return "rebuilt";
  }
  return "?";
}

std::string token_cache_path(const std::string& corpus_spec, const Tokenizer& tok) {
  std::string name = corpus_spec;
  for (char& c : name) {
    const bool keep =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (!keep) c = '_';
  }
  return default_data_home() + "/cache/" + name + "." + tok.kind() + ".tokens";
}

TokenSpan load_or_build_tokens(const std::string& path, std::string_view text, const Tokenizer& tok,
                               CacheStatus* status) {
  auto set = [&](CacheStatus s) {
    if (status) *status = s;
  };
  if (path.empty()) {
    set(CacheStatus::None);
    return TokenSpan::from_vector(tok.encode(text));
  }
  const CacheHeader want = expected_header(text, tok, 0);
  std::string why;
  TokenSpan mapped = try_map_cache(path, want, why);
  if (why.empty()) {
    set(CacheStatus::Reused);
    return mapped;
  }
  const bool existed = why != "absent";
  if (existed) spdlog::info("token cache {}: {}; rebuilding", path, why);

  std::vector<int64_t> ids = tok.encode(text);
  CacheHeader h = want;
  h.count = ids.size();
  try {
    write_cache_atomic(path, h, ids);
    set(existed ? CacheStatus::Rebuilt : CacheStatus::Built);
  } catch (const IoError& e) {
    // The cache only saves time; a read-only cache directory must not stop a run.
    spdlog::warn("{} — continuing without a token cache", e.what());
    set(CacheStatus::None);
  }
  return TokenSpan::from_vector(std::move(ids));
}

// ---- EvalWindows ----------------------------------------------------------------------------------

EvalWindows::EvalWindows(TokenSpan split, int64_t block, int64_t max_windows)
    : split_(std::move(split)), block_(block) {
  POSGRAD_CHECK(block >= 1, ValueError, "eval windows: block must be >= 1, got ", block);
  // Window k reads split[k*block, (k+1)*block] inclusive (the last token is only a target).
  const int64_t fit = split_.size() >= 1 ? (split_.size() - 1) / block : 0;
  POSGRAD_CHECK(fit >= 1, ValueError, "eval windows: the validation split has ", split_.size(),
                " tokens, fewer than one window of block ", block, " + 1 = ", block + 1, " tokens");
  count_ = max_windows > 0 ? std::min(fit, max_windows) : fit;
}

std::pair<Tensor, Tensor> EvalWindows::batch(int64_t first, int64_t count) const {
  POSGRAD_CHECK(first >= 0 && count >= 1 && first + count <= count_, IndexError, "eval windows [", first, ", ",
                first + count, ") out of range: there are ", count_, " windows");
  Tensor x = Tensor::empty({count, block_}, DType::Int64);  // (count, block)
  Tensor y = Tensor::empty({count, block_}, DType::Int64);  // (count, block), x shifted by one
  int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t* src = split_.data() + start(first + r);
    std::memcpy(px + r * block_, src, static_cast<size_t>(block_) * sizeof(int64_t));
    std::memcpy(py + r * block_, src + 1, static_cast<size_t>(block_) * sizeof(int64_t));
  }
  return {x, y};
}

// ---- TokenDataset ---------------------------------------------------------------------------------

TokenDataset::TokenDataset(std::string_view text, const Tokenizer& tok, int64_t block_size,
                           const std::string& cache_path)
    : vocab_(tok.vocab_size()) {
  all_ = load_or_build_tokens(cache_path, text, tok, &cache_status_);
  split(block_size);
}

TokenDataset::TokenDataset(std::vector<int64_t> ids, int64_t vocab_size, int64_t block_size) : vocab_(vocab_size) {
  POSGRAD_CHECK(vocab_size >= 1, ValueError, "token dataset: vocab_size must be >= 1, got ", vocab_size);
  for (size_t i = 0; i < ids.size(); ++i)
    POSGRAD_CHECK(ids[i] >= 0 && ids[i] < vocab_size, ValueError, "token dataset: id ", ids[i], " at position ", i,
                  " is outside the vocabulary [0, ", vocab_size, ")");
  all_ = TokenSpan::from_vector(std::move(ids));
  split(block_size);
}

void TokenDataset::split(int64_t block_size) {
  // nanoGPT's prepare.py splits the text at int(n * 0.9); we split the ids, in integer arithmetic.
  const int64_t n = all_.size();
  const int64_t n_train = n / 100 * kTrainPercent + (n % 100) * kTrainPercent / 100;
  train_ = all_.sub(0, n_train);
  val_ = all_.sub(n_train, n - n_train);
  check_block(block_size);
}

void TokenDataset::check_block(int64_t block) const {
  POSGRAD_CHECK(block >= 1, ValueError, "block size must be >= 1, got ", block);
  POSGRAD_CHECK(train_.size() >= block + 1 && val_.size() >= block + 1, ValueError, "corpus too short for block ",
                block, ": ", all_.size(), " tokens split into ", train_.size(), " train and ", val_.size(),
                " validation tokens, but each split needs at least block + 1 = ", block + 1);
}

// ---- BatchSampler ---------------------------------------------------------------------------------

BatchSampler::BatchSampler(TokenSpan split, uint64_t seed) : split_(std::move(split)), gen_(seed) {}

std::pair<Tensor, Tensor> BatchSampler::next(int64_t batch, int64_t block) {
  POSGRAD_CHECK(batch >= 1 && block >= 1, ValueError, "batch sampler: batch and block must be >= 1, got batch ", batch,
                ", block ", block);
  POSGRAD_CHECK(split_.size() >= block + 1, ValueError, "batch sampler: the split has ", split_.size(),
                " tokens, fewer than one window of block ", block, " + 1 = ", block + 1);
  // Valid starts are 0 .. size-block-1 inclusive. u64 % n has a bias of at most n / 2^64 — nil
  // for any corpus that fits in memory.
  const uint64_t n_starts = static_cast<uint64_t>(split_.size() - block);
  Tensor x = Tensor::empty({batch, block}, DType::Int64);  // (B, T)
  Tensor y = Tensor::empty({batch, block}, DType::Int64);  // (B, T), x shifted by one
  int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t s = static_cast<int64_t>(gen_.next_u64() % n_starts);
    const int64_t* src = split_.data() + s;
    std::memcpy(px + b * block, src, static_cast<size_t>(block) * sizeof(int64_t));
    std::memcpy(py + b * block, src + 1, static_cast<size_t>(block) * sizeof(int64_t));
  }
  return {x, y};
}

}  // namespace posgrad::data
