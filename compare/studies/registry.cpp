// registry.cpp — the studies of the comparison (compare/study.h), one line each, in the order they
// run on a unit and appear in the report and the claims table. Adding a study: its folder in
// compare/studies/<name>/ with an entry function, and one line here.
#include <stdexcept>

#include "compare/studies/addition/addition.h"
#include "compare/studies/article/article.h"
#include "compare/studies/attention/attention.h"
#include "compare/studies/cost/cost.h"
#include "compare/studies/encoder/encoder_track.h"
#include "compare/studies/entropy/entropy.h"
#include "compare/studies/flipflop/flipflop.h"
#include "compare/studies/gradient/gradient.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/papers/papers.h"
#include "compare/studies/passkey/passkey.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/suite/length_suite.h"
#include "compare/studies/task/task.h"

namespace posgrad::train {

const std::vector<StudyEntry>& studies() {
  static const std::vector<StudyEntry> all = {
      article_study(),    // the article's table and claims (a)-(k), from the studies below
      papers_study(),     // the newer encodings' papers' claims (n1-n4), from the lm study
      lm_study(),         // perplexity and accuracy by length, per-position loss, evaluation-time RoPE scalings
      attention_study(),  // attention weight by query-key distance
      task_study(),       // the synthetic copy / reverse task
      cost_study(),       // the interleaved cost benchmark (once per experiment)
      suite_study(),      // the length-generalisation suite
      flipflop_study(),   // flip-flop language modelling: read accuracy and glitch rate (Liu et al. 2023)
      addition_study(),   // reversed addition with index hints, its own units: spread over seeds (Zhou et al. 2024)
      pi_study(),         // position interpolation: RoPE scaled and fine-tuned
      passkey_study(),    // passkey retrieval, of each model and of the fine-tuned PI rows
      entropy_study(),    // attention entropy by query position (1 = uniform attention)
      gradient_study(),   // gradient flow by distance: how far back the learning signal reaches
      encoder_study(),    // the encoder track (--track encoder|both)
  };
  return all;
}

const StudyEntry& study_entry(const std::string& name) {
  for (const auto& s : studies())
    if (s.name == name) return s;
  throw std::logic_error("no study named '" + name + "' is registered (compare/studies/registry.cpp)");
}

}  // namespace posgrad::train
