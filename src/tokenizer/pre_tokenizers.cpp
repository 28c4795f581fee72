// Pre-tokenizers of tokenizer.json: Split, ByteLevel, Metaspace, Digits, Sequence.
#include <unicode/uchar.h>

#include <array>

#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace lucid::tok {
namespace {

using nlohmann::json;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t start, end;
  bool is_match;
};

// HF NormalizedString::split: turns a covering list of match/non-match spans into pieces.
std::vector<std::pair<size_t, size_t>> ApplyBehavior(const std::vector<Span>& spans, Behavior b) {
  std::vector<std::pair<size_t, size_t>> out;
  bool prev_match = false;
  switch (b) {
    case Behavior::kIsolated:
      for (const auto& s : spans) out.emplace_back(s.start, s.end);
      break;
    case Behavior::kRemoved:
      for (const auto& s : spans) {
        if (!s.is_match) out.emplace_back(s.start, s.end);
      }
      break;
    case Behavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == prev_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        prev_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !prev_match && !out.empty()) {
          out.back().second = s.end;
        } else {
          out.emplace_back(s.start, s.end);
        }
        prev_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !prev_match && !out.empty()) {
          out.back().first = it->start;
        } else {
          out.emplace_back(it->start, it->end);
        }
        prev_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  return out;
}

// Spans covering `text` from a list of matches (HF Pattern::find_matches).
std::vector<Span> CoverWithMatches(size_t size, const std::vector<std::pair<size_t, size_t>>& m,
                                   bool invert) {
  std::vector<Span> spans;
  if (size == 0) return {{0, 0, false}};
  size_t prev = 0;
  for (const auto& [s, e] : m) {
    if (prev != s) spans.push_back({prev, s, invert});
    spans.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != size) spans.push_back({prev, size, invert});
  return spans;
}

// Splits every piece by `spans_of(text)` with `behavior`, dropping empty results.
template <typename F>
void SplitPieces(std::vector<Piece>* pieces, Behavior behavior, F spans_of) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (auto& p : *pieces) {
    const auto parts = ApplyBehavior(spans_of(p.text), behavior);
    for (const auto& [s, e] : parts) {
      if (s == e) continue;
      out.push_back({p.text.substr(s, e - s), p.at_origin && s == 0});
    }
  }
  *pieces = std::move(out);
}

StatusOr<Behavior> ParseBehavior(const std::string& s) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  return Unimplemented("split behavior '" + s + "' is not supported");
}

std::vector<std::pair<size_t, size_t>> FindLiteral(const std::string& text,
                                                   const std::string& lit) {
  std::vector<std::pair<size_t, size_t>> m;
  if (lit.empty()) return m;
  for (size_t p = text.find(lit); p != std::string::npos; p = text.find(lit, p + lit.size())) {
    m.emplace_back(p, p + lit.size());
  }
  return m;
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string lit, std::shared_ptr<const Regex> re, Behavior b, bool invert)
      : literal_(std::move(lit)), re_(std::move(re)), behavior_(b), invert_(invert) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitPieces(pieces, behavior_, [&](const std::string& t) {
      return CoverWithMatches(t.size(), re_ ? re_->FindAll(t) : FindLiteral(t, literal_), invert_);
    });
  }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> re_;
  Behavior behavior_;
  bool invert_;
};

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::shared_ptr<const Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_) {
      for (auto& p : *pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
      }
    }
    if (re_) {
      SplitPieces(pieces, Behavior::kIsolated, [&](const std::string& t) {
        return CoverWithMatches(t.size(), re_->FindAll(t), false);
      });
    }
    for (auto& p : *pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += ByteToUnicode(static_cast<uint8_t>(c));
      p.text = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<const Regex> re_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string rep, PrependScheme scheme, bool split)
      : rep_(std::move(rep)), scheme_(scheme), split_(split) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (auto& p : *pieces) {
      std::string t;
      for (char c : p.text) {
        if (c == ' ') {
          t += rep_;
        } else {
          t += c;
        }
      }
      const bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && p.at_origin))) {
        t.insert(0, rep_);
      }
      p.text = std::move(t);
    }
    if (split_) {
      SplitPieces(pieces, Behavior::kMergedWithNext, [&](const std::string& t) {
        return CoverWithMatches(t.size(), FindLiteral(t, rep_), false);
      });
    }
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    SplitPieces(pieces, individual_ ? Behavior::kIsolated : Behavior::kContiguous,
                [](const std::string& t) {
                  std::vector<std::pair<size_t, size_t>> m;
                  for (size_t i = 0; i < t.size();) {
                    size_t len;
                    const int32_t cp = DecodeUtf8(t, i, &len);
                    const int8_t type = u_charType(cp);
                    if (type == U_DECIMAL_DIGIT_NUMBER || type == U_LETTER_NUMBER ||
                        type == U_OTHER_NUMBER) {
                      m.emplace_back(i, i + len);
                    }
                    i += len;
                  }
                  return CoverWithMatches(t.size(), m, false);
                });
  }

 private:
  bool individual_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> s)
      : seq_(std::move(s)) {}
  void PreTokenize(std::vector<Piece>* pieces) const override {
    for (const auto& p : seq_) p->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> seq_;
};

