// method.cpp — see method.h.
#include "compare/method.h"

#include <algorithm>

#include "nn/posenc/position_encoding.h"
#include "tensor/errors.h"
#include "train/options.h"

namespace posgrad::train {

namespace {

constexpr const char* kSinks = "attention_sinks";  // the one model option a variant may set

// The specs a variant of `kind` may set: its encoding's options (every encoding's when it composes
// others), then attention_sinks.
std::vector<opt::Spec> settable(const std::string& kind) {
  std::vector<opt::Spec> out;
  const nn::PosEncEntry& e = nn::position_encoding_entry(kind);
  if (e.composes)
    out = nn::position_encoding_options();
  else
    out = e.options;
  for (const auto& o : train_options())
    if (o.spec.name == kSinks) out.push_back(o.spec);
  return out;
}

bool value_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '+' || c == '-';
}

opt::Value base_value(const nn::GPTConfig& base, const std::string& name) {
  if (name == kSinks) return opt::Value(base.attention_sinks);
  return base.pos.options.at(name);
}

}  // namespace

namespace {

// A value as the flag prints it, less the '+' of a positive exponent ("5e+05" -> "5e05", which reads
// back the same): a method's name holds no '+', the separator of the rows derived from it
// ("rope+yarn").
std::string value_text(const opt::Value& v) {
  std::string s = opt::format(v);
  for (size_t at = s.find("e+"); at != std::string::npos; at = s.find("e+", at)) s.erase(at + 1, 1);
  return s;
}

}  // namespace

std::string MethodSpec::name() const {
  if (settings.empty()) return kind;
  std::string out = kind + "[";
  for (size_t i = 0; i < settings.size(); ++i) {
    if (i) out += ';';  // appended piece by piece (GCC 12's false -Wrestrict on "x" + std::string)
    out += settings[i].first;
    out += '=';
    out += value_text(settings[i].second);
  }
  out += ']';
  return out;
}

MethodSpec parse_method(const std::string& text) {
  const std::string where = "--methods '" + text + "'";
  MethodSpec m;
  const size_t open = text.find('[');
  m.kind = text.substr(0, open);
  const auto kinds = nn::position_encoding_kinds();
  if (std::find(kinds.begin(), kinds.end(), m.kind) == kinds.end()) {
    const std::string near = opt::nearest(m.kind, kinds);
    std::string known;
    for (const auto& k : kinds) known += (known.empty() ? "" : ", ") + k;
    throw UsageError(where + ": unknown position encoding '" + m.kind + "'" +
                     (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; known: " + known +
                     ", each optionally with settings KIND[NAME=VALUE;...]");
  }
  if (open == std::string::npos) return m;
  POSGRAD_CHECK(
      text.back() == ']' && text.find('[', open + 1) == std::string::npos && text.find(']') == text.size() - 1,
      UsageError, where, ": a variant is KIND[NAME=VALUE;NAME=VALUE...], one bracket closed at the end");
  const std::string inner = text.substr(open + 1, text.size() - open - 2);
  POSGRAD_CHECK(!inner.empty(), UsageError, where, ": empty brackets (the plain method is '", m.kind, "')");
  const std::vector<opt::Spec> specs = settable(m.kind);
  size_t start = 0;
  while (start <= inner.size()) {
    const size_t end = std::min(inner.find(';', start), inner.size());
    const std::string item = inner.substr(start, end - start);
    const size_t eq = item.find('=');
    POSGRAD_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), UsageError, where, ": '", item,
                  "' is not NAME=VALUE");
    std::string name = item.substr(0, eq);
    std::replace(name.begin(), name.end(), '-', '_');
    const std::string value = item.substr(eq + 1);
    auto spec = std::find_if(specs.begin(), specs.end(), [&](const opt::Spec& s) { return s.name == name; });
    if (spec == specs.end()) {
      std::vector<std::string> names;
      for (const auto& s : specs) names.push_back(s.name);
      const std::string near = opt::nearest(name, names);
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UsageError(where + ": '" + name + "' is not a setting of " + m.kind +
                       (near.empty() ? "" : " (did you mean '" + near + "'?)") + "; its settings: " + known);
    }
    for (char c : value)
      POSGRAD_CHECK(value_char(c), UsageError, where, ": the value of ", name,
                    " may hold only letters, digits and _ . + - ", "(it names files and rows); set ", spec->flag(),
                    " for the whole experiment instead");
    POSGRAD_CHECK(std::none_of(m.settings.begin(), m.settings.end(), [&](const auto& s) { return s.first == name; }),
                  UsageError, where, ": sets ", name, " twice");
    m.settings.emplace_back(name, opt::parse(*spec, value, where + " " + name));
    start = end + 1;
  }
  std::sort(m.settings.begin(), m.settings.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return m;
}

std::string canonical_method(const std::string& text, const nn::GPTConfig& base) {
  const MethodSpec m = parse_method(text);
  for (const auto& [name, value] : m.settings)
    POSGRAD_CHECK(value != base_value(base, name), UsageError, "--methods '", text, "': ", name, "=",
                  opt::format(value), " is the experiment's own value, so this is '", m.kind,
                  "' under another name; leave the setting out, or change the experiment's");
  return m.name();
}

std::string method_kind(const std::string& method) { return method.substr(0, method.find('[')); }

bool is_variant(const std::string& method) { return method.find('[') != std::string::npos; }

void apply_method(nn::GPTConfig& model, const std::string& method) {
  const MethodSpec m = parse_method(method);
  model.pos.kind = m.kind;
  for (const auto& [name, value] : m.settings) {
    if (name == kSinks)
      model.attention_sinks = std::get<bool>(value);
    else
      model.pos.set(name, value);
  }
}

nn::GPTConfig method_model(const nn::GPTConfig& base, const std::string& method) {
  nn::GPTConfig c = base;
  apply_method(c, method);
  return c;
}

std::unique_ptr<nn::GPT> copy_gpt(const nn::GPT& model,
                                  const std::vector<std::pair<std::string, opt::Value>>& pos_options,
                                  uint64_t dropout_seed, Device dev) {
  nn::GPTConfig c = model.config();
  for (const auto& [name, v] : pos_options) c.pos.set(name, v);
  Generator init(0), drop(dropout_seed);
  auto m = std::make_unique<nn::GPT>(c, init, drop);
  m->load_state_dict(model.state_dict());
  m->to(dev);
  return m;
}

}  // namespace posgrad::train
