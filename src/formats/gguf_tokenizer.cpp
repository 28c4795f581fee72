// GGUF tokenizer metadata -> tokenizer.json (the construction transformers uses; see header).
#include "formats/gguf_tokenizer.h"

#include <array>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>
#include <unordered_map>

namespace lucid {
namespace {

using json = nlohmann::json;

constexpr int kTokenControl = 3;
constexpr int kTokenUserDefined = 4;

constexpr const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// GPT-2's bytes_to_unicode: byte b -> the code point that spells it.
std::array<uint32_t, 256> ByteSpelling() {
  std::array<uint32_t, 256> m{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    m[b] = self ? static_cast<uint32_t>(b) : next++;
  }
  return m;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Code points of UTF-8 text; false for invalid UTF-8.
bool DecodeUtf8(std::string_view s, std::vector<uint32_t>* cps) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (int k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    cps->push_back(cp);
    i += n;
  }
  return true;
}

struct ByteAlphabet {
  std::array<uint32_t, 256> spelling = ByteSpelling();
  std::set<uint32_t> members{spelling.begin(), spelling.end()};

  bool Spells(std::string_view token) const {
    std::vector<uint32_t> cps;
    if (!DecodeUtf8(token, &cps)) return false;
    for (uint32_t cp : cps)
      if (!members.count(cp)) return false;
    return true;
  }
  std::string Respell(std::string_view token) const {
    std::string out;
    for (unsigned char b : token) AppendUtf8(spelling[b], &out);
    return out;
  }
};

StatusOr<json> PreTokenizerFor(const GgufFile& f, const std::string& pre) {
  static const std::set<std::string> kGpt2 = {"default", "gpt-2", "gpt2", "smollm"};
  static const std::set<std::string> kLlama3 = {"llama3",    "llama-v3", "llama-bpe",
                                                "smaug-bpe", "dbrx",     "falcon3"};
  static const std::set<std::string> kQwen2 = {"qwen2", "deepseek-r1-qwen", "megrez"};
  json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", true}};
  if (kGpt2.count(pre)) return byte_level;
  const char* split = kLlama3.count(pre) ? kLlama3Split : kQwen2.count(pre) ? kQwen2Split : nullptr;
  if (split == nullptr) {
    return Unimplemented(f.path() + ": tokenizer.ggml.pre \"" + pre +
                         "\" is not supported (known: default, gpt-2, gpt2, smollm, llama3, "
                         "llama-v3, llama-bpe, smaug-bpe, dbrx, falcon3, qwen2, deepseek-r1-qwen, "
                         "megrez)");
  }
  byte_level["use_regex"] = false;
  return json{{"type", "Sequence"},
              {"pretokenizers", json::array({json{{"type", "Split"},
                                                  {"pattern", {{"Regex", split}}},
                                                  {"behavior", "Isolated"},
                                                  {"invert", false}},
                                             byte_level})}};
}

StatusOr<bool> OptionalBool(const GgufFile& f, const std::string& key, bool dflt) {
  if (f.Find(key) == nullptr) return dflt;
  return f.GetBool(key);
}

}  // namespace

StatusOr<std::string> TokenizerJsonFromGguf(const GgufFile& f) {
  LUCID_ASSIGN_OR_RETURN(std::string model, f.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return Unimplemented(f.path() + ": tokenizer.ggml.model \"" + model +
                         "\" is not supported (lucid builds \"gpt2\" byte-level BPE tokenizers)");
  }
  std::string pre = "default";
  if (f.Find("tokenizer.ggml.pre")) {
    LUCID_ASSIGN_OR_RETURN(pre, f.GetString("tokenizer.ggml.pre"));
  }
  LUCID_ASSIGN_OR_RETURN(json pre_tokenizer, PreTokenizerFor(f, pre));
  LUCID_ASSIGN_OR_RETURN(auto tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  LUCID_ASSIGN_OR_RETURN(auto merges, f.GetStringArray("tokenizer.ggml.merges"));
  std::vector<int64_t> types;
  if (f.Find("tokenizer.ggml.token_type")) {
    LUCID_ASSIGN_OR_RETURN(types, f.GetIntArray("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size()) {
      return InvalidArgument(f.path() + ": tokenizer.ggml.token_type has " +
                             std::to_string(types.size()) + " entries for " +
                             std::to_string(tokens.size()) + " tokens");
    }
  }
  const ByteAlphabet alphabet;
  std::unordered_map<std::string, size_t> ids;
  std::vector<std::string> spelled(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    spelled[i] = alphabet.Spells(tokens[i]) ? tokens[i] : alphabet.Respell(tokens[i]);
    ids[spelled[i]] = i;  // a repeated spelling keeps the last id, as a Python dict does
  }
  json vocab = json::object();
  for (const auto& [tok, id] : ids) vocab[tok] = id;
  json added = json::array();
  for (size_t i = 0; i < types.size(); ++i) {
    const bool control = types[i] == kTokenControl && spelled[i] == tokens[i];
    const bool user = types[i] == kTokenUserDefined;
    if (!control && !user) continue;
    added.push_back({{"id", ids[spelled[i]]},
                     {"content", spelled[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", control}});
  }
  LUCID_ASSIGN_OR_RETURN(bool add_bos, OptionalBool(f, "tokenizer.ggml.add_bos_token", false));
  json single = json::array({json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}});
  json specials = json::object();
  if (add_bos) {
    LUCID_ASSIGN_OR_RETURN(uint64_t bos, f.GetUint("tokenizer.ggml.bos_token_id"));
    if (bos >= tokens.size()) {
      return InvalidArgument(f.path() + ": tokenizer.ggml.bos_token_id " + std::to_string(bos) +
                             " is past the " + std::to_string(tokens.size()) + "-token vocabulary");
    }
    single.insert(single.begin(), json{{"SpecialToken", {{"id", spelled[bos]}, {"type_id", 0}}}});
    specials[spelled[bos]] = {
        {"id", spelled[bos]}, {"ids", json::array({bos})}, {"tokens", json::array({spelled[bos]})}};
  }
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", single},
        {"pair", single},
        {"special_tokens", specials}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

StatusOr<GgufTextAssets> TextAssetsFromGguf(const GgufFile& f) {
  GgufTextAssets a;
  if (f.Find("tokenizer.chat_template")) {
    LUCID_ASSIGN_OR_RETURN(std::string t, f.GetString("tokenizer.chat_template"));
    a.chat_template = std::move(t);
  }
  if (!f.Find("tokenizer.ggml.tokens")) return a;
  LUCID_ASSIGN_OR_RETURN(auto tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  for (auto [key, out] : {std::pair{"tokenizer.ggml.bos_token_id", &a.bos_token},
                          std::pair{"tokenizer.ggml.eos_token_id", &a.eos_token}}) {
    if (!f.Find(key)) continue;
    LUCID_ASSIGN_OR_RETURN(uint64_t id, f.GetUint(key));
    if (id >= tokens.size()) {
      return InvalidArgument(f.path() + ": " + key + " " + std::to_string(id) + " is past the " +
                             std::to_string(tokens.size()) + "-token vocabulary");
    }
    *out = tokens[id];
  }
  return a;
}

}  // namespace lucid
