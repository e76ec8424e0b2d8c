// pi_study.cpp — the position-interpolation protocol's entry (compare/study.h): its checks, work,
// results and report (pi_protocol.h, pi_report.h).
#include <algorithm>
#include <filesystem>

#include "compare/method.h"
#include "compare/studies/lm/lm.h"
#include "compare/studies/passkey/passkey.h"
#include "compare/studies/pi/pi_protocol.h"
#include "compare/studies/pi/pi_report.h"
#include "tensor/option_table.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
std::string at(const std::string& p, size_t i) { return json_path_at(p, i); }
std::string dot(const std::string& p, const std::string& k) { return json_path_key(p, k); }

json pi_json(const std::vector<PiResult>& v) {
  json a = json::array();
  for (const auto& p : v)
    a.push_back({{"scaling", p.scaling},
                 {"multiplier", p.multiplier},
                 {"iters", p.iters},
                 {"batch", p.batch},
                 {"first_loss", p.first_loss},
                 {"final_loss", p.final_loss},
                 {"seconds", p.seconds},
                 {"lengths", lengths_to_json(p.lengths)}});
  return a;
}

std::vector<PiResult> pi_from(const json& j) {
  if (!j.is_array()) throw json::type_error::create(302, "\"pi\": expected an array", &j);
  std::vector<PiResult> v;
  for (const auto& e : j) {
    PiResult p;
    p.scaling = e.at("scaling").get<std::string>();
    p.multiplier = json_int(e.at("multiplier"));
    p.iters = json_int(e.at("iters"));
    p.batch = json_int(e.at("batch"));
    p.first_loss = json_real(e.at("first_loss"));
    p.final_loss = json_real(e.at("final_loss"));
    p.seconds = json_real(e.at("seconds"));
    p.lengths = lengths_from_json(e.at("lengths"));
    v.push_back(std::move(p));
  }
  return v;
}

void check_part(const UnitResult& u, const CompareConfig& cfg, const ValueCheck& c, const std::string& path) {
  const std::string p = dot(path, "pi");
  const auto& rows = u.parts.value<PiResults>().rows;
  const bool runs = pi_refusal(cfg, u.method).empty() && cfg.of<PiSettings>().iters > 0;
  const PiSettings& ps = cfg.of<PiSettings>();
  const size_t scaled = runs ? ps.multipliers.size() * ps.scalings.size() : 0;
  const size_t want = scaled + (runs && ps.drope ? 1 : 0);
  c.size(rows.size(), want, p,
         runs ? "--pi-multipliers x --pi-scalings, then the DroPE row with --pi-drope"
              : "the protocol runs with --pi-iters > 0 only, on units it can scale (pi_refusal: " +
                    pi_refusal(cfg, u.method) + ")");
  for (size_t i = 0; i < want; ++i) {
    const PiResult& r = rows[i];
    const std::string q = at(p, i);
    const int64_t m = i < scaled ? ps.multipliers[i / ps.scalings.size()] : 1;
    const std::string s = i < scaled ? ps.scalings[i % ps.scalings.size()] : "drope";
    if (r.scaling != s)
      c.fail(dot(q, "scaling"), ValueCheck::quoted(r.scaling),
             "expected " + ValueCheck::quoted(s) + " (--pi-scalings, in order)");
    c.equal(r.multiplier, m, dot(q, "multiplier"), "--pi-multipliers, in order");
    c.equal(r.iters, cfg.of<PiSettings>().iters, dot(q, "iters"), "--pi-iters");
    c.positive(r.batch, dot(q, "batch"));
    c.non_negative(r.first_loss, dot(q, "first_loss"));
    c.non_negative(r.final_loss, dot(q, "final_loss"));
    c.non_negative(r.seconds, dot(q, "seconds"));
    check_lengths(c, r.lengths, cfg, dot(q, "lengths"));
  }
}

void run(UnitContext& ctx) {
  // Each fine-tuned model is kept for the studies after this one (the passkey test scores it).
  const PiCallback publish = [&](const std::string& row, nn::GPT& tuned) {
    std::shared_ptr<nn::GPT> copy = copy_gpt(tuned, {}, 0, ctx.dev);
    copy->eval();
    ctx.models[row] = std::move(copy);
  };
  ctx.unit.parts.get<PiResults>().rows =
      run_pi_protocol(ctx.model, ctx.method, ctx.data.train(), ctx.data.val(), ctx.cfg, ctx.seed, ctx.dev, publish);
}

