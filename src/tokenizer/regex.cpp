#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace lucid::tok {
namespace {

constexpr const char* kWhiteSpace =
    "\\x{09}-\\x{0D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

}  // namespace

std::string TranslateOnigPattern(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A leading ']' or '^]' is literal inside a class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

StatusOr<std::shared_ptr<const Regex>> Regex::Compile(const std::string& pattern) {
  const std::string translated = TranslateOnigPattern(pattern);
  int err = 0;
  PCRE2_SIZE erroff = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &erroff, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return InvalidArgument("cannot compile regex '" + pattern + "' at offset " +
                           std::to_string(erroff) + ": " + reinterpret_cast<char*>(buf));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // best effort; falls back to the interpreter
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = pattern;
  re->code_ = code;
  return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  bool have_prev = false;
  size_t prev_end = 0;
  const auto next_char = [&](size_t p) {
    ++p;
    while (p < text.size() && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) ++p;
    return p;
  };
  while (pos <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0], e = ov[1];
    if (s == e && have_prev && prev_end == e) {
      if (s >= text.size()) break;
      pos = next_char(s);
      continue;
    }
    out.emplace_back(s, e);
    have_prev = true;
    prev_end = e;
    if (s == e) {
      if (e >= text.size()) break;
      pos = next_char(e);
    } else {
      pos = e;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace lucid::tok
