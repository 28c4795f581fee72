// The syntax tree of the Jinja subset: expressions and statements, produced by jinja_parser and
// walked by jinja_interpreter. Nodes own their children (unique_ptr); every node records the
// 1-based template line it starts on, for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace lucid::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // items
    kTuple,    // items
    kDict,     // items as key, value pairs (even/odd)
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d] (null parts allowed)
    kCall,     // a(items, kwargs)
    kFilter,   // a | name(items, kwargs); a may be null inside {% filter %}
    kTest,     // a is [not] name(items)
    kUnary,    // op a   ("-", "+", "not")
    kBinary,   // a op b (arithmetic, "~", "and", "or", "in", "not in", comparisons)
    kCond,     // b if a else c
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;  // name, attribute, filter/test name, or operator
  bool negated = false;
  ExprPtr a, b, c;
  std::vector<ExprPtr> items;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,       // text
    kOutput,     // {{ expr }}
    kIf,         // conds[i] -> bodies[i]; else_body
    kFor,        // targets in expr [if cond]: body; else_body
    kSet,        // targets (or attr target) = expr
    kSetBlock,   // {% set name %}body{% endset %}
    kMacro,      // name(params = defaults): body
    kCallBlock,  // {% call(params) expr %}body{% endcall %}
    kFilterBlock,
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;  // output / for iterable / set value / call expr / filter chain
  ExprPtr cond;  // for-loop filter
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body, else_body;
  std::vector<std::string> targets;  // loop / set names; for `set ns.attr`: {"ns", "attr"}
  bool attr_target = false;
  std::string name;                                     // macro name
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro / caller parameters
};

struct Template {
  Body body;
};

}  // namespace lucid::jinja
