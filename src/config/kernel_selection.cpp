#include "config/kernel_selection.h"

#include <algorithm>

namespace lucid::config {

std::optional<std::string> RefusalByName(const std::string& name,
                                         const std::vector<Situation>& situations) {
  if (situations.empty()) return std::nullopt;
  const Situation& first = situations.front();
  const std::vector<const KernelDecl*> decls = FindKernels(first.family, name);
  if (decls.empty()) return std::string("has no ") + FamilyName(first.family) + " kernel";
  for (const Situation& s : situations) {
    std::optional<std::string> best;
    bool ok = false;
    for (const KernelDecl* d : decls) {
      std::optional<std::string> r = Refusal(*d, s, s.device != Device::kCuda);
      if (!r) {
        ok = true;
        break;
      }
      // Prefer the refusal of the declaration for the right weight format: it is the telling one.
      const bool right_format = std::find(d->weight_formats.begin(), d->weight_formats.end(),
                                          s.weight_format) != d->weight_formats.end();
      if (!best || right_format) best = r;
    }
    if (!ok) return best;
  }
  return std::nullopt;
}

namespace {

bool CompiledIn(const std::string& name, const std::vector<Situation>& situations) {
  for (const KernelDecl* d : FindKernels(situations.front().family, name))
    if (d->compiled_in) return true;
  return false;
}

// What `name` lacks for `situations` (RuntimeGaps of the declaration that serves each), as
// "<name> <gap>" clauses.
std::vector<std::string> GapsOf(const std::string& name, const std::vector<Situation>& situations) {
  std::vector<std::string> gaps;
  for (const Situation& s : situations)
    for (const KernelDecl* d : FindKernels(s.family, name)) {
      if (Refusal(*d, s, false)) continue;
      for (const std::string& g : RuntimeGaps(*d, s)) {
        const std::string gap = name + " " + g;
        if (std::find(gaps.begin(), gaps.end(), gap) == gaps.end()) gaps.push_back(gap);
      }
      break;
    }
  return gaps;
}

}  // namespace

Selection SelectKernel(const std::vector<Situation>& situations, const std::string& explicit_name) {
  Selection sel;
  if (situations.empty()) return sel;
  const std::vector<std::string> list =
      explicit_name.empty() ? PriorityList(situations.front().family, situations.front().device)
                            : std::vector<std::string>{explicit_name};
  // The supported candidate with the fewest gaps is taken, the first of the list among equals
  // (on cuda, where gaps do not refuse, the kernel set that computes in the plan's dtype).
  std::vector<std::optional<std::string>> refusals;
  std::vector<std::vector<std::string>> gaps;
  int taken = -1;
  for (size_t i = 0; i < list.size(); ++i) {
    refusals.push_back(RefusalByName(list[i], situations));
    gaps.push_back(refusals.back() ? std::vector<std::string>{} : GapsOf(list[i], situations));
    if (!refusals.back() && (taken < 0 || gaps[i].size() < gaps[taken].size()))
      taken = static_cast<int>(i);
  }
  if (taken >= 0) {
    sel.ok = true;
    sel.kernel = list[taken];
    sel.compiled_in = CompiledIn(sel.kernel, situations);
    sel.gaps = gaps[taken];
  }
  for (size_t i = 0; i < list.size(); ++i) {
    CandidateReport c;
    c.name = list[i];
    c.compiled_in = CompiledIn(list[i], situations);
    if (refusals[i]) {
      c.reason = *refusals[i];
      sel.failure += (sel.failure.empty() ? "" : "; ") + list[i] + " " + *refusals[i];
    } else if (static_cast<int>(i) == taken) {
      c.taken = c.supported = true;
    } else {
      c.supported = true;
      if (static_cast<int>(i) > taken) {
        c.reason = "supported, lower in the priority list than " + sel.kernel;
      } else {  // passed over for its gaps
        std::string what;
        for (const std::string& g : gaps[i])
          what += (what.empty() ? "" : " and ") + g.substr(list[i].size() + 1);
        c.reason = "supported, but it " + what + " (" + sel.kernel + " lacks less)";
      }
    }
    sel.candidates.push_back(std::move(c));
  }
  if (list.empty()) sel.failure = "no backend is declared for this device";
  return sel;
}

std::vector<std::string> WorkingBackends(const std::vector<Situation>& situations) {
  std::vector<std::string> out;
  if (situations.empty()) return out;
  for (const std::string& name : PriorityList(situations.front().family, situations.front().device))
    if (!RefusalByName(name, situations)) out.push_back(name);
  return out;
}

}  // namespace lucid::config
