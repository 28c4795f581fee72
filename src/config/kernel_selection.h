// Kernel selection with reasons: for one situation, either the backend the user named (which
// must declare support for exactly that situation) or, of the device's priority list, the one
// that does with the fewest runtime gaps (RuntimeGaps; the first among equals). Every candidate
// looked at is recorded with why it was taken or refused. Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "config/kernel_catalog.h"

namespace lucid::config {

struct CandidateReport {
  std::string name;
  bool taken = false;
  bool supported = false;  // declares support (taken, or lower in the priority list)
  std::string reason;      // why refused, or why a supported one was not taken; "" when taken
  bool compiled_in = false;
};

struct Selection {
  bool ok = false;
  std::string kernel;  // chosen backend name when ok
  bool compiled_in = false;
  std::vector<CandidateReport> candidates;  // in the order examined
  std::string failure;                      // when !ok: one clause per refused candidate
  std::vector<std::string> gaps;            // cuda: what the chosen kernel lacks (RuntimeGaps)
};

// Why backend `name` cannot serve all of `situations` (the same family; e.g. prefill and decode
// of a matmul format); nullopt when it can. Considers every declaration of the name (a backend
// may declare one kernel per weight format).
// On cuda the compute dtype and graph capture do not refuse (Refusal's gaps_refuse false): a cuda
// plan may describe a deployment that lucid's kernels cannot run (a described target's dtype and
// graphs), and what the chosen kernel lacks is reported as Selection::gaps (explain lists each
// under "not runnable here"; generate and serve refuse such a plan) rather than replacing the
// deployment's dtype and graphs.
std::optional<std::string> RefusalByName(const std::string& name,
                                         const std::vector<Situation>& situations);

// Selects for `situations`: `explicit_name` if non-empty (refused -> !ok), else the priority list.
Selection SelectKernel(const std::vector<Situation>& situations, const std::string& explicit_name);

// Backends of the family that would serve `situations`, in priority order (for error messages).
std::vector<std::string> WorkingBackends(const std::vector<Situation>& situations);

}  // namespace lucid::config
