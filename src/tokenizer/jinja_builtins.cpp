// Filters, tests, attribute/item access and the str/dict methods templates call.
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cfenv>
#include <cmath>

#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_strings.h"
#include "tokenizer/utf8.h"

namespace lucid::jinja {

using tok::DecodeUtf8;

namespace {
bool IsPySpace(int32_t cp) { return tok::IsUnicodeWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

}  // namespace

std::vector<int32_t> CodePoints(const std::string& s) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    out.push_back(DecodeUtf8(s, i, &len));
    i += len;
  }
  return out;
}

std::string FromCodePoints(const std::vector<int32_t>& cps, size_t b, size_t e) {
  std::string out;
  for (size_t k = b; k < e; ++k) tok::AppendUtf8(&out, static_cast<uint32_t>(cps[k]));
  return out;
}

// Python str.strip/lstrip/rstrip with optional chars.
std::string Strip(const std::string& s, const Value* chars, bool left, bool right) {
  const auto cps = CodePoints(s);
  std::vector<int32_t> set;
  const bool by_set = chars != nullptr && !chars->is_none() && !chars->is_undefined();
  if (by_set) set = CodePoints(chars->ToString());
  const auto strip_it = [&](int32_t c) {
    return by_set ? std::find(set.begin(), set.end(), c) != set.end() : IsPySpace(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  return FromCodePoints(cps, b, e);
}

std::string CaseMap(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (mode == 0) u.toLower(icu::Locale::getRoot());
  if (mode == 1) u.toUpper(icu::Locale::getRoot());
  if (mode == 2 || mode == 3) {
    std::string out;
    bool start = true;
    for (size_t i = 0; i < s.size();) {
      size_t len;
      const int32_t cp = DecodeUtf8(s, i, &len);
      icu::UnicodeString c(static_cast<UChar32>(cp));
      if (start) {
        c.toTitle(nullptr, icu::Locale::getRoot());
      } else {
        c.toLower(icu::Locale::getRoot());
      }
      c.toUTF8String(out);
      if (mode == 2) {
        start = !(u_isalpha(cp) || u_isdigit(cp));
      } else {
        start = false;
      }
      i += len;
    }
    return out;
  }
  std::string out;
  u.toUTF8String(out);
  return out;
}

Array Split(const std::string& s, const Value* sep, int64_t maxsplit) {
  Array out;
  if (sep == nullptr || sep->is_none()) {
    const auto cps = CodePoints(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && IsPySpace(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t j = i;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = cps.size();
        while (e > i && IsPySpace(cps[e - 1])) --e;
        out.emplace_back(FromCodePoints(cps, i, e));
        break;
      }
      while (j < cps.size() && !IsPySpace(cps[j])) ++j;
      out.emplace_back(FromCodePoints(cps, i, j));
      i = j;
    }
    return out;
  }
  const std::string d = sep->ToString();
  if (d.empty()) Fail("empty separator");
  size_t prev = 0;
  for (size_t p = s.find(d); p != std::string::npos; p = s.find(d, prev)) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) break;
    out.emplace_back(s.substr(prev, p - prev));
    prev = p + d.size();
  }
  out.emplace_back(s.substr(prev));
  return out;
}

std::string Replace(const std::string& s, const std::string& a, const std::string& b,
                    int64_t count) {
  std::string out;
  if (a.empty()) return s;  // Python inserts between characters; not needed by templates
  size_t prev = 0;
  int64_t n = 0;
  for (size_t p = s.find(a); p != std::string::npos && (count < 0 || n < count);
       p = s.find(a, prev), ++n) {
    out.append(s, prev, p - prev);
    out += b;
    prev = p + a.size();
  }
  out.append(s, prev, std::string::npos);
  return out;
}