// Its rows of the option table (compare/options.h).
void options(opt::Table<CompareConfig>& t) {
  using namespace opt;
  Rows<CompareConfig> r(t);
  r.group("Position interpolation (compare/studies/pi/pi_protocol.h)")
      .add(integer("pi_iters", closed(0, kMany),
                   "Fine-tuning steps of each trained RoPE model per scaling and multiplier, at multiplier x "
                   "block_size tokens (Chen et al. 2023; 0: off)",
                   "steps"),
           POSGRAD_MEMBER(template of<PiSettings>().iters))
      .add(real("pi_lr", open_closed(0, 1),
                "Learning rate of the fine-tuning (after a linear warm-up of a tenth "
                "of pi_iters, constant, as Chen et al. 2023 §3.1)"),
           POSGRAD_MEMBER(template of<PiSettings>().lr))
      .add(integer_list("pi_multipliers", closed(2, 64), 1, 8,
                        "Fine-tuning lengths M as multiples of the training length (scaling factor s = M), each once"),
           POSGRAD_MEMBER(template of<PiSettings>().multipliers))
      .add(choice_list("pi_scalings", {"none", "linear", "ntk", "yarn"}, 4,
                       "RoPE scalings fine-tuned, each once: none (plain RoPE), linear (position interpolation), "
                       "ntk (static NTK-aware), yarn"),
           POSGRAD_MEMBER(template of<PiSettings>().scalings))
      // Added after results were first written: a file without it made no DroPE row.
      .add(added_later(boolean("pi_drope",
                               "Also drop each RoPE model's rotary embedding and recalibrate it at the "
                               "training length for --pi-iters steps (DroPE, Gelberg & Cetin 2026)"),
                       false),
           POSGRAD_MEMBER(template of<PiSettings>().drope));
}

// Its values in each preset (compare_preset).
void preset(CompareConfig& c, const std::string& name) {
  if (name == "quick") {
    // 2 lengths x 4 scalings x 40 steps per rope seed (cost: docs/presets.md).
    c.of<PiSettings>().iters = 40;
    c.of<PiSettings>().lr = 1e-4;
    c.of<PiSettings>().multipliers = {2, 4};
    c.of<PiSettings>().scalings = {"none", "linear", "ntk", "yarn"};
  } else if (name == "full") {
    c.of<PiSettings>().iters = 200;  // 5x the quick budget (not timed)
    c.of<PiSettings>().lr = 1e-4;
    c.of<PiSettings>().multipliers = {2, 4};
  } else if (name == "tiny") {
    c.of<PiSettings>().iters = 3;
    c.of<PiSettings>().multipliers = {2};
    c.of<PiSettings>().scalings = {"none", "linear"};
  }
}

}  // namespace

StudyEntry pi_study() {
  StudyEntry e;
  e.name = PiResults::kStudy;
  e.summary =
      "position interpolation: each RoPE model scaled and fine-tuned at Mx its training length, against NTK-aware "
      "and YaRN scaling (Chen et al. 2023 §2.3, §3; Peng et al. 2023), and DroPE: its RoPE dropped and "
      "recalibrated at 1x (Gelberg & Cetin 2026)";
  e.init_settings = [](Parts& p) { p.get<PiSettings>(); };
  e.options = options;
  e.preset = preset;
  e.validate = validate_pi;
  e.enabled = [](const CompareConfig& c) { return c.of<PiSettings>().iters > 0; };
  e.applies = [](const CompareConfig& cfg, const std::string& method) { return pi_refusal(cfg, method).empty(); };
  e.check_data = [](const CompareConfig& cfg, const CorpusData* d) {
    if (d && !rope_scaling_methods(cfg).empty()) check_pi_data(cfg, cfg.base.model.block_size, d->dataset.train());
  };
  e.run_unit = run;
  e.derives_models = true;
  e.unit_to_json = [](const UnitResult& u, json& j) { j["pi"] = pi_json(u.parts.value<PiResults>().rows); };
  e.unit_from_json = [](const json& j, UnitResult& u) {
    if (j.contains("pi"))
      u.parts.get<PiResults>().rows = pi_from(j.at("pi"));  // absent: made before the protocol existed
  };
  e.check_unit = check_part;
  e.write_files = [](const ComparisonResult& r, const ReportDir& out) {
    write_pi_csv(r, out.dir + "/pi.csv");
    write_pi_plot(r, out.plots);
    return std::vector<std::string>{};
  };
  e.markdown = [](const ComparisonResult& r, const ReportDir& out) {
    return pi_markdown(r, std::filesystem::exists(out.plots + "/pi_ppl_vs_length.png"));
  };
  e.claims = judge_pi_claims;
  return e;
}

}  // namespace posgrad::train
