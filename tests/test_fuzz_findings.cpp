// test_fuzz_findings.cpp — one focused test per fault that fuzzing the loaders found (or that
// writing the fuzz harness showed), each with the exact typed error the fixed library now gives.
// The inputs themselves are also in tests/fuzz/corpus/<target>/ and replayed by test_fuzz_corpus.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "compare/options.h"
#include "data/fileio.h"
#include "tensor/errors.h"
#include "tensor/option_table.h"
#include "tensor/tensor.h"
#include "tests/fuzz/fuzz_targets.h"
#include "tests/support/test_util.h"
#include "train/checkpoint.h"
#include "train/options.h"
#include "train/safetensors.h"

using namespace posgrad;
using posgrad::test::thrown_message;
using json = nlohmann::json;

namespace {

// A safetensors file: 8-byte little-endian header length, the header, the data.
std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  const uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

const opt::Spec& spec_of(const opt::Table<train::EvalOptions>& table, const std::string& name) {
  return opt::find(table, name)->spec;
}

// The fuzz harness's scratch run with state.json replaced by `st`, re-signed as write_checkpoint signs it.
std::string run_with_state(json st) {
  st.erase("state_checksum");
  st["state_checksum"] = hex64(fnv1a64(st.dump()));
  const std::string dir = fuzz::checkpoint_run_dir();
  write_file_atomic(dir + "/checkpoint/state.json", st.dump(2));
  return dir;
}

}  // namespace

// ---- configuration (fuzz_config) -------------------------------------------------------------------

// Found by fuzz_config: a text option accepted bytes that are not UTF-8, and writing the
// configuration (config.json, state.json) then threw nlohmann's type_error 316 — not a posgrad::Error.
TEST(FuzzFindings, OptionTextMustBeUtf8) {
  const auto& run = spec_of(train::eval_options(), "run");
  EXPECT_EQ(thrown_message<UsageError>([&] { opt::parse(run, "runs/\xff", "--run"); }),
            "--run: text is not valid UTF-8 (invalid UTF-8 byte at index 5: 0xFF); options are saved as JSON, which "
            "holds UTF-8 only");
  // Overlong forms, surrogates and truncated sequences are not UTF-8 either; real characters are.
  for (const char* bad : {"\xc0\xaf", "\xed\xa0\x80", "\xe2\x82", "\xf4\x90\x80\x80"})
    EXPECT_THROW(opt::parse(run, bad, "--run"), UsageError) << bad;
  EXPECT_EQ(std::get<std::string>(opt::parse(run, "runs/é✓\xf0\x9f\x98\x80", "--run")), "runs/é✓\xf0\x9f\x98\x80");
  // Lists of names are checked per element.
  const auto* methods = opt::find(train::compare_options(), "methods");
  EXPECT_THROW(opt::parse(methods->spec, "rope,\xff", "--methods"), UsageError);
}

// Found while writing fuzz_config: "+-5" read as -5 (the '+' was dropped, then from_chars took the '-').
TEST(FuzzFindings, IntegerTakesOneSignOnly) {
  const auto* n_layer = opt::find(train::train_options(), "n_layer");
  EXPECT_EQ(thrown_message<UsageError>([&] { opt::parse(n_layer->spec, "+-5", "--n-layer"); }),
            "--n-layer: '+-5' is not a base-10 integer (valid: [1, 1024])");
  EXPECT_EQ(std::get<int64_t>(opt::parse(n_layer->spec, "+5", "--n-layer")), 5);
  EXPECT_THROW(opt::parse(n_layer->spec, "++5", "--n-layer"), UsageError);
}

// ---- safetensors (fuzz_safetensors) ------------------------------------------------------------------

