// Regex: a compiled PCRE2 pattern with the find-all semantics of HF tokenizers (Oniguruma).
//
// Patterns come from tokenizer.json files (Split pre-tokenizers, Replace normalizers). They are
// compiled in UTF + UCP mode so \p{L}, \p{N}, lookahead and (?i:...) behave as in Oniguruma. `\s`
// and `\S` are rewritten to the Unicode White_Space set, which is what Oniguruma uses (PCRE2's UCP
// \s additionally matches U+180E).
// Thread-safety: a compiled Regex is immutable and may be used from many threads at once; each
// FindAll call allocates its own match data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace lucid::tok {

class Regex {
 public:
  // Compiles `pattern`; an invalid pattern is an InvalidArgument naming the pattern.
  static StatusOr<std::shared_ptr<const Regex>> Compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping matches [start, end) as byte offsets, left to right. After an empty
  // match the search resumes one character later and an empty match right at the previous match's
  // end is skipped (onig's FindMatches). Input must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Rewrites \s and \S to explicit White_Space classes (exposed for tests).
std::string TranslateOnigPattern(const std::string& pattern);

}  // namespace lucid::tok
