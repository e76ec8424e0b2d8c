// test_method.cpp — the comparison's methods (compare/method.h): a registered encoding or a variant
// of one with settings of its own, KIND[NAME=VALUE;...]. The canonical name, every refusal with the
// message that names the bad part, the model a variant builds, --methods read as the flag reads it,
// the row names built on a variant, and a tiny comparison of p-RoPE and sinks variants beside plain
// RoPE whose units are trained with their own settings.
#include <gtest/gtest.h>

#include <filesystem>

#include "compare/compare.h"
#include "compare/method.h"
#include "compare/options.h"
#include "compare/rows.h"
#include "compare/studies/pi/pi_protocol.h"
#include "data/fileio.h"
#include "support/compare_config.h"
#include "support/test_util.h"
#include "train/config.h"

using namespace posgrad;
using namespace posgrad::train;
using posgrad::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::string usage_error(const std::string& text) {
  return test::thrown_message<UsageError>([&] { (void)parse_method(text); });
}

// --methods as the flag reads it: parsed by its spec, then set through the option table's row.
CompareConfig with_methods(const std::string& text) {
  CompareConfig c = compare_preset("tiny");
  for (const auto& o : compare_options())
    if (o.spec.name == "methods") o.set(c, opt::parse(o.spec, text, "--methods"));
  return c;
}

}  // namespace

TEST(Method, PlainKindsAndCanonicalVariants) {
  EXPECT_EQ(parse_method("rope").name(), "rope");
  EXPECT_TRUE(parse_method("rope").settings.empty());
  // Sorted by name, values as the flag prints them, '-' read as '_'.
  const MethodSpec m = parse_method("rope[rope_partial=prope;rope-fraction=0.750]");
  EXPECT_EQ(m.kind, "rope");
  ASSERT_EQ(m.settings.size(), 2u);
  EXPECT_EQ(m.settings[0].first, "rope_fraction");
  EXPECT_EQ(std::get<double>(m.settings[0].second), 0.75);
  EXPECT_EQ(m.name(), "rope[rope_fraction=0.75;rope_partial=prope]");
  EXPECT_EQ(parse_method("alibi[attention_sinks=1]").name(), "alibi[attention_sinks=true]");
  // No '+' in a name (the separator of derived rows): an exponent's is dropped, and the text reads back.
  EXPECT_EQ(parse_method("rope[rope_base=1e6]").name(), "rope[rope_base=1e06]");
  EXPECT_EQ(parse_method("rope[rope_base=500000]").name(), "rope[rope_base=5e05]");
  EXPECT_EQ(parse_method("rope[rope_base=5e05]").name(), "rope[rope_base=5e05]");
  EXPECT_EQ(parse_method("rope[rope_base=1e+6]").name(), "rope[rope_base=1e06]");
  EXPECT_EQ(method_kind("rope[rope_fraction=0.5]"), "rope");
  EXPECT_EQ(method_kind("alibi"), "alibi");
  EXPECT_TRUE(is_variant("rope[rope_fraction=0.5]"));
  EXPECT_FALSE(is_variant("rope"));
  // An encoding that composes others (hybrid's layers) takes their options too.
  EXPECT_EQ(parse_method("hybrid[rope_base=500]").name(), "hybrid[rope_base=500]");
}

TEST(Method, RefusalsNameTheBadPart) {
  EXPECT_NE(usage_error("rpoe").find("unknown position encoding 'rpoe' (did you mean 'rope'?)"), std::string::npos);
  EXPECT_NE(usage_error("rope[rope_fractoin=0.5]")
                .find("'rope_fractoin' is not a setting of rope (did you mean "
                      "'rope_fraction'?)"),
            std::string::npos);
  // Another encoding's option is not the variant's.
  EXPECT_NE(usage_error("alibi[rope_fraction=0.5]").find("'rope_fraction' is not a setting of alibi"),
            std::string::npos);
  EXPECT_NE(usage_error("rope[rope_fraction=1.5]").find("out of range"), std::string::npos);
  EXPECT_NE(usage_error("rope[rope_partial=half]").find("rope_partial"), std::string::npos);
  EXPECT_NE(usage_error("rope[]").find("empty brackets"), std::string::npos);
  EXPECT_NE(usage_error("rope[rope_fraction]").find("'rope_fraction' is not NAME=VALUE"), std::string::npos);
  EXPECT_NE(usage_error("rope[rope_fraction=0.5").find("one bracket closed at the end"), std::string::npos);
  EXPECT_NE(usage_error("rope[rope_fraction=0.5]x").find("one bracket closed at the end"), std::string::npos);
  EXPECT_NE(usage_error("rope[[rope_fraction=0.5]]").find("one bracket"), std::string::npos);
  EXPECT_NE(usage_error("rope[rope_fraction=0.5;rope_fraction=0.25]").find("sets rope_fraction twice"),
            std::string::npos);
  // A value that could not name a file or a row.
  EXPECT_NE(usage_error("hybrid[hybrid_layers=rope'none]").find("may hold only letters"), std::string::npos);
  EXPECT_NE(usage_error("hybrid[hybrid_layers=a/b]").find("--hybrid-layers for the whole experiment"),
            std::string::npos);
}

