// encoder_track.h — the encoder track inside `posgrad compare` (--track encoder|both): builds the
// encoder track's configuration from the comparison's (methods, seeds, corpus and tokenizer of
// `base`, the encoder_* options), loads the corpus, runs train/encoder.h's units, and keeps the
// result in <out_dir>/encoder_results.json so that re-running the same command reuses it (the
// encoder track is measured again when its configuration changed).
#pragma once

#include "train/config.h"
#include "train/encoder.h"

namespace posgrad::train {

// The encoder track's configuration implied by a comparison's.
EncoderTrackConfig encoder_track_config(const CompareConfig& cfg);
// Runs (or reuses) the encoder track of a comparison; writes <out_dir>/encoder_results.json and
// saves each pretrained encoder in <out_dir>/encoder/<method>/seed<k>/ (fill-mask reads it).
EncoderTrackResult run_compare_encoder_track(const CompareConfig& cfg);

}  // namespace posgrad::train
