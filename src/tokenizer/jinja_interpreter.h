// Interpreter of the Jinja subset: renders a parsed Template against global variables.
//
// Semantics follow Python jinja2 3.1 (ImmutableSandboxedEnvironment, default Undefined) as
// transformers configures it for chat templates: undefined values print as "", fail on attribute
// access, arithmetic or calls; for-loop bodies get a fresh scope per iteration (so `set` inside a
// loop does not leak; namespace() is the way out); macros see the scope they were defined in.
// Builtins: range, namespace, dict, raise_exception, strftime_now; filters, tests and str/dict
// methods live in jinja_builtins.cpp.
// Limits guard against runaway templates: output size, loop iterations and call depth.
// Internal API: Render throws JinjaError; ChatTemplate turns it into a Status with the line.
// Thread-safety: one Interpreter per render; the Template is read-only and may be shared.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace lucid::jinja {

struct Scope {
  std::map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* Find(const std::string& name) const;
};

class Interpreter {
 public:
  Interpreter();
  // Renders `t` with `globals` (name -> value) visible to the whole template.
  std::string Render(const Template& t, const std::map<std::string, Value>& globals);

  // Builtins shared with jinja_builtins.cpp.
  Value ApplyFilter(const std::string& name, const Value& target, CallArgs& args);
  bool ApplyTest(const std::string& name, const Value& target, CallArgs& args);
  Value GetAttr(const Value& obj, const std::string& name);
  Value GetItem(const Value& obj, const Value& key);
  void CountStep();

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Value Eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalBinary(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value EvalSlice(const Expr& e, const std::shared_ptr<Scope>& scope);
  void EvalArgs(const Expr& e, const std::shared_ptr<Scope>& scope, CallArgs* args);
  Flow Exec(const Body& body, const std::shared_ptr<Scope>& scope, std::string* out);
  Flow ExecStmt(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out);
  Flow ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope, std::string* out);
  void ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Value MakeMacro(const Stmt& s, const std::shared_ptr<Scope>& scope, Value caller);
  Value LookupName(const std::string& name, const std::shared_ptr<Scope>& scope);

  std::map<std::string, Value> builtins_;
  int64_t steps_ = 0;
  int depth_ = 0;
};

// Iterates a value the way a for loop does (lists, dict keys, string characters; undefined is
// empty). Fail()s for non-iterables.
Array Iterate(const Value& v);

}  // namespace lucid::jinja
