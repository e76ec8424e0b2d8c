// passkey_study.cpp — the passkey test's entry (compare/study.h): its checks, work, results and
// report (passkey.h, passkey_report.h).
#include <algorithm>

#include "compare/method.h"
#include "compare/rows.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/passkey/passkey.h"
#include "compare/studies/passkey/passkey_report.h"
#include "compare/value_check.h"
#include "data/passkey.h"
#include "nn/posenc/position_encoding.h"
#include "tensor/option_table.h"
#include "train/options.h"
#include "train/trainer.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
std::string at(const std::string& p, size_t i) { return json_path_at(p, i); }
std::string dot(const std::string& p, const std::string& k) { return json_path_key(p, k); }

// Whether the test runs: a model fine-tuned on passkey examples, or pretrained with some.
bool passkey_on(const PasskeyConfig& k) { return k.iters > 0 || k.pretrain_fraction > 0; }

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const std::string p = dot(path, "passkey");
  const auto& rows = u.parts.value<PasskeyRows>().rows;
  const PasskeyConfig& k = cfg.of<PasskeyConfig>();
  if (!passkey_on(k)) {
    if (!rows.empty())
      c.fail(p, "", "holds rows, but --passkey-iters is 0 and --passkey-pretrain-fraction is 0 (no passkey test)");
    return;
  }
  if (!passkey_selects(k, u.method)) {
    if (!rows.empty())
      c.fail(p, "",
             "holds rows, but --passkey-methods " + ValueCheck::list(k.methods) + " does not select " +
                 ValueCheck::quoted(u.method));
    return;
  }
  if (!rows.count(u.method))
    c.fail(p, "",
           "has no row " + ValueCheck::quoted(u.method) +
               " (--passkey-iters or --passkey-pretrain-fraction > 0: the test runs)");
  const size_t cells = k.multipliers.size() * k.depths.size();
  for (const auto& [row, r] : rows) {
    const std::string q = p + "[" + ValueCheck::quoted(row) + "]";
    if (Row::parse(row).method != u.method)
      c.fail(q, "", "a row of unit " + ValueCheck::quoted(u.method) + " must be that method or a variant of it");
    if (!k.derived && Row::parse(row).finetune > 0)
      c.fail(q, "", "a row an earlier study derived, but --passkey-derived is false");
    c.non_negative(r.final_loss, dot(q, "final_loss"));
    if (r.grid.alphabet != "digits" && r.grid.alphabet != "letters")
      c.fail(dot(q, "alphabet"), ValueCheck::quoted(r.grid.alphabet),
             "expected \"digits\" or \"letters\" (data/passkey.h)");
    c.size(r.grid.cells.size(), cells, dot(q, "cells"), "--passkey-multipliers x --passkey-depths");
    for (size_t i = 0; i < cells; ++i) {
      const PasskeyCell& e = r.grid.cells[i];
      const std::string s = at(dot(q, "cells"), i);
      c.equal(e.multiplier, k.multipliers[i / k.depths.size()], dot(s, "multiplier"),
              "--passkey-multipliers, in order");
      const double depth = k.depths[i % k.depths.size()];
      if (e.depth != depth)
        c.fail(dot(s, "depth"), ValueCheck::show(e.depth),
               "expected " + ValueCheck::show(depth) + " (--passkey-depths, in order)");
      c.count(e.examples, dot(s, "examples"));
      if (e.accuracy)
        c.fraction(*e.accuracy, dot(s, "accuracy"));
      else if (e.multiplier == 1)
        c.fail(dot(s, "accuracy"), "null", "every row is scored at the training length, where it was trained");
    }
  }
}

// The unit's own rows (the method, its evaluation-time scalings), then the passkey fine-tuning (none
// with --passkey-iters 0) and scoring of each model an earlier study derived (the
// position-interpolation rows "rope+linear ft2x": same steps, examples and seed as the untuned model,
// so that `rope` against "rope+linear ft2x" in the passkey table is before / after the protocol).
void run(UnitContext& ctx) {
  const CompareConfig& cfg = ctx.cfg;
  if (!passkey_selects(cfg.of<PasskeyConfig>(), ctx.method)) return;  // --passkey-methods
  auto& rows = ctx.unit.parts.get<PasskeyRows>().rows;
  rows = run_passkey(ctx.model, ctx.data.train(), ctx.data.val(), ctx.tokenizer, cfg.of<PasskeyConfig>(), ctx.method,
                     ctx.seed, ctx.dev, skipped_variants(cfg));
  if (!cfg.of<PasskeyConfig>().derived) return;  // --passkey-derived false
  for (const auto& [row, tuned] : ctx.models) {
    auto copy = copy_gpt(*tuned, {}, ctx.seed ^ 0x9a55d0ULL, ctx.dev);
    const PasskeyConfig& k = cfg.of<PasskeyConfig>();
    PasskeyResult pr;
    pr.final_loss = k.iters > 0
                        ? finetune_passkey(*copy, ctx.data.train(), ctx.tokenizer, k, ctx.seed, ctx.dev, row).final_loss
                        : passkey_key_loss(*copy, ctx.data.val(), ctx.tokenizer, k, ctx.dev);
    pr.grid = evaluate_passkey(*copy, ctx.data.val(), ctx.tokenizer, cfg.of<PasskeyConfig>(), ctx.dev);
    rows[row] = pr;
  }
}

