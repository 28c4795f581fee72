// Test helper for the config tests: resolving a list of command-line flags the way the CLI does.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/resolver.h"
#include "config/settings.h"

namespace lucid::config::testing_util {

using Flags = std::vector<std::pair<std::string, std::string>>;

// Sets each flag as the command line would (`--name value`, in order) and resolves them; the
// first refused flag's error, or the resolver's.
inline StatusOr<ResolvedConfig> ResolveFlags(const Flags& flags) {
  ExplicitSettings s;
  for (const auto& [k, v] : flags) {
    Status st = s.Set(k, v, Source::kCli, "--" + k);
    if (!st.ok()) return st;
  }
  return Resolve(s);
}

}  // namespace lucid::config::testing_util
