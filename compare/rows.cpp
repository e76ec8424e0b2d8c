// rows.cpp — see rows.h.
#include "compare/rows.h"

namespace posgrad::train {

std::string Row::name() const {
  std::string n = method + variant;
  if (finetune > 0) n += " ft" + std::to_string(finetune) + "x";
  if (randomized) n += "+randomized";
  return n;
}

Row Row::parse(const std::string& name) {
  Row r;
  std::string rest = name;
  const std::string rnd = "+randomized";
  if (rest.size() > rnd.size() && rest.compare(rest.size() - rnd.size(), rnd.size(), rnd) == 0) {
    r.randomized = true;
    rest.resize(rest.size() - rnd.size());
  }
  const auto ft = rest.rfind(" ft");
  if (ft != std::string::npos && rest.size() > ft + 4 && rest.back() == 'x') {
    const std::string m = rest.substr(ft + 3, rest.size() - ft - 4);
    if (!m.empty() && m.find_first_not_of("0123456789") == std::string::npos && m.size() < 10) {
      r.finetune = std::stoll(m);
      rest.resize(ft);
    }
  }
  // A method variant's settings ("rope[rope_base=1e+06]", compare/method.h) may hold a '+'; the row's
  // own suffix starts after its closing bracket.
  const auto bracket = rest.find(']');
  const auto cut = rest.find_first_of("+@", bracket == std::string::npos ? 0 : bracket);
  r.method = rest.substr(0, cut);
  if (cut != std::string::npos) r.variant = rest.substr(cut);
  return r;
}

}  // namespace posgrad::train
