// The ops conformance suite (ops_conformance.h) for every CPU kernel set of the backend registry
// at every instruction-set level this machine has: the reference set against itself (the suite's
// own sanity: NaN and Inf cases included, every case must pass), `fast` and `fast-bf16act` at
// scalar, avx2, avx512 and avx512bf16 as far as the machine goes. Each run prints its table (one
// line per op x format).
#include "backends/cpu/ops_conformance.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_fast_ops.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/ops_registry.h"

namespace lucid {
namespace {

struct SetAtLevel {
  std::string set;  // the registry entry's name: reference | fast | fast-bf16act
  CpuIsa isa;
};
void PrintTo(const SetAtLevel& s, std::ostream* os) { *os << s.set << "@" << CpuIsaName(s.isa); }

// Every CPU set of the backend registry at every level up to this machine's; a set whose ops do
// not depend on the level (the same name at every level: the reference) once.
std::vector<SetAtLevel> SetsOnThisMachine() {
  std::vector<SetAtLevel> v;
  for (const OpsSetEntry& e : OpsRegistry()) {
    if (e.device != "cpu") continue;
    std::set<std::string> seen;
    for (int l = 0; l <= static_cast<int>(DetectCpuIsa()); ++l)
      if (seen.insert(e.make(static_cast<CpuIsa>(l))->name()).second)
        v.push_back({e.name, static_cast<CpuIsa>(l)});
  }
  return v;
}

class OpsConformanceTest : public ::testing::TestWithParam<SetAtLevel> {};

TEST_P(OpsConformanceTest, EveryOpMatchesTheReference) {
  const SetAtLevel& p = GetParam();
  const OpsSetEntry* e = FindOpsSet("cpu", p.set);
  ASSERT_NE(e, nullptr);
  const std::unique_ptr<Ops> ops = e->make(p.isa);
  const ConformancePrecision precision = e->precision;
  const std::vector<ConformanceCase> cases = RunOpsConformance(*ops, precision);
  std::printf("%s", ConformanceTable(std::string(ops->name()) + " (" + p.set + ")", cases).c_str());
  // Every op of ops/ops.h is covered, with NaN and Inf inputs.
  std::set<std::string> ops_seen, planted;
  for (const ConformanceCase& c : cases) {
    ops_seen.insert(c.op);
    if (c.input != "random") planted.insert(c.op + ":" + c.input);
    EXPECT_TRUE(c.pass) << c.op << " " << c.format << " " << c.shape << " input=" << c.input
                        << ": error " << c.error << " (tolerance " << c.tolerance << ")"
                        << (c.nonfinite_match ? "" : ", non-finite entries differ");
  }
  const std::set<std::string> all(OpNames().begin(), OpNames().end());
  EXPECT_EQ(ops_seen, all);
  for (const std::string& op : all) {
    // SampleRows is given finite rows only: the numerics guard fails a non-finite row first.
    if (op == "SampleRows") continue;
    EXPECT_TRUE(planted.count(op + ":nan")) << op;
    EXPECT_TRUE(planted.count(op + ":inf")) << op;
  }
}

// A backend that implements part of the interface runs only its ops' cases.
TEST(OpsConformanceOnlyTest, RunsTheCasesOfTheNamedOpsAndNoOthers) {
  const CpuOps ref;
  const std::vector<ConformanceCase> cases =
      RunOpsConformance(ref, ConformancePrecision::kF32, {"RmsNorm", "NonFiniteRows"});
  std::set<std::string> ops;
  for (const ConformanceCase& c : cases) ops.insert(c.op);
  EXPECT_EQ(ops, (std::set<std::string>{"RmsNorm", "LayerNorm", "NonFiniteRows"}));
  EXPECT_TRUE(AllPassed(cases));
}

INSTANTIATE_TEST_SUITE_P(CpuSets, OpsConformanceTest, ::testing::ValuesIn(SetsOnThisMachine()),
                         [](const auto& info) {
                           std::string n = info.param.set + "_" + CpuIsaName(info.param.isa);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace
}  // namespace lucid
