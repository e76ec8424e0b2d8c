// encoder_track.h — the encoder track inside `posgrad compare` (--track encoder|both): builds the
// encoder track's configuration from the comparison's (methods, seeds, corpus and tokenizer of
// `base`, the encoder_* options), loads the corpus, runs compare/studies/encoder/encoder.h's units and writes the
// track's results to <out_dir>/encoder_results.json. Each finished unit keeps its own result in
// <out_dir>/encoder/<method>/seed<k>/result.json, so re-running the same command (after an
// interruption, or with a method or seed added) measures only the missing units; changed
// --encoder-* settings are refused when units exist (check_same_experiment in compare.cpp).
#pragma once

#include "compare/config.h"
#include "compare/studies/encoder/encoder.h"
#include "compare/study.h"

namespace posgrad::train {

// The encoder track's configuration implied by a comparison's.
EncoderTrackConfig encoder_track_config(const CompareConfig& cfg);
// The comparison's corpus as the encoder track reads it (--corpus, --data-dir, --max-corpus-bytes,
// --tokenizer), checked by check_encoder_data (UsageError naming the --encoder-* options); IoError
// for an unreadable corpus. run_compare_encoder_unit, collect_encoder_track and --dry-run (check_compare_data) call it.
struct EncoderTrackData {
  std::string text;
  std::unique_ptr<data::Tokenizer> tokenizer;
  std::unique_ptr<data::TokenDataset> dataset;
};
EncoderTrackData load_encoder_track_data(const CompareConfig& cfg);
// The track's units, (method, seed) in its order (methods outer, seeds inner).
std::vector<std::pair<std::string, uint64_t>> encoder_units(const CompareConfig& cfg);
// The track's configuration of a run: encoder_track_config with the corpus record (path, bytes,
// FNV-1a of the text; data/corpus.h) that every saved encoder carries.
EncoderTrackConfig encoder_run_config(const CompareConfig& cfg, const EncoderTrackData& d);
// One unit of the track in the comparison: kept from <out_dir>/encoder/<method>/seed<k>/ when
// finished there, else measured, its pretrained encoder saved there (fill-mask reads it) and its
// result.json written. UsageError: invalid encoder settings, a kept unit with other settings.
EncoderUnitResult run_compare_encoder_unit(const CompareConfig& cfg, const std::string& method, uint64_t seed);
// The track's result from its units (in encoder_units order); writes <out_dir>/encoder_results.json.
EncoderTrackResult collect_encoder_track(const CompareConfig& cfg, std::vector<EncoderUnitResult> units);
// UsageError when the encoder track would need more memory than this machine has (estimate_memory
// of a model of the same sizes: pretraining `batch` x `length`, evaluation of `batch` windows at the
// longest multiplier), naming the --encoder-* options that drive each part. Nothing when the
// machine's memory is unknown.
void check_encoder_memory(const EncoderTrackConfig& ec);

// The track's entry in the comparison (compare/study.h): --track encoder|both.
StudyEntry encoder_study();

}  // namespace posgrad::train