// Its rows of the option table (compare/options.h).
void options(opt::Table<CompareConfig>& t) {
  using namespace opt;
  Rows<CompareConfig> r(t);
  r.group("Passkey retrieval (compare/studies/passkey/passkey.h)")
      .add(integer("passkey_iters", closed(0, kMany),
                   "Fine-tuning steps of each trained LM on passkey examples at the training length (0: none; the "
                   "pretrained model is scored when --passkey-pretrain-fraction > 0, else no passkey test)",
                   "steps"),
           POSGRAD_MEMBER(template of<PasskeyConfig>().iters))
      // Added after results were first written: a file without it had no passkey rows in pretraining.
      .add(added_later_default(real("passkey_pretrain_fraction", closed_open(0, 1),
                                    "Share of each pretraining batch's rows that are passkey examples at the training "
                                    "length instead of corpus windows, with the whole row's next-token loss (0: none)"),
                               0.0),
           POSGRAD_MEMBER(template of<PasskeyConfig>().pretrain_fraction))
      .add(real("passkey_lr", open_closed(0, 1), "Peak learning rate of the passkey fine-tuning"),
           POSGRAD_MEMBER(template of<PasskeyConfig>().lr))
      .add(integer("passkey_batch", closed(1, 4096), "Passkey examples per fine-tuning step and per scoring pass",
                   "sequences"),
           POSGRAD_MEMBER(template of<PasskeyConfig>().batch))
      .add(integer("passkey_examples", closed(1, 1 << 16), "Passkey test examples per (length, depth) cell",
                   "sequences"),
           POSGRAD_MEMBER(template of<PasskeyConfig>().examples))
      .add(integer_list("passkey_multipliers", closed(1, 64), 1, 16,
                        "Passkey test lengths as multiples of the training length (must include 1)"),
           POSGRAD_MEMBER(template of<PasskeyConfig>().multipliers))
      .add(real_list(
               "passkey_depths", closed(0, 1), 1, 21,
               "Needle depths: the fraction of the filler before the needle (0: at the start, 1: before the question)"),
           POSGRAD_MEMBER(template of<PasskeyConfig>().depths))
      .add(integer("passkey_key_length", closed(1, 64), "Symbols of the pass key (digits, else lowercase letters)",
                   "symbols"),
           POSGRAD_MEMBER(template of<PasskeyConfig>().key_length))
      .add(choice("passkey_template", data::passkey_template_names(),
                  "Needle and question: standard (Mohtashami & Jaggi 2023, about 100 tokens with a char tokenizer) or "
                  "short (' key K.' / ' key ', for short training contexts) or marker (' (K)' / ' (': a one-character "
                  "marker "
                  "that text seldom holds)"),
           POSGRAD_MEMBER(template of<PasskeyConfig>().template_name))
      // Added after results were first written: a file without them ran the test for every method
      // and on every derived model.
      .add(added_later(
               [] {
                 std::vector<std::string> names = {"all"};
                 for (const auto& k : nn::position_encoding_kinds()) names.push_back(k);
                 return choice_list(
                     "passkey_methods", names, 32,
                     "Encodings whose units run the passkey test (all: every method; a kind covers its "
                     "variants, 'rope' also 'rope[rope_fraction=0.5]'); the others have no passkey rows");
               }(),
               std::vector<std::string>{"all"}),
           POSGRAD_MEMBER(template of<PasskeyConfig>().methods))
      .add(added_later(boolean("passkey_derived",
                               "Also fine-tune and score the models the position-interpolation study derived (its "
                               "fine-tuned scalings and DroPE rows), each as the unit's own model; false: only the "
                               "unit's own model and its evaluation-time RoPE scalings"),
                       true),
           POSGRAD_MEMBER(template of<PasskeyConfig>().derived));
}

// --passkey-methods: "all" alone, or encodings of which at least one is among --methods (UsageError).
void validate_methods(const CompareConfig& cfg) {
  const PasskeyConfig& k = cfg.of<PasskeyConfig>();
  if (!passkey_on(k)) return;
  const bool all = std::find(k.methods.begin(), k.methods.end(), "all") != k.methods.end();
  POSGRAD_CHECK(!all || k.methods.size() == 1, UsageError,
                "--passkey-methods: 'all' selects every method and cannot be listed with others");
  auto sorted = k.methods;
  std::sort(sorted.begin(), sorted.end());
  POSGRAD_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), UsageError,
                "--passkey-methods lists an encoding twice");
  POSGRAD_CHECK(
      std::any_of(cfg.methods.begin(), cfg.methods.end(), [&](const std::string& m) { return passkey_selects(k, m); }),
      UsageError, "--passkey-methods ", ValueCheck::list(k.methods), " selects none of --methods ",
      ValueCheck::list(cfg.methods),
      " (the passkey test would run nowhere; --passkey-iters 0 and --passkey-pretrain-fraction 0 turn it off)");
}

