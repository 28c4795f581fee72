// What `lucid backends` prints: every backend of every kernel family with whether it is compiled
// in, whether it is usable on this machine (and why not), and what it supports; and the
// self-test that runs each usable kernel on random inputs and compares it with a plain
// double-precision evaluation of the op's definition (ops/ops.h).
// Thread-safety: pure functions (the self-test allocates its own inputs).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/ops_registry.h"
#include "config/kernel_catalog.h"

namespace lucid::config {

struct BackendRow {
  const KernelDecl* decl = nullptr;
  bool usable_here = false;
  std::string why_not;  // when !usable_here
};

// One row per declaration: lucid's kernels (catalog order), then the foreign ones (never usable).
std::vector<BackendRow> BackendRows();
nlohmann::json BackendsJson(const std::vector<BackendRow>& rows);
std::string BackendsText(const std::vector<BackendRow>& rows);

struct SelfTestResult {
  std::string family;
  std::string kernel;
  std::string check;  // what was compared
  double max_error = 0;
  double tolerance = 0;
  bool passed = false;
  bool skipped = false;
  std::string note;
};
// Runs every usable kernel's checks (fixed seed; small shapes), then the ops conformance suite
// (backends/cpu/ops_conformance.h) for every set in the backend registry at this machine's
// instruction set: one result per set, passed when every case passes.
std::vector<SelfTestResult> RunSelfTest(const std::vector<BackendRow>& rows);
// The conformance suite for one registered set, as a self-test line.
SelfTestResult ConformanceSelfTest(const OpsSetEntry& e);

}  // namespace lucid::config
