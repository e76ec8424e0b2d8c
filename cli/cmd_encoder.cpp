// cmd_encoder.cpp — `posgrad fill-mask`: a pretrained encoder of the comparison's encoder track
// (posgrad compare --track encoder|both saves <out_dir>/encoder/<method>/seed<k>/) fills the masked
// characters of a text, BERT-style (all masks predicted at once), and lists its best candidates.
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "compare/studies/encoder/encoder.h"
#include "tensor/errors.h"

namespace posgrad::cli {

void add_fill_mask(CLI::App& app) {
  auto* sub =
      app.add_subcommand("fill-mask",
                         "Fill the masked characters of a text with a pretrained encoder of posgrad compare --track "
                         "encoder|both (prints the filled text, then the candidates of each mask)");
  auto run = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  auto mask = std::make_shared<std::string>("_");
  auto top = std::make_shared<int64_t>(5);
  sub->add_option("--run", *run, "Encoder directory: <compare out_dir>/encoder/<method>/seed<k>")->required();
  sub->add_option("--text", *text, "Text with one or more mask characters")->required();
  sub->add_option("--mask-char", *mask, "The character that marks a masked position: one byte (ASCII)")
      ->capture_default_str();
  sub->add_option("--top", *top, "Candidates listed per mask")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  sub->footer(exit_status_help());
  sub->callback([run, text, mask, top] {
    require_single_process("fill-mask");
    // The encoders' vocabulary is bytes (the char and byte tokenizers), so a mask is one byte: an
    // ASCII character. A multi-byte UTF-8 character would be several positions.
    if (mask->size() != 1)
      throw UsageError(
          "--mask-char must be a single byte (an ASCII character; the encoders' vocabulary is bytes), got '" + *mask +
          "' (" + std::to_string(mask->size()) + " bytes)");
    const auto enc = train::load_encoder(*run);
    const train::FillMaskResult r = train::fill_mask(*enc, *text, (*mask)[0], *top);
    fmt::print("{}\n", r.filled);
    for (size_t i = 0; i < r.candidates.size(); ++i) {
      std::string line;
      for (const auto& [tok, p] : r.candidates[i])
        line += fmt::format("{}{:?} {:.3f}", line.empty() ? "" : ", ", tok, p);
      fmt::print("mask {}: {}\n", i + 1, line);
    }
  });
}

}  // namespace posgrad::cli
