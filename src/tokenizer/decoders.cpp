// Decoders of tokenizer.json: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence.
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace lucid::tok {
namespace {

using nlohmann::json;

class ByteLevelDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const auto& t : *tokens) {
      // A token with any character outside the byte alphabet passes through as UTF-8.
      std::string mapped;
      bool ok = true;
      for (size_t i = 0; i < t.size() && ok;) {
        size_t len;
        const int b = ByteFromUnicode(DecodeUtf8(t, i, &len));
        if (b < 0) ok = false;
        mapped.push_back(static_cast<char>(b));
        i += len;
      }
      bytes += ok ? mapped : t;
    }
    *tokens = {Utf8Lossy(bytes)};
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string rep, bool strip_first) : rep_(std::move(rep)), strip_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      std::string out;
      for (size_t p = 0; p < t.size();) {
        if (t.compare(p, rep_.size(), rep_) == 0) {
          if (!(i == 0 && strip_)) out += ' ';  // HF drops every replacement in token 0
          p += rep_.size();
        } else {
          out += t[p++];
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::string rep_;
  bool strip_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    const auto flush = [&] {
      if (pending.empty()) return;
      if (IsValidUtf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : *tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = ParseHex(t);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }

 private:
  static int ParseHex(const std::string& t) {
    int v = 0;
    for (int k = 3; k < 5; ++k) {
      const char c = t[k];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
};

class FuseDecoder final : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const auto& t : *tokens) all += t;
    *tokens = {all};
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && t.compare(b, content_.size(), content_) == 0 && b < e; ++k) {
        b += content_.size();
      }
      for (size_t k = 0; k < stop_ && e >= b + content_.size() &&
                         t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++k) {
        e -= content_.size();
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(std::string lit, std::shared_ptr<const Regex> re, std::string content)
      : literal_(std::move(lit)), re_(std::move(re)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) {
      std::vector<std::pair<size_t, size_t>> m;
      if (re_) {
        m = re_->FindAll(t);
      } else if (!literal_.empty()) {
        for (size_t p = t.find(literal_); p != std::string::npos;
             p = t.find(literal_, p + literal_.size())) {
          m.emplace_back(p, p + literal_.size());
        }
      }
      if (m.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& [s, e] : m) {
        out.append(t, prev, s - prev);
        out += content_;
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> re_;
  std::string content_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> s) : seq_(std::move(s)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& d : seq_) d->DecodeChain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> seq_;
};

}  // namespace

StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const json& j) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "Metaspace") {
    bool strip = j.value("add_prefix_space", true);
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      strip = j["prepend_scheme"].get<std::string>() != "never";
    }
    return std::unique_ptr<Decoder>(
        new MetaspaceDecoder(j.value("replacement", "\xE2\x96\x81"), strip));
  }
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    return std::unique_ptr<Decoder>(new StripDecoder(j.at("content").get<std::string>(),
                                                     j.value("start", 0), j.value("stop", 0)));
  }
  if (type == "Replace") {
    std::string literal;
    std::shared_ptr<const Regex> re;
    LUCID_RETURN_IF_ERROR(ParsePattern(j.at("pattern"), &literal, &re));
    return std::unique_ptr<Decoder>(
        new ReplaceDecoder(literal, re, j.at("content").get<std::string>()));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> seq;
    for (const auto& e : j.at("decoders")) {
      LUCID_ASSIGN_OR_RETURN(auto d, ParseDecoder(e));
      if (d) seq.push_back(std::move(d));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(seq)));
  }
  return Unimplemented("decoder type '" + type + "' is not supported");
}

}  // namespace lucid::tok
