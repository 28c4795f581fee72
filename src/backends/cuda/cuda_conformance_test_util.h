// Test support for the CPU runs of the CUDA kernels' block algorithms: the ops conformance
// suite's cases (backends/cpu/ops_conformance.h) on an emulation (an Ops that runs a kernel's
// phases on the CPU where the kernel takes the case), each failed case a gtest failure.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cpu/ops_conformance.h"

namespace lucid::cuda {

// Runs the cases of the ops `only` names on `ops` at `precision` and returns them. Each case that
// fails is also a gtest failure naming its op, format, shape, input, error and tolerance (the
// caller's SCOPED_TRACE says which thread order or variant ran).
inline std::vector<ConformanceCase> ExpectConformance(const Ops& ops,
                                                      ConformancePrecision precision,
                                                      const std::vector<std::string>& only) {
  std::vector<ConformanceCase> cases = RunOpsConformance(ops, precision, only);
  for (const ConformanceCase& c : cases)
    EXPECT_TRUE(c.pass) << c.op << " " << c.format << " " << c.shape << " " << c.input << ": error "
                        << c.error << " (tolerance " << c.tolerance << ")";
  return cases;
}

// How many of `cases` are of `op`.
inline int CasesOf(const std::vector<ConformanceCase>& cases, const std::string& op) {
  return static_cast<int>(std::count_if(cases.begin(), cases.end(),
                                        [&](const ConformanceCase& c) { return c.op == op; }));
}

}  // namespace lucid::cuda