// Found while writing fuzz_safetensors: the header JSON was parsed without a depth limit and a
// nested shape entry printed (recursively) in the error message, so a deeply nested header
// overflowed the stack (SIGSEGV). Now refused while parsing; a valid header nests three levels.
TEST(FuzzFindings, SafetensorsHeaderNestingIsLimited) {
  const int depth = 200000;
  const std::string deep = "{\"a\":{\"dtype\":\"F32\",\"shape\":" + std::string(depth, '[') + std::string(depth, ']') +
                           ",\"data_offsets\":[0,0]}}";
  EXPECT_EQ(thrown_message<IoError>([&] { parse_safetensors(safetensors_bytes(deep), "deep.safetensors"); }),
            "safetensors file 'deep.safetensors': header JSON is nested deeper than 3 levels");
  // Exactly as deep as a real header is fine.
  const auto f = parse_safetensors(safetensors_bytes(
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')));
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.metadata.at("k"), "v");
}

// Found while writing fuzz_safetensors (UBSan: signed overflow in contiguous_strides): an empty
// tensor of shape [0, 2^62, 4] passed the byte-count checks (it holds nothing), but its strides
// overflow int64. Both the reader (IoError naming the file and tensor) and Tensor::empty
// (ShapeError, for every other source of shapes) refuse it; so is a rank above kMaxDims.
TEST(FuzzFindings, SafetensorsShapeWhoseStridesOverflow) {
  const std::string h = R"({"a":{"dtype":"F32","shape":[0,4611686018427387904,4],"data_offsets":[0,0]}})";
  EXPECT_EQ(thrown_message<IoError>([&] { parse_safetensors(safetensors_bytes(h), "x.safetensors"); }),
            "safetensors file 'x.safetensors': tensor 'a': shape [0,4611686018427387904,4] overflows (its strides "
            "exceed int64)");
  EXPECT_EQ(thrown_message<ShapeError>([] {
              Tensor::empty({0, int64_t{1} << 62, 4});
            }),
            "empty: shape (0, 4611686018427387904, 4) has more elements (counting empty dims as 1) than an int64 can "
            "index");
  const std::string rank9 = R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})";
  EXPECT_EQ(
      thrown_message<IoError>([&] { parse_safetensors(safetensors_bytes(rank9, std::string(4, '\0')), "r.st"); }),
      "safetensors file 'r.st': tensor 'a': shape [1,1,1,1,1,1,1,1,1] has 9 dims; posgrad tensors have at most 8");
  // The largest empty shape that still indexes is fine.
  EXPECT_EQ(Tensor::empty({0, (int64_t{1} << 61) - 1, 4}).numel(), 0);  // strides up to 2^63 - 4
}

// ---- checkpoint (fuzz_checkpoint) ------------------------------------------------------------------

// Found while writing fuzz_checkpoint: state.json's integers were read with nlohmann's get<T>(),
// which converts a float such as 1e300 (or -1.5 into a uint64) with undefined behaviour, and
// true as 1. Now each must be a JSON integer in range, else an IoError naming the key.
TEST(FuzzFindings, CheckpointIntegersAreStrict) {
  const json good = json::parse(fuzz::checkpoint_reference_state());
  const std::string where = "checkpoint " + fuzz::checkpoint_run_dir() + "/checkpoint/state.json";
  json st = good;
  st["step"] = 1e300;
  std::string dir = run_with_state(st);
  EXPECT_EQ(thrown_message<IoError>([&] { train::read_checkpoint(dir); }),
            where + ": \"step\" is 1e+300, not an integer in the range of int64");
  st = good;
  st["optimizer_steps"] = true;
  dir = run_with_state(st);
  EXPECT_EQ(thrown_message<IoError>([&] { train::read_checkpoint(dir); }),
            where + ": \"optimizer_steps\" is true, not an integer in the range of int64");
  st = good;
  st["rng"]["sampler"]["seed"] = -1.5;
  dir = run_with_state(st);
  EXPECT_EQ(thrown_message<IoError>([&] { train::read_checkpoint(dir); }),
            where + ": rng.sampler: \"seed\" is -1.5, not an integer in the range of uint64");
  st = good;
  st["rng"]["init"].erase("offset");
  dir = run_with_state(st);
  EXPECT_EQ(thrown_message<IoError>([&] { train::read_checkpoint(dir); }),
            where + ": rng.init is incomplete: no \"offset\"");
  // The largest seed is an integer like any other.
  st = good;
  st["rng"]["init"]["seed"] = UINT64_MAX;
  dir = run_with_state(st);
  EXPECT_EQ(train::read_checkpoint(dir).state.init_rng.seed, UINT64_MAX);
  write_file_atomic(dir + "/checkpoint/state.json", fuzz::checkpoint_reference_state());
}

// The same class in metrics.jsonl, which a resumed run truncates: a row whose step is not a JSON
// integer is damaged and dropped (get<int64_t>() of 1e300 was undefined behaviour).
TEST(FuzzFindings, MetricsRowsWithNonIntegerStepsAreDropped) {
  test::TempDir tmp;
  const std::string path = tmp.file("metrics.jsonl");
  write_file_atomic(
      path, "{\"step\": 3}\n{\"step\": 1e300}\n{\"step\": 9}\n[1]\n{\"loss\": 1}\n{\"step\": 18446744073709551615}\n");
  train::truncate_metrics(path, 5);
  EXPECT_EQ(read_file(path), "{\"step\": 3}\n{\"loss\": 1}\n");
}
