#include "tokenizer/jinja_value.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace lucid::jinja {

using tok::AppendUtf8;
using tok::DecodeUtf8;

void Fail(const std::string& message) { throw JinjaError{message, 0}; }

int64_t CheckedIntOp(const std::string& op, int64_t a, int64_t b) {
  int64_t r = 0;
  const bool overflow = op == "+"   ? __builtin_add_overflow(a, b, &r)
                        : op == "-" ? __builtin_sub_overflow(a, b, &r)
                                    : __builtin_mul_overflow(a, b, &r);
  if (overflow) Fail("integer overflow in " + op + " (integers are 64-bit)");
  return r;
}

const Value* Object::Find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Object::Set(const std::string& key, Value v) {
  for (auto& [k, old] : items) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  items.emplace_back(key, std::move(v));
}

Value Value::Func(Function f, std::string name) {
  Value v(Kind::kFunction);
  v.fn_ = std::make_shared<Function>(std::move(f));
  v.fn_name_ = std::make_shared<std::string>(std::move(name));
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(FromJson(e));
      return Value(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.items.emplace_back(it.key(), FromJson(*it));
      return Value(std::move(o));
    }
    default:
      return Value();
  }
}

int64_t Value::AsInt() const { return is_float() ? static_cast<int64_t>(float_) : int_; }
double Value::AsFloat() const { return is_float() ? float_ : static_cast<double>(int_); }

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0.0;
    case Kind::kString:
      return !str_->empty();
    case Kind::kArray:
      return !arr_->empty();
    case Kind::kObject:
      return obj_->is_namespace || !obj_->items.empty();
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string FormatFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // e.g. "-1.2345e+02"
  const size_t e = sci.find('e');
  const int exp = std::stoi(sci.substr(e + 1));
  std::string mant = sci.substr(0, e);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant) {
    if (c != '.') digits += c;
  }
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) return out + "0." + std::string(-exp - 1, '0') + digits;
  if (static_cast<int>(digits.size()) <= exp + 1) {
    return out + digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  }
  return out + digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
}

namespace {

bool IsPrintable(int32_t cp) {
  if (cp == ' ') return true;
  switch (u_charType(cp)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

void AppendJsonString(std::string* out, const std::string& s, bool ensure_ascii) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const int32_t cp = DecodeUtf8(s, i, &len);
    char buf[16];
    switch (cp) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (cp >= 0 && cp < 0x20) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          *out += buf;
        } else if (ensure_ascii && cp >= 0x80) {
          if (cp >= 0x10000) {
            const int32_t v = cp - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                          0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          }
          *out += buf;
        } else {
          out->append(s, i, len);
        }
    }
    i += len;
  }
  out->push_back('"');
}

}  // namespace

std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    size_t len;
    const int32_t cp = DecodeUtf8(s, i, &len);
    char buf[16];
    if (cp == q || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp >= 0 && !IsPrintable(cp)) {
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
      }
      out += buf;
    } else {
      out.append(s, i, len);
    }
    i += len;
  }
  out += q;
  return out;
}

std::string Value::ToString() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return *str_;
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return FormatFloat(float_);
    case Kind::kString:
      return ReprString(*str_);
    case Kind::kArray: {
      std::string out = is_tuple_ ? "(" : "[";
      for (size_t k = 0; k < arr_->size(); ++k) out += (k ? ", " : "") + (*arr_)[k].Repr();
      if (is_tuple_ && arr_->size() == 1) out += ",";
      return out + (is_tuple_ ? ")" : "]");
    }
    case Kind::kObject: {
      if (obj_->is_namespace) return "<Namespace>";
      std::string out = "{";
      for (size_t k = 0; k < obj_->items.size(); ++k) {
        out += (k ? ", " : "") + ReprString(obj_->items[k].first) + ": " +
               obj_->items[k].second.Repr();
      }
      return out + "}";
    }
    case Kind::kFunction:
      return "<function " + *fn_name_ + ">";
  }
  return "";
}