StatusOr<PrependScheme> ParsePrependScheme(const json& j) {
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    return Unimplemented("Metaspace prepend_scheme '" + s + "' is not supported");
  }
  // Files older than prepend_scheme only have add_prefix_space.
  return j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& j) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  const std::string type = j.value("type", "");
  if (type == "Split") {
    std::string literal;
    std::shared_ptr<const Regex> re;
    LUCID_RETURN_IF_ERROR(ParsePattern(j.at("pattern"), &literal, &re));
    LUCID_ASSIGN_OR_RETURN(Behavior b, ParseBehavior(j.at("behavior").get<std::string>()));
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(literal, re, b, j.value("invert", false)));
  }
  if (type == "ByteLevel") {
    std::shared_ptr<const Regex> re;
    if (j.value("use_regex", true)) {
      LUCID_ASSIGN_OR_RETURN(re, Regex::Compile(kGpt2Pattern));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(j.value("add_prefix_space", true), re));
  }
  if (type == "Metaspace") {
    LUCID_ASSIGN_OR_RETURN(PrependScheme scheme, ParsePrependScheme(j));
    std::string rep = j.value("replacement", "\xE2\x96\x81");
    if (CountChars(rep) != 1) return InvalidArgument("Metaspace replacement must be one char");
    return std::unique_ptr<PreTokenizer>(
        new MetaspacePreTokenizer(rep, scheme, j.value("split", true)));
  }
  if (type == "Digits") {
    return std::unique_ptr<PreTokenizer>(
        new DigitsPreTokenizer(j.value("individual_digits", false)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> seq;
    for (const auto& e : j.at("pretokenizers")) {
      LUCID_ASSIGN_OR_RETURN(auto p, ParsePreTokenizer(e));
      if (p) seq.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(seq)));
  }
  return Unimplemented("pre_tokenizer type '" + type + "' is not supported");
}

const std::string& ByteToUnicode(uint8_t b) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
      AppendUtf8(&t[c], printable ? c : 256 + n++);
    }
    return t;
  }();
  return table[b];
}

int ByteFromUnicode(int32_t cp) {
  static const std::array<int16_t, 324> rev = [] {
    std::array<int16_t, 324> r;
    r.fill(-1);
    for (int b = 0; b < 256; ++b) {
      size_t len;
      r[DecodeUtf8(ByteToUnicode(static_cast<uint8_t>(b)), 0, &len)] = static_cast<int16_t>(b);
    }
    return r;
  }();
  return cp >= 0 && cp < static_cast<int32_t>(rev.size()) ? rev[cp] : -1;
}

}  // namespace lucid::tok