// Its values in each preset (compare_preset).
void preset(CompareConfig& c, const std::string& name) {
  if (name == "quick") {
    // RoPE only, fine-tuned after pretraining on the one-letter marker template with 600 steps of 48
    // examples: RoPE read 0.92-1.00 at 1x in each of 3 seeds, 0.99 after 1000 steps of 64, and stayed
    // near chance after 400 steps of 64, 600 of 32 or 1500 of 16 (docs/presets.md). About 60 s per
    // unit, too much for every method within the preset's 20 minutes; not on the derived models (9 per
    // RoPE unit).
    PasskeyConfig& k = c.of<PasskeyConfig>();
    k.iters = 600;
    k.batch = 48;
    k.template_name = "marker";
    k.key_length = 1;
    k.methods = {"rope"};
    k.derived = false;
  } else if (name == "medium") {
    // The quick preset's passkey test (above) for ALiBi too: about 60 s per unit more.
    c.of<PasskeyConfig>().methods = {"rope", "alibi"};
  } else if (name == "full") {
    // The articles' passkey text fits the 128-token context (104 tokens of needle, question and key,
    // 25 of filler at 1x); a longer fine-tuning than the quick preset's, more examples per cell.
    c.of<PasskeyConfig>().template_name = "standard";
    c.of<PasskeyConfig>().iters = 1000;
    c.of<PasskeyConfig>().lr = 2e-3;
    c.of<PasskeyConfig>().examples = 32;
  } else if (name == "tiny") {
    // The short template with a 2-symbol key: 15 tokens, so a 17-token example keeps 2 of filler.
    c.of<PasskeyConfig>().iters = 3;
    c.of<PasskeyConfig>().batch = 2;
    c.of<PasskeyConfig>().examples = 2;
    c.of<PasskeyConfig>().multipliers = {1, 2};
    c.of<PasskeyConfig>().depths = {0, 1};
    c.of<PasskeyConfig>().key_length = 2;
  }
}

}  // namespace

StudyEntry passkey_study() {
  StudyEntry e;
  e.name = PasskeyRows::kStudy;
  e.summary =
      "passkey retrieval: each language model pretrained with passkey examples among its batches or fine-tuned on "
      "them at its training length, scored by length and needle depth (Mohtashami & Jaggi 2023)";
  e.init_settings = [](Parts& p) { p.get<PasskeyConfig>(); };
  e.options = options;
  e.preset = preset;
  e.validate = [](const CompareConfig& cfg) {
    validate_passkey(cfg.of<PasskeyConfig>(), cfg.base.model.block_size);
    validate_methods(cfg);
    if (passkey_on(cfg.of<PasskeyConfig>()))
      check_memory(cfg.base, *std::max_element(cfg.of<PasskeyConfig>().multipliers.begin(),
                                               cfg.of<PasskeyConfig>().multipliers.end()) *
                                 cfg.base.model.block_size);
  };
  e.enabled = [](const CompareConfig& c) { return passkey_on(c.of<PasskeyConfig>()); };
  e.check_data = [](const CompareConfig& cfg, const CorpusData* d) {
    if (d) check_passkey_data(d->dataset.train(), d->tokenizer, cfg.of<PasskeyConfig>(), cfg.base.model.block_size);
  };
  e.pretrain_mix = [](const CompareConfig& cfg, const std::string& method, uint64_t seed,
                      const CorpusData& d) -> BatchMix {
    if (!passkey_selects(cfg.of<PasskeyConfig>(), method)) return {};
    return passkey_pretrain_mix(d.dataset.train(), d.tokenizer, cfg.of<PasskeyConfig>(), seed);
  };
  e.run_unit = run;
  e.unit_to_json = [](const UnitResult& u, json& j) {
    j["passkey"] = passkey_to_json(u.parts.value<PasskeyRows>().rows);
  };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    if (j.contains("passkey"))
      u.parts.get<PasskeyRows>().rows = passkey_from_json(j.at("passkey"));  // absent: before the test
  };
  e.check_unit = check_part;
  e.write_files = [](const ComparisonResult& r, const ReportDir& out) {
    write_passkey_csv(r, out.dir + "/passkey.csv");
    write_passkey_seeds_csv(r, out.dir + "/passkey_seeds.csv");
    write_passkey_plots(r, out.plots);
    return std::vector<std::string>{};
  };
  e.markdown = [](const ComparisonResult& r, const ReportDir& out) { return passkey_markdown(r, out.plots); };
  e.claims = judge_passkey_claims;
  return e;
}

}  // namespace posgrad::train