namespace {

const Value* Arg(CallArgs& a, size_t pos, const char* name) {
  for (auto& [k, v] : a.keyword) {
    if (k == name) return &v;
  }
  return pos < a.positional.size() ? &a.positional[pos] : nullptr;
}

Value StringMethod(const std::string& s, const std::string& name, CallArgs& a) {
  if (name == "startswith" || name == "endswith") {
    const Value* p = Arg(a, 0, "prefix");
    if (p == nullptr) Fail(name + " needs an argument");
    Array opts = p->is_array() ? p->array() : Array{*p};
    for (const auto& o : opts) {
      if (!o.is_string()) Fail(name + " argument must be a string");
      const std::string& x = o.str();
      const bool hit = name == "startswith" ? s.compare(0, x.size(), x) == 0
                                            : s.size() >= x.size() &&
                                                  s.compare(s.size() - x.size(), x.size(), x) == 0;
      if (hit) return Value(true);
    }
    return Value(false);
  }
  if (name == "strip") return Value(Strip(s, Arg(a, 0, "chars"), true, true));
  if (name == "lstrip") return Value(Strip(s, Arg(a, 0, "chars"), true, false));
  if (name == "rstrip") return Value(Strip(s, Arg(a, 0, "chars"), false, true));
  if (name == "split" || name == "rsplit") {
    const Value* m = Arg(a, 1, "maxsplit");
    const int64_t maxsplit = m ? m->AsInt() : -1;
    if (name == "rsplit" && maxsplit >= 0) Fail("rsplit with maxsplit is not supported");
    return Value(Split(s, Arg(a, 0, "sep"), maxsplit));
  }
  if (name == "splitlines") {
    Array out;
    size_t prev = 0;
    for (size_t p = s.find('\n'); p != std::string::npos; p = s.find('\n', prev)) {
      out.emplace_back(s.substr(prev, p - prev));
      prev = p + 1;
    }
    if (prev < s.size()) out.emplace_back(s.substr(prev));
    return Value(std::move(out));
  }
  if (name == "upper") return Value(CaseMap(s, 1));
  if (name == "lower") return Value(CaseMap(s, 0));
  if (name == "title") return Value(CaseMap(s, 2));
  if (name == "capitalize") return Value(CaseMap(s, 3));
  if (name == "replace") {
    const Value* x = Arg(a, 0, "old");
    const Value* y = Arg(a, 1, "new");
    const Value* c = Arg(a, 2, "count");
    if (!x || !y || !x->is_string() || !y->is_string()) Fail("replace(old, new)");
    return Value(Replace(s, x->str(), y->str(), c ? c->AsInt() : -1));
  }
  if (name == "find" || name == "count" || name == "index") {
    const Value* x = Arg(a, 0, "sub");
    if (!x || !x->is_string()) Fail(name + "(sub)");
    if (name == "count") {
      int64_t n = 0;
      if (x->str().empty()) return Value(static_cast<int64_t>(tok::CountChars(s)) + 1);
      for (size_t p = s.find(x->str()); p != std::string::npos;
           p = s.find(x->str(), p + x->str().size()))
        ++n;
      return Value(n);
    }
    const size_t p = s.find(x->str());
    if (p == std::string::npos) {
      if (name == "index") Fail("substring not found");
      return Value(int64_t{-1});
    }
    return Value(static_cast<int64_t>(tok::CountChars(s.substr(0, p))));
  }
  if (name == "join") {
    const Value* x = Arg(a, 0, "iterable");
    if (!x) Fail("join(iterable)");
    std::string out;
    bool first = true;
    for (const auto& v : Iterate(*x)) {
      if (!first) out += s;
      first = false;
      out += v.ToString();
    }
    return Value(out);
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum") {
    if (s.empty()) return Value(false);
    for (int32_t c : CodePoints(s)) {
      const bool ok = name == "isdigit"   ? u_isdigit(c)
                      : name == "isalpha" ? u_isalpha(c)
                      : name == "isspace" ? IsPySpace(c)
                                          : (u_isalpha(c) || u_isdigit(c));
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  Fail("str object has no method '" + name + "'");
}

bool IsStringMethod(const std::string& n) {
  static const char* const kNames[] = {
      "startswith", "endswith", "strip", "lstrip",  "rstrip",     "split",   "rsplit",
      "splitlines", "upper",    "lower", "title",   "capitalize", "replace", "find",
      "count",      "index",    "join",  "isdigit", "isalpha",    "isspace", "isalnum"};
  for (const char* k : kNames) {
    if (n == k) return true;
  }
  return false;
}

Value DictMethod(const Value& obj, const std::string& name, CallArgs& a) {
  const Object& o = obj.object();
  if (name == "items") {
    Array out;
    for (const auto& [k, v] : o.items) out.emplace_back(Array{Value(k), v}, true);
    return Value(std::move(out));
  }
  if (name == "keys" || name == "values") {
    Array out;
    for (const auto& [k, v] : o.items) out.push_back(name == "keys" ? Value(k) : v);
    return Value(std::move(out));
  }
  // get(key, default=None)
  const Value* k = Arg(a, 0, "key");
  if (k == nullptr) Fail("get(key)");
  const Value* found = k->is_string() ? o.Find(k->str()) : nullptr;
  if (found) return *found;
  const Value* d = Arg(a, 1, "default");
  return d ? *d : Value::None();
}

}  // namespace

Value Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) Fail("'" + name + "' accessed on an undefined value");
  if (obj.is_object()) {
    if (!obj.object().is_namespace &&
        (name == "items" || name == "keys" || name == "values" || name == "get")) {
      return Value::Func([obj, name](CallArgs& a) { return DictMethod(obj, name, a); }, name);
    }
    const Value* v = obj.object().Find(name);
    return v ? *v : Value();
  }
  if (obj.is_string() && IsStringMethod(name)) {
    const std::string s = obj.str();
    return Value::Func([s, name](CallArgs& a) { return StringMethod(s, name, a); }, name);
  }
  return Value();
}

