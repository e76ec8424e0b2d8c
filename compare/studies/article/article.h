// article.h — the article this comparison measures ("relative position encodings: T5's bucketed
// bias, DeBERTa's disentangled attention, RoPE, against absolute encodings", with a table it calls
// illustrative): its table measured (perplexity and accuracy at the training length, the synthetic
// task's F1 where --task-iters > 0, extrapolation), the pairwise decisions behind it, and its claims
// (a)-(k), each judged on the other studies' measurements (lm, task, attention, cost; claim (b) on the
// encoder track's accuracy and F1, not measured without it). It trains and runs nothing itself.
// "Absolute" in its claims means the sinusoidal and learned encodings, each of which must be beaten.
#pragma once

#include "compare/study.h"

namespace posgrad::train {

StudyEntry article_study();

}  // namespace posgrad::train
