// passkey.cpp — see passkey.h.
#include "compare/studies/passkey/passkey.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "autograd/node.h"
#include "compare/method.h"
#include "compare/rows.h"
#include "compare/studies/lm/lm.h"
#include "data/length_tasks.h"
#include "data/passkey.h"
#include "train/finetune.h"
#include "train/optim.h"
#include "train/seeds.h"
#include "train/trainer.h"

namespace posgrad::train {

bool passkey_selects(const PasskeyConfig& cfg, const std::string& method) {
  if (cfg.methods.size() == 1 && cfg.methods.front() == "all") return true;
  return std::find(cfg.methods.begin(), cfg.methods.end(), method_kind(method)) != cfg.methods.end();
}

const PasskeyCell* PasskeyGrid::find(int64_t multiplier, double depth) const {
  for (const auto& c : cells)
    if (c.multiplier == multiplier && c.depth == depth) return &c;
  return nullptr;
}

int64_t passkey_correct(const Tensor& logits, const Tensor& y) {
  const data::LengthScore s = data::score_length_logits(logits, y);
  int64_t n = 0;
  for (size_t i = 0; i < s.correct.size(); ++i) n += s.correct[i] == s.scored[i];
  return n;
}

namespace {

data::PasskeyTemplate template_of(const PasskeyConfig& cfg) { return data::parse_passkey_template(cfg.template_name); }

// The generator of one test cell: fixed by (multiplier, depth) alone.
uint64_t cell_seed(int64_t multiplier, double depth) {
  uint64_t bits = 0;
  std::memcpy(&bits, &depth, sizeof bits);
  return 0x9a55ce11ULL ^ (static_cast<uint64_t>(multiplier) * 1000003ULL) ^ (bits * 0x9e3779b97f4a7c15ULL);
}

// The generators of the fine-tuning's examples and depths for a unit seed. Derived by their own
// arithmetic, not stream() (train/seeds.h), because every passkey number depends on them; kept as
// they are until the comparison's seeds change all at once.
struct PasskeySeeds {
  uint64_t examples, depths;
};
PasskeySeeds passkey_seeds(uint64_t seed) { return {seed * 1000003ULL + 0x9a55ULL, seed * 1000003ULL + 0x9a56ULL}; }

}  // namespace

PasskeyFinetune finetune_passkey(nn::GPT& model, const data::TokenSpan& train, const data::Tokenizer& tok,
                                 const PasskeyConfig& cfg, uint64_t seed, Device dev, const std::string& row) {
  const auto t0 = std::chrono::steady_clock::now();
  PasskeyFinetune r;
  const int64_t block = model.config().block_size;
  const PasskeySeeds seeds = passkey_seeds(seed);
  data::PasskeyGenerator gen(train, tok, cfg.key_length, template_of(cfg), seeds.examples);
  Generator depth_gen(seeds.depths);
  model.to(dev);
  const FinetuneSpec spec = study_finetune_spec(
      "passkey fine-tuning (" + (row.empty() ? std::string() : row + " ") + "seed " + std::to_string(seed) + ")",
      cfg.iters, cfg.lr, "");
  r.final_loss = finetune(model, spec, dev, [&](int64_t) {
                   std::vector<data::PasskeyExample> ex;
                   for (int64_t b = 0; b < cfg.batch; ++b) ex.push_back(gen.example(block + 1, depth_gen.next_unit()));
                   data::PasskeyBatch batch = data::passkey_batch(ex);
                   return std::make_pair(batch.x, batch.y);
                 }).final_loss;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

BatchMix passkey_pretrain_mix(const data::TokenSpan& train, const data::Tokenizer& tok, const PasskeyConfig& cfg,
                              uint64_t seed) {
  if (cfg.pretrain_fraction <= 0) return {};
  const data::PasskeyTemplate t = template_of(cfg);
  const int64_t key_length = cfg.key_length;
  const double fraction = cfg.pretrain_fraction;
  (void)data::PasskeyGenerator(train, tok, key_length, t, 0);  // the template and alphabet, refused now
  const uint64_t base = stream(seed, "passkey.pretrain");
  return [train, &tok, t, key_length, fraction, base](int64_t step, int64_t micro, Tensor& x, Tensor& y) {
    const int64_t rows = x.size(0), T = x.size(1);
    Generator g(stream(stream(base, static_cast<uint64_t>(step)), static_cast<uint64_t>(micro)));
    const double share = fraction * static_cast<double>(rows);
    int64_t n = static_cast<int64_t>(std::floor(share));
    if (g.next_unit() < share - static_cast<double>(n)) ++n;
    n = std::min(n, rows);
    std::vector<int64_t> order(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) order[static_cast<size_t>(i)] = i;
    for (int64_t i = 0; i < n; ++i)  // the first n of a partial Fisher-Yates shuffle: n distinct rows
      std::swap(order[static_cast<size_t>(i)],
                order[static_cast<size_t>(i + static_cast<int64_t>(g.next_u64() % static_cast<uint64_t>(rows - i)))]);
    data::PasskeyGenerator gen(train, tok, key_length, t, g.next_u64());
    int64_t* px = x.data<int64_t>();
    int64_t* py = y.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = order[static_cast<size_t>(i)];
      const data::PasskeyExample e = gen.example(T + 1, g.next_unit());
      std::copy(e.tokens.begin(), e.tokens.end() - 1, px + r * T);
      std::copy(e.tokens.begin() + 1, e.tokens.end(), py + r * T);
    }
  };
}

double passkey_key_loss(nn::GPT& model, const data::TokenSpan& val, const data::Tokenizer& tok,
                        const PasskeyConfig& cfg, Device dev) {
  model.eval();
  NoGradGuard ng;
  data::PasskeyGenerator gen(val, tok, cfg.key_length, template_of(cfg), stream(0, "passkey.key_loss"));
  std::vector<data::PasskeyExample> ex;
  for (int64_t i = 0; i < cfg.batch; ++i)
    ex.push_back(
        gen.example(model.config().block_size + 1, (static_cast<double>(i) + 0.5) / static_cast<double>(cfg.batch)));
  const data::PasskeyBatch b = data::passkey_batch(ex);
  return cross_entropy(model.forward(b.x.to(dev)), b.y.to(dev)).item();  // the mean over the key targets
}

PasskeyGrid evaluate_passkey(nn::GPT& model, const data::TokenSpan& val, const data::Tokenizer& tok,
                             const PasskeyConfig& cfg, Device dev) {
  PasskeyGrid grid;
  const int64_t block = model.config().block_size;
  const int64_t limit = model.position_encoding().max_length();
  model.eval();
  NoGradGuard ng;
  for (int64_t m : cfg.multipliers)
    for (double depth : cfg.depths) {
      PasskeyCell cell;
      cell.multiplier = m;
      cell.depth = depth;
      data::PasskeyGenerator gen(val, tok, cfg.key_length, template_of(cfg), cell_seed(m, depth));
      grid.alphabet = gen.alphabet();
      const int64_t length = m * block + 1;  // inputs of m · block tokens
      if ((limit >= 0 && m * block > limit) || length > gen.max_length()) {
        grid.cells.push_back(cell);  // n/a
        continue;
      }
      int64_t correct = 0;
      for (int64_t done = 0; done < cfg.examples; done += cfg.batch) {
        std::vector<data::PasskeyExample> ex;
        for (int64_t b = done; b < std::min(cfg.examples, done + cfg.batch); ++b)
          ex.push_back(gen.example(length, depth));
        const data::PasskeyBatch batch = data::passkey_batch(ex);
        const Tensor logits = model.forward(batch.x.to(dev));  // (B, T, V)
        correct += passkey_correct(logits.to(Device::cpu()), batch.y);
      }
      cell.examples = cfg.examples;
      cell.accuracy = static_cast<double>(correct) / static_cast<double>(cfg.examples);
      grid.cells.push_back(cell);
    }
  return grid;
}

std::map<std::string, PasskeyResult> run_passkey(const nn::GPT& model, const data::TokenSpan& train,
                                                 const data::TokenSpan& val, const data::Tokenizer& tok,
                                                 const PasskeyConfig& cfg, const std::string& method, uint64_t seed,
                                                 Device dev, const std::map<std::string, std::string>& skip) {
  const auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, PasskeyResult> rows;
  auto tuned = copy_gpt(model, {}, seed ^ 0x9a55d0ULL, dev);
  PasskeyFinetune f;
  if (cfg.iters > 0)
    f = finetune_passkey(*tuned, train, tok, cfg, seed, dev, method);
  else  // the pretrained model as it is (its passkey rows came with pretraining)
    f.final_loss = passkey_key_loss(*tuned, val, tok, cfg, dev);
  PasskeyResult plain{f.final_loss, evaluate_passkey(*tuned, val, tok, cfg, dev)};
  rows[method] = plain;
  std::string acc;
  for (const auto& c : plain.grid.cells)
    if (c.depth == cfg.depths.front()) acc += c.accuracy ? fmt::format(" {:.2f}", *c.accuracy) : std::string(" n/a");
  spdlog::info("[{} seed {}] passkey: loss on the key {:.3f}, accuracy by length at depth {}:{} ({})", method, seed,
               f.final_loss, cfg.depths.front(), acc,
               cfg.iters > 0 ? fmt::format("{:.1f} s fine-tuning", f.seconds) : std::string("not fine-tuned"));
  auto done = [&] {
    spdlog::info("[{} seed {}] passkey: {} row(s) in {:.1f} s", method, seed, rows.size(),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return rows;
  };
  if (variant_rows(method).empty()) return done();  // the encoding takes no RoPE scaling (compare/studies/lm/lm.h)
  for (const std::string scaling : {"linear", "dynamic", "yarn"}) {
    const std::string name = Row{method, "+" + scaling}.name();
    if (skip.count(name)) continue;
    PasskeyResult r;
    r.final_loss = f.final_loss;
    r.grid.alphabet = plain.grid.alphabet;
    for (int64_t m : cfg.multipliers) {
      if (m == 1) {  // s = 1 (and dynamic NTK up to the training length) is the plain model
        for (const auto& c : plain.grid.cells)
          if (c.multiplier == 1) r.grid.cells.push_back(c);
        continue;
      }
      auto v = copy_gpt(
          *tuned,
          {{"rope_scaling", scaling}, {"rope_scaling_factor", scaling == "dynamic" ? 1.0 : static_cast<double>(m)}}, 0,
          dev);
      PasskeyConfig one = cfg;
      one.multipliers = {m};
      const PasskeyGrid g = evaluate_passkey(*v, val, tok, one, dev);
      r.grid.cells.insert(r.grid.cells.end(), g.cells.begin(), g.cells.end());
    }
    rows[name] = r;
  }
  return done();
}

void check_passkey_data(const data::TokenSpan& train, const data::Tokenizer& tok, const PasskeyConfig& cfg,
                        int64_t block_size) {
  data::PasskeyGenerator gen(train, tok, cfg.key_length, template_of(cfg), 0);
  POSGRAD_CHECK(block_size + 1 <= gen.max_length() && block_size + 1 >= gen.min_length(), ValueError,
                "passkey: ", "a fine-tuning example of ", block_size + 1, " tokens needs between ", gen.min_length(),
                " and the training split's ", gen.max_length(), " tokens");
}

void validate_passkey(const PasskeyConfig& cfg, int64_t block_size) {
  if (cfg.iters == 0 && cfg.pretrain_fraction == 0) return;
  POSGRAD_CHECK(std::find(cfg.multipliers.begin(), cfg.multipliers.end(), 1) != cfg.multipliers.end(), UsageError,
                "--passkey-multipliers must include 1 (the training length, where the model is fine-tuned)");
  auto sorted_m = cfg.multipliers;
  std::sort(sorted_m.begin(), sorted_m.end());
  POSGRAD_CHECK(std::adjacent_find(sorted_m.begin(), sorted_m.end()) == sorted_m.end(), UsageError,
                "--passkey-multipliers lists a multiplier twice");
  for (double d : cfg.depths)
    POSGRAD_CHECK(std::isfinite(d) && d >= 0 && d <= 1, UsageError, "--passkey-depths: ", d,
                  " is not a depth in [0, 1] (the fraction of the filler before the needle)");
  auto sorted_d = cfg.depths;
  std::sort(sorted_d.begin(), sorted_d.end());
  POSGRAD_CHECK(std::adjacent_find(sorted_d.begin(), sorted_d.end()) == sorted_d.end(), UsageError,
                "--passkey-depths lists a depth twice");
  const int64_t need =
      data::passkey_overhead_bytes(data::parse_passkey_template(cfg.template_name), cfg.key_length) + 1;
  POSGRAD_CHECK(block_size + 1 >= need, UsageError, "--passkey-template ", cfg.template_name,
                " with --passkey-key-length ", cfg.key_length, " needs examples of at least ", need,
                " tokens (needle, question, key and one filler token; one token per byte), but the ",
                cfg.iters > 0 ? "fine-tuning" : "--passkey-pretrain-fraction rows'", " length is --block-size ",
                block_size, " + 1; use a longer --block-size or a shorter key",
                cfg.template_name == "short" ? "" : ", or --passkey-template short");
}

nlohmann::json passkey_to_json(const std::map<std::string, PasskeyResult>& rows) {
  nlohmann::json o = nlohmann::json::object();
  for (const auto& [row, r] : rows) {
    nlohmann::json cells = nlohmann::json::array();
    for (const auto& c : r.grid.cells)
      cells.push_back({{"multiplier", c.multiplier},
                       {"depth", c.depth},
                       {"examples", c.examples},
                       {"accuracy", c.accuracy ? nlohmann::json(*c.accuracy) : nlohmann::json(nullptr)}});
    o[row] = {{"final_loss", r.final_loss}, {"alphabet", r.grid.alphabet}, {"cells", cells}};
  }
  return o;
}

std::map<std::string, PasskeyResult> passkey_from_json(const nlohmann::json& j) {
  using json = nlohmann::json;
  if (!j.is_object()) throw json::type_error::create(302, "passkey: expected an object of rows", &j);
  auto number = [](const json& v) {
    if (!v.is_number()) throw json::type_error::create(302, "passkey: expected a number", &v);
    return v.get<double>();
  };
  auto integer = [](const json& v) {
    if (!v.is_number_integer()) throw json::type_error::create(302, "passkey: expected an integer", &v);
    return v.get<int64_t>();
  };
  std::map<std::string, PasskeyResult> out;
  for (const auto& [row, e] : j.items()) {
    PasskeyResult r;
    r.final_loss = number(e.at("final_loss"));
    r.grid.alphabet = e.at("alphabet").get<std::string>();
    for (const auto& c : e.at("cells")) {
      PasskeyCell cell;
      cell.multiplier = integer(c.at("multiplier"));
      cell.depth = number(c.at("depth"));
      cell.examples = integer(c.at("examples"));
      const json& a = c.at("accuracy");
      if (!a.is_null()) {
        const double v = number(a);
        if (!(v >= 0 && v <= 1)) throw json::out_of_range::create(401, "passkey: accuracy outside [0, 1]", &a);
        cell.accuracy = v;
      }
      r.grid.cells.push_back(cell);
    }
    out[row] = std::move(r);
  }
  return out;
}

}  // namespace posgrad::train
