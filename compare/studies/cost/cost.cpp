// cost.cpp — see cost.h.
#include "compare/studies/cost/cost.h"
#include "tensor/option_table.h"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <sstream>

#include "autograd/ops.h"
#include "compare/markdown.h"
#include "compare/method.h"
#include "compare/studies/lm/lm.h"
#include "data/fileio.h"
#include "train/interrupt.h"
#include "train/options.h"
#include "train/threads.h"
#include "train/trainer.h"

namespace posgrad::train {

namespace {

struct Bench {
  std::unique_ptr<nn::GPT> model;
  std::unique_ptr<AdamW> opt;
  Generator init{1}, dropout{2}, data{3};
  int64_t batch = 1;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

CostResult measure_cost(const CompareConfig& cfg) {
  // --threads holds here too, whether or not this process trained a unit before (a re-run that keeps
  // every unit trains none): a fixed count for every round, or the OpenMP default.
  std::optional<ThreadGovernor> threads;
  if (cfg.base.threads > 0) threads.emplace(cfg.base.threads);
  CostResult r;
  r.rounds = cfg.of<CostSettings>().rounds;
  r.threads = omp_get_max_threads();
  r.lengths = cfg.of<CostSettings>().lengths;
  const Device dev = Device::parse(cfg.base.device);
  const int64_t tokens = cfg.base.batch_size * cfg.base.model.block_size;
  std::map<std::pair<std::string, int64_t>, Bench> benches;
  for (int64_t T : cfg.of<CostSettings>().lengths)
    for (const auto& m : cfg.methods) {
      Bench& b = benches[{m, T}];
      nn::GPTConfig mc = method_model(cfg.base.model, m);
      mc.block_size = T;
      mc.vocab_size = 256;
      mc.dropout = 0;
      b.model = std::make_unique<nn::GPT>(mc, b.init, b.dropout);
      b.model->to(dev);
      b.opt = std::make_unique<AdamW>(decay_groups(b.model->named_parameters(), cfg.base.weight_decay),
                                      AdamWOptions(cfg.base.lr).betas(cfg.base.beta1, cfg.base.beta2));
      b.batch = std::max<int64_t>(1, tokens / T);
      r.rows.push_back({m, "attention", T, b.batch, {}, 0, b.model->num_parameters()});
      r.rows.push_back({m, "step", T, b.batch, {}, 0, b.model->num_parameters()});
    }
  auto row = [&](const std::string& m, const std::string& what, int64_t T) -> CostRow& {
    for (auto& x : r.rows)
      if (x.method == m && x.what == what && x.T == T) return x;
    throw std::logic_error("cost row missing");
  };
  const LRSchedule constant{cfg.base.lr, cfg.base.lr, 0, 1, false};
  for (int64_t round = 0; round <= cfg.of<CostSettings>().rounds; ++round) {
    for (int64_t T : cfg.of<CostSettings>().lengths)
      for (const auto& m : cfg.methods) {
        if (interrupt_requested())
          throw Interrupted(std::string("interrupted by ") + signal_name(interrupt_signal()) +
                                " during the cost benchmark (it is measured again on resume)",
                            cfg.out_dir, round, interrupt_signal());
        Bench& b = benches.at({m, T});
        nn::GPT& model = *b.model;
        const int64_t C = model.config().n_embd;
        // One attention layer, forward + backward, on the output of the embedding.
        Tensor x = randn({b.batch, T, C}, b.data, DType::Float32, Device::cpu()).to(dev);
        x.set_requires_grad(true);
        const auto& block = (*model.blocks)[0];
        auto t0 = std::chrono::steady_clock::now();
        Tensor y = block.attn->forward(x, model.position_encoding(), 0, 0);
        sum(y).backward();
        (void)sum(x.grad()).item();  // completes queued device work before the clock stops
        const double attn = seconds_since(t0);
        model.zero_grad();
        // One training step.
        auto& bk = backend(dev.type);
        const size_t before = bk.current_bytes();
        bk.reset_peak();
        std::vector<int64_t> ids(static_cast<size_t>(b.batch * (T + 1)));
        for (auto& id : ids) id = static_cast<int64_t>(b.data.next_u64() % 256);
        Tensor seq = Tensor::from_ints(ids, {b.batch, T + 1});
        t0 = std::chrono::steady_clock::now();
        training_step(model, *b.opt, constant, 0, 1, cfg.base.grad_clip, dev, [&] {
          return std::make_pair(seq.narrow(1, 0, T).contiguous(), seq.narrow(1, 1, T).contiguous());
        });
        const double step = seconds_since(t0);
        const size_t peak = bk.peak_bytes();
        if (round == 0) continue;  // warm-up
        row(m, "attention", T).seconds.push_back(attn);
        CostRow& s = row(m, "step", T);
        s.seconds.push_back(step);
        s.peak_bytes = std::max<int64_t>(s.peak_bytes, static_cast<int64_t>(peak > before ? peak - before : 0));
      }
    if (round > 0) spdlog::info("cost benchmark: round {}/{} done", round, cfg.of<CostSettings>().rounds);
  }
  return r;
}

double CostRow::median() const {
  if (seconds.empty()) return NAN;
  std::vector<double> s = seconds;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

double CostRow::spread() const {
  if (seconds.empty()) return NAN;
  const auto [lo, hi] = std::minmax_element(seconds.begin(), seconds.end());
  return (*hi - *lo) / median();
}

double CostResult::noise() const {
  std::vector<double> s;
  for (const auto& r : rows) s.push_back(r.spread());
  if (s.empty()) return NAN;
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}

const CostRow* CostResult::find(const std::string& method, const std::string& what, int64_t T) const {
  for (const auto& r : rows)
    if (r.method == method && r.what == what && r.T == T) return &r;
  return nullptr;
}

std::vector<double> CostResult::log_ratios(const std::string& method, const std::string& reference,
                                           const std::string& what, int64_t T) const {
  const CostRow *a = find(method, what, T), *b = find(reference, what, T);
  std::vector<double> out;
  if (!a || !b || a->seconds.size() != b->seconds.size()) return out;
  for (size_t i = 0; i < a->seconds.size(); ++i) out.push_back(std::log(a->seconds[i] / b->seconds[i]));
  return out;
}

std::string ratio_text(const std::vector<double>& log_ratios, int prec) {
  const Summary s = summarize(log_ratios);
  if (s.n == 0) return "n/a";
  if (!s.has_interval()) return markdown::num(std::exp(s.mean), prec) + " (1 round)";
  return markdown::num(std::exp(s.mean), prec) + " [" + markdown::num(std::exp(s.ci_low), prec) + ", " +
         markdown::num(std::exp(s.ci_high), prec) + "]";
}

namespace {

using json = nlohmann::json;
using markdown::num;
using markdown::Table;

void write_csv(const CostResult& k, const std::string& path) {
  std::string csv = "method,measurement,T,batch,rounds,median_ms,min_ms,max_ms,spread,peak_mib,parameters\n";
  for (const auto& c : k.rows) {
    if (c.seconds.empty()) continue;
    const auto [lo, hi] = std::minmax_element(c.seconds.begin(), c.seconds.end());
    csv += c.method + "," + c.what + "," + std::to_string(c.T) + "," + std::to_string(c.batch) + "," +
           std::to_string(c.seconds.size()) + "," + num(1e3 * c.median(), 3) + "," + num(1e3 * *lo, 3) + "," +
           num(1e3 * *hi, 3) + "," + num(c.spread(), 3) + "," + num(static_cast<double>(c.peak_bytes) / (1 << 20), 2) +
           "," + std::to_string(c.parameters) + "\n";
  }
  write_file_atomic(path, csv);
}

void write_part(const ComparisonResult& r, json& j) {
  const CostResult& k = r.parts.value<CostResult>();
  json rows = json::array();
  for (const auto& c : k.rows)
    rows.push_back({{"method", c.method},
                    {"what", c.what},
                    {"T", c.T},
                    {"batch", c.batch},
                    {"seconds", c.seconds},
                    {"peak_bytes", c.peak_bytes},
                    {"parameters", c.parameters}});
  j["cost"] = {{"rounds", k.rounds}, {"threads", k.threads}, {"lengths", k.lengths}, {"rows", rows}};
}

void read_part(const json& j, ComparisonResult& r, const std::string&) {
  if (!j.contains("cost")) return;
  const json& c = j.at("cost");
  CostResult& k = r.parts.get<CostResult>();
  k.rounds = json_int(c.at("rounds"));
  k.threads = json_int(c.at("threads"));
  k.lengths = json_list<int64_t>(c.at("lengths"), json_int);
  for (const auto& row : c.at("rows"))
    k.rows.push_back({json_text(row.at("method")), json_text(row.at("what")), json_int(row.at("T")),
                      json_int(row.at("batch")), json_list<double>(row.at("seconds"), json_real),
                      json_int(row.at("peak_bytes")), json_int(row.at("parameters"))});
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

void check(const ComparisonResult& r, const ValueCheck& c, const std::string&, const std::string&) {
  const CompareConfig& cfg = r.config;
  const CostResult& k = r.parts.value<CostResult>();
  const bool decoder = cfg.track != "encoder";
  using P = std::string;
  auto at = [](const P& p, size_t i) { return json_path_at(p, i); };
  auto dot = [](const P& p, const P& key) { return json_path_key(p, key); };
  c.count(k.threads, "cost.threads");
  if (decoder) {  // every method at every --cost-lengths, attention and step, one time per round
    c.equal(k.rounds, cfg.of<CostSettings>().rounds, "cost.rounds", "--cost-rounds");
    if (k.lengths != cfg.of<CostSettings>().lengths)
      c.fail("cost.lengths", ValueCheck::list(k.lengths),
             "expected --cost-lengths " + ValueCheck::list(cfg.of<CostSettings>().lengths));
    c.size(k.rows.size(), cfg.methods.size() * cfg.of<CostSettings>().lengths.size() * 2, "cost.rows",
           "one attention and one step row per method and --cost-lengths");
    for (const auto& m : cfg.methods)
      for (int64_t T : cfg.of<CostSettings>().lengths)
        for (const char* what : {"attention", "step"})
          if (!k.find(m, what, T))
            c.fail("cost.rows", "", std::string("no ") + what + " row for " + m + " at T = " + std::to_string(T));
    for (size_t i = 0; i < k.rows.size(); ++i)
      c.size(k.rows[i].seconds.size(), static_cast<size_t>(cfg.of<CostSettings>().rounds),
             at("cost.rows", i) + ".seconds", "one per round (--cost-rounds)");
  }
  for (size_t i = 0; i < k.lengths.size(); ++i) c.positive(k.lengths[i], at("cost.lengths", i));
  for (size_t i = 0; i < k.rows.size(); ++i) {
    const CostRow& row = k.rows[i];
    const std::string p = at("cost.rows", i);
    if (!contains(cfg.methods, row.method))
      c.fail(dot(p, "method"), ValueCheck::quoted(row.method),
             "not among the configured methods (" + ValueCheck::list(cfg.methods) + ")");
    if (row.what != "attention" && row.what != "step")
      c.fail(dot(p, "what"), ValueCheck::quoted(row.what), "expected \"attention\" or \"step\"");
    c.positive(row.T, dot(p, "T"));
    c.positive(row.batch, dot(p, "batch"));
    for (size_t k = 0; k < row.seconds.size(); ++k) c.non_negative(row.seconds[k], at(dot(p, "seconds"), k));
    c.count(row.peak_bytes, dot(p, "peak_bytes"));
    c.count(row.parameters, dot(p, "parameters"));
  }
}

// Step and attention times relative to the first method, from the per-round ratios (paired by
// round), with the resolution they reach.
std::string ratio_table(const CostResult& k, const std::vector<std::string>& methods) {
  if (methods.size() < 2 || k.lengths.empty()) return "";
  const std::string& ref = methods.front();
  std::vector<std::string> ch = {"method"};
  for (int64_t T : k.lengths) {
    ch.push_back("step / " + ref + " T=" + std::to_string(T));
    ch.push_back("attention / " + ref + " T=" + std::to_string(T));
  }
  Table t(ch);
  std::vector<double> half;  // the relative half-widths of the step ratios' intervals
  for (size_t i = 1; i < methods.size(); ++i) {
    std::vector<std::string> cells = {methods[i]};
    for (int64_t T : k.lengths)
      for (const char* what : {"step", "attention"}) {
        const auto lr = k.log_ratios(methods[i], ref, what, T);
        cells.push_back(ratio_text(lr));
        const Summary s = summarize(lr);
        if (s.has_interval() && what == std::string("step")) half.push_back(std::exp(s.ci_high - s.mean) - 1);
      }
    t.row(cells);
  }
  std::ostringstream md;
  md << "Time relative to " << ref << " (the first of --methods), paired by round: the geometric mean of the per-round "
     << "ratios with its 95% interval (Student's t on the log ratios over " << k.rounds << " rounds). A ratio whose "
     << "interval excludes 1 is a resolved difference.";
  if (!half.empty()) {
    std::sort(half.begin(), half.end());
    md << " Resolution: the median half-width of the step ratios' intervals is " << num(100 * half[half.size() / 2], 1)
       << "%, so differences of about that size or larger are resolved at this number of rounds (the half-width "
       << "shrinks as 1 / sqrt(rounds): --cost-rounds).";
  }
  md << "\n\n" << t.markdown() << "\n";
  return md.str();
}

std::string section(const ComparisonResult& r, const ReportDir&) {
  const CompareConfig& c = r.config;
  const CostResult& k = r.parts.value<CostResult>();
  std::ostringstream md;
  const double noise = k.noise();
  md << "## Cost (interleaved benchmark, not training time)\n\n"
     << k.rounds << " rounds after a warm-up, every method once per round and length, " << k.threads
     << " threads; median time with [min, max]. Noise figure: the median (max - min) / median over all measurements "
     << "is " << num(100 * noise, 1) << "%; a difference smaller than that is inside the noise. Memory: the peak "
     << "of posgrad's allocator during the training step (not the RSS). Parameters of the benchmark models "
     << "(256-symbol vocabulary, block_size = T).\n\n";
  std::vector<std::string> ch = {"method", "position parameters"};
  for (int64_t T : k.lengths) {
    ch.push_back("step T=" + std::to_string(T) + " (ms)");
    ch.push_back("attention T=" + std::to_string(T) + " (ms)");
  }
  ch.push_back("peak memory at T=" + (k.lengths.empty() ? std::string("?") : std::to_string(k.lengths.back())) +
               " (MiB)");
  Table cost(ch);
  for (const auto& m : c.methods) {
    const Summary pp = summary(r, m, lm_metric(Quantity::PositionParameters));  // exact: the same for every seed
    std::vector<std::string> cells = {m, pp.n ? num(pp.mean, 0) : "n/a"};
    const CostRow* last = nullptr;
    for (int64_t T : k.lengths)
      for (const std::string what : {"step", "attention"}) {
        const CostRow* x = k.find(m, what, T);
        if (!x || x->seconds.empty()) {
          cells.push_back("n/a");
          continue;
        }
        const auto [lo, hi] = std::minmax_element(x->seconds.begin(), x->seconds.end());
        cells.push_back(num(1e3 * x->median(), 2) + " [" + num(1e3 * *lo, 2) + ", " + num(1e3 * *hi, 2) + "]");
        if (what == std::string("step")) last = x;
      }
    cells.push_back(last ? num(static_cast<double>(last->peak_bytes) / (1 << 20), 1) : "n/a");
    cost.row(cells);
  }
  md << cost.markdown() << "\n";
  for (int64_t T : k.lengths) {  // which step times are inside the noise of the cheapest
    const CostRow* best = nullptr;
    for (const auto& m : c.methods) {
      const CostRow* x = k.find(m, "step", T);
      if (x && !x->seconds.empty() && (!best || x->median() < best->median())) best = x;
    }
    if (!best) continue;
    std::string close;
    for (const auto& m : c.methods) {
      const CostRow* x = k.find(m, "step", T);
      if (x && x != best && !x->seconds.empty() && x->median() < best->median() * (1 + noise))
        close += (close.empty() ? "" : ", ") + m;
    }
    md << "- T=" << T << ": cheapest step " << best->method << " (" << num(1e3 * best->median(), 2) << " ms)"
       << (close.empty() ? "; every other method is dearer by more than the noise"
                         : "; inside the noise of it: " + close)
       << "\n";
  }
  md << "\n" << ratio_table(k, c.methods);

  return md.str();
}

// The benchmark's models at each --cost-lengths T, with the training batch scaled to T.
void validate(const CompareConfig& cfg) {
  for (int64_t T : cfg.of<CostSettings>().lengths) {
    TrainConfig b = cfg.base;
    b.model.block_size = T;
    b.batch_size = std::max<int64_t>(1, cfg.base.batch_size * cfg.base.model.block_size / T);
    check_memory(b, T);
  }
}

// Its rows of the option table (compare/options.h).
void options(opt::Table<CompareConfig>& t) {
  using namespace opt;
  Rows<CompareConfig> r(t);
  r.group("Cost benchmark")
      .add(integer_list("cost_lengths", closed(1, 1 << 16), 1, 8, "Sequence lengths timed", "tokens"),
           POSGRAD_MEMBER(template of<CostSettings>().lengths))
      .add(result_neutral(integer("cost_rounds", closed(1, 1000),
                                  "Interleaved rounds (every method once per round, after a warm-up; measured again on "
                                  "every re-run)")),
           POSGRAD_MEMBER(template of<CostSettings>().rounds));
}

// Its values in each preset (compare_preset).
void preset(CompareConfig& c, const std::string& name) {
  if (name == "tiny") {
    c.of<CostSettings>().lengths = {16, 32};
    c.of<CostSettings>().rounds = 2;
  }
}

}  // namespace

StudyEntry cost_study() {
  StudyEntry e;
  e.name = CostResult::kStudy;
  e.summary =
      "cost benchmark: interleaved timing of one attention layer and one training step per method and length, "
      "and the allocator's peak memory";
  e.init_settings = [](Parts& p) { p.get<CostSettings>(); };
  e.options = options;
  e.preset = preset;
  e.validate = validate;
  e.enabled = [](const CompareConfig& c) { return c.track != "encoder"; };
  e.run_experiment = [](const CompareConfig& cfg, ComparisonResult& r) {
    spdlog::info("=== cost benchmark: {} rounds over {} methods x {} lengths ===", cfg.of<CostSettings>().rounds,
                 cfg.methods.size(), cfg.of<CostSettings>().lengths.size());
    r.parts.get<CostResult>() = measure_cost(cfg);
  };
  e.to_json = write_part;
  e.from_json = read_part;
  e.check = check;
  e.write_files = [](const ComparisonResult& r, const ReportDir& out) {
    write_csv(r.parts.value<CostResult>(), out.dir + "/cost.csv");
    return std::vector<std::string>{};
  };
  e.markdown = section;
  return e;
}

}  // namespace posgrad::train