Value Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) Fail("subscript of an undefined value");
  if (obj.is_object()) {
    if (key.is_string()) {
      const Value* v = obj.object().Find(key.str());
      if (v) return *v;
      return GetAttr(obj, key.str());
    }
    return Value();
  }
  if ((obj.is_array() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.AsInt();
    if (obj.is_array()) {
      const int64_t n = static_cast<int64_t>(obj.array().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? obj.array()[i] : Value();
    }
    const auto cps = CodePoints(obj.str());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (i < 0) i += n;
    return i >= 0 && i < n ? Value(FromCodePoints(cps, i, i + 1)) : Value();
  }
  if (key.is_string()) return GetAttr(obj, key.str());
  return Value();
}

bool Interpreter::ApplyTest(const std::string& name, const Value& v, CallArgs& a) {
  const Value* arg = a.positional.empty() ? nullptr : &a.positional[0];
  const auto need = [&]() -> const Value& {
    if (arg == nullptr) Fail("test '" + name + "' needs an argument");
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.AsBool();
  if (name == "false") return v.is_bool() && !v.AsBool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_object() && !v.object().is_namespace;
  if (name == "iterable") return v.is_string() || v.is_array() || v.is_object() || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_array() || v.is_object() || v.is_undefined();
  if (name == "callable") return v.is_function();
  if (name == "even" || name == "odd") {
    if (!v.is_int()) Fail("test '" + name + "' needs an integer");
    return (v.AsInt() % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const int64_t d = need().AsInt();
    if (d == 0) Fail("division by zero");
    return v.AsInt() % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return v.Equals(need());
  if (name == "ne" || name == "!=") return !v.Equals(need());
  if (name == "lt" || name == "lessthan" || name == "<") return v.Compare(need()) < 0;
  if (name == "le" || name == "<=") return v.Compare(need()) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return v.Compare(need()) > 0;
  if (name == "ge" || name == ">=") return v.Compare(need()) >= 0;
  if (name == "sameas") {
    const Value& o = need();
    if (v.kind() != o.kind()) return false;
    return v.is_none() || v.is_undefined() || (v.is_bool() && v.AsBool() == o.AsBool()) ||
           v.Equals(o);
  }
  if (name == "in") {
    const Value& o = need();
    if (o.is_string()) return v.is_string() && o.str().find(v.str()) != std::string::npos;
    for (const auto& x : Iterate(o)) {
      if (x.Equals(v)) return true;
    }
    return false;
  }
  if (name == "lower" || name == "upper") {
    return v.is_string() && CaseMap(v.str(), name == "lower" ? 0 : 1) == v.str();
  }
  if (name == "escaped") return false;
  Fail("unknown test '" + name + "'");
}

}  // namespace lucid::jinja
