// papers.cpp — see papers.h.
#include "compare/studies/papers/papers.h"

#include "compare/markdown.h"
#include "compare/method.h"
#include "compare/studies/attention/attention.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/study_claims.h"
#include "nn/posenc/position_encoding.h"

namespace posgrad::train {

namespace {

using markdown::num;

constexpr double kGrowthMargin = 0.05;  // n1: FIRE's growth within 5% of each comparator's
constexpr double kPplMargin = 0.01;     // n2, n5: perplexity at 1x within 1% of the comparator's
constexpr double kSinkMargin = 0.01;    // n6: sinks lower the first-token share by more than 0.01 (of 1 = uniform)

// "a is no worse than b by more than `margin`" on metric m (lower is better): Welch on a's values
// against b's scaled by 1 + margin.
ClaimTest within(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m,
                 double margin) {
  std::vector<double> scaled = values(r, b, m);
  for (double& v : scaled) v *= 1.0 + margin;
  return better_values(a + " within " + num(100 * margin, 0) + "% of " + b, values(r, a, m), scaled, true);
}

std::string missing_of(const ComparisonResult& r, const std::vector<std::string>& need) {
  std::string out;
  for (const auto& m : need)
    if (!has_method(r, m)) out += (out.empty() ? "" : ", ") + m;
  return out.empty() ? "" : out + " in --methods";
}

ClaimVerdict fire_claim(const ComparisonResult& r, Protocol p) {
  const int64_t k = r.config.eval_multipliers.back();
  const Metric g = lm_metric(Quantity::PerplexityRatio, k, p);
  const std::string claim = "FIRE extrapolates at least as well as T5, ALiBi and KERPLE (Li et al. 2024 §5)";
  std::vector<std::string> against;
  for (const std::string m : {"t5", "alibi", "kerple"})
    if (has_method(r, m)) against.push_back(m);
  std::string missing = missing_of(r, {"fire"});
  if (missing.empty() && against.empty()) missing = "t5, alibi or kerple in --methods";
  if (k == 1) missing = "an evaluation beyond the training length (--eval-multipliers)";
  std::vector<ClaimTest> tests;
  if (missing.empty())
    for (const auto& m : against) tests.push_back(within(r, "fire", m, g, kGrowthMargin));
  const Judgement j = judge_family(tests, missing);
  std::vector<std::string> shown = {"fire"};
  shown.insert(shown.end(), against.begin(), against.end());
  return claim_from("n1", claim,
                    g.name() + " (perplexity at " + std::to_string(k) +
                        "x / at 1x; lower is better): FIRE's against "
                        "each comparator's x 1.05, Welch per comparator (non-inferiority, margin 5%)",
                    measured(r, shown, g), j, training_budget(r), k > 1 ? length_protocol(r, k, p) : "");
}

ClaimVerdict hybrid_claim(const ComparisonResult& r, Protocol p) {
  const int64_t k = r.config.eval_multipliers.back();
  const Metric g = lm_metric(Quantity::PerplexityRatio, k, p), ppl = lm_metric(Quantity::Perplexity);
  std::string missing = missing_of(r, {"hybrid", "rope"});
  if (missing.empty() && k == 1) missing = "an evaluation beyond the training length (--eval-multipliers)";
  std::vector<ClaimTest> tests;
  if (missing.empty()) {
    tests.push_back(better(r, "hybrid", "rope", g));
    tests.push_back(within(r, "hybrid", "rope", ppl, kPplMargin));
  }
  const Judgement j = judge_family(tests, missing);
  const std::string hybrid_pattern =
      r.config.base.model.pos.options.text("hybrid_layers").empty()
          ? "hybrid = RoPE with every " +
                std::to_string(r.config.base.model.pos.options.integer("hybrid_nope_interval")) + "th layer NoPE" +
                (r.config.base.model.pos.options.boolean("hybrid_temperature") ? " (+ temperature)" : "")
          : "hybrid = --hybrid-layers " + r.config.base.model.pos.options.text("hybrid_layers");
  return claim_from(
      "n2",
      "NoPE every 4th layer improves extrapolation without hurting perplexity at the training length "
      "(SmolLM3; Llama 4 iRoPE)",
      g.name() + " (lower is better): hybrid below rope; " + ppl.name() +
          ": hybrid within 1% of rope (non-inferiority); one family of 2; " + hybrid_pattern,
      "growth: " + measured(r, {"hybrid", "rope"}, g) + " — perplexity at 1x: " + measured(r, {"hybrid", "rope"}, ppl),
      j, training_budget(r), k > 1 ? length_protocol(r, k, p) : "");
}

ClaimVerdict xpos_claim(const ComparisonResult& r, Protocol p) {
  const int64_t k = r.config.eval_multipliers.back();
  const Metric g = lm_metric(Quantity::PerplexityRatio, k, p);
  std::string missing = missing_of(r, {"xpos", "rope"});
  if (missing.empty() && k == 1) missing = "an evaluation beyond the training length (--eval-multipliers)";
  std::vector<ClaimTest> tests;
  if (missing.empty()) tests.push_back(better(r, "xpos", "rope", g));
  const Judgement j = judge_family(tests, missing);
  return claim_from("n3", "xPos extrapolates better than RoPE (Sun et al. 2023 §4)",
                    g.name() + " (lower is better): xpos below rope, Welch", measured(r, {"xpos", "rope"}, g), j,
                    training_budget(r), k > 1 ? length_protocol(r, k, p) : "");
}

ClaimVerdict fox_claim(const ComparisonResult& r, Protocol p) {
  const int64_t k = r.config.eval_multipliers.back();
  const Metric at1 = lm_metric(Quantity::Perplexity), far = lm_metric(Quantity::Perplexity, k, p);
  std::string missing = missing_of(r, {"fox", "rope"});
  if (missing.empty() && k == 1) missing = "an evaluation beyond the training length (--eval-multipliers)";
  std::vector<ClaimTest> tests;
  if (missing.empty()) {
    tests.push_back(better(r, "fox", "rope", at1));
    ClaimTest t = better(r, "fox", "rope", far);
    t.name += " at " + std::to_string(k) + "x";
    tests.push_back(std::move(t));
  }
  const Judgement j = judge_family(tests, missing);
  return claim_from(
      "n4", "FoX beats RoPE on perplexity at and beyond the training length (Lin et al. 2025 §4)",
      at1.name() + " and " + far.name() + " (lower is better): fox below rope at both, Welch; one family of 2",
      "1x: " + measured(r, {"fox", "rope"}, at1) + " — " + std::to_string(k) +
          "x: " + measured(r, {"fox", "rope"}, far),
      j, training_budget(r), k > 1 ? length_protocol(r, k, p) : "");
}

// combine(a's value, b's value) for each seed both rows have a finite value of m for, in seed order.
template <typename F>
std::vector<double> per_seed(const ComparisonResult& r, const std::string& a, const std::string& b, const Metric& m,
                             F combine) {
  const auto va = values_by_seed(r, a, m), vb = values_by_seed(r, b, m);
  std::vector<double> out;
  for (const auto& [seed, x] : va)
    if (const auto it = vb.find(seed); it != vb.end()) out.push_back(combine(x, it->second));
  return out;
}

// Whether methods a and b build the same model but for the options in `except` (and attention_sinks
// when `sinks_differ`).
bool same_model_but(const ComparisonResult& r, const std::string& a, const std::string& b,
                    const std::vector<std::string>& except, bool sinks_differ) {
  nn::GPTConfig x = method_model(r.config.base.model, a), y = method_model(r.config.base.model, b);
  if (x.pos.kind != y.pos.kind) return false;
  for (const auto& name : except) y.pos.options.set(name, x.pos.options.at(name));
  if (sinks_differ) y.attention_sinks = x.attention_sinks;
  return x.pos.options == y.pos.options && x.attention_sinks == y.attention_sinks;
}

ClaimVerdict prope_claim(const ComparisonResult& r) {
  const Metric ppl = lm_metric(Quantity::Perplexity);
  // Each p-RoPE method (a rope method keeping a fraction f < 1 of the frequencies in the p-RoPE
  // convention) with its full-RoPE twin (the same model with rope_fraction 1): one test per pair.
  std::vector<std::pair<std::string, std::string>> pairs;
  std::string lonely;
  for (const auto& m : r.config.methods) {
    if (method_kind(m) != "rope") continue;
    const nn::PosEncConfig& pc = method_model(r.config.base.model, m).pos;
    if (pc.options.text("rope_partial") != "prope" || !(pc.options.real("rope_fraction") < 1.0)) continue;
    std::string full;
    for (const auto& f : r.config.methods)
      if (f != m && method_kind(f) == "rope" &&
          method_model(r.config.base.model, f).pos.options.real("rope_fraction") == 1.0 &&
          same_model_but(r, m, f, {"rope_partial", "rope_fraction"}, false)) {
        full = f;
        break;
      }
    if (full.empty())
      lonely += (lonely.empty() ? "" : ", ") + m;
    else
      pairs.emplace_back(m, full);
  }
  std::string missing;
  if (pairs.empty())
    missing =
        lonely.empty()
            ? "a p-RoPE method in --methods, e.g. 'rope[rope_fraction=0.75;rope_partial=prope]' (the paper's best)"
            : "full RoPE beside " + lonely + " in --methods (the same settings with --rope-fraction 1)";
  std::vector<ClaimTest> tests;
  std::vector<std::string> shown;
  for (const auto& [p, f] : pairs) {
    // Paired by seed: the two models share their initial weights and batches (a rotary encoding has no
    // parameters), so the per-seed ratio carries no seed-to-seed noise of its own.
    const std::vector<double> ratio = per_seed(r, p, f, ppl, [](double x, double y) { return x / y; });
    tests.push_back(beyond(p + " / " + f + " below " + markdown::num(1.0 + kPplMargin, 2) + " (paired by seed)", ratio,
                           1.0 + kPplMargin, true));
    shown.push_back(p);
    if (std::find(shown.begin(), shown.end(), f) == shown.end()) shown.push_back(f);
  }
  const Judgement j = judge_family(tests, missing);
  return claim_from("n5",
                    "p-RoPE, rotating only the highest frequencies, is at least as good as full RoPE (Barbero et al. "
                    "2025 §6)",
                    ppl.name() +
                        " (lower is better): each p-RoPE method within 1% of its full-RoPE twin (non-inferiority: "
                        "the per-seed ratio below 1.01, paired by seed); one test per p-RoPE method",
                    shown.empty() ? std::string("n/a") : measured(r, shown, ppl), j, training_budget(r));
}

ClaimVerdict sinks_claim(const ComparisonResult& r) {
  const Metric f = attention_first_token_metric();
  // Every method with sinks whose twin without sinks (the same model otherwise) also ran.
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const auto& a : r.config.methods) {
    if (!method_model(r.config.base.model, a).attention_sinks) continue;
    for (const auto& b : r.config.methods)
      if (b != a && !method_model(r.config.base.model, b).attention_sinks && same_model_but(r, a, b, {}, true)) {
        pairs.emplace_back(a, b);
        break;
      }
  }
  std::string missing = pairs.empty() ? "a method with attention sinks and the same method without in --methods, e.g. "
                                        "'rope,rope[attention_sinks=true]'"
                                      : "";
  for (const auto& [a, b] : pairs)
    for (const auto& m : {a, b})
      if (values(r, m, f).empty() && missing.find("share of " + m + " ") == std::string::npos)
        missing += (missing.empty() ? "" : "; ") + std::string("the first-token share of ") + m +
                   " (absent from results written before it was measured)";
  std::vector<ClaimTest> tests;
  std::vector<std::string> shown;
  for (const auto& [a, b] : pairs) {
    // Lower by more than the margin, paired by seed: the per-seed differences below -kSinkMargin.
    const std::vector<double> d = per_seed(r, a, b, f, [](double x, double y) { return x - y; });
    tests.push_back(beyond(a + " below " + b + " by more than " + markdown::num(kSinkMargin, 2) + " (paired by seed)",
                           d, -kSinkMargin, true));
    shown.push_back(a);
    shown.push_back(b);
  }
  const Judgement j = judge_family(tests, missing);
  return claim_from(
      "n6", "Attention sinks take the weight off the first token (StreamingLLM, Xiao et al. 2024 §3)",
      f.name() +
          " (the first token's attention over its uniform share among the real keys; 1 = uniform, "
          "lower = less weight parked on it): each method with sinks below the same method without by more than 0.01, "
          "paired by seed; one test per pair" +
          (tests.empty() ? std::string() : " (" + std::to_string(tests.size()) + ")"),
      shown.empty() ? std::string("n/a") : measured(r, shown, f), j, training_budget(r));
}

}  // namespace

