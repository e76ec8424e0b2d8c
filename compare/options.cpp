// options.cpp — see options.h. The experiment's own rows here, then each study's (StudyEntry::options,
// in registry order), then the training options of the decoder units.
#include "compare/options.h"

#include <algorithm>

#include "compare/method.h"
#include "compare/study.h"

#include "nn/posenc/position_encoding.h"
#include "train/options.h"

namespace posgrad::train {

using namespace opt;

const Table<CompareConfig>& compare_options() {
  static const Table<CompareConfig> table = [] {
    Table<CompareConfig> t;
    Rows<CompareConfig> r(t);
    r.group("Experiment")
        .add(choice_list("methods", {}, 32,
                         [] {
                           std::string k;
                           for (const auto& kind : nn::position_encoding_kinds()) k += (k.empty() ? "" : ", ") + kind;
                           return "Position encodings to compare: " + k +
                                  "; all: every registered one, in registry order; a variant with settings of its "
                                  "own: KIND[NAME=VALUE;...], NAME one of KIND's options or attention_sinks, e.g. "
                                  "'rope[rope_partial=prope;rope_fraction=0.75]' or 'alibi[attention_sinks=true]' "
                                  "(quote it in a shell; compare/method.h)";
                         }()),
             POSGRAD_MEMBER(methods))
        .add(unsigned_list("seeds", 64, "Seeds; every method is trained once per seed (mean ± std over them)"),
             POSGRAD_MEMBER(seeds))
        .add(integer_list("eval_multipliers", closed(1, 64), 1, 16,
                          "Evaluation lengths as multiples of the training length"),
             POSGRAD_MEMBER(eval_multipliers))
        .add(integer("eval_tokens", closed(1, 1 << 24), "Validation tokens scored per evaluation length", "tokens"),
             POSGRAD_MEMBER(eval_tokens))
        .add(integer("per_position_multiplier", closed(1, 64),
                     "Window of the per-position loss, as a multiple of the training length"),
             POSGRAD_MEMBER(per_position_multiplier))
        .add(result_neutral(
                 text("out_dir", "Experiment directory (one run directory per method and seed inside)", false)),
             POSGRAD_MEMBER(out_dir))
        .add(result_neutral(added_later(
                 integer("jobs", closed(0, 64),
                         "Units (a method and seed, with its studies) trained at once, each on its share of "
                         "--threads, so at most --threads (0: one per thread with --device cpu and one process, "
                         "fewer if memory holds fewer of the largest unit, else 1); the results are the same "
                         "bits whatever it is"),
                 Value(int64_t{0}))),
             POSGRAD_MEMBER(jobs));
    // --methods all: every registered encoding; "all" stands alone.
    for (auto& o : t)
      if (o.spec.name == "methods") {
        auto set = o.set;
        o.set = [set](CompareConfig& c, Value v) {
          auto& list = std::get<std::vector<std::string>>(v);
          if (std::find(list.begin(), list.end(), "all") != list.end()) {
            POSGRAD_CHECK(list.size() == 1, UsageError,
                          "--methods: 'all' names every registered encoding and stands "
                          "alone, got ",
                          opt::format(v));
            list = nn::position_encoding_kinds();
          }
          for (auto& m : list) m = parse_method(m).name();  // canonical: settings sorted, values formatted
          set(c, std::move(v));
        };
      }
    for (const StudyEntry& s : studies())  // each study's rows, under its group (compare/study.h)
      if (s.options) s.options(t);
    auto base = lift<CompareConfig, TrainConfig>(train_options(), [](auto& c) -> auto& { return c.base; },
                                                 {"pos", "seed", "out_dir"});
    t.insert(t.end(), base.begin(), base.end());
    return t;
  }();
  return table;
}

}  // namespace posgrad::train
