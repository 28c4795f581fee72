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

}  // namespace

Selection SelectKernel(const std::vector<Situation>& situations, const std::string& explicit_name) {
  Selection sel;
  if (situations.empty()) return sel;
  const std::vector<std::string> list =
      explicit_name.empty() ? PriorityList(situations.front().family, situations.front().device)
                            : std::vector<std::string>{explicit_name};
  for (const std::string& name : list) {
    CandidateReport c;
    c.name = name;
    c.compiled_in = CompiledIn(name, situations);
    std::optional<std::string> r = RefusalByName(name, situations);
    if (r) {
      c.reason = *r;
      sel.failure += (sel.failure.empty() ? "" : "; ") + name + " " + *r;
    } else if (!sel.ok) {
      c.taken = c.supported = true;
      sel.ok = true;
      sel.kernel = name;
      sel.compiled_in = c.compiled_in;
      for (const Situation& s : situations)
        for (const KernelDecl* d : FindKernels(s.family, name)) {
          if (Refusal(*d, s, false)) continue;
          for (const std::string& g : RuntimeGaps(*d, s)) {
            const std::string gap = name + " " + g;
            if (std::find(sel.gaps.begin(), sel.gaps.end(), gap) == sel.gaps.end())
              sel.gaps.push_back(gap);
          }
          break;
        }
    } else {
      c.supported = true;
      c.reason = "supported, lower in the priority list than " + sel.kernel;
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
