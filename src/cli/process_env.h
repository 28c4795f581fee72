// The process environment that must be in place before the OpenMP runtime starts: the wait
// policy of config/wait_policy.h. libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT in its
// constructor, before main, so a policy the current process lacks is applied by executing the same
// command line again (once: the new image has the variables, and the marker that tells the config
// layer lucid set them).
// Thread-safety: call from the main thread before any other thread or parallel region starts.
#pragma once

#include <string>

#include "config/wait_policy.h"

namespace lucid::cli {

// Records the command line for ApplyWaitPolicy (main.cpp calls it first).
void SetCommandLine(int argc, char** argv);

// When plan.reexec: sets plan.set (and the marker) in the environment and executes
// /proc/self/exe with the recorded command line; does not return on success. When the execution
// fails, or no command line was recorded, prints one warning naming `command` and returns: the
// process keeps the OpenMP runtime's current policy.
void ApplyWaitPolicy(const config::WaitPolicyPlan& plan, const std::string& command);

}  // namespace lucid::cli
