// markdown.cpp — see markdown.h.
#include <algorithm>
#include "train/markdown.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>

namespace posgrad::train::markdown {

std::string num(double v, int prec) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}

std::string cell(const Summary& s, int prec) {
  if (s.n == 0) return "n/a";
  if (!s.has_interval()) return num(s.mean, prec);
  return num(s.mean, prec) + " ± " + num(s.std, prec) + " [" + num(s.ci_low, prec) + ", " + num(s.ci_high, prec) + "]";
}

std::string bounded_cell(const Summary& s, int prec, double lo, double hi) {
  if (s.n == 0 || !s.has_interval()) return cell(s, prec);
  return num(s.mean, prec) + " ± " + num(s.std, prec) + " [" + num(std::max(lo, s.ci_low), prec) + ", " +
         num(std::min(hi, s.ci_high), prec) + "]";
}

std::string Table::markdown() const {
  std::string s = "|";
  for (const auto& h : header_) s += " " + h + " |";
  s += "\n|";
  for (size_t i = 0; i < header_.size(); ++i) s += text_ || i < label_columns_ ? "---|" : "---:|";
  s += "\n";
  for (const auto& r : rows_) {
    s += "|";
    for (const auto& c : r) s += " " + c + " |";
    s += "\n";
  }
  return s;
}

bool run_gnuplot(const std::string& script) {
  const std::string cmd = "gnuplot '" + script + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return false;
  char buf[512];
  std::string out;
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int st = pclose(p);
  if (st != 0) spdlog::warn("gnuplot failed on {}: {}", script, out);
  return st == 0;
}

}  // namespace posgrad::train::markdown