TEST(Method, TheVariantBuildsItsOwnModel) {
  nn::GPTConfig base;
  base.pos.set("rope_base", 500.0);
  const nn::GPTConfig m = method_model(base, "rope[attention_sinks=true;rope_fraction=0.5;rope_partial=prope]");
  EXPECT_EQ(m.pos.kind, "rope");
  EXPECT_TRUE(m.attention_sinks);
  EXPECT_EQ(m.pos.options.real("rope_fraction"), 0.5);
  EXPECT_EQ(m.pos.options.text("rope_partial"), "prope");
  EXPECT_EQ(m.pos.options.real("rope_base"), 500.0);  // the experiment's, where the variant sets nothing
  const nn::GPTConfig plain = method_model(base, "alibi");
  EXPECT_EQ(plain.pos.kind, "alibi");
  EXPECT_FALSE(plain.attention_sinks);
  EXPECT_EQ(plain.pos.options, base.pos.options);
  // The name under the experiment's settings: a setting equal to its value is the plain method.
  EXPECT_EQ(canonical_method("rope[rope_fraction=0.5]", base), "rope[rope_fraction=0.5]");
  const std::string same =
      test::thrown_message<UsageError>([&] { (void)canonical_method("rope[rope_base=500]", base); });
  EXPECT_NE(same.find("rope_base=500 is the experiment's own value, so this is 'rope' under another name"),
            std::string::npos);
}

TEST(Method, MethodsFlagReadsVariantsAndValidateChecksThem) {
  const CompareConfig c = with_methods("rope,rope[rope_partial=prope;rope_fraction=0.75],alibi[attention_sinks=true]");
  EXPECT_EQ(c.methods, (std::vector<std::string>{"rope", "rope[rope_fraction=0.75;rope_partial=prope]",
                                                 "alibi[attention_sinks=true]"}));
  EXPECT_NO_THROW(c.validate());
  // Written two ways, the same variant twice.
  const CompareConfig twice = with_methods("rope[rope_fraction=0.5],rope[rope-fraction=0.50]");
  EXPECT_NE(test::thrown_message<UsageError>([&] { twice.validate(); }).find("lists a method twice"),
            std::string::npos);
  EXPECT_THROW(with_methods("rope,rope[nope=1]"), UsageError);
  // Set in code, a non-canonical name is refused with the canonical one.
  CompareConfig raw = compare_preset("tiny");
  raw.methods = {"rope[rope_partial=prope;rope_fraction=0.75]"};
  EXPECT_NE(test::thrown_message<UsageError>([&] {
              raw.validate();
            }).find("is written rope[rope_fraction=0.75;rope_partial=prope]"),
            std::string::npos);
  // The variant's own model is checked like a plain one's: p-RoPE with an odd rotary width at the
  // tiny size (n_embd 16, 2 heads: 8 channels, 0.1 of 4 pairs rounds to 0) is refused up front.
  CompareConfig bad = compare_preset("tiny");
  bad.methods = {"rope[rope_fraction=0.1;rope_partial=prope]"};
  EXPECT_NE(test::thrown_message<UsageError>([&] {
              bad.validate();
            }).find("--methods 'rope[rope_fraction=0.1;rope_partial=prope]'"),
            std::string::npos);
}

TEST(Method, RowsOnVariantsParseBack) {
  for (const std::string name : {"rope[rope_base=1e+06]+yarn", "rope[rope_fraction=0.5;rope_partial=prope]@bf16",
                                 "rope[attention_sinks=true]+linear ft2x", "learned[attention_sinks=true]+randomized",
                                 "rope[rope_base=1e+06]"}) {
    const Row r = Row::parse(name);
    EXPECT_EQ(r.name(), name);
    EXPECT_EQ(method_kind(r.method), name.substr(0, name.find('[')));
  }
  EXPECT_EQ(Row::parse("rope[rope_base=1e+06]+yarn").variant, "+yarn");
  EXPECT_EQ(Row::parse("rope[rope_base=1e+06]+yarn").method, "rope[rope_base=1e+06]");
}

