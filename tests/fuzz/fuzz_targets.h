// fuzz_targets.h — the entry functions of posgrad's loader fuzzers: one per loader of untrusted
// bytes (safetensors, checkpoint state.json, JSON configuration and option values, tokenizer JSON
// and the token cache, a comparison's results.json, a saved encoder). Each takes the raw input and returns 0, as
// libFuzzer's LLVMFuzzerTestOneInput does; tests/fuzz/libfuzzer_main.cpp wraps one per executable (clang,
// POSGRAD_FUZZ=ON) and tests/test_fuzz_corpus.cpp replays the committed corpus through all of
// them in every build (any compiler, no fuzzing).
//
// The contract a target checks: the loader either succeeds or throws posgrad::Error (or a
// subclass) — the library's typed, message-naming errors. Any other exception, a crash, a
// sanitizer report or a hang is a finding. Where a loader has a property beyond "does not crash"
// (a save/load round trip, two readers that must agree, decode(encode(x)) == x) a violation
// throws Finding, which is deliberately not a posgrad::Error.
//
// Not here: fuzzing of kernels or autograd (their inputs are tensors built by code, not bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace posgrad::fuzz {

int fuzz_safetensors(const uint8_t* data, size_t size);
int fuzz_checkpoint(const uint8_t* data, size_t size);
int fuzz_config(const uint8_t* data, size_t size);
int fuzz_tokenizer(const uint8_t* data, size_t size);
int fuzz_results(const uint8_t* data, size_t size);
int fuzz_encoder_checkpoint(const uint8_t* data, size_t size);

// Writes fuzz_encoder_checkpoint's reference encoder (encoder.safetensors and encoder.json) into dir.
void write_reference_encoder(const std::string& dir);

// The real state.json of fuzz_checkpoint's scratch run (the seed corpus/checkpoint/valid must equal it).
std::string checkpoint_reference_state();
// The scratch run directory of fuzz_checkpoint (its checkpoint/state.json holds the last input).
std::string checkpoint_run_dir();

struct Target {
  const char* name;  // the corpus folder tests/fuzz/corpus/<name>
  int (*entry)(const uint8_t*, size_t);
};
inline constexpr Target kTargets[] = {
    {"safetensors", fuzz_safetensors}, {"checkpoint", fuzz_checkpoint},
    {"config", fuzz_config},           {"tokenizer", fuzz_tokenizer},
    {"results", fuzz_results},         {"encoder_checkpoint", fuzz_encoder_checkpoint}};

// A violated property of a loader (not a typed error it was allowed to throw).
struct Finding : std::logic_error {
  using std::logic_error::logic_error;
};
inline void require(bool ok, const std::string& what) {
  if (!ok) throw Finding(what);
}

// A directory for the files a target must put on disk, created once per process (under /dev/shm
// where it exists, for speed) and removed at exit.
const std::string& scratch_dir();

// Silences posgrad's logging (a rebuilt token cache logs a line per input).
void quiet_logging();

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace posgrad::fuzz
