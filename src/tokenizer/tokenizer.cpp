#include "tokenizer/tokenizer.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/utf8.h"

namespace lucid::tok {

using nlohmann::json;

namespace {

// The special-token ids of a TemplateProcessing token entry.
Status TemplateTokenIds(const json& special_tokens, const std::string& name,
                        std::vector<int32_t>* out) {
  if (!special_tokens.contains(name)) {
    return InvalidArgument("TemplateProcessing special token '" + name + "' is not defined");
  }
  for (const auto& id : special_tokens[name].at("ids")) out->push_back(id.get<int32_t>());
  return OkStatus();
}

// Supports TemplateProcessing (its "single" template), ByteLevel (ids unchanged) and Sequence.
Status ParsePostProcessor(const json& j, std::vector<int32_t>* prefix,
                          std::vector<int32_t>* suffix) {
  if (j.is_null()) return OkStatus();
  const std::string type = j.value("type", "");
  if (type == "ByteLevel") return OkStatus();
  if (type == "Sequence") {
    for (const auto& p : j.at("processors")) {
      LUCID_RETURN_IF_ERROR(ParsePostProcessor(p, prefix, suffix));
    }
    return OkStatus();
  }
  if (type != "TemplateProcessing") {
    return Unimplemented("post_processor type '" + type + "' is not supported");
  }
  if (!prefix->empty() || !suffix->empty()) {
    return Unimplemented("more than one TemplateProcessing in a post_processor Sequence");
  }
  bool seen_sequence = false;
  for (const auto& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      if (piece["Sequence"].value("id", "A") != "A") {
        return Unimplemented("TemplateProcessing single template with sequence B");
      }
      seen_sequence = true;
    } else if (piece.contains("SpecialToken")) {
      LUCID_RETURN_IF_ERROR(TemplateTokenIds(j.at("special_tokens"),
                                             piece["SpecialToken"].at("id").get<std::string>(),
                                             seen_sequence ? suffix : prefix));
    } else {
      return InvalidArgument("TemplateProcessing piece is neither Sequence nor SpecialToken");
    }
  }
  return OkStatus();
}

StatusOr<std::vector<AddedToken>> ParseAddedTokens(const json& j) {
  std::vector<AddedToken> out;
  if (j.is_null()) return out;
  for (const auto& e : j) {
    AddedToken t;
    t.id = e.at("id").get<int32_t>();
    t.content = e.at("content").get<std::string>();
    t.special = e.value("special", false);
    t.single_word = e.value("single_word", false);
    t.lstrip = e.value("lstrip", false);
    t.rstrip = e.value("rstrip", false);
    t.normalized = e.value("normalized", !t.special);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open tokenizer file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto t = FromJsonString(ss.str());
  if (!t.ok()) return t.status().WithContext(path);
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJsonString(std::string_view json_text) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  Status s;
  try {
    s = t->Load(std::string(json_text));
  } catch (const std::exception& e) {  // nlohmann type/key errors in a malformed file
    s = InvalidArgument(std::string("malformed tokenizer.json: ") + e.what());
  }
  if (!s.ok()) return s;
  return t;
}

Status Tokenizer::Load(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("tokenizer.json is not JSON");
  LUCID_ASSIGN_OR_RETURN(auto model, BpeModel::Parse(j.at("model")));
  model_ = std::move(model);
  LUCID_ASSIGN_OR_RETURN(normalizer_, ParseNormalizer(j.value("normalizer", json())));
  LUCID_ASSIGN_OR_RETURN(pre_tokenizer_, ParsePreTokenizer(j.value("pre_tokenizer", json())));
  LUCID_ASSIGN_OR_RETURN(decoder_, ParseDecoder(j.value("decoder", json())));
  LUCID_RETURN_IF_ERROR(
      ParsePostProcessor(j.value("post_processor", json()), &post_prefix_, &post_suffix_));
  LUCID_ASSIGN_OR_RETURN(auto added, ParseAddedTokens(j.value("added_tokens", json())));
  added_ = AddedVocabulary(std::move(added), normalizer_.get());
  return OkStatus();
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(std::string_view text,
                                                 bool add_special_tokens) const {
  if (!IsValidUtf8(text)) return InvalidArgument("input text is not valid UTF-8");
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = post_prefix_;
  std::vector<Piece> pieces;
  for (auto& seg : added_.ExtractAndNormalize(text, normalizer_.get())) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    pieces.clear();
    pieces.push_back({std::move(seg.text), seg.at_origin});
    if (pre_tokenizer_) pre_tokenizer_->PreTokenize(&pieces);
    for (const auto& p : pieces) model_->Tokenize(p.text, &ids);
  }
  if (add_special_tokens) ids.insert(ids.end(), post_suffix_.begin(), post_suffix_.end());
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* t = added_.FindById(id)) {
      if (skip_special_tokens && t->special) continue;
      tokens.push_back(t->decoded);
    } else if (const std::string* s = model_->IdToToken(id)) {
      const AddedToken* same = skip_special_tokens ? added_.FindByContent(*s) : nullptr;
      if (same != nullptr && same->special) continue;  // HF compares by content
      tokens.push_back(*s);
    }
  }
  if (!decoder_) {
    std::string out;
    for (size_t k = 0; k < tokens.size(); ++k) out += (k ? " " : "") + tokens[k];
    return out;
  }
  decoder_->DecodeChain(&tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const AddedToken* t = added_.FindByContent(token)) return t->id;
  return model_->TokenToId(token);
}

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* t = added_.FindById(id)) return t->decoded;
  if (const std::string* s = model_->IdToToken(id)) return *s;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* t = added_.FindById(id);
  return t != nullptr && t->special;
}

size_t Tokenizer::vocab_size() const {
  size_t n = model_->size();
  for (const auto& t : added_.tokens()) n = std::max(n, static_cast<size_t>(t.id) + 1);
  return n;
}

}  // namespace lucid::tok