// Each variant's units are trained with its settings (their config.json), its folder is its name,
// and the plain RoPE units are those a comparison without the variants trains (byte-identical
// results.json entries are not asked: the cost benchmark's timings differ; the perplexities are).
TEST(Method, TinyComparisonTrainsEachVariantWithItsSettings) {
  TempDir d;
  CompareConfig c = test::tiny_compare(d, "v");
  c.methods = {"rope", "rope[rope_fraction=0.5;rope_partial=prope]", "rope[attention_sinks=true]"};
  c.seeds = {1};
  (void)run_compare(c);
  auto config_of = [&](const std::string& m) {
    return TrainConfig::from_json(nlohmann::json::parse(read_file(c.out_dir + "/" + m + "/seed1/config.json")),
                                  "config.json");
  };
  const TrainConfig p = config_of("rope[rope_fraction=0.5;rope_partial=prope]");
  EXPECT_EQ(p.model.pos.kind, "rope");
  EXPECT_EQ(p.model.pos.options.real("rope_fraction"), 0.5);
  EXPECT_EQ(p.model.pos.options.text("rope_partial"), "prope");
  EXPECT_FALSE(p.model.attention_sinks);
  EXPECT_TRUE(config_of("rope[attention_sinks=true]").model.attention_sinks);
  EXPECT_EQ(config_of("rope").model.pos.options.real("rope_fraction"), 1.0);
  const std::string report = read_file(c.out_dir + "/report.md");
  EXPECT_NE(report.find("| n5 |"), std::string::npos);
  EXPECT_NE(report.find("| n6 |"), std::string::npos);
  EXPECT_NE(report.find("rope[attention_sinks=true] below rope by more than 0.01 (paired by seed)"), std::string::npos)
      << report;
  const std::string csv = read_file(c.out_dir + "/results.csv");
  EXPECT_NE(csv.find("rope[rope_fraction=0.5;rope_partial=prope],attention_first_token_share,1,"), std::string::npos);
  // A second run keeps the variants' finished units (their settings are checked against the folder).
  EXPECT_NO_THROW((void)run_compare(c));
  // A variant's folder moved into the plain method's is refused: the unit says whose it is.
  const CompareConfig moved = c;
  fs::remove_all(c.out_dir + "/rope/seed1");
  fs::rename(c.out_dir + "/rope[attention_sinks=true]/seed1", c.out_dir + "/rope/seed1");
  const std::string m = test::thrown_message<IoError>([&] { (void)run_compare(moved); });
  EXPECT_NE(m.find("this is the folder of method \"rope\""), std::string::npos) << m;
}

// The PI protocol leaves out the variants it cannot scale as configured (p-RoPE defines only linear
// scaling; a variant scaled already), saying why, and still refuses a plain method whose options
// do not fit it.
TEST(Method, ThePiProtocolLeavesOutVariantsItCannotScale) {
  CompareConfig c = compare_preset("quick");
  c.methods = {"rope", "rope[rope_fraction=0.75;rope_partial=prope]",
               "rope[rope_scaling=linear;rope_scaling_factor=2]"};
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(pi_methods(c), (std::vector<std::string>{"rope"}));
  EXPECT_NE(pi_refusal(c, c.methods[1]).find("--pi-scalings ntk"), std::string::npos) << pi_refusal(c, c.methods[1]);
  EXPECT_NE(pi_refusal(c, c.methods[2]).find("scaled already (rope_scaling linear)"), std::string::npos);
  EXPECT_EQ(pi_refusal(c, "rope"), "");
  EXPECT_NE(pi_refusal(c, "alibi").find("takes no RoPE scaling"), std::string::npos);
  // With linear scaling only, p-RoPE runs the protocol.
  c.of<PiSettings>().scalings = {"none", "linear"};
  EXPECT_EQ(pi_methods(c), (std::vector<std::string>{"rope", "rope[rope_fraction=0.75;rope_partial=prope]"}));
  // A plain p-RoPE experiment (--rope-partial prope for every method) with NTK-aware in --pi-scalings:
  // the options do not fit the plain method, refused with the reason.
  CompareConfig plain = compare_preset("quick");
  plain.methods = {"rope"};
  plain.base.model.pos.set("rope_partial", std::string("prope"));
  plain.base.model.pos.set("rope_fraction", 0.75);
  EXPECT_NE(test::thrown_message<UsageError>([&] { plain.validate(); }).find("--pi-iters 0 turns the protocol off"),
            std::string::npos);
}
