// markdown.cpp — see markdown.h.
#include "compare/markdown.h"
#include <algorithm>

#include "data/process.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

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

bool run_gnuplot(const std::string& dir, const std::string& script) {
  const ProcessResult r = run_process({"gnuplot", script}, dir);
  if (!r.ok())
    spdlog::warn("gnuplot {} on {} (in {}): {}", r.started ? "failed" : "could not be started", script, dir, r.output);
  return r.ok();
}

std::vector<std::string> draw(const std::string& dir, const std::vector<std::string>& names) {
  std::vector<std::string> made;
  for (const auto& n : names)
    if (run_gnuplot(dir, n + ".gp") && std::filesystem::exists(dir + "/" + n + ".png")) made.push_back(n);
  return made;
}

std::string gnuplot_style(int width, int height, int font) {
  return "set terminal pngcairo size " + std::to_string(width) + "," + std::to_string(height) +
         " noenhanced font 'Sans," + std::to_string(font) + "'\nset grid\nset key outside right top\n";
}

std::vector<std::string> draw_layer_panels(
    const std::string& dir, const LayerPanels& figure,
    const std::vector<std::pair<std::string, const std::vector<std::vector<double>>*>>& profiles) {
  if (profiles.empty()) return {};
  std::ofstream dat(dir + "/" + figure.name + ".dat");
  std::ofstream gp(dir + "/" + figure.name + ".gp");
  const int n = static_cast<int>(profiles.size());
  const int cols = std::min(n, 4), rows = (n + cols - 1) / cols;
  gp << gnuplot_style(420 * cols, 330 * rows, 9) << "set output '" << figure.name << ".png'\nset multiplot layout "
     << rows << "," << cols << " title '" << figure.title << "'\n"
     << figure.settings;
  int idx = 0;
  for (const auto& [method, by_layer] : profiles) {
    std::string plot = "plot ";
    for (size_t l = 0; l < by_layer->size(); ++l) {
      const auto& v = (*by_layer)[l];
      dat << "# " << method << " layer " << l << "\n";
      for (size_t i = 0; i < v.size(); ++i)
        if (!figure.positive_only || v[i] > 0) dat << static_cast<int64_t>(i) + figure.x0 << " " << v[i] << "\n";
      dat << "\n\n";
      plot += std::string(l ? ", " : "") + "'" + figure.name + ".dat' index " + std::to_string(idx++) +
              " with lines lw 2 title '" + (figure.label ? figure.label(l) : "layer " + std::to_string(l)) + "'";
    }
    gp << "set title '" << method << "'\n" << plot << "\n";
  }
  gp << "unset multiplot\n";
  dat.close();
  gp.close();
  return draw(dir, {figure.name});
}

}  // namespace posgrad::train::markdown
