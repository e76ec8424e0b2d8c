// encoder_study.cpp — the encoder track's entry in the comparison (compare/study.h): its checks,
// work, results and report (encoder.h, encoder_track.h).
#include <map>
#include <set>
#include <sstream>

#include "compare/options.h"
#include "compare/studies/encoder/encoder_track.h"
#include "data/fileio.h"
#include "tensor/option_table.h"

namespace posgrad::train {

namespace {

using json = nlohmann::json;
std::string at(const std::string& p, size_t i) { return json_path_at(p, i); }

void check_track(const EncoderTrackResult& e, const CompareConfig& cfg, const std::string& source,
                 const std::string& advice) {
  const ValueCheck c(source, advice);
  const EncoderTrackConfig& ec = e.config;
  try {
    ec.validate();
  } catch (const ValueError& x) {
    c.fail("encoder.config", "", x.what());
  }
  // The track ran with the comparison's methods, seeds and --encoder-* settings (encoder_track_config).
  const EncoderTrackConfig want = encoder_track_config(cfg);
  if (ec.method_list() != want.method_list())
    c.fail("encoder.config.methods", ValueCheck::list(ec.method_list()),
           "config.methods is " + ValueCheck::list(want.method_list()));
  if (ec.seeds != want.seeds)
    c.fail("encoder.config.seeds", ValueCheck::list(ec.seeds), "config.seeds is " + ValueCheck::list(want.seeds));
  const nlohmann::json have_s = ec.settings_json(), want_s = want.settings_json();
  // Only the settings that are options of the comparison (--encoder-<key>) are recorded in its config.
  std::set<std::string> options;
  for (const auto& o : compare_options()) options.insert(o.spec.name);
  for (const auto& [k, v] : want_s.items())
    if (options.count("encoder_" + k) && (!have_s.contains(k) || have_s[k] != v))
      c.fail("encoder.config." + k, have_s.contains(k) ? have_s[k].dump() : "missing",
             "config's --encoder-" + k + " is " + v.dump());
  std::map<std::pair<std::string, uint64_t>, size_t> seen;
  for (size_t i = 0; i < e.units.size(); ++i) {
    const EncoderUnitResult& u = e.units[i];
    const std::string p = at("encoder.units", i);
    check_encoder_unit(u, ec, source, p, advice);
    const auto [it, fresh] = seen.emplace(std::make_pair(u.method, u.seed), i);
    if (!fresh)
      c.fail(p, "",
             "a second encoder unit for (" + u.method + ", seed " + std::to_string(u.seed) + "); the first is " +
                 at("encoder.units", it->second));
  }
  for (const auto& m : ec.method_list())
    for (uint64_t s : ec.seeds)
      if (!seen.count({m, s}))
        c.fail("encoder.units", "",
               "no unit for (" + m + ", seed " + std::to_string(s) + "), but encoder.config.seeds claims " +
                   ValueCheck::list(ec.seeds));
}

void check(const ComparisonResult& r, const ValueCheck& c, const std::string& source, const std::string& advice) {
  const CompareConfig& cfg = r.config;
  const EncoderTrackResult* e = r.parts.find<EncoderTrackResult>();
  if ((cfg.track != "decoder") != (e != nullptr))
    c.fail("encoder", "",
           e ? "present, but config.track is \"decoder\""
             : "missing, but config.track is " + ValueCheck::quoted(cfg.track));
  if (e) check_track(*e, cfg, source, advice);
}

void validate(const CompareConfig& cfg) {
  if (cfg.track == "decoder") return;  // before anything is written: a refused track leaves nothing behind
  POSGRAD_CHECK(cfg.base.device == "cpu", UsageError, "--device ", cfg.base.device, ": the encoder track (--track ",
                cfg.track, ") trains its encoders on the CPU only; use --device cpu, or --track decoder for a GPU run");
  const EncoderTrackConfig ec = encoder_track_config(cfg);
  ec.validate();
  check_encoder_memory(ec);
}

// The whole report.md of an experiment without decoder units (--track encoder).
std::string alone(const ComparisonResult& r) {
  const EncoderTrackResult& e = r.parts.value<EncoderTrackResult>();
  std::ostringstream md;
  md << "# posgrad position-encoding comparison: encoder track\n\nMeasured, not illustrative: every number below "
     << "comes from the runs of this experiment (commit " << r.provenance.git_commit << ", " << r.provenance.cpu << ", "
     << r.provenance.threads << " threads). Files: `results.json` (under \"encoder\"), "
     << "`encoder_results.csv` (every value per seed).\n\n"
     << encoder_report_markdown(e);
  return md.str();
}

// Its rows of the option table (compare/options.h).
void options(opt::Table<CompareConfig>& t) {
  using namespace opt;
  Rows<CompareConfig> r(t);
  r.group("Encoder track (compare/studies/encoder/encoder.h)")
      .add(choice("track", {"decoder", "encoder", "both"},
                  "Models compared: causal decoder (language modelling), bidirectional encoder (masked-LM "
                  "pretraining, then classification and labelling tasks), or both"),
           POSGRAD_MEMBER(track))
      .add(integer("encoder_n_layer", closed(1, 64), "Encoder: transformer blocks"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().n_layer))
      .add(integer("encoder_n_embd", closed(1, 4096), "Encoder: width, divisible by encoder_n_head", "channels"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().n_embd))
      .add(integer("encoder_n_head", closed(1, 64), "Encoder: attention heads"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().n_head))
      .add(integer("encoder_length", closed(2, 4096), "Encoder: pretraining and fine-tuning length", "tokens"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().length))
      .add(integer("encoder_mlm_iters", closed(1, kMany), "Encoder: masked-LM pretraining steps", "steps"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().mlm_iters))
      .add(integer("encoder_task_iters", closed(1, kMany), "Encoder: fine-tuning steps per task", "steps"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().task_iters))
      .add(integer("encoder_batch", closed(1, 4096), "Encoder: sequences per step", "sequences"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().batch))
      .add(real("encoder_lr", Interval{0, 1, true, true},  // (0, 1): as EncoderTrackConfig::validate
                "Encoder: peak learning rate (pretraining and fine-tuning)"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().lr))
      .add(integer("encoder_eval_examples", closed(1, 1 << 20),
                   "Encoder: held-out examples per task and length (and masked-LM windows per length)", "sequences"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().eval_examples))
      .add(choice_list("encoder_tasks", {"reversed", "marker_segment", "line_word"}, 3,
                       "Encoder fine-tuning tasks: reversed (was the window reversed), marker_segment (which segment "
                       "holds the marker), line_word (BIO-tag the k-th word of each line)"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().tasks))
      .add(integer_list("encoder_multipliers", closed(1, 64), 1, 8,
                        "Encoder evaluation lengths as multiples of encoder_length"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().multipliers))
      .add(integer("encoder_segments", closed(2, 1024), "Encoder marker_segment task: segments (classes)"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().segments))
      .add(integer("encoder_word_k", closed(1, 64), "Encoder line_word task: which word of each line is tagged"),
           POSGRAD_MEMBER(template of<EncoderTrackConfig>().word_k));
}

// Its values in each preset (compare_preset).
// The quick and full presets run both tracks: claim (b) is judged on the encoders' tasks (about 3
// minutes of the quick default on 2 cores); tiny stays on the decoder (--track both adds it).
void preset(CompareConfig& c, const std::string& name) {
  c.of<EncoderTrackConfig>() = encoder_track_preset(name);
  c.track = name == "tiny" ? "decoder" : "both";
}

}  // namespace

StudyEntry encoder_study() {
  StudyEntry e;
  e.name = EncoderTrackResult::kStudy;
  e.summary =
      "encoder track: bidirectional encoders pretrained by masked-LM, fine-tuned on classification and labelling "
      "tasks, scored by length (claim b where the article made it)";
  e.init_settings = [](Parts& p) { p.get<EncoderTrackConfig>(); };
  e.options = options;
  e.preset = preset;
  e.validate = validate;
  e.enabled = [](const CompareConfig& c) { return c.track != "decoder"; };
  e.check_data = [](const CompareConfig& cfg, const CorpusData*) { (void)load_encoder_track_data(cfg); };
  e.own_units = encoder_units;
  // Its units read the corpus and the tokenizer of the experiment; their model is sized by the
  // --encoder-* options alone.
  e.own_units_read = [](const std::string& option) { return option == "corpus" || option == "tokenizer"; };
  e.run_own_unit = [](const CompareConfig& cfg, const std::string& method, uint64_t seed) {
    return encoder_unit_to_json(run_compare_encoder_unit(cfg, method, seed));
  };
  e.collect = [](const CompareConfig& cfg, const std::vector<json>& units, ComparisonResult& r) {
    std::vector<EncoderUnitResult> us;
    for (size_t i = 0; i < units.size(); ++i)
      us.push_back(
          encoder_unit_from_json(units[i], "the encoder unit " + std::to_string(i + 1) + " sent by its process"));
    r.parts.get<EncoderTrackResult>() = collect_encoder_track(cfg, std::move(us));
  };
  e.to_json = [](const ComparisonResult& r, json& j) {
    if (const auto* t = r.parts.find<EncoderTrackResult>()) j["encoder"] = to_json(*t);
  };
  e.from_json = [](const json& j, ComparisonResult& r, const std::string& source) {
    if (j.contains("encoder")) r.parts.get<EncoderTrackResult>() = encoder_track_from_json(j.at("encoder"), source);
  };
  e.check = check;
  e.write_files = [](const ComparisonResult& r, const ReportDir& out) {
    if (const auto* t = r.parts.find<EncoderTrackResult>())
      write_file_atomic(out.dir + "/encoder_results.csv", encoder_results_csv(*t));
    return std::vector<std::string>{};
  };
  e.markdown = [](const ComparisonResult& r, const ReportDir&) {
    const auto* t = r.parts.find<EncoderTrackResult>();
    return t ? encoder_report_markdown(*t) + "\n" : std::string();
  };
  // No claims of its own: the article's claim (b) reads this track (compare/studies/article/article.cpp).
  e.report_alone = alone;
  return e;
}

}  // namespace posgrad::train
