#include "cli/process_env.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lucid::cli {
namespace {

char** g_argv = nullptr;

}  // namespace

void SetCommandLine(int argc, char** argv) { g_argv = argc > 0 ? argv : nullptr; }

void ApplyWaitPolicy(const config::WaitPolicyPlan& plan, const std::string& command) {
  if (!plan.reexec) return;
  if (g_argv == nullptr) {
    std::fprintf(stderr, "lucid %s: warning: cannot apply --cpu-wait-policy %s (no command line)\n",
                 command.c_str(), plan.policy.c_str());
    return;
  }
  for (const auto& [name, value] : plan.set) {
    if (value)
      setenv(name.c_str(), value->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  setenv(config::kOmpMarkerVariable, plan.policy.c_str(), 1);
  std::fflush(stdout);
  std::fflush(stderr);
  execv("/proc/self/exe", g_argv);
  const int err = errno;
  std::fprintf(stderr,
               "lucid %s: warning: cannot re-execute to apply --cpu-wait-policy %s (%s); the "
               "OpenMP workers keep the runtime's default wait policy\n",
               command.c_str(), plan.policy.c_str(), std::strerror(err));
}

}  // namespace lucid::cli