std::vector<ClaimVerdict> judge_paper_claims(const ComparisonResult& r) {
  return {with_sliding(r, [&](Protocol p) { return fire_claim(r, p); }),
          with_sliding(r, [&](Protocol p) { return hybrid_claim(r, p); }),
          with_sliding(r, [&](Protocol p) { return xpos_claim(r, p); }),
          with_sliding(r, [&](Protocol p) { return fox_claim(r, p); }),
          prope_claim(r),
          sinks_claim(r)};
}

StudyEntry papers_study() {
  StudyEntry e;
  e.name = "papers";
  e.summary =
      "the headline claims of the newer encodings' papers (FIRE, hybrid NoPE/RoPE layers, xPos, FoX, p-RoPE), "
      "judged on perplexity by length, and StreamingLLM's on attention sinks, judged on the first-token share";
  e.claims = judge_paper_claims;
  // Which encodings ran, and why the quick preset's choice is what it is (issue of the default's budget).
  e.settings_markdown = [](const ComparisonResult& r) {
    std::string ran, left;
    for (const auto& m : r.config.methods) ran += (ran.empty() ? "" : ", ") + m;
    for (const auto& k : nn::position_encoding_kinds())
      if (!has_method(r, k)) left += (left.empty() ? "" : ", ") + k;
    return "- methods: " + ran + (left.empty() ? " (every registered encoding)" : "; not run: " + left) +
           ". The quick preset runs the article's eight encodings, which keeps it within 20 minutes on 2 cores; the "
           "newer ones (sandwich, xpos, fire, hybrid, fox, cope; claims n1-n4) are --methods choices, p-RoPE and "
           "attention "
           "sinks (claims n5, n6) method variants ('rope[rope_fraction=0.75;rope_partial=prope]', "
           "'rope[attention_sinks=true]'), and --methods all or the full preset runs every registered encoding\n";
  };
  return e;
}

}  // namespace posgrad::train
