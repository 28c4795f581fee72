// How the OpenMP workers of the CPU kernels wait between parallel regions: option
// `cpu-wait-policy` (docs/CONFIG.md, "CPU wait policy").
//
// libgomp reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, in its constructor, before main runs; a
// change needs a fresh process image. So the decision is made here (pure, from the option and the
// process environment) and the command line applies it by re-executing itself once with the
// variables set (cli/process_env.h). Its default, libgomp's own, spins about 300,000 pauses
// (milliseconds) after every parallel region: on a CPU that other processes also use, those spins
// take the time the HTTP threads and the preempted team member need, and throughput collapses.
//
// Values: short-spin (GOMP_SPINCOUNT=kShortSpinCount: spin about 0.1 ms, then sleep), passive
// (OMP_WAIT_POLICY=passive), active (OMP_WAIT_POLICY=active), environment (leave
// OMP_WAIT_POLICY / GOMP_SPINCOUNT as the environment has them; libgomp's default when unset).
// Precedence: the option (flag, config file, LUCID_CPU_WAIT_POLICY) given by the user, else the
// user's own OMP_WAIT_POLICY / GOMP_SPINCOUNT (never overridden: rule wait-policy-environment),
// else rule wait-policy-short-spin. An explicit option other than `environment` that contradicts
// a user-set OMP_WAIT_POLICY / GOMP_SPINCOUNT is refused (InvalidArgument naming both).
// Variables that lucid itself set when it re-executed are recognised by the marker
// kOmpMarkerVariable and are not taken for the user's.
// Thread-safety: pure functions and value types.
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "config/settings.h"

namespace lucid::config {

inline constexpr const char* kShortSpinCount = "10000";
// Set by lucid when it re-executes: the policy it applied ("short-spin", ...).
inline constexpr const char* kOmpMarkerVariable = "LUCID_APPLIED_CPU_WAIT_POLICY";

// The process environment the wait policy depends on (unset = nullopt).
struct OmpEnvironment {
  std::optional<std::string> wait_policy;  // OMP_WAIT_POLICY
  std::optional<std::string> spin_count;   // GOMP_SPINCOUNT
  std::optional<std::string> marker;       // kOmpMarkerVariable
};
OmpEnvironment ReadOmpEnvironment(const EnvLookup& getenv);
// The same from the process variables LoadEnvironment recorded in `s`.
OmpEnvironment OmpEnvironmentOf(const ExplicitSettings& s);

// The variables a policy needs: name -> value, or nullopt for "must be unset". Empty for
// `environment`.
std::map<std::string, std::optional<std::string>> WaitPolicyVariables(const std::string& policy);

struct WaitPolicyPlan {
  std::string policy;  // one of the option's values
  Source source = Source::kRule;
  std::string origin;   // user: the flag, file key or LUCID_ variable
  std::string rule_id;  // Source::kRule
  std::string reason;   // Source::kRule: one line
  // What the process must have; `reexec` when the current environment differs (apply `set`, then
  // execute the same command line again).
  std::map<std::string, std::optional<std::string>> set;
  bool reexec = false;
};

// Decides the policy. `user` is the explicit value of `cpu-wait-policy` (nullptr or JSON null when
// unset or "auto"). InvalidArgument for a contradiction with the user's OMP variables.
StatusOr<WaitPolicyPlan> PlanWaitPolicy(const ExplicitValue* user, const OmpEnvironment& env);

// For the commands that do not resolve a whole configuration (bench, generate): the option from
// LUCID_CPU_WAIT_POLICY only, and the OMP variables, all read through `getenv`.
StatusOr<WaitPolicyPlan> PlanWaitPolicyFromEnvironment(const EnvLookup& getenv = &std::getenv);

// The one-line reason of rule `rule_id` (wait-policy-environment, wait-policy-short-spin);
// rules.cpp lists the rules with these reasons.
std::string WaitPolicyRuleReason(const std::string& rule_id);

// "short-spin (rule:wait-policy-short-spin: ...)": one line for logs and `lucid bench`.
std::string DescribeWaitPolicy(const WaitPolicyPlan& plan);

}  // namespace lucid::config
