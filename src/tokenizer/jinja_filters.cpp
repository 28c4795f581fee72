// Jinja filters (Interpreter::ApplyFilter), with jinja2 3.1 semantics; `tojson` is transformers'
// override (json.dumps with ensure_ascii=False, no HTML escaping).
#include <algorithm>
#include <cfenv>
#include <cmath>

#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_strings.h"

namespace lucid::jinja {
namespace {

const Value* Arg(CallArgs& a, size_t pos, const char* name) {
  for (auto& [k, v] : a.keyword) {
    if (k == name) return &v;
  }
  return pos < a.positional.size() ? &a.positional[pos] : nullptr;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Follows a dotted attribute path ("a.b" or "0") like jinja2's make_attrgetter.
Value AttrPath(Interpreter& in, Value v, const std::string& path) {
  size_t prev = 0;
  while (true) {
    const size_t dot = path.find('.', prev);
    const std::string part = path.substr(prev, dot == std::string::npos ? dot : dot - prev);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit)) {
      v = in.GetItem(v, Value(static_cast<int64_t>(std::stoll(part))));
    } else {
      v = in.GetItem(v, Value(part));
    }
    if (dot == std::string::npos) return v;
    prev = dot + 1;
  }
}

std::string ToJsonFilter(const Value& v, CallArgs& a) {
  const Value* ea = Arg(a, 0, "ensure_ascii");
  const Value* ind = Arg(a, 1, "indent");
  const Value* seps = Arg(a, 2, "separators");
  const Value* sk = Arg(a, 3, "sort_keys");
  const int indent = ind && (ind->is_int()) ? static_cast<int>(ind->AsInt()) : -1;
  std::string item_sep = indent >= 0 ? "," : ", ", key_sep = ": ";
  if (seps && seps->is_array() && seps->array().size() == 2) {
    item_sep = seps->array()[0].ToString();
    key_sep = seps->array()[1].ToString();
  }
  return v.ToJson(ea && ea->Truthy(), indent, item_sep, key_sep, sk && sk->Truthy());
}

double RoundHalfEven(double x, int64_t precision) {
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const int old = std::fegetround();
  std::fesetround(FE_TONEAREST);
  const double r = std::nearbyint(x * scale) / scale;
  std::fesetround(old);
  return r;
}

Value SortValues(Interpreter& in, Array items, CallArgs& a) {
  const Value* rev = Arg(a, 0, "reverse");
  const Value* cs = Arg(a, 1, "case_sensitive");
  const Value* attr = Arg(a, 2, "attribute");
  const bool case_sensitive = cs && cs->Truthy();
  const auto key = [&](const Value& v) {
    Value k = attr && attr->is_string() ? AttrPath(in, v, attr->str()) : v;
    if (!case_sensitive && k.is_string()) k = Value(CaseMap(k.str(), 0));
    return k;
  };
  std::stable_sort(items.begin(), items.end(),
                   [&](const Value& x, const Value& y) { return key(x).Compare(key(y)) < 0; });
  if (rev && rev->Truthy()) std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

}  // namespace

Value Interpreter::ApplyFilter(const std::string& name, const Value& v, CallArgs& a) {
  CountStep();
  const Value* a0 = a.positional.empty() ? nullptr : &a.positional[0];
  if (name == "default" || name == "d") {
    const Value* b = Arg(a, 1, "boolean");
    const bool use_default = v.is_undefined() || (b && b->Truthy() && !v.Truthy());
    const Value* d = Arg(a, 0, "default_value");
    return use_default ? (d ? *d : Value("")) : v;
  }
  if (name == "tojson") return Value(ToJsonFilter(v, a));
  if (name == "string") return Value(v.ToString());
  if (name == "safe") return v;
  if (name == "escape" || name == "e") return Value(HtmlEscape(v.ToString()));
  if (name == "length" || name == "count") return Value(v.Length());
  if (name == "trim") return Value(Strip(v.ToString(), Arg(a, 0, "chars"), true, true));
  if (name == "upper") return Value(CaseMap(v.ToString(), 1));
  if (name == "lower") return Value(CaseMap(v.ToString(), 0));
  if (name == "title") return Value(CaseMap(v.ToString(), 2));
  if (name == "capitalize") return Value(CaseMap(v.ToString(), 3));
  if (name == "replace") {
    const Value* x = Arg(a, 0, "old");
    const Value* y = Arg(a, 1, "new");
    const Value* c = Arg(a, 2, "count");
    if (!x || !y) Fail("replace(old, new)");
    return Value(Replace(v.ToString(), x->ToString(), y->ToString(), c ? c->AsInt() : -1));
  }
  if (name == "first" || name == "last") {
    const Array items = Iterate(v);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(Iterate(v));
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = CodePoints(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value(FromCodePoints(cps, 0, cps.size()));
    }
    Array items = Iterate(v);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "join") {
    const Value* sep = Arg(a, 0, "d");
    const Value* attr = Arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& x : Iterate(v)) {
      if (!first && sep) out += sep->ToString();
      first = false;
      out += (attr ? AttrPath(*this, x, attr->ToString()) : x).ToString();
    }
    return Value(out);
  }
  if (name == "items") {
    if (v.is_undefined()) return Value(Array{});
    if (!v.is_object()) Fail("items filter needs a mapping");
    Array out;
    for (const auto& [k, x] : v.object().items) out.emplace_back(Array{Value(k), x}, true);
    return Value(std::move(out));
  }
  if (name == "dictsort") {
    if (!v.is_object()) Fail("dictsort needs a mapping");
    Array out;
    for (const auto& [k, x] : v.object().items) out.emplace_back(Array{Value(k), x}, true);
    std::stable_sort(out.begin(), out.end(), [](const Value& p, const Value& q) {
      return CaseMap(p.array()[0].str(), 0) < CaseMap(q.array()[0].str(), 0);
    });
    return Value(std::move(out));
  }
  if (name == "map") {
    Array out;
    const Value* attr = Arg(a, 99, "attribute");
    for (const auto& x : Iterate(v)) {
      if (attr) {
        Value r = AttrPath(*this, x, attr->ToString());
        const Value* d = Arg(a, 99, "default");
        out.push_back(r.is_undefined() && d ? *d : r);
      } else {
        if (!a0 || !a0->is_string()) Fail("map needs a filter name or attribute=");
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + 1, a.positional.end());
        rest.keyword = a.keyword;
        out.push_back(ApplyFilter(a0->str(), x, rest));
      }
    }
    return Value(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    const bool by_attr = name == "selectattr" || name == "rejectattr";
    const bool keep = name == "select" || name == "selectattr";
    const size_t test_pos = by_attr ? 1 : 0;
    if (by_attr && (!a0 || !a0->is_string())) Fail(name + " needs an attribute name");
    Array out;
    for (const auto& x : Iterate(v)) {
      const Value subject = by_attr ? AttrPath(*this, x, a0->str()) : x;
      bool ok;
      if (a.positional.size() > test_pos) {
        CallArgs rest;
        rest.positional.assign(a.positional.begin() + test_pos + 1, a.positional.end());
        ok = ApplyTest(a.positional[test_pos].ToString(), subject, rest);
      } else {
        ok = subject.Truthy();
      }
      if (ok == keep) out.push_back(x);
    }
    return Value(std::move(out));
  }
  if (name == "unique") {
    Array out;
    for (const auto& x : Iterate(v)) {
      bool seen = false;
      for (const auto& y : out) seen = seen || x.Equals(y);
      if (!seen) out.push_back(x);
    }
    return Value(std::move(out));
  }
  if (name == "sort") return SortValues(*this, Iterate(v), a);
  if (name == "sum") {
    const Value* attr = Arg(a, 0, "attribute");
    const Value* start = Arg(a, 1, "start");
    Value total = start ? *start : Value(int64_t{0});
    for (const auto& x : Iterate(v)) {
      const Value y = attr && attr->is_string() ? AttrPath(*this, x, attr->str()) : x;
      if (!y.is_number() || !total.is_number()) Fail("sum of non-numbers");
      total = total.is_float() || y.is_float() ? Value(total.AsFloat() + y.AsFloat())
                                               : Value(CheckedIntOp("+", total.AsInt(), y.AsInt()));
    }
    return total;
  }
  if (name == "min" || name == "max") {
    const Array items = Iterate(v);
    if (items.empty()) return Value();
    Value best = items[0];
    for (const auto& x : items) {
      const int c = x.Compare(best);
      if ((name == "min" && c < 0) || (name == "max" && c > 0)) best = x;
    }
    return best;
  }
  if (name == "abs") {
    if (!v.is_number()) Fail("abs of a non-number");
    return v.is_float() ? Value(std::fabs(v.AsFloat()))
                        : Value(static_cast<int64_t>(std::llabs(v.AsInt())));
  }
  if (name == "round") {
    const Value* p = Arg(a, 0, "precision");
    if (!v.is_number()) Fail("round of a non-number");
    return Value(RoundHalfEven(v.AsFloat(), p ? p->AsInt() : 0));
  }
  if (name == "int") {
    if (v.is_number()) return Value(v.AsInt());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string s = Strip(v.str(), nullptr, true, true);
        const long long x = std::stoll(s, &used, 10);
        if (used == s.size()) return Value(static_cast<int64_t>(x));
      } catch (...) {
      }
    }
    const Value* d = Arg(a, 0, "default");
    return d ? *d : Value(int64_t{0});
  }
  if (name == "float") {
    if (v.is_number()) return Value(v.AsFloat());
    if (v.is_string()) {
      try {
        size_t used = 0;
        const std::string s = Strip(v.str(), nullptr, true, true);
        const double x = std::stod(s, &used);
        if (used == s.size()) return Value(x);
      } catch (...) {
      }
    }
    const Value* d = Arg(a, 0, "default");
    return d ? *d : Value(0.0);
  }
  if (name == "indent") {
    const Value* w = Arg(a, 0, "width");
    const Value* first = Arg(a, 1, "first");
    const Value* blank = Arg(a, 2, "blank");
    const std::string pad = w && w->is_string() ? w->str() : std::string(w ? w->AsInt() : 4, ' ');
    const std::string s = v.ToString();
    std::string out;
    size_t prev = 0;
    bool first_line = true;
    while (true) {
      const size_t nl = s.find('\n', prev);
      const std::string line = s.substr(prev, nl == std::string::npos ? nl : nl - prev);
      const bool add =
          first_line ? (first && first->Truthy()) : (!line.empty() || (blank && blank->Truthy()));
      out += (add ? pad : "") + line;
      if (nl == std::string::npos) break;
      out += "\n";
      prev = nl + 1;
      first_line = false;
    }
    return Value(out);
  }
  if (name == "wordcount")
    return Value(static_cast<int64_t>(Split(v.ToString(), nullptr, -1).size()));
  if (name == "batch" || name == "slice" || name == "groupby" || name == "format" ||
      name == "truncate" || name == "urlize" || name == "wordwrap" || name == "xmlattr" ||
      name == "filesizeformat" || name == "pprint" || name == "striptags" || name == "center") {
    Fail("filter '" + name + "' is not supported");
  }
  Fail("unknown filter '" + name + "'");
}

}  // namespace lucid::jinja
