// markdown.h — the pieces the report's sections (compare/report.cpp, compare/studies/suite/length_suite_report.cpp)
// share: numbers at a fixed precision, a summary over seeds as one cell, a Markdown pipe table, and
// running a gnuplot script for their plots.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compare/stats.h"

namespace posgrad::train::markdown {

// v with `prec` digits after the point ("%.*f"); nan, inf and -inf spelled out.
std::string num(double v, int prec = 6);

// "4.312 ± 0.021 [4.260, 4.364]" (mean ± std [95% interval]); one seed: the mean; none: "n/a".
std::string cell(const Summary& s, int prec);
// The same for a quantity bounded to [lo, hi] (an accuracy or F1: [0, 1]): the Student-t interval's
// ends are clipped to the bounds, which the quantity cannot leave (the mean and std are not).
std::string bounded_cell(const Summary& s, int prec, double lo, double hi);

// A GitHub-flavoured Markdown pipe table. The first `label_columns` columns are left-aligned
// (labels), the others right-aligned (numbers); text = true left-aligns every column (prose).
class Table {
 public:
  explicit Table(std::vector<std::string> header, bool text = false, size_t label_columns = 1)
      : header_(std::move(header)), text_(text), label_columns_(label_columns) {}
  void row(std::vector<std::string> r) { rows_.push_back(std::move(r)); }
  std::string markdown() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  bool text_ = false;
  size_t label_columns_ = 1;
};

// Runs gnuplot on the script file `script` (a plain file name, relative to `dir`) with `dir` as its
// working directory, started from an argument vector (data/process.h): no shell sees the directory's
// name, and the script names its data and PNG files relative to `dir`, so no path of the user's
// appears in gnuplot's input either. False (with a warning naming the script and gnuplot's output)
// when it cannot be started or fails. A report without its plots is still a report.
bool run_gnuplot(const std::string& dir, const std::string& script);
// run_gnuplot on "<name>.gp" for each name; returns the names whose "<name>.png" it drew.
std::vector<std::string> draw(const std::string& dir, const std::vector<std::string>& names);

// A figure of one panel per method and one line per layer: profiles[i] = (method, its (layer, index)
// values), the index plotted at x = index + x0. Writes <name>.dat and <name>.gp into dir (settings:
// further gnuplot lines such as axes and ranges; positive_only leaves out values <= 0, for a log
// axis; label(l) names layer l's line, default "layer l") and draws it; returns the names drawn.
struct LayerPanels {
  std::string name, title, settings;
  int64_t x0 = 0;
  bool positive_only = false;
  std::function<std::string(size_t layer)> label;
};
std::vector<std::string> draw_layer_panels(
    const std::string& dir, const LayerPanels& figure,
    const std::vector<std::pair<std::string, const std::vector<std::vector<double>>*>>& profiles);

// The house style of every plot: the PNG terminal at width x height pixels with a font of `font`
// points, without enhanced text (method names such as "rope+yarn" stay literal), a grid, the key
// outside on the right. The default size is a single-panel plot's.
std::string gnuplot_style(int width = 1000, int height = 650, int font = 11);

}  // namespace posgrad::train::markdown
