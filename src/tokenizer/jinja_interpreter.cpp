#include "tokenizer/jinja_interpreter.h"

#include <cmath>
#include <ctime>

#include "tokenizer/utf8.h"

namespace lucid::jinja {
namespace {

constexpr size_t kMaxOutput = 16 << 20;
constexpr int64_t kMaxSteps = 2'000'000;
constexpr int kMaxDepth = 128;

const Value* FindKw(CallArgs& a, const char* name) {
  for (auto& [k, v] : a.keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::vector<std::string> Chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    tok::DecodeUtf8(s, i, &len);
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

// b != 0. INT64_MIN // -1 does not fit: an overflow error, as is every out-of-range result.
int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == -1) return CheckedIntOp("-", 0, a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

const Value* Scope::Find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Array Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kArray:
      return v.array();
    case Value::Kind::kObject: {
      Array keys;
      for (const auto& kv : v.object().items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      Array out;
      for (auto& c : Chars(v.str())) out.emplace_back(c);
      return out;
    }
    default:
      Fail("'" + v.Repr() + "' is not iterable");
  }
}

Interpreter::Interpreter() {
  builtins_["range"] = Value::Func(
      [this](CallArgs& a) {
        int64_t start = 0, stop = 0, step = 1;
        const auto& p = a.positional;
        if (p.empty() || p.size() > 3) Fail("range expects 1 to 3 arguments");
        for (const auto& x : p) {
          if (!x.is_int() && !x.is_bool()) Fail("range arguments must be integers");
        }
        if (p.size() == 1) {
          stop = p[0].AsInt();
        } else {
          start = p[0].AsInt();
          stop = p[1].AsInt();
          if (p.size() == 3) step = p[2].AsInt();
        }
        if (step == 0) Fail("range() arg 3 must not be zero");
        Array out;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          CountStep();
          out.emplace_back(i);
        }
        return Value(std::move(out));
      },
      "range");
  builtins_["namespace"] = Value::Func(
      [](CallArgs& a) {
        Object o;
        o.is_namespace = true;
        for (const auto& p : a.positional) {
          if (!p.is_object()) Fail("namespace() positional argument must be a dict");
          for (const auto& [k, v] : p.object().items) o.Set(k, v);
        }
        for (const auto& [k, v] : a.keyword) {
          if (!k.empty() && k[0] == '_') Fail("namespace attributes cannot start with '_'");
          o.Set(k, v);
        }
        return Value(std::move(o));
      },
      "namespace");
  builtins_["dict"] = Value::Func(
      [](CallArgs& a) {
        Object o;
        for (const auto& p : a.positional) {
          if (!p.is_object()) Fail("dict() positional argument must be a dict");
          for (const auto& [k, v] : p.object().items) o.Set(k, v);
        }
        for (const auto& [k, v] : a.keyword) o.Set(k, v);
        return Value(std::move(o));
      },
      "dict");
  builtins_["raise_exception"] = Value::Func(
      [](CallArgs& a) -> Value {
        Fail(a.positional.empty() ? "raise_exception called" : a.positional[0].ToString());
      },
      "raise_exception");
  builtins_["strftime_now"] = Value::Func(
      [](CallArgs& a) {
        if (a.positional.empty() || !a.positional[0].is_string()) Fail("strftime_now(format)");
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        const size_t n = std::strftime(buf, sizeof(buf), a.positional[0].str().c_str(), &tm);
        return Value(std::string(buf, n));
      },
      "strftime_now");
}

void Interpreter::CountStep() {
  if (++steps_ > kMaxSteps) Fail("template exceeded the step limit");
}

std::string Interpreter::Render(const Template& t, const std::map<std::string, Value>& globals) {
  auto root = std::make_shared<Scope>();
  root->vars = globals;
  std::string out;
  Exec(t.body, root, &out);
  return out;
}

Interpreter::Flow Interpreter::Exec(const Body& body, const std::shared_ptr<Scope>& scope,
                                    std::string* out) {
  for (const auto& s : body) {
    try {
      const Flow f = ExecStmt(*s, scope, out);
      if (f != Flow::kNormal) return f;
    } catch (JinjaError& e) {
      if (e.line == 0) e.line = s->line;
      throw;
    }
    if (out->size() > kMaxOutput) Fail("template output exceeds the size limit");
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecStmt(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                        std::string* out) {
  CountStep();
  switch (s.kind) {
    case Stmt::Kind::kText:
      *out += s.text;
      return Flow::kNormal;
    case Stmt::Kind::kOutput:
      *out += Eval(*s.expr, scope).ToString();
      return Flow::kNormal;
    case Stmt::Kind::kIf:
      for (size_t k = 0; k < s.conds.size(); ++k) {
        if (Eval(*s.conds[k], scope).Truthy()) return Exec(s.bodies[k], scope, out);
      }
      return Exec(s.else_body, scope, out);
    case Stmt::Kind::kFor:
      return ExecFor(s, scope, out);
    case Stmt::Kind::kSet:
      ExecSet(s, scope);
      return Flow::kNormal;
    case Stmt::Kind::kSetBlock: {
      std::string captured;
      Exec(s.body, scope, &captured);
      scope->vars[s.targets[0]] = Value(captured);
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      scope->vars[s.name] = MakeMacro(s, scope, Value());
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock: {
      const Value caller = MakeMacro(s, scope, Value());
      const Value callee = Eval(*s.expr->a, scope);
      if (!callee.is_function()) Fail("call block target is not callable");
      CallArgs args;
      EvalArgs(*s.expr, scope, &args);
      args.keyword.emplace_back("caller", caller);
      *out += callee.Call(args).ToString();
      return Flow::kNormal;
    }
    case Stmt::Kind::kFilterBlock: {
      std::string captured;
      Exec(s.body, scope, &captured);
      // Apply the filter chain innermost first.
      std::vector<const Expr*> chain;
      for (const Expr* f = s.expr.get(); f != nullptr; f = f->a.get()) chain.push_back(f);
      Value v(captured);
      for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        CallArgs args;
        EvalArgs(**it, scope, &args);
        v = ApplyFilter((*it)->name, v, args);
      }
      *out += v.ToString();
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::ExecFor(const Stmt& s, const std::shared_ptr<Scope>& scope,
                                       std::string* out) {
  const Array all = Iterate(Eval(*s.expr, scope));
  const auto bind = [&](const std::shared_ptr<Scope>& sc, const Value& item) {
    if (s.targets.size() == 1) {
      sc->vars[s.targets[0]] = item;
      return;
    }
    const Array parts = Iterate(item);
    if (parts.size() != s.targets.size()) Fail("cannot unpack loop item into targets");
    for (size_t k = 0; k < parts.size(); ++k) sc->vars[s.targets[k]] = parts[k];
  };
  Array items;
  if (s.cond) {
    for (const auto& item : all) {
      auto sc = std::make_shared<Scope>();
      sc->parent = scope;
      bind(sc, item);
      if (Eval(*s.cond, sc).Truthy()) items.push_back(item);
    }
  } else {
    items = all;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    CountStep();
    auto sc = std::make_shared<Scope>();
    sc->parent = scope;
    bind(sc, items[i]);
    Object loop;
    loop.Set("index", Value(i + 1));
    loop.Set("index0", Value(i));
    loop.Set("revindex", Value(n - i));
    loop.Set("revindex0", Value(n - i - 1));
    loop.Set("first", Value(i == 0));
    loop.Set("last", Value(i == n - 1));
    loop.Set("length", Value(n));
    loop.Set("depth", Value(1));
    loop.Set("depth0", Value(0));
    loop.Set("previtem", i > 0 ? items[i - 1] : Value());
    loop.Set("nextitem", i + 1 < n ? items[i + 1] : Value());
    loop.Set("cycle", Value::Func(
                          [i](CallArgs& a) {
                            if (a.positional.empty()) Fail("loop.cycle needs arguments");
                            return a.positional[i % a.positional.size()];
                          },
                          "cycle"));
    sc->vars["loop"] = Value(std::move(loop));
    if (Exec(s.body, sc, out) == Flow::kBreak) break;
  }
  if (n == 0) return Exec(s.else_body, scope, out);
  return Flow::kNormal;
}

void Interpreter::ExecSet(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Value v = Eval(*s.expr, scope);
  if (s.attr_target) {
    const Value* ns = scope->Find(s.targets[0]);
    if (ns == nullptr || !ns->is_object() || !ns->object().is_namespace) {
      Fail("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    }
    if (!s.targets[1].empty() && s.targets[1][0] == '_')
      Fail("namespace attributes cannot start with '_'");
    ns->object().Set(s.targets[1], std::move(v));
    return;
  }
  if (s.targets.size() == 1) {
    scope->vars[s.targets[0]] = std::move(v);
    return;
  }
  const Array parts = Iterate(v);
  if (parts.size() != s.targets.size()) Fail("cannot unpack value into set targets");
  for (size_t k = 0; k < parts.size(); ++k) scope->vars[s.targets[k]] = parts[k];
}

Value Interpreter::MakeMacro(const Stmt& s, const std::shared_ptr<Scope>& scope, Value) {
  const Stmt* def = &s;
  std::weak_ptr<Scope> weak = scope;
  return Value::Func(
      [this, def, weak](CallArgs& a) {
        auto parent = weak.lock();
        if (!parent) Fail("macro called after its scope ended");
        if (++depth_ > kMaxDepth) Fail("macro recursion too deep");
        auto sc = std::make_shared<Scope>();
        sc->parent = parent;
        size_t next_pos = 0;
        for (const auto& [name, dflt] : def->params) {
          const Value* kw = FindKw(a, name.c_str());
          if (kw != nullptr) {
            sc->vars[name] = *kw;
          } else if (next_pos < a.positional.size()) {
            sc->vars[name] = a.positional[next_pos++];
          } else {
            sc->vars[name] = dflt ? Eval(*dflt, parent) : Value();
          }
        }
        Array varargs(a.positional.begin() + std::min(next_pos, a.positional.size()),
                      a.positional.end());
        sc->vars["varargs"] = Value(std::move(varargs));
        if (const Value* c = FindKw(a, "caller")) sc->vars["caller"] = *c;
        std::string out;
        Exec(def->body, sc, &out);
        --depth_;
        return Value(out);
      },
      def->name.empty() ? "caller" : def->name);
}

Value Interpreter::LookupName(const std::string& name, const std::shared_ptr<Scope>& scope) {
  if (const Value* v = scope->Find(name)) return *v;
  auto it = builtins_.find(name);
  if (it != builtins_.end()) return it->second;
  return Value();
}

void Interpreter::EvalArgs(const Expr& e, const std::shared_ptr<Scope>& scope, CallArgs* args) {
  for (const auto& x : e.items) args->positional.push_back(Eval(*x, scope));
  for (const auto& [k, x] : e.kwargs) args->keyword.emplace_back(k, Eval(*x, scope));
}

Value Interpreter::Eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  CountStep();
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return LookupName(e.name, scope);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      Array a;
      for (const auto& x : e.items) a.push_back(Eval(*x, scope));
      return Value(std::move(a), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Object o;
      for (size_t k = 0; k + 1 < e.items.size(); k += 2) {
        const Value key = Eval(*e.items[k], scope);
        if (!key.is_string()) Fail("only string dict keys are supported");
        o.Set(key.str(), Eval(*e.items[k + 1], scope));
      }
      return Value(std::move(o));
    }
    case Expr::Kind::kAttr:
      return GetAttr(Eval(*e.a, scope), e.name);
    case Expr::Kind::kItem:
      return GetItem(Eval(*e.a, scope), Eval(*e.b, scope));
    case Expr::Kind::kSlice:
      return EvalSlice(e, scope);
    case Expr::Kind::kCall: {
      const Value callee = Eval(*e.a, scope);
      if (!callee.is_function()) Fail("'" + callee.Repr() + "' is not callable");
      CallArgs args;
      EvalArgs(e, scope, &args);
      return callee.Call(args);
    }
    case Expr::Kind::kFilter: {
      const Value target = e.a ? Eval(*e.a, scope) : Value();
      CallArgs args;
      EvalArgs(e, scope, &args);
      return ApplyFilter(e.name, target, args);
    }
    case Expr::Kind::kTest: {
      const Value target = Eval(*e.a, scope);
      CallArgs args;
      EvalArgs(e, scope, &args);
      return Value(ApplyTest(e.name, target, args) != e.negated);
    }
    case Expr::Kind::kUnary: {
      const Value v = Eval(*e.a, scope);
      if (e.name == "not") return Value(!v.Truthy());
      if (!v.is_number()) Fail("bad operand type for unary " + e.name);
      if (e.name == "+") return v.is_float() ? v : Value(v.AsInt());
      return v.is_float() ? Value(-v.AsFloat()) : Value(CheckedIntOp("-", 0, v.AsInt()));
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e, scope);
    case Expr::Kind::kCond:
      if (Eval(*e.a, scope).Truthy()) return Eval(*e.b, scope);
      return e.c ? Eval(*e.c, scope) : Value();
  }
  return Value();
}

Value Interpreter::EvalBinary(const Expr& e, const std::shared_ptr<Scope>& scope) {
  const std::string& op = e.name;
  const Value a = Eval(*e.a, scope);
  if (op == "and") return a.Truthy() ? Eval(*e.b, scope) : a;
  if (op == "or") return a.Truthy() ? a : Eval(*e.b, scope);
  const Value b = Eval(*e.b, scope);
  if (op == "~") return Value(a.ToString() + b.ToString());
  if (op == "==") return Value(a.Equals(b));
  if (op == "!=") return Value(!a.Equals(b));
  if (op == "in" || op == "not in") {
    bool found = false;
    if (b.is_string()) {
      if (!a.is_string()) Fail("'in <string>' requires string as left operand");
      found = b.str().find(a.str()) != std::string::npos;
    } else if (b.is_array()) {
      for (const auto& x : b.array()) found = found || x.Equals(a);
    } else if (b.is_object()) {
      found = a.is_string() && b.object().Find(a.str()) != nullptr;
    } else if (!b.is_undefined()) {
      Fail("argument of type '" + b.Repr() + "' is not iterable");
    }
    return Value(found != (op == "not in"));
  }
  if (op == "<") return Value(a.Compare(b) < 0);
  if (op == ">") return Value(a.Compare(b) > 0);
  if (op == "<=") return Value(a.Compare(b) <= 0);
  if (op == ">=") return Value(a.Compare(b) >= 0);
  if (a.is_undefined() || b.is_undefined()) Fail("undefined value in arithmetic");
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_array() && b.is_array()) {
      Array r = a.array();
      r.insert(r.end(), b.array().begin(), b.array().end());
      return Value(std::move(r));
    }
  }
  if (op == "*" && (a.is_string() || a.is_array()) && (b.is_int() || b.is_bool())) {
    const int64_t n = b.AsInt();
    int64_t total = 0;
    if (__builtin_mul_overflow(n, std::max<int64_t>(1, a.Length()), &total) || total > (1 << 24))
      Fail("repetition too large");
    if (a.is_string()) {
      std::string r;
      for (int64_t k = 0; k < n; ++k) r += a.str();
      return Value(r);
    }
    Array r;
    for (int64_t k = 0; k < n; ++k) r.insert(r.end(), a.array().begin(), a.array().end());
    return Value(std::move(r));
  }
  if (!a.is_number() || !b.is_number()) {
    Fail("unsupported operand types for " + op + ": " + a.Repr() + " and " + b.Repr());
  }
  const bool ints = !a.is_float() && !b.is_float();
  const double x = a.AsFloat(), y = b.AsFloat();
  if (op == "+" || op == "-" || op == "*") {
    if (ints) return Value(CheckedIntOp(op, a.AsInt(), b.AsInt()));
    return Value(op == "+" ? x + y : op == "-" ? x - y : x * y);
  }
  if (op == "/") {
    if (y == 0) Fail("division by zero");
    return Value(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) Fail("integer division or modulo by zero");
    if (ints) {
      const int64_t n = a.AsInt(), d = b.AsInt();
      if (op == "%") {  // Python's sign rule, without the overflow of n - q * d
        const int64_t r = d == -1 ? 0 : n % d;  // INT64_MIN % -1 would trap
        return Value(r != 0 && (r < 0) != (d < 0) ? r + d : r);
      }
      return Value(FloorDiv(n, d));
    }
    const double q = std::floor(x / y);
    return op == "//" ? Value(q) : Value(x - q * y);
  }
  if (op == "**") {
    if (ints && b.AsInt() >= 0 && b.AsInt() < 64) {
      int64_t r = 1;
      for (int64_t k = 0; k < b.AsInt(); ++k) r = CheckedIntOp("*", r, a.AsInt());
      return Value(r);
    }
    return Value(std::pow(x, y));
  }
  Fail("unknown operator " + op);
}

Value Interpreter::EvalSlice(const Expr& e, const std::shared_ptr<Scope>& scope) {
  const Value target = Eval(*e.a, scope);
  std::optional<int64_t> parts[3];
  for (int k = 0; k < 3; ++k) {
    if (!e.items[k]) continue;
    const Value v = Eval(*e.items[k], scope);
    if (v.is_none()) continue;
    if (!v.is_int() && !v.is_bool()) Fail("slice indices must be integers");
    parts[k] = v.AsInt();
  }
  const int64_t step = parts[2].value_or(1);
  if (step == 0) Fail("slice step cannot be zero");
  Array elems;
  if (target.is_string()) {
    for (auto& c : Chars(target.str())) elems.emplace_back(c);
  } else if (target.is_array()) {
    elems = target.array();
  } else {
    Fail("'" + target.Repr() + "' is not subscriptable");
  }
  const int64_t n = static_cast<int64_t>(elems.size());
  const auto clamp = [&](std::optional<int64_t> v, int64_t dflt, int64_t lo, int64_t hi) {
    if (!v) return dflt;
    int64_t x = *v < 0 ? *v + n : *v;
    return std::max(lo, std::min(hi, x));
  };
  const int64_t start = step > 0 ? clamp(parts[0], 0, 0, n) : clamp(parts[0], n - 1, -1, n - 1);
  const int64_t stop = step > 0 ? clamp(parts[1], n, 0, n) : clamp(parts[1], -1, -1, n - 1);
  Array out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(elems[i]);
  if (!target.is_string()) return Value(std::move(out), target.is_tuple());
  std::string s;
  for (const auto& c : out) s += c.str();
  return Value(s);
}

}  // namespace lucid::jinja
