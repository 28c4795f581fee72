#include "tokenizer/jinja_lexer.h"

#include <cstring>

#include "tokenizer/jinja_value.h"
#include "tokenizer/utf8.h"

namespace lucid::jinja {
namespace {

[[noreturn]] void LexFail(const std::string& m, int line) { throw JinjaError{m, line}; }

// Python str.isspace for one code point.
bool IsPySpace(int32_t cp) { return tok::IsUnicodeWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

size_t RStripSpaceLen(const std::string& s) {  // length of s.rstrip()
  size_t e = s.size();
  while (e > 0) {
    size_t p = e - 1;
    while (p > 0 && (static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
    size_t len;
    if (!IsPySpace(tok::DecodeUtf8(s, p, &len))) break;
    e = p;
  }
  return e;
}

size_t SkipSpace(const std::string& s, size_t p) {
  while (p < s.size()) {
    size_t len;
    if (!IsPySpace(tok::DecodeUtf8(s, p, &len))) break;
    p += len;
  }
  return p;
}

int CountLines(const std::string& s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to && i < s.size(); ++i) n += s[i] == '\n';
  return n;
}

std::string Normalize(const std::string& src) {
  std::string s;
  s.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      s += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      s += src[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return s;
}

// Finds the end of a {{ }} / {% %} tag starting after its opener at p; skips string literals
// and balanced braces. Returns the index of the closing delimiter.
size_t FindTagEnd(const std::string& s, size_t p, char closer, int line) {
  int depth = 0;
  while (p + 1 < s.size()) {
    const char c = s[p];
    if (c == '"' || c == '\'') {
      size_t q = p + 1;
      while (q < s.size() && s[q] != c) q += s[q] == '\\' ? 2 : 1;
      p = q + 1;
      continue;
    }
    if (depth == 0 && c == closer && s[p + 1] == '}') return p;
    if (c == '{' || c == '[' || c == '(') ++depth;
    if ((c == '}' || c == ']' || c == ')') && depth > 0) --depth;
    ++p;
  }
  LexFail(std::string("unclosed tag, expected '") + closer + "}'", line);
}

}  // namespace

std::vector<Segment> SplitTemplate(const std::string& source) {
  const std::string s = Normalize(source);
  std::vector<Segment> out;
  size_t pos = 0;
  int line = 1;
  bool line_starting = true;
  while (pos < s.size()) {
    size_t p = s.find('{', pos);
    while (p != std::string::npos && p + 1 < s.size() && std::strchr("{%#", s[p + 1]) == nullptr) {
      p = s.find('{', p + 1);
    }
    if (p == std::string::npos || p + 1 >= s.size()) {
      out.push_back({Segment::Kind::kText, s.substr(pos), line});
      break;
    }
    const char type = s[p + 1];
    const char sign = p + 2 < s.size() ? s[p + 2] : 0;
    std::string text = s.substr(pos, p - pos);
    const int text_line = line;
    line += CountLines(s, pos, p);
    if (sign == '-') {
      text.resize(RStripSpaceLen(text));
    } else if (sign != '+' && type != '{') {  // lstrip_blocks
      const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
          SkipSpace(text, l_pos) == text.size()) {
        text.resize(l_pos);
      }
    }
    if (!text.empty()) out.push_back({Segment::Kind::kText, text, text_line});
    const size_t inner = p + 2 + (sign == '-' || sign == '+' ? 1 : 0);
    size_t close;
    if (type == '#') {
      close = s.find("#}", inner);
      if (close == std::string::npos) LexFail("unclosed comment", line);
    } else {
      close = FindTagEnd(s, inner, type == '{' ? '}' : '%', line);
    }
    const bool strip_after = close > inner && s[close - 1] == '-';
    const bool keep_after = close > inner && s[close - 1] == '+';
    const size_t inner_end = strip_after || keep_after ? close - 1 : close;
    const std::string inside = s.substr(inner, inner_end > inner ? inner_end - inner : 0);
    size_t next = close + 2;
    if (strip_after) {
      next = SkipSpace(s, next);
    } else if (type != '{' && !keep_after && next < s.size() && s[next] == '\n') {
      ++next;  // trim_blocks
    }
    if (type == '%') {
      // {% raw %}: everything up to {% endraw %} is text.
      const size_t b = inside.find_first_not_of(" \t\n");
      if (b != std::string::npos && inside.compare(b, 3, "raw") == 0 &&
          inside.find_first_not_of(" \t\n", b + 3) == std::string::npos) {
        size_t e = s.find("endraw", next);
        const size_t open = e == std::string::npos ? e : s.rfind("{%", e);
        if (open == std::string::npos) LexFail("unclosed raw block", line);
        std::string raw = s.substr(next, open - next);
        if (s[open + 2] == '-') raw.resize(RStripSpaceLen(raw));
        out.push_back({Segment::Kind::kText, raw, line});
        const size_t end_close = s.find("%}", e);
        if (end_close == std::string::npos) LexFail("unclosed endraw", line);
        line += CountLines(s, p, end_close);
        next = end_close + 2;
        if (s[end_close - 1] == '-') {
          next = SkipSpace(s, next);
        } else if (next < s.size() && s[next] == '\n') {
          ++next;
        }
        line_starting = s[next - 1] == '\n';
        pos = next;
        continue;
      }
    }
    if (type != '#') {
      out.push_back(
          {type == '{' ? Segment::Kind::kOutput : Segment::Kind::kStatement, inside, line});
    }
    line += CountLines(s, p, next);
    line_starting = s[next - 1] == '\n';
    pos = next;
  }
  return out;
}

std::vector<Token> TokenizeExpression(const std::string& t, int line) {
  static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                     "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                     "]",  "{",  "}",  ",",  ".",  ":",  "|"};
  std::vector<Token> out;
  size_t i = 0;
  while (i < t.size()) {
    const char c = t[i];
    if (c == '\n') ++line;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < t.size() && (std::isalnum(static_cast<unsigned char>(t[j])) || t[j] == '_')) ++j;
      out.push_back({Token::Kind::kName, t.substr(i, j - i), line});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < t.size() && (std::isdigit(static_cast<unsigned char>(t[j])) || t[j] == '_')) ++j;
      if (j + 1 < t.size() && t[j] == '.' && std::isdigit(static_cast<unsigned char>(t[j + 1]))) {
        is_float = true;
        ++j;
        while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
      }
      if (j < t.size() && (t[j] == 'e' || t[j] == 'E')) {
        size_t k = j + 1;
        if (k < t.size() && (t[k] == '+' || t[k] == '-')) ++k;
        if (k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]))) {
          is_float = true;
          j = k;
          while (j < t.size() && std::isdigit(static_cast<unsigned char>(t[j]))) ++j;
        }
      }
      std::string num;
      for (size_t k = i; k < j; ++k) {
        if (t[k] != '_') num += t[k];
      }
      out.push_back({is_float ? Token::Kind::kFloat : Token::Kind::kInt, num, line});
      i = j;
      continue;
    }
    if (c == '"' || c == '\'') {
      std::string v;
      size_t j = i + 1;
      for (; j < t.size() && t[j] != c; ++j) {
        if (t[j] != '\\' || j + 1 >= t.size()) {
          v += t[j];
          continue;
        }
        const char e = t[++j];
        switch (e) {
          case 'n':
            v += '\n';
            break;
          case 't':
            v += '\t';
            break;
          case 'r':
            v += '\r';
            break;
          case '0':
            v += '\0';
            break;
          case 'b':
            v += '\b';
            break;
          case 'f':
            v += '\f';
            break;
          case 'v':
            v += '\v';
            break;
          case 'a':
            v += '\a';
            break;
          case '\\':
          case '\'':
          case '"':
            v += e;
            break;
          case '\n':
            break;
          case 'x':
          case 'u':
          case 'U': {
            const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            if (j + n >= t.size()) LexFail("bad escape", line);
            uint32_t cp = 0;
            for (int k = 1; k <= n; ++k) {
              const char h = t[j + k];
              if (!std::isxdigit(static_cast<unsigned char>(h))) LexFail("bad escape", line);
              cp = cp * 16 +
                   (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (h | 0x20) - 'a' + 10);
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) LexFail("bad escape", line);
            tok::AppendUtf8(&v, cp);
            j += n;
            break;
          }
          default:
            v += '\\';
            v += e;
        }
      }
      if (j >= t.size()) LexFail("unterminated string literal", line);
      out.push_back({Token::Kind::kString, v, line});
      i = j + 1;
      continue;
    }
    bool found = false;
    for (const char* op : kOps) {
      const size_t n = std::strlen(op);
      if (t.compare(i, n, op) == 0) {
        out.push_back({Token::Kind::kOp, op, line});
        i += n;
        found = true;
        break;
      }
    }
    if (!found) LexFail(std::string("unexpected character '") + c + "'", line);
  }
  out.push_back({Token::Kind::kEnd, "", line});
  return out;
}

}  // namespace lucid::jinja
