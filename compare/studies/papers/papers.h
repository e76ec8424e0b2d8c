// papers.h — the headline claims of the papers behind the encodings added since the article
// (FIRE, hybrid NoPE/RoPE layers, xPos, FoX, p-RoPE) and of StreamingLLM on attention sinks, each
// judged on the language-model study's perplexity by length (the sinks claim on the attention
// study's first-token share) with the family rule of compare/claims.h. It trains and runs nothing
// itself: a claim whose encodings or method variants (compare/method.h) are not among --methods
// reads "not measured" and names them.
//
//   n1  FIRE extrapolates at least as well as T5, ALiBi and KERPLE (Li et al., ICLR 2024, §5):
//       non-inferiority at the longest evaluation length, FIRE's perplexity growth against each
//       comparator's times 1 + 5% (one test per comparator among --methods).
//   n2  NoPE every 4th layer improves extrapolation without hurting perplexity at the training length
//       (SmolLM3's ablation; Llama 4's iRoPE): hybrid's growth below rope's, and hybrid's perplexity at
//       1x below rope's times 1 + 1% (non-inferiority), one family of 2.
//   n3  xPos extrapolates better than RoPE (Sun et al., ACL 2023, §4): xpos's growth below rope's.
//   n4  FoX beats RoPE on perplexity at and beyond the training length (Lin et al., ICLR 2025, §4):
//       fox's perplexity below rope's at 1x and at the longest evaluation length, one family of 2.
//   n5  p-RoPE is at least as good as full RoPE (Barbero et al., ICLR 2025, §6): each rope method
//       with rope_partial = prope and rope_fraction < 1 (e.g. 'rope[rope_fraction=0.75;rope_partial=prope]',
//       the paper's best) whose twin with rope_fraction 1 ran, its perplexity at 1x over the twin's
//       below 1 + 1% per seed (non-inferiority, paired by seed: the two share their initial weights and
//       batches), one test per p-RoPE method.
//   n6  Attention sinks take the weight off the first token (StreamingLLM, Xiao et al., ICLR 2024, §3):
//       each method with attention sinks whose twin without (the same model otherwise) ran, e.g.
//       'rope[attention_sinks=true]' beside 'rope': its first-token share (compare/studies/attention)
//       below the twin's by more than 0.01 (on the scale where 1 is uniform attention: a reduction
//       too small to matter counts for nothing), paired by seed (the two share every weight's
//       initial draw but the sinks'); one test per pair.
//
// Each non-inferiority test is Welch's t-test of a against b x (1 + margin): "supported" says a is
// significantly within the margin, "contradicted" that a is significantly worse than b by more than it.
#pragma once

#include <vector>

#include "compare/claims.h"
#include "compare/study.h"

namespace posgrad::train {

// The claims n1-n6 on a comparison (also the study's claims callback).
std::vector<ClaimVerdict> judge_paper_claims(const ComparisonResult& r);

StudyEntry papers_study();

}  // namespace posgrad::train
