#include "config/wait_policy.h"

#include "config/option_table.h"

namespace lucid::config {
namespace {

std::optional<std::string> Get(const EnvLookup& getenv, const char* name) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// The user's own OMP variables: those present and not exactly what lucid applied (per marker).
std::string UserOmpText(const OmpEnvironment& env) {
  std::map<std::string, std::optional<std::string>> lucid_set;
  if (env.marker) lucid_set = WaitPolicyVariables(*env.marker);
  std::string text;
  auto add = [&](const char* name, const std::optional<std::string>& v) {
    if (!v) return;
    auto it = lucid_set.find(name);
    if (it != lucid_set.end() && it->second == v) return;
    text += (text.empty() ? "" : " ") + std::string(name) + "=" + *v;
  };
  add("OMP_WAIT_POLICY", env.wait_policy);
  add("GOMP_SPINCOUNT", env.spin_count);
  return text;
}

bool Matches(const std::map<std::string, std::optional<std::string>>& want,
             const OmpEnvironment& env) {
  for (const auto& [name, value] : want) {
    const std::optional<std::string>& have =
        name == "OMP_WAIT_POLICY" ? env.wait_policy : env.spin_count;
    if (have != value) return false;
  }
  return true;
}

}  // namespace

OmpEnvironment ReadOmpEnvironment(const EnvLookup& getenv) {
  return {Get(getenv, "OMP_WAIT_POLICY"), Get(getenv, "GOMP_SPINCOUNT"),
          Get(getenv, kOmpMarkerVariable)};
}

OmpEnvironment OmpEnvironmentOf(const ExplicitSettings& s) {
  const auto& vars = s.process_variables();
  return ReadOmpEnvironment([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::map<std::string, std::optional<std::string>> WaitPolicyVariables(const std::string& policy) {
  if (policy == "short-spin")
    return {{"OMP_WAIT_POLICY", std::nullopt}, {"GOMP_SPINCOUNT", kShortSpinCount}};
  if (policy == "passive" || policy == "active")
    return {{"OMP_WAIT_POLICY", policy}, {"GOMP_SPINCOUNT", std::nullopt}};
  return {};
}

std::string WaitPolicyRuleReason(const std::string& rule_id) {
  if (rule_id == "wait-policy-environment")
    return "the environment sets the OpenMP wait policy; lucid leaves it as set";
  return std::string(
             "libgomp's default spins ~3 ms after every parallel region, which starves "
             "the HTTP threads and other processes on a busy CPU; GOMP_SPINCOUNT=") +
         kShortSpinCount +
         " spins ~0.1 ms and then sleeps (quiet batch-1 decode unchanged, "
         "docs/BENCHMARKS.md)";
}

StatusOr<WaitPolicyPlan> PlanWaitPolicy(const ExplicitValue* user, const OmpEnvironment& env) {
  const std::string user_omp = UserOmpText(env);
  WaitPolicyPlan p;
  if (user != nullptr && user->value.is_string()) {
    p.policy = user->value.get<std::string>();
    p.source = user->source;
    p.origin = user->origin;
    if (!user_omp.empty() && p.policy != "environment" &&
        !Matches(WaitPolicyVariables(p.policy), env))
      return InvalidArgument("--cpu-wait-policy " + p.policy + " (" + SourceName(user->source) +
                             ", " + user->origin + ") contradicts " + user_omp +
                             " in the environment (would work: unset those variables, or "
                             "--cpu-wait-policy environment)");
  } else if (!user_omp.empty()) {
    p.policy = "environment";
    p.rule_id = "wait-policy-environment";
    p.reason = WaitPolicyRuleReason(p.rule_id) + " (" + user_omp + ")";
  } else {
    p.policy = "short-spin";
    p.rule_id = "wait-policy-short-spin";
    p.reason = WaitPolicyRuleReason(p.rule_id);
  }
  if (user != nullptr && user->value.is_null()) p.origin = user->origin + " = auto";
  p.set = WaitPolicyVariables(p.policy);
  p.reexec = !Matches(p.set, env);
  return p;
}

StatusOr<WaitPolicyPlan> PlanWaitPolicyFromEnvironment(const EnvLookup& getenv) {
  ExplicitSettings s;
  const OptionSpec* spec = FindOption("cpu-wait-policy");
  const std::string name = spec->env_name();
  if (std::optional<std::string> v = Get(getenv, name.c_str()))
    LUCID_RETURN_IF_ERROR(s.Set(spec->name, *v, Source::kEnv, name));
  return PlanWaitPolicy(s.Get(spec->name), ReadOmpEnvironment(getenv));
}

std::string DescribeWaitPolicy(const WaitPolicyPlan& p) {
  std::string vars;
  for (const auto& [name, value] : p.set)
    if (value) vars += (vars.empty() ? "" : " ") + name + "=" + *value;
  std::string s = p.policy + (vars.empty() ? "" : " (" + vars + ")");
  if (p.source == Source::kRule) return s + "; rule:" + p.rule_id + ": " + p.reason;
  return s + "; " + SourceName(p.source) + " " + p.origin;
}

}  // namespace lucid::config
