// Rules: how settings the user left unset ("auto") are filled. All of them are in rules.cpp, as
// data: an id, the setting, a condition, the value and a one-line reason. A rule never applies to
// a setting the user gave (the resolver does not even ask).
// For the settings that kernels constrain (kv-cache-dtype, page-size) a rule's value is a JSON
// array of candidates in preference order; the resolver takes the first for which every kernel
// family finds a kernel and says in the reason which earlier candidates were refused and why.
// Rules whose value is null are computed by the memory planner (mem-fraction-static,
// max-total-tokens, cuda-graph-max-bs when memory is short); their reason is written there.
// Thread-safety: immutable table.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/model_facts.h"
#include "config/target.h"

namespace lucid::config {

struct RuleContext {
  const ModelFacts& model;
  const Target& target;
  const std::map<std::string, nlohmann::json>& values;  // settings resolved so far
  bool cuda() const;                                    // the resolved device is cuda
  const nlohmann::json& v(const std::string& name) const;
};

struct Rule {
  std::string id;
  std::string option;
  std::string condition;  // human-readable, listed by docs/CONFIG.md
  std::function<bool(const RuleContext&)> when;
  std::function<nlohmann::json(const RuleContext&)> value;
  std::function<std::string(const RuleContext&)> reason;
};

const std::vector<Rule>& Rules();
// The first rule for `option` whose condition holds, or nullptr.
const Rule* FirstRule(const std::string& option, const RuleContext& ctx);
// The rule with this id (for planner-computed values), or nullptr.
const Rule* RuleById(const std::string& id);

}  // namespace lucid::config
