#include "config/option_table.h"

#include <gtest/gtest.h>

#include <set>

#include "config/rules.h"
#include "config/settings.h"

namespace lucid::config {
namespace {

TEST(OptionTableTest, NamesAreUniqueAndDefaultsParse) {
  std::set<std::string> names;
  for (const OptionSpec& o : Options()) {
    EXPECT_TRUE(names.insert(o.name).second) << o.name;
    for (const std::string& a : o.aliases) EXPECT_TRUE(names.insert(a).second) << a;
    EXPECT_FALSE(o.help.empty()) << o.name;
    EXPECT_FALSE(o.group.empty()) << o.name;
    (void)DefaultValue(o);  // aborts on a bad default
  }
  EXPECT_EQ(FindOption("--dsa-prefill-backend")->name, "nsa-prefill-backend");
  EXPECT_EQ(FindOption("tp_size")->name, "tp-size");
  EXPECT_EQ(FindOption("tp-size")->env_name(), "LUCID_TP_SIZE");
  EXPECT_EQ(FindOption("nope"), nullptr);
}

TEST(OptionTableTest, EveryAutoOptionHasARule) {
  std::set<std::string> ruled;
  for (const Rule& r : Rules()) ruled.insert(r.option);
  for (const OptionSpec& o : Options()) {
    const bool backend = o.name.find("backend") != std::string::npos;
    if (o.auto_default() && !backend) {
      EXPECT_TRUE(ruled.count(o.name)) << o.name;
    }
  }
}

TEST(OptionTableTest, ParsesAndValidates) {
  EXPECT_EQ(*ParseOptionValue(*FindOption("tp-size"), "8"), 8);
  EXPECT_TRUE(ParseOptionValue(*FindOption("kv-cache-dtype"), "auto")->is_null());
  EXPECT_EQ(*ParseOptionValue(*FindOption("gpu-memory"), "96GiB"), int64_t{96} << 30);
  EXPECT_EQ(*ParseOptionValue(*FindOption("gpu-memory"), "80GB"), int64_t{80'000'000'000});
  EXPECT_EQ(*ParseOptionValue(*FindOption("disable-cuda-graph"), "true"), true);
  auto bad = ParseOptionValue(*FindOption("kv-cache-dtype"), "fp8");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "--kv-cache-dtype: unknown value \"fp8\" (valid: auto, f32, bf16, fp8_e4m3)");
  EXPECT_NE(ParseOptionValue(*FindOption("port"), "70000").status().message().find("out of range"),
            std::string::npos);
  EXPECT_FALSE(ParseOptionValue(*FindOption("tp-size"), "2.5").ok());
}

TEST(SettingsTest, PrecedenceCliThenFileThenEnv) {
  ExplicitSettings s;
  ASSERT_TRUE(s.Set("tp-size", "2", Source::kEnv, "LUCID_TP_SIZE").ok());
  ASSERT_TRUE(s.Set("tp-size", "4", Source::kFile, "f: tp-size").ok());
  ASSERT_TRUE(s.Set("tp-size", "8", Source::kCli, "--tp-size").ok());
  ASSERT_TRUE(s.Set("tp-size", "1", Source::kEnv, "LUCID_TP_SIZE").ok());
  EXPECT_EQ(s.Get("tp-size")->value, 8);
  EXPECT_EQ(s.Get("tp-size")->source, Source::kCli);
  auto e = s.Set("page-size", "x", Source::kEnv, "LUCID_PAGE_SIZE");
  EXPECT_EQ(e.message(), "LUCID_PAGE_SIZE: \"x\" is not an integer");
}

}  // namespace
}  // namespace lucid::config
