// The OpenMP wait-policy decision (config/wait_policy.h): the rule's default, the user's own OMP
// variables left alone, lucid's own re-execution recognised, contradictions refused; and the same
// decision shown by `lucid explain` (through the resolver).
#include "config/wait_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "config/cli_options.h"
#include "config/resolver.h"

namespace lucid::config {
namespace {

using Vars = std::map<std::string, std::string>;

EnvLookup Lookup(const Vars& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::optional<std::string> Want(const WaitPolicyPlan& p, const std::string& name) {
  auto it = p.set.find(name);
  EXPECT_NE(it, p.set.end()) << name;
  return it == p.set.end() ? std::nullopt : it->second;
}

TEST(WaitPolicyTest, NoOmpVariablesGivesShortSpinByRuleAndAsksForReexec) {
  StatusOr<WaitPolicyPlan> p = PlanWaitPolicyFromEnvironment(Lookup({}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->policy, "short-spin");
  EXPECT_EQ(p->source, Source::kRule);
  EXPECT_EQ(p->rule_id, "wait-policy-short-spin");
  EXPECT_EQ(Want(*p, "GOMP_SPINCOUNT"), std::optional<std::string>(kShortSpinCount));
  EXPECT_EQ(Want(*p, "OMP_WAIT_POLICY"), std::nullopt);
  EXPECT_TRUE(p->reexec);
}

TEST(WaitPolicyTest, AfterLucidsOwnReexecTheSameRuleHoldsAndNothingIsRepeated) {
  StatusOr<WaitPolicyPlan> p = PlanWaitPolicyFromEnvironment(
      Lookup({{"GOMP_SPINCOUNT", kShortSpinCount}, {kOmpMarkerVariable, "short-spin"}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->policy, "short-spin");
  EXPECT_EQ(p->rule_id, "wait-policy-short-spin");
  EXPECT_FALSE(p->reexec);
}

TEST(WaitPolicyTest, UsersOmpWaitPolicyIsLeftAsSet) {
  for (const Vars& vars : {Vars{{"OMP_WAIT_POLICY", "active"}},
                           // the user's own GOMP_SPINCOUNT, even one equal to lucid's value
                           Vars{{"GOMP_SPINCOUNT", kShortSpinCount}},
                           // a marker that does not describe the variables: they are the user's
                           Vars{{"GOMP_SPINCOUNT", "5"}, {kOmpMarkerVariable, "short-spin"}}}) {
    StatusOr<WaitPolicyPlan> p = PlanWaitPolicyFromEnvironment(Lookup(vars));
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->policy, "environment");
    EXPECT_EQ(p->rule_id, "wait-policy-environment");
    const std::string& var = vars.begin()->first;
    EXPECT_NE(p->reason.find(var + "=" + vars.at(var)), std::string::npos) << p->reason;
    EXPECT_TRUE(p->set.empty());
    EXPECT_FALSE(p->reexec);
  }
}

TEST(WaitPolicyTest, ExplicitOptionIsAppliedWithItsSource) {
  StatusOr<WaitPolicyPlan> p =
      PlanWaitPolicyFromEnvironment(Lookup({{"LUCID_CPU_WAIT_POLICY", "passive"}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->policy, "passive");
  EXPECT_EQ(p->source, Source::kEnv);
  EXPECT_EQ(p->origin, "LUCID_CPU_WAIT_POLICY");
  EXPECT_EQ(Want(*p, "OMP_WAIT_POLICY"), std::optional<std::string>("passive"));
  EXPECT_EQ(Want(*p, "GOMP_SPINCOUNT"), std::nullopt);
  EXPECT_TRUE(p->reexec);
  // The same after lucid applied it: no second re-execution, still the user's choice.
  p = PlanWaitPolicyFromEnvironment(Lookup({{"LUCID_CPU_WAIT_POLICY", "passive"},
                                            {"OMP_WAIT_POLICY", "passive"},
                                            {kOmpMarkerVariable, "passive"}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->source, Source::kEnv);
  EXPECT_FALSE(p->reexec);
  // Agreeing with the user's own variable is no contradiction.
  p = PlanWaitPolicyFromEnvironment(
      Lookup({{"LUCID_CPU_WAIT_POLICY", "passive"}, {"OMP_WAIT_POLICY", "passive"}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_FALSE(p->reexec);
}

TEST(WaitPolicyTest, OptionContradictingUsersOmpVariableIsRefusedNamingBoth) {
  StatusOr<WaitPolicyPlan> p = PlanWaitPolicyFromEnvironment(
      Lookup({{"LUCID_CPU_WAIT_POLICY", "short-spin"}, {"OMP_WAIT_POLICY", "active"}}));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("--cpu-wait-policy short-spin"), std::string::npos);
  EXPECT_NE(p.status().message().find("OMP_WAIT_POLICY=active"), std::string::npos);
  // `environment` defers to the variables instead.
  p = PlanWaitPolicyFromEnvironment(
      Lookup({{"LUCID_CPU_WAIT_POLICY", "environment"}, {"OMP_WAIT_POLICY", "active"}}));
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->policy, "environment");
  EXPECT_FALSE(p->reexec);
}

TEST(WaitPolicyTest, BadOptionValueIsRefusedNamingTheVariable) {
  StatusOr<WaitPolicyPlan> p =
      PlanWaitPolicyFromEnvironment(Lookup({{"LUCID_CPU_WAIT_POLICY", "sometimes"}}));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("LUCID_CPU_WAIT_POLICY"), std::string::npos)
      << p.status().message();
}

// The resolver (what `lucid explain` and `lucid serve` print) shows the same decision and why.
StatusOr<ResolvedConfig> ResolveWith(const Vars& env) {
  ExplicitSettings s;
  LUCID_RETURN_IF_ERROR(
      s.Set("model-path", std::string(LUCID_SOURCE_DIR) + "/tests/fixtures/models/tiny_glm_moe_dsa",
            Source::kCli, "--model-path"));
  LUCID_RETURN_IF_ERROR(LoadEnvironment(Lookup(env), &s));
  return Resolve(s);
}

TEST(WaitPolicyTest, ResolverShowsTheRuleAndTheUsersVariable) {
  StatusOr<ResolvedConfig> rc = ResolveWith({});
  ASSERT_TRUE(rc.ok()) << rc.status().message();
  const ResolvedField* f = rc->Field("cpu-wait-policy");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->value, "short-spin");
  EXPECT_EQ(f->Provenance(), "rule:wait-policy-short-spin");
  EXPECT_NE(rc->ToText().find("wait-policy-short-spin"), std::string::npos);

  rc = ResolveWith({{"OMP_WAIT_POLICY", "passive"}});
  ASSERT_TRUE(rc.ok()) << rc.status().message();
  f = rc->Field("cpu-wait-policy");
  EXPECT_EQ(f->value, "environment");
  EXPECT_EQ(f->Provenance(), "rule:wait-policy-environment");
  EXPECT_NE(f->reason.find("OMP_WAIT_POLICY=passive"), std::string::npos) << f->reason;

  rc = ResolveWith({{"OMP_WAIT_POLICY", "passive"}, {"LUCID_CPU_WAIT_POLICY", "active"}});
  ASSERT_FALSE(rc.ok());
  EXPECT_NE(rc.status().message().find("OMP_WAIT_POLICY=passive"), std::string::npos);
}

}  // namespace
}  // namespace lucid::config