std::string Value::ToJson(bool ensure_ascii, int indent, const std::string& item_sep,
                          const std::string& key_sep, bool sort_keys) const {
  std::string out;
  AppendJson(&out, ensure_ascii, indent, 0, item_sep, key_sep, sort_keys);
  return out;
}

void Value::AppendJson(std::string* out, bool ensure_ascii, int indent, int depth,
                       const std::string& item_sep, const std::string& key_sep,
                       bool sort_keys) const {
  const auto newline = [&](int d) {
    if (indent >= 0) *out += "\n" + std::string(static_cast<size_t>(indent) * d, ' ');
  };
  switch (kind_) {
    case Kind::kNone:
      *out += "null";
      return;
    case Kind::kBool:
      *out += int_ ? "true" : "false";
      return;
    case Kind::kInt:
      *out += std::to_string(int_);
      return;
    case Kind::kFloat:
      if (std::isnan(float_)) {
        *out += "NaN";
      } else if (std::isinf(float_)) {
        *out += float_ > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FormatFloat(float_);
      }
      return;
    case Kind::kString:
      AppendJsonString(out, *str_, ensure_ascii);
      return;
    case Kind::kArray:
      if (arr_->empty()) {
        *out += "[]";
        return;
      }
      *out += "[";
      for (size_t k = 0; k < arr_->size(); ++k) {
        if (k) *out += item_sep;
        newline(depth + 1);
        (*arr_)[k].AppendJson(out, ensure_ascii, indent, depth + 1, item_sep, key_sep, sort_keys);
      }
      newline(depth);
      *out += "]";
      return;
    case Kind::kObject: {
      if (obj_->items.empty()) {
        *out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : obj_->items) items.push_back(&kv);
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      }
      *out += "{";
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(out, items[k]->first, ensure_ascii);
        *out += key_sep;
        items[k]->second.AppendJson(out, ensure_ascii, indent, depth + 1, item_sep, key_sep,
                                    sort_keys);
      }
      newline(depth);
      *out += "}";
      return;
    }
    default:
      Fail("Object of type " + std::string(is_undefined() ? "Undefined" : "function") +
           " is not JSON serializable");
  }
}

bool Value::Equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if (is_float() || o.is_float()) return AsFloat() == o.AsFloat();
    return int_ == o.int_;
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return *str_ == *o.str_;
    case Kind::kArray:
      if (arr_->size() != o.arr_->size()) return false;
      for (size_t k = 0; k < arr_->size(); ++k) {
        if (!(*arr_)[k].Equals((*o.arr_)[k])) return false;
      }
      return true;
    case Kind::kObject: {
      if (obj_->items.size() != o.obj_->items.size()) return false;
      for (const auto& [k, v] : obj_->items) {
        const Value* ov = o.obj_->Find(k);
        if (ov == nullptr || !v.Equals(*ov)) return false;
      }
      return true;
    }
    default:
      return fn_ == o.fn_;
  }
}

int Value::Compare(const Value& o) const {
  if (is_number() && o.is_number()) {
    const double a = AsFloat(), b = o.AsFloat();
    if (!is_float() && !o.is_float()) return int_ < o.int_ ? -1 : int_ > o.int_ ? 1 : 0;
    return a < b ? -1 : a > b ? 1 : 0;
  }
  if (is_string() && o.is_string()) {
    const int c = str_->compare(*o.str_);
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (is_array() && o.is_array()) {
    for (size_t k = 0; k < arr_->size() && k < o.arr_->size(); ++k) {
      const int c = (*arr_)[k].Compare((*o.arr_)[k]);
      if (c != 0) return c;
    }
    return arr_->size() < o.arr_->size() ? -1 : arr_->size() > o.arr_->size() ? 1 : 0;
  }
  Fail("cannot compare " + Repr() + " and " + o.Repr());
}

int64_t Value::Length() const {
  switch (kind_) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(tok::CountChars(*str_));
    case Kind::kArray:
      return static_cast<int64_t>(arr_->size());
    case Kind::kObject:
      return static_cast<int64_t>(obj_->items.size());
    default:
      Fail("object of type " + Repr() + " has no len()");
  }
}

}  // namespace lucid::jinja
