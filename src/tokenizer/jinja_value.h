// jinja::Value: the dynamic value of the Jinja subset interpreter (Python semantics).
//
// Kinds mirror what chat templates see from Python: Undefined, None, bool, int (int64), float,
// str (UTF-8), list (tuples are lists flagged is_tuple), dict (insertion-ordered, string keys),
// and callables (macros, builtins, bound methods). Lists and dicts have reference semantics
// (shared_ptr), as in Python, so namespace() objects can be updated by `set ns.x = ...`.
// Printing follows Python's str()/repr(); ToJson follows json.dumps.
// Thread-safety: values are not synchronized; a render owns its values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace lucid::jinja {

class Value;
using Array = std::vector<Value>;

struct Object {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;
  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value v);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using Function = std::function<Value(CallArgs&)>;

// Error raised inside the interpreter; converted to a Status (with the template line) at the
// ChatTemplate boundary.
struct JinjaError {
  std::string message;
  int line = 0;
};
[[noreturn]] void Fail(const std::string& message);
// Integer arithmetic with an overflow check: Python's (and so Jinja's) integers are unbounded,
// lucid's are 64-bit, so a result out of range is a render error naming the operator (never
// undefined behaviour). op is one of "+", "-", "*".
int64_t CheckedIntOp(const std::string& op, int64_t a, int64_t b);

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kFunction };

  Value() = default;  // Undefined
  static Value None() { return Value(Kind::kNone); }
  Value(bool b) : kind_(Kind::kBool), int_(b) {}       // NOLINT
  Value(int v) : kind_(Kind::kInt), int_(v) {}         // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), int_(v) {}     // NOLINT
  Value(double v) : kind_(Kind::kFloat), float_(v) {}  // NOLINT
  Value(std::string s)
      : kind_(Kind::kString), str_(std::make_shared<std::string>(std::move(s))) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                                   // NOLINT
  Value(Array a, bool is_tuple = false)                                             // NOLINT
      : kind_(Kind::kArray), arr_(std::make_shared<Array>(std::move(a))), is_tuple_(is_tuple) {}
  Value(Object o) : kind_(Kind::kObject), obj_(std::make_shared<Object>(std::move(o))) {}  // NOLINT
  static Value Func(Function f, std::string name);
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool is_function() const { return kind_ == Kind::kFunction; }
  bool is_tuple() const { return is_tuple_; }

  bool AsBool() const { return int_ != 0; }
  int64_t AsInt() const;  // int or bool; floats truncate
  double AsFloat() const;
  const std::string& str() const { return *str_; }
  Array& array() const { return *arr_; }
  Object& object() const { return *obj_; }
  Value Call(CallArgs& args) const { return (*fn_)(args); }
  const std::string& func_name() const { return *fn_name_; }

  bool Truthy() const;
  // Python str(): strings unquoted, None -> "None", containers as repr. Undefined -> "".
  std::string ToString() const;
  // Python repr().
  std::string Repr() const;
  // json.dumps(value, ensure_ascii, indent (<0: none), separators, sort_keys).
  std::string ToJson(bool ensure_ascii, int indent, const std::string& item_sep,
                     const std::string& key_sep, bool sort_keys) const;
  bool Equals(const Value& o) const;
  // Python-style ordering for numbers and strings; Fail()s for other pairs.
  int Compare(const Value& o) const;
  // Length for len(): strings in code points. Fail()s for other kinds.
  int64_t Length() const;

 private:
  explicit Value(Kind k) : kind_(k) {}
  void AppendJson(std::string* out, bool ensure_ascii, int indent, int depth,
                  const std::string& item_sep, const std::string& key_sep, bool sort_keys) const;

  Kind kind_ = Kind::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<std::string> str_;
  std::shared_ptr<Array> arr_;
  std::shared_ptr<Object> obj_;
  std::shared_ptr<Function> fn_;
  std::shared_ptr<std::string> fn_name_;
  bool is_tuple_ = false;
};

// Python float repr (shortest round-trip; scientific below 1e-4 and from 1e16).
std::string FormatFloat(double v);
// Python repr() of a str.
std::string ReprString(const std::string& s);

}  // namespace lucid::jinja
