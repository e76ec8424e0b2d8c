// test_data.cpp — the data pipeline: tokenizers, corpora, the token cache, the train/val split, the
// batch sampler, evaluation windows and the synthetic copy/reverse tasks with their scorer.
// Uses temp directories only; TinyShakespeare is read from $POSGRAD_DATA_DIR when present.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "data/corpus.h"
#include "data/dataset.h"
#include "data/synthetic.h"
#include "data/tokenizer.h"
#include "tensor/errors.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;
using namespace posgrad;
using posgrad::test::TempDir;
using namespace posgrad::data;

namespace {

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Sets (or unsets, with nullptr) an environment variable for the scope of a test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

std::string some_text() {
  std::string s;
  for (int i = 0; i < 400; ++i) s += "To be, or not to be: that is the question. " + std::to_string(i % 7) + "\n";
  return s;
}

std::vector<int64_t> iota_ids(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace

// ---- tokenizers ------------------------------------------------------------------------------------

TEST(Tokenizer, ByteRoundTripsEveryByte) {
  ByteTokenizer tok;
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  auto ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.kind(), "byte");
  EXPECT_THROW(tok.decode({256}), IndexError);
  EXPECT_THROW(tok.decode({-1}), IndexError);
}

TEST(Tokenizer, CharVocabularyIsSortedDistinctBytes) {
  CharTokenizer tok("hello world\n");
  // distinct: '\n' ' ' d e h l o r w
  EXPECT_EQ(tok.vocab_size(), 9);
  EXPECT_EQ(tok.symbols(), (std::vector<uint8_t>{'\n', ' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w'}));
  auto ids = tok.encode("hello");
  EXPECT_EQ(ids, (std::vector<int64_t>{4, 3, 5, 5, 6}));
  EXPECT_EQ(tok.decode(ids), "hello");
  EXPECT_EQ(tok.decode(tok.encode("world\nhello ")), "world\nhello ");
  EXPECT_THROW(tok.decode({9}), IndexError);
}

TEST(Tokenizer, CharUnknownByteNamesCharacterAndValue) {
  CharTokenizer tok("abc");
  std::string msg = posgrad::test::thrown_message<ValueError>([&] { tok.encode("abz"); });
  EXPECT_NE(msg.find("'z'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("122"), std::string::npos) << msg;
  msg = posgrad::test::thrown_message<ValueError>([&] { tok.encode(std::string("a\x01", 2)); });
  EXPECT_NE(msg.find("\\x01"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte 1"), std::string::npos) << msg;
  EXPECT_THROW(CharTokenizer(""), ValueError);
}

TEST(Tokenizer, JsonRoundTrip) {
  std::string corpus = "The quick brown fox\n\xff\x80 jumps";  // includes non-UTF-8 bytes
  auto chr = make_tokenizer("char", corpus);
  auto j = chr->to_json();
  std::string dumped = j.dump();  // must not throw on the non-UTF-8 corpus
  auto back = Tokenizer::from_json(nlohmann::json::parse(dumped));
  EXPECT_EQ(back->kind(), "char");
  EXPECT_EQ(back->vocab_size(), chr->vocab_size());
  EXPECT_EQ(back->encode(corpus), chr->encode(corpus));
  EXPECT_EQ(back->decode(chr->encode(corpus)), corpus);

  auto byte = make_tokenizer("byte", corpus);
  auto byte_back = Tokenizer::from_json(byte->to_json());
  EXPECT_EQ(byte_back->kind(), "byte");
  EXPECT_EQ(byte_back->vocab_size(), 256);
}

TEST(Tokenizer, BadJsonAndUnknownKind) {
  EXPECT_THROW(Tokenizer::from_json(nlohmann::json::array()), ValueError);
  EXPECT_THROW(Tokenizer::from_json({{"kind", "bpe"}}), ValueError);
  EXPECT_THROW(Tokenizer::from_json({{"kind", "char"}}), ValueError);
  EXPECT_THROW(Tokenizer::from_json({{"kind", "char"}, {"symbols", {3, 2}}}), ValueError);
  EXPECT_THROW(Tokenizer::from_json({{"kind", "char"}, {"symbols", {1, 300}}}), ValueError);
  EXPECT_THROW(Tokenizer::from_json({{"kind", "char"}, {"symbols", {1, 2}}, {"vocab_size", 3}}), ValueError);
  std::string msg = posgrad::test::thrown_message<ValueError>([] { make_tokenizer("bpe", "abc"); });
  EXPECT_NE(msg.find("bpe"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte"), std::string::npos) << msg;
  EXPECT_NE(msg.find("char"), std::string::npos) << msg;
}

TEST(Tokenizer, TinyShakespeareHas65Symbols) {
  const std::string dir = test::data_dir();
  const std::string path = dir + "/tinyshakespeare.txt";
  if (dir.empty() || !fs::exists(path))
    GTEST_SKIP() << "tinyshakespeare.txt not found (POSGRAD_DATA_DIR='" << dir << "')";
  std::string text = load_corpus("shakespeare", dir);
  EXPECT_EQ(text.size(), 1115394u);  // nanoGPT's shakespeare_char: "length of dataset in characters: 1,115,394"
  auto tok = make_tokenizer("char", text);
  EXPECT_EQ(tok->vocab_size(), 65);
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

// ---- corpora ---------------------------------------------------------------------------------------

TEST(Corpus, FilePathMissingEmptyDirectory) {
  TempDir d;
  write_text(d.file("a.txt"), "some text\n");
  EXPECT_EQ(load_corpus(d.file("a.txt")), "some text\n");

  std::string msg = posgrad::test::thrown_message<IoError>([&] { load_corpus(d.file("missing.txt")); });
  EXPECT_NE(msg.find(d.file("missing.txt")), std::string::npos) << msg;

  write_text(d.file("empty.txt"), "");
  msg = posgrad::test::thrown_message<IoError>([&] { load_corpus(d.file("empty.txt")); });
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  EXPECT_NE(msg.find(d.file("empty.txt")), std::string::npos) << msg;

  msg = posgrad::test::thrown_message<IoError>([&] { load_corpus(d.str()); });
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
  EXPECT_THROW(load_corpus(""), ValueError);
}

TEST(Corpus, KjvLooksInDataHome) {
  TempDir d;
  ScopedEnv env("POSGRAD_HOME", d.str().c_str());
  EXPECT_EQ(default_data_home(), d.str());
  std::string msg = posgrad::test::thrown_message<IoError>([] { load_corpus("kjv"); });
  EXPECT_NE(msg.find(d.file("kjv.txt")), std::string::npos) << msg;
  EXPECT_NE(msg.find("setup.sh"), std::string::npos) << msg;
  write_text(d.file("kjv.txt"), "In the beginning\n");
  EXPECT_EQ(load_corpus("kjv"), "In the beginning\n");
}

TEST(Corpus, DataHomeDefaultsToHome) {
  ScopedEnv unset_home("POSGRAD_HOME", nullptr);
  ScopedEnv home("HOME", "/some/home");
  EXPECT_EQ(default_data_home(), "/some/home/.local/share/posgrad");
}

TEST(Corpus, ShakespeareDataDirPrecedence) {
  TempDir flag, env_dir;
  write_text(flag.file("tinyshakespeare.txt"), "from flag\n");
  write_text(env_dir.file("tinyshakespeare.txt"), "from env\n");
  {
    ScopedEnv env("POSGRAD_DATA_DIR", env_dir.str().c_str());
    EXPECT_EQ(load_corpus("shakespeare", flag.str()), "from flag\n");
    EXPECT_EQ(load_corpus("shakespeare"), "from env\n");
    EXPECT_EQ(resolve_data_dir(""), env_dir.str());
  }
  {
    ScopedEnv env("POSGRAD_DATA_DIR", nullptr);
    EXPECT_EQ(resolve_data_dir(""), "../shared/data");
  }
  TempDir empty;
  ScopedEnv env("POSGRAD_DATA_DIR", empty.str().c_str());
  std::string msg = posgrad::test::thrown_message<IoError>([] { load_corpus("shakespeare"); });
  EXPECT_NE(msg.find(empty.file("tinyshakespeare.txt")), std::string::npos) << msg;
  EXPECT_NE(msg.find("POSGRAD_DATA_DIR"), std::string::npos) << msg;
}

// ---- token cache -----------------------------------------------------------------------------------

TEST(TokenCache, BuildReuseAndRebuildOnChange) {
  TempDir d;
  const std::string cache = d.file("cache/tokens.bin");  // directory created on demand
  const std::string text = some_text();
  CharTokenizer tok(text);
  CacheStatus st;

  TokenSpan a = load_or_build_tokens(cache, text, tok, &st);
  EXPECT_EQ(st, CacheStatus::Built);
  EXPECT_EQ(a.to_vector(), tok.encode(text));
  EXPECT_EQ(fs::file_size(cache), 64 + 8 * text.size());

  TokenSpan b = load_or_build_tokens(cache, text, tok, &st);
  EXPECT_EQ(st, CacheStatus::Reused);
  EXPECT_EQ(b.to_vector(), a.to_vector());

  // The text changes (same length, same vocabulary): rebuilt.
  std::string text2 = text;
  std::swap(text2[0], text2[1]);
  TokenSpan c = load_or_build_tokens(cache, text2, tok, &st);
  EXPECT_EQ(st, CacheStatus::Rebuilt);
  EXPECT_EQ(c.to_vector(), tok.encode(text2));
  // The old span stays valid (its mapping survives the rename over its file).
  EXPECT_EQ(b.to_vector(), a.to_vector());

  // The tokenizer changes: rebuilt.
  ByteTokenizer byte;
  TokenSpan e = load_or_build_tokens(cache, text2, byte, &st);
  EXPECT_EQ(st, CacheStatus::Rebuilt);
  EXPECT_EQ(e.to_vector(), byte.encode(text2));
  load_or_build_tokens(cache, text2, byte, &st);
  EXPECT_EQ(st, CacheStatus::Reused);

  // No temp files are left behind.
  std::vector<std::string> left;
  for (const auto& ent : fs::directory_iterator(d.file("cache"))) left.push_back(ent.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"tokens.bin"});
}

TEST(TokenCache, CorruptCacheIsRebuilt) {
  TempDir d;
  const std::string cache = d.file("tokens.bin");
  const std::string text = some_text();
  CharTokenizer tok(text);
  CacheStatus st;
  const auto want = tok.encode(text);
  load_or_build_tokens(cache, text, tok, &st);

  // Truncated.
  fs::resize_file(cache, fs::file_size(cache) - 8);
  EXPECT_EQ(load_or_build_tokens(cache, text, tok, &st).to_vector(), want);
  EXPECT_EQ(st, CacheStatus::Rebuilt);

  // An id outside the vocabulary.
  {
    std::fstream f(cache, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 8 * 5);
    int64_t bad = 1000;
    f.write(reinterpret_cast<const char*>(&bad), 8);
  }
  EXPECT_EQ(load_or_build_tokens(cache, text, tok, &st).to_vector(), want);
  EXPECT_EQ(st, CacheStatus::Rebuilt);

  // Garbage magic / shorter than the header.
  write_text(cache, "not a cache");
  EXPECT_EQ(load_or_build_tokens(cache, text, tok, &st).to_vector(), want);
  EXPECT_EQ(st, CacheStatus::Rebuilt);
  load_or_build_tokens(cache, text, tok, &st);
  EXPECT_EQ(st, CacheStatus::Reused);
}

TEST(TokenCache, DatasetUsesCache) {
  TempDir d;
  const std::string text = some_text();
  CharTokenizer tok(text);
  TokenDataset a(text, tok, 8, d.file("t.bin"));
  EXPECT_EQ(a.cache_status(), CacheStatus::Built);
  TokenDataset b(text, tok, 8, d.file("t.bin"));
  EXPECT_EQ(b.cache_status(), CacheStatus::Reused);
  EXPECT_EQ(b.train().to_vector(), a.train().to_vector());
  EXPECT_EQ(b.val().to_vector(), a.val().to_vector());
  TokenDataset c(text, tok, 8);
  EXPECT_EQ(c.cache_status(), CacheStatus::None);
}

TEST(TokenCache, DefaultPathIsSanitised) {
  ScopedEnv env("POSGRAD_HOME", "/h");
  ByteTokenizer byte;
  EXPECT_EQ(token_cache_path("kjv", byte), "/h/cache/kjv.byte.tokens");
  EXPECT_EQ(token_cache_path("../data/my corpus.txt", byte), "/h/cache/.._data_my_corpus.txt.byte.tokens");
}

// ---- split -----------------------------------------------------------------------------------------

TEST(Dataset, ContiguousNinetyTenSplit) {
  TokenDataset ds(iota_ids(1001), 1001, 4);
  EXPECT_EQ(ds.train().size(), 900);  // floor(1001 * 0.9)
  EXPECT_EQ(ds.val().size(), 101);
  EXPECT_EQ(ds.train()[0], 0);
  EXPECT_EQ(ds.train()[899], 899);
  EXPECT_EQ(ds.val()[0], 900);
  EXPECT_EQ(ds.val()[100], 1000);
  EXPECT_EQ(ds.vocab_size(), 1001);
}

TEST(Dataset, TooShortCorpusNamesLengths) {
  // 40 tokens: 36 train, 4 val; block 8 needs 9 in each split.
  std::string msg = posgrad::test::thrown_message<ValueError>([] { TokenDataset(iota_ids(40), 40, 8); });
  EXPECT_NE(msg.find("36"), std::string::npos) << msg;
  EXPECT_NE(msg.find(" 4 "), std::string::npos) << msg;
  EXPECT_NE(msg.find("9"), std::string::npos) << msg;
  EXPECT_NO_THROW(TokenDataset(iota_ids(40), 40, 3));
  EXPECT_THROW(TokenDataset(iota_ids(40), 40, 0), ValueError);
  EXPECT_THROW(TokenDataset(std::vector<int64_t>{1, 2, 50}, 10, 1), ValueError);  // id out of vocab
  EXPECT_THROW(TokenDataset("abc", CharTokenizer("abc"), 1), ValueError);
}

// ---- sampler ---------------------------------------------------------------------------------------

TEST(Sampler, YIsXShiftedAndWindowsAreInRange) {
  TokenDataset ds(iota_ids(200), 200, 5);  // ids equal positions: a row is s, s+1, ..., s+T-1
  BatchSampler s(ds.train(), 7);
  std::set<int64_t> starts;
  for (int i = 0; i < 300; ++i) {
    auto [x, y] = s.next(4, 5);
    ASSERT_EQ(x.shape(), (Shape{4, 5}));
    ASSERT_EQ(y.shape(), (Shape{4, 5}));
    ASSERT_EQ(x.dtype(), DType::Int64);
    auto xv = x.to_int_vector(), yv = y.to_int_vector();
    for (int b = 0; b < 4; ++b) {
      const int64_t s0 = xv[b * 5];
      starts.insert(s0);
      for (int t = 0; t < 5; ++t) {
        EXPECT_EQ(xv[b * 5 + t], s0 + t);
        EXPECT_EQ(yv[b * 5 + t], s0 + t + 1);
      }
      EXPECT_GE(s0, 0);
      EXPECT_LE(s0 + 5, 179);  // y's last token is still inside the 180-token train split
    }
  }
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), 180 - 5 - 1);
  EXPECT_EQ(starts.size(), 175u);  // every valid start is drawn
}

TEST(Sampler, SeedDeterminismAndStateRestore) {
  TokenDataset ds(iota_ids(5000), 5000, 16);
  BatchSampler a(ds.train(), 42), b(ds.train(), 42), c(ds.train(), 43);
  for (int i = 0; i < 5; ++i) {
    auto [xa, ya] = a.next(3, 16);
    auto [xb, yb] = b.next(3, 16);
    EXPECT_EQ(xa.to_int_vector(), xb.to_int_vector());
    EXPECT_EQ(ya.to_int_vector(), yb.to_int_vector());
  }
  EXPECT_NE(a.next(3, 16).first.to_int_vector(), c.next(3, 16).first.to_int_vector());

  GeneratorState saved = a.state();
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; i < 4; ++i) expected.push_back(a.next(2, 16).first.to_int_vector());
  BatchSampler resumed(ds.train(), 999);  // a fresh sampler, any seed: the state carries it
  resumed.set_state(saved);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(resumed.next(2, 16).first.to_int_vector(), expected[i]);
  EXPECT_EQ(resumed.state().seed, 42u);
  EXPECT_EQ(resumed.state().offset, a.state().offset);
}

TEST(Sampler, TooShortSplitAndBadArguments) {
  TokenDataset ds(iota_ids(100), 100, 4);  // val: 10 tokens
  BatchSampler s(ds.val(), 1);
  EXPECT_NO_THROW(s.next(2, 9));
  std::string msg = posgrad::test::thrown_message<ValueError>([&] { s.next(2, 10); });
  EXPECT_NE(msg.find("10 tokens"), std::string::npos) << msg;
  EXPECT_THROW(s.next(0, 4), ValueError);
  EXPECT_THROW(s.next(2, 0), ValueError);
}

TEST(Sampler, OutlivesDataset) {
  std::unique_ptr<BatchSampler> s;
  {
    TokenDataset ds(iota_ids(100), 100, 4);
    s = std::make_unique<BatchSampler>(ds.train(), 3);
  }
  auto [x, y] = s->next(2, 4);
  auto xv = x.to_int_vector();
  EXPECT_EQ(xv[1], xv[0] + 1);
}

// ---- eval windows ----------------------------------------------------------------------------------

TEST(EvalWindows, DeterministicNonOverlappingFirstN) {
  TokenDataset ds(iota_ids(1000), 1000, 8);  // val = ids 900..999 (100 tokens)
  EvalWindows w = ds.eval_windows(8, 0);
  EXPECT_EQ(w.size(), 12);  // floor((100 - 1) / 8)
  EXPECT_EQ(w.tokens(), 96);
  auto [x, y] = w.batch(0, w.size());
  ASSERT_EQ(x.shape(), (Shape{12, 8}));
  auto xv = x.to_int_vector(), yv = y.to_int_vector();
  std::set<int64_t> xs;
  for (int64_t k = 0; k < 12; ++k)
    for (int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(xv[k * 8 + t], 900 + k * 8 + t);
      EXPECT_EQ(yv[k * 8 + t], 900 + k * 8 + t + 1);
      EXPECT_TRUE(xs.insert(xv[k * 8 + t]).second) << "overlap at window " << k;
    }
  // Same call, same windows; a sub-batch is a slice of the whole.
  auto [x2, y2] = ds.eval_windows(8, 0).batch(3, 2);
  EXPECT_EQ(x2.to_int_vector(), std::vector<int64_t>(xv.begin() + 24, xv.begin() + 40));
  EXPECT_EQ(ds.eval_windows(8, 5).size(), 5);
  EXPECT_EQ(ds.eval_windows(8, 50).size(), 12);
  EXPECT_THROW(w.batch(11, 2), IndexError);
}

TEST(EvalWindows, SameTextAcrossLengths) {
  TokenDataset ds(iota_ids(20000), 20000, 8);  // val: 2000 tokens
  const int64_t budget = 1024;
  std::vector<int64_t> text_at_1x;
  for (int64_t mult : {1, 2, 4, 8, 16}) {
    const int64_t block = 4 * mult;
    EvalWindows w = ds.eval_windows(block, budget / block);
    EXPECT_EQ(w.tokens(), budget);
    auto xv = w.batch(0, w.size()).first.to_int_vector();
    if (mult == 1)
      text_at_1x = xv;
    else
      EXPECT_EQ(xv, text_at_1x) << "block " << block;  // identical scored text at every length
  }
}

TEST(EvalWindows, TooShortValSplit) {
  TokenDataset ds(iota_ids(100), 100, 4);  // val: 10 tokens
  EXPECT_EQ(ds.eval_windows(9, 0).size(), 1);
  std::string msg = posgrad::test::thrown_message<ValueError>([&] { ds.eval_windows(10, 0); });
  EXPECT_NE(msg.find("10 tokens"), std::string::npos) << msg;
}

// ---- synthetic tasks -------------------------------------------------------------------------------

static void check_synthetic(SyntheticTask task, int64_t L) {
  SyntheticTaskGenerator g(task, 10, 5);
  EXPECT_EQ(g.vocab_size(), 12);
  SyntheticBatch b = g.next(3, L);
  const int64_t T = 2 * L + 1;
  ASSERT_EQ(b.x.shape(), (Shape{3, T}));
  ASSERT_EQ(b.y.shape(), (Shape{3, T}));
  ASSERT_EQ(b.prompt.shape(), (Shape{3, L + 2}));
  ASSERT_EQ(b.target.shape(), (Shape{3, L}));
  auto x = b.x.to_int_vector(), y = b.y.to_int_vector(), p = b.prompt.to_int_vector(), t = b.target.to_int_vector();
  for (int64_t r = 0; r < 3; ++r) {
    const int64_t* xr = x.data() + r * T;
    const int64_t* yr = y.data() + r * T;
    EXPECT_EQ(xr[0], g.bos());
    EXPECT_EQ(xr[L + 1], g.sep());
    for (int64_t i = 0; i < L; ++i) {
      EXPECT_GE(xr[1 + i], 0);
      EXPECT_LT(xr[1 + i], 10);
      const int64_t want = task == SyntheticTask::Copy ? xr[1 + i] : xr[L - i];
      EXPECT_EQ(t[r * L + i], want);
    }
    for (int64_t j = 0; j <= L; ++j) EXPECT_EQ(yr[j], kIgnoreIndex) << "prompt position " << j << " is scored";
    for (int64_t i = 0; i < L; ++i) EXPECT_EQ(yr[L + 1 + i], t[r * L + i]);
    for (int64_t j = 0; j + 1 < T; ++j)
      if (yr[j] != kIgnoreIndex) {
        EXPECT_EQ(yr[j], xr[j + 1]);  // y is x shifted where scored
      }
    for (int64_t j = 0; j < L + 2; ++j) EXPECT_EQ(p[r * (L + 2) + j], xr[j]);
  }
}

TEST(Synthetic, CopyAndReverseLayoutAndMask) {
  for (int64_t L : {1, 5, 20}) {
    check_synthetic(SyntheticTask::Copy, L);
    check_synthetic(SyntheticTask::Reverse, L);
  }
}

TEST(Synthetic, HandMadeReverseExample) {
  // Find the symbols drawn, then check the exact sequences.
  SyntheticTaskGenerator g(SyntheticTask::Reverse, 4, 11);
  SyntheticBatch b = g.next(1, 3);
  auto x = b.x.to_int_vector();
  const int64_t s1 = x[1], s2 = x[2], s3 = x[3];
  EXPECT_EQ(x, (std::vector<int64_t>{4, s1, s2, s3, 5, s3, s2}));
  EXPECT_EQ(b.y.to_int_vector(), (std::vector<int64_t>{-100, -100, -100, -100, s3, s2, s1}));
  EXPECT_EQ(b.target.to_int_vector(), (std::vector<int64_t>{s3, s2, s1}));
}

TEST(Synthetic, SeededAndResumable) {
  SyntheticTaskGenerator a(SyntheticTask::Copy, 8, 1), b(SyntheticTask::Copy, 8, 1);
  EXPECT_EQ(a.next(4, 6).x.to_int_vector(), b.next(4, 6).x.to_int_vector());
  GeneratorState st = a.state();
  auto want = a.next(2, 24).x.to_int_vector();  // test-time length 4L
  SyntheticTaskGenerator c(SyntheticTask::Copy, 8, 77);
  c.set_state(st);
  EXPECT_EQ(c.next(2, 24).x.to_int_vector(), want);
  EXPECT_EQ(parse_synthetic_task("reverse"), SyntheticTask::Reverse);
  EXPECT_THROW(parse_synthetic_task("sort"), ValueError);
  EXPECT_THROW(SyntheticTaskGenerator(SyntheticTask::Copy, 1, 0), ValueError);
  EXPECT_THROW(a.next(1, 0), ValueError);
}

TEST(Synthetic, ScorerOnHandMadeExamples) {
  EXPECT_DOUBLE_EQ(token_f1({1, 2, 3}, {1, 2, 3}), 1.0);
  EXPECT_DOUBLE_EQ(token_f1({3, 2, 1}, {1, 2, 3}), 1.0);  // bag of tokens: order ignored
  EXPECT_DOUBLE_EQ(token_f1({1, 2, 4}, {1, 2, 3}), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(token_f1({1, 1}, {1, 2}), 0.5);     // multiset: the second 1 is unmatched
  EXPECT_DOUBLE_EQ(token_f1({1}, {1, 2, 3, 4}), 0.4);  // P = 1, R = 1/4 -> 2*(1/4)/(5/4)
  EXPECT_DOUBLE_EQ(token_f1({5, 6}, {1, 2}), 0.0);
  EXPECT_DOUBLE_EQ(token_f1({}, {}), 1.0);
  EXPECT_DOUBLE_EQ(token_f1({}, {1}), 0.0);

  std::vector<std::vector<int64_t>> pred = {{1, 2, 3}, {3, 2, 1}, {1, 2, 4}, {}};
  std::vector<std::vector<int64_t>> gold = {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}, {1, 2}};
  SyntheticScore s = score_predictions(pred, gold);
  EXPECT_EQ(s.examples, 4);
  EXPECT_DOUBLE_EQ(s.exact_match, 0.25);
  EXPECT_DOUBLE_EQ(s.token_f1, (1.0 + 1.0 + 2.0 / 3.0 + 0.0) / 4.0);
  EXPECT_DOUBLE_EQ(s.token_accuracy, (1.0 + 1.0 / 3.0 + 2.0 / 3.0 + 0.0) / 4.0);

  Tensor tp = Tensor::from_ints({1, 2, 3, 3, 2, 1}, {2, 3});
  Tensor tg = Tensor::from_ints({1, 2, 3, 1, 2, 3}, {2, 3});
  SyntheticScore st = score_predictions(tp, tg);
  EXPECT_DOUBLE_EQ(st.exact_match, 0.5);
  EXPECT_DOUBLE_EQ(st.token_f1, 1.0);
  EXPECT_THROW(score_predictions(pred, {{1}}), ValueError);
  EXPECT_THROW(score_predictions(Tensor::from_ints({1, 2}, {2}), tg), ShapeError);
}
