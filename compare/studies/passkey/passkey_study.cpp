// passkey_study.cpp — the passkey test's entry (compare/study.h): its checks, work, results and
// report (passkey.h, passkey_report.h).
#include <algorithm>

#include "compare/studies/lm/lm.h"
#include "compare/studies/passkey/passkey.h"
#include "compare/studies/passkey/passkey_report.h"
#include "train/options.h"
#include "train/trainer.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
std::string at(const std::string& p, size_t i) { return json_path_at(p, i); }
std::string dot(const std::string& p, const std::string& k) { return json_path_key(p, k); }

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const std::string p = dot(path, "passkey");
  const auto& rows = u.parts.value<PasskeyRows>().rows;
  const PasskeyConfig& k = cfg.passkey;
  if (k.iters == 0) {
    if (!rows.empty()) c.fail(p, "", "holds rows, but --passkey-iters is 0 (no passkey test)");
    return;
  }
  if (!rows.count(u.method)) c.fail(p, "", "has no row " + ValueCheck::quoted(u.method) + " (--passkey-iters > 0)");
  const size_t cells = k.multipliers.size() * k.depths.size();
  for (const auto& [row, r] : rows) {
    const std::string q = p + "[" + ValueCheck::quoted(row) + "]";
    if (row.substr(0, row.find_first_of("+@ ")) != u.method)
      c.fail(q, "", "a row of unit " + ValueCheck::quoted(u.method) + " must be that method or a variant of it");
    c.non_negative(r.final_loss, dot(q, "final_loss"));
    if (r.grid.alphabet != "digits" && r.grid.alphabet != "letters")
      c.fail(dot(q, "alphabet"), ValueCheck::quoted(r.grid.alphabet), "expected \"digits\" or \"letters\" (data/passkey.h)");
    c.size(r.grid.cells.size(), cells, dot(q, "cells"), "--passkey-multipliers x --passkey-depths");
    for (size_t i = 0; i < cells; ++i) {
      const PasskeyCell& e = r.grid.cells[i];
      const std::string s = at(dot(q, "cells"), i);
      c.equal(e.multiplier, k.multipliers[i / k.depths.size()], dot(s, "multiplier"), "--passkey-multipliers, in order");
      const double depth = k.depths[i % k.depths.size()];
      if (e.depth != depth)
        c.fail(dot(s, "depth"), ValueCheck::show(e.depth), "expected " + ValueCheck::show(depth) + " (--passkey-depths, in order)");
      c.count(e.examples, dot(s, "examples"));
      if (e.accuracy) c.fraction(*e.accuracy, dot(s, "accuracy"));
      else if (e.multiplier == 1) c.fail(dot(s, "accuracy"), "null", "every row is scored at the training length, where it was fine-tuned");
    }
  }
}

// The unit's own rows (the method, its evaluation-time scalings), then the passkey fine-tuning and
// scoring of each model an earlier study derived (the position-interpolation rows "rope+linear
// ft2x": same steps, examples and seed as the untuned model, so that "rope" against "rope+linear
// ft2x" in the passkey table is before / after the protocol).
void run(UnitContext& ctx) {
  const CompareConfig& cfg = ctx.cfg;
  auto& rows = ctx.unit.parts.get<PasskeyRows>().rows;
  rows = run_passkey(ctx.model, ctx.data.train(), ctx.data.val(), ctx.tokenizer, cfg.passkey, ctx.method, ctx.seed, ctx.dev,
                     skipped_variants(cfg));
  for (const auto& [row, tuned] : ctx.models) {
    auto copy = copy_gpt(*tuned, {}, ctx.seed ^ 0x9a55d0ULL, ctx.dev);
    PasskeyResult pr;
    pr.final_loss = finetune_passkey(*copy, ctx.data.train(), ctx.tokenizer, cfg.passkey, ctx.seed, ctx.dev, row).final_loss;
    pr.grid = evaluate_passkey(*copy, ctx.data.val(), ctx.tokenizer, cfg.passkey, ctx.dev);
    rows[row] = pr;
  }
}

}  // namespace

StudyEntry passkey_study() {
  StudyEntry e;
  e.name = PasskeyRows::kStudy;
  e.summary = "passkey retrieval: each language model fine-tuned on passkey examples at its training length, scored by "
              "length and needle depth (Mohtashami & Jaggi 2023)";
  e.validate = [](const CompareConfig& cfg) {
    validate_passkey(cfg.passkey, cfg.base.model.block_size);
    if (cfg.passkey.iters > 0)
      check_memory(cfg.base, *std::max_element(cfg.passkey.multipliers.begin(), cfg.passkey.multipliers.end()) *
                                 cfg.base.model.block_size);
  };
  e.enabled = [](const CompareConfig& c) { return c.passkey.iters > 0; };
  e.check_data = [](const CompareConfig& cfg, const CorpusData* d) {
    if (d) check_passkey_data(d->dataset.train(), d->tokenizer, cfg.passkey, cfg.base.model.block_size);
  };
  e.run_unit = run;
  e.unit_to_json = [](const UnitResult& u, json& j) { j["passkey"] = passkey_to_json(u.parts.value<PasskeyRows>().rows); };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    if (j.contains("passkey")) u.parts.get<PasskeyRows>().rows = passkey_from_json(j.at("passkey"));  // absent: before the test
  };
  e.check_unit = check_part;
  e.write_files = [](const ComparisonResult& r, const ReportDir& out) {
    write_passkey_csv(r, out.dir + "/passkey.csv");
    write_passkey_plots(r, out.plots);
    return std::vector<std::string>{};
  };
  e.markdown = [](const ComparisonResult& r, const ReportDir& out) { return passkey_markdown(r, out.plots); };
  e.claims = judge_passkey_claims;
  return e;
}

}  // namespace posgrad::train
