// Normalizers of tokenizer.json: NFC, NFD, NFKC, NFKD (ICU), Lowercase, Strip, StripAccents,
// Prepend, Replace, Sequence.
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace lucid::tok {
namespace {

using nlohmann::json;

bool IsAscii(const std::string& s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(const icu::Normalizer2* n) : n_(n) {}
  void Normalize(std::string* text) const override {
    if (IsAscii(*text)) return;  // every normal form maps ASCII to itself
    UErrorCode st = U_ZERO_ERROR;
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(*text);
    if (n_->isNormalized(in, st) && U_SUCCESS(st)) return;
    st = U_ZERO_ERROR;
    const icu::UnicodeString out = n_->normalize(in, st);
    if (U_FAILURE(st)) return;  // cannot happen for valid UTF-8 input
    text->clear();
    out.toUTF8String(*text);
  }

 private:
  const icu::Normalizer2* n_;
};

// Per-character full lowercase mapping (Rust char::to_lowercase: no context, no final sigma).
class LowercaseNormalizer final : public Normalizer {
 public:
  void Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    for (size_t i = 0; i < text->size();) {
      size_t len;
      const int32_t cp = DecodeUtf8(*text, i, &len);
      if (cp < 0x80) {
        out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
      } else {
        icu::UnicodeString u(static_cast<UChar32>(cp));
        u.toLower(icu::Locale::getRoot());
        u.toUTF8String(out);
      }
      i += len;
    }
    *text = std::move(out);
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    size_t b = 0, e = text->size();
    if (left_) {
      while (b < e) {
        size_t len;
        if (!IsUnicodeWhitespace(DecodeUtf8(*text, b, &len))) break;
        b += len;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<uint8_t>((*text)[s]) & 0xC0) == 0x80) --s;
        size_t len;
        if (!IsUnicodeWhitespace(DecodeUtf8(*text, s, &len))) break;
        e = s;
      }
    }
    *text = text->substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class StripAccentsNormalizer final : public Normalizer {
 public:
  void Normalize(std::string* text) const override {
    std::string out;
    for (size_t i = 0; i < text->size();) {
      size_t len;
      const int32_t cp = DecodeUtf8(*text, i, &len);
      if (u_charType(cp) != U_NON_SPACING_MARK) out.append(*text, i, len);
      i += len;
    }
    *text = std::move(out);
  }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::shared_ptr<const Regex> re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override {
    std::string out;
    size_t prev = 0;
    if (re_) {
      for (const auto& [s, e] : re_->FindAll(*text)) {
        out.append(*text, prev, s - prev);
        out += content_;
        prev = e;
      }
    } else {
      if (literal_.empty()) return;
      for (size_t p = text->find(literal_); p != std::string::npos;
           p = text->find(literal_, prev)) {
        out.append(*text, prev, p - prev);
        out += content_;
        prev = p + literal_.size();
      }
    }
    out.append(*text, prev, std::string::npos);
    *text = std::move(out);
  }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> re_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> s) : seq_(std::move(s)) {}
  void Normalize(std::string* text) const override {
    for (const auto& n : seq_) n->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> seq_;
};

StatusOr<const icu::Normalizer2*> IcuInstance(const std::string& type) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  if (type == "NFC") n = icu::Normalizer2::getNFCInstance(st);
  if (type == "NFD") n = icu::Normalizer2::getNFDInstance(st);
  if (type == "NFKC") n = icu::Normalizer2::getNFKCInstance(st);
  if (type == "NFKD") n = icu::Normalizer2::getNFKDInstance(st);
  if (n == nullptr || U_FAILURE(st)) return Internal("ICU has no " + type + " normalizer");
  return n;
}

}  // namespace

// Parses the {"String": s} / {"Regex": r} pattern objects used by Replace and Split.
Status ParsePattern(const json& p, std::string* literal, std::shared_ptr<const Regex>* re) {
  if (!p.is_object()) return InvalidArgument("pattern must be an object");
  if (p.contains("String")) {
    *literal = p["String"].get<std::string>();
    return OkStatus();
  }
  if (p.contains("Regex")) {
    LUCID_ASSIGN_OR_RETURN(*re, Regex::Compile(p["Regex"].get<std::string>()));
    return OkStatus();
  }
  return InvalidArgument("pattern needs a String or a Regex");
}

StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  const std::string type = j.value("type", "");
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    LUCID_ASSIGN_OR_RETURN(const icu::Normalizer2* n, IcuInstance(type));
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(n));
  }
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(j.value("strip_left", true), j.value("strip_right", true)));
  }
  if (type == "Prepend") {
    return std::unique_ptr<Normalizer>(new PrependNormalizer(j.at("prepend").get<std::string>()));
  }
  if (type == "Replace") {
    std::string literal;
    std::shared_ptr<const Regex> re;
    LUCID_RETURN_IF_ERROR(ParsePattern(j.at("pattern"), &literal, &re));
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(literal, re, j.at("content").get<std::string>()));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> seq;
    for (const auto& e : j.at("normalizers")) {
      LUCID_ASSIGN_OR_RETURN(auto n, ParseNormalizer(e));
      if (n) seq.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(seq)));
  }
  return Unimplemented("normalizer type '" + type + "' is not supported");
}

}  // namespace lucid::tok
