// Invariants: every constraint in the cache was compiled by compiler_ against the one VocabSpec
// given to Create; a matcher's bitmask has one bit per logits column (vocab_size_), 1 = allowed.
#include "grammar/grammar_compiler.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "grammar/token_bitmask.h"
#include "tokenizer/tokenizer.h"

namespace lucid::grammar {
namespace {

// The threads xgrammar may use to compile one grammar's token masks.
constexpr int kCompileThreads = 2;
// JSON separators: items and key/value with no space (xgrammar's default adds one after each).
const std::pair<std::string, std::string> kCompact{",", ":"};

class XgrammarMatcher final : public TokenMatcher {
 public:
  XgrammarMatcher(const xgrammar::CompiledGrammar& compiled, int64_t vocab_size)
      : matcher_(compiled),
        vocab_size_(vocab_size),
        bitmask_(static_cast<size_t>(xgrammar::GetBitmaskSize(static_cast<int>(vocab_size)))) {}

  void MaskLogits(std::span<float> logits) override {
    FillOwnBitmask();
    // Columns past the model's vocabulary (padding) are never allowed.
    const size_t n = std::min(logits.size(), static_cast<size_t>(vocab_size_));
    ApplyTokenBitmask(bitmask_, logits.first(n));
    std::fill(logits.begin() + static_cast<std::ptrdiff_t>(n), logits.end(),
              -std::numeric_limits<float>::infinity());
  }

  void FillBitmask(std::span<int32_t> words, int64_t columns) override {
    FillOwnBitmask();
    std::fill(words.begin(), words.end(), 0);
    const int64_t n = std::min(columns, vocab_size_);  // padding columns are never allowed
    std::copy_n(bitmask_.begin(), n / 32, words.begin());
    if (n % 32 != 0)
      words[n / 32] =
          static_cast<int32_t>(static_cast<uint32_t>(bitmask_[n / 32]) & ((1u << (n % 32)) - 1u));
  }

  bool Accept(int32_t token) override {
    if (token < 0 || token >= vocab_size_) return false;
    return matcher_.AcceptToken(token);
  }

  bool IsTerminated() const override { return matcher_.IsTerminated(); }

 private:
  // bitmask_ = the grammar's allowed next tokens.
  void FillOwnBitmask() {
    int64_t shape[1] = {static_cast<int64_t>(bitmask_.size())};
    DLTensor t{};
    t.data = bitmask_.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = xgrammar::GetBitmaskDLType();
    t.shape = shape;
    t.strides = nullptr;
    t.byte_offset = 0;
    matcher_.FillNextTokenBitmask(&t, 0);
  }

  xgrammar::GrammarMatcher matcher_;
  int64_t vocab_size_;
  std::vector<int32_t> bitmask_;
};

class XgrammarConstraint final : public TokenConstraint {
 public:
  XgrammarConstraint(xgrammar::CompiledGrammar compiled, int64_t vocab_size)
      : compiled_(std::move(compiled)), vocab_size_(vocab_size) {}
  std::unique_ptr<TokenMatcher> NewMatcher() const override {
    return std::make_unique<XgrammarMatcher>(compiled_, vocab_size_);
  }

 private:
  xgrammar::CompiledGrammar compiled_;
  int64_t vocab_size_;
};

xgrammar::VocabType ToXgrammar(VocabSpec::Type t) {
  switch (t) {
    case VocabSpec::Type::kByteLevel:
      return xgrammar::VocabType::BYTE_LEVEL;
    case VocabSpec::Type::kByteFallback:
      return xgrammar::VocabType::BYTE_FALLBACK;
    case VocabSpec::Type::kRaw:
      break;
  }
  return xgrammar::VocabType::RAW;
}

// The first line of an exception's message (xgrammar's carry a location prefix and detail).
std::string MessageOf(const std::exception& e) {
  std::string m = e.what();
  if (size_t nl = m.find('\n'); nl != std::string::npos) m.resize(nl);
  return m;
}

}  // namespace

const char* GrammarKindName(GrammarKind kind) {
  switch (kind) {
    case GrammarKind::kJsonObject:
      return "json_object";
    case GrammarKind::kJsonSchema:
      return "json_schema";
    case GrammarKind::kRegex:
      return "regex";
    case GrammarKind::kEbnf:
      return "ebnf";
  }
  return "?";
}

StatusOr<VocabSpec> VocabFromTokenizer(std::string_view tokenizer_json,
                                       const tok::Tokenizer& tokenizer, int64_t vocab_size,
                                       std::vector<int32_t> stop_token_ids) {
  const int64_t n = static_cast<int64_t>(tokenizer.vocab_size());
  if (vocab_size < n)
    return InvalidArgument("grammar: the model's vocab_size " + std::to_string(vocab_size) +
                           " is smaller than the tokenizer's " + std::to_string(n));
  VocabSpec v;
  v.vocab_size = vocab_size;
  v.stop_token_ids = std::move(stop_token_ids);
  for (int32_t id : v.stop_token_ids)
    if (id < 0 || id >= vocab_size)
      return InvalidArgument("grammar: stop token id " + std::to_string(id) + " outside [0, " +
                             std::to_string(vocab_size) + ")");
  std::string metadata;
  try {
    metadata = xgrammar::TokenizerInfo::DetectMetadataFromHF(std::string(tokenizer_json));
  } catch (const std::exception& e) {
    return InvalidArgument("grammar: tokenizer.json: " + MessageOf(e));
  }
  const nlohmann::json meta = nlohmann::json::parse(metadata, nullptr, false);
  const int type = meta.is_object() ? meta.value("vocab_type", 0) : 0;
  v.type = type == 2   ? VocabSpec::Type::kByteLevel
           : type == 1 ? VocabSpec::Type::kByteFallback
                       : VocabSpec::Type::kRaw;
  v.add_prefix_space = meta.is_object() && meta.value("add_prefix_space", false);
  v.encoded_tokens.resize(static_cast<size_t>(n));
  for (int64_t id = 0; id < n; ++id) {
    const int32_t i = static_cast<int32_t>(id);
    // Special added tokens (chat markers, BOS) are never part of structured text; a stop token
    // keeps its string (xgrammar knows it by id).
    const bool stop =
        std::find(v.stop_token_ids.begin(), v.stop_token_ids.end(), i) != v.stop_token_ids.end();
    if (tokenizer.IsSpecial(i) && !stop) continue;
    if (std::optional<std::string> t = tokenizer.IdToToken(i)) v.encoded_tokens[id] = *t;
  }
  return v;
}

StatusOr<std::unique_ptr<GrammarCompiler>> GrammarCompiler::Create(const VocabSpec& vocab) {
  if (vocab.encoded_tokens.empty()) return InvalidArgument("grammar: empty vocabulary");
  if (vocab.vocab_size < static_cast<int64_t>(vocab.encoded_tokens.size()) ||
      vocab.vocab_size > std::numeric_limits<int32_t>::max())
    return InvalidArgument("grammar: vocab_size " + std::to_string(vocab.vocab_size) +
                           " is below the " + std::to_string(vocab.encoded_tokens.size()) +
                           " token strings or above 2^31");
  if (vocab.stop_token_ids.empty())
    return InvalidArgument("grammar: no stop token (the model has no EOS id)");
  for (int32_t id : vocab.stop_token_ids)
    if (id < 0 || id >= vocab.vocab_size)
      return InvalidArgument("grammar: stop token id " + std::to_string(id) + " out of range");
  auto c = std::unique_ptr<GrammarCompiler>(new GrammarCompiler(vocab.vocab_size));
  try {
    xgrammar::TokenizerInfo info(vocab.encoded_tokens, ToXgrammar(vocab.type),
                                 static_cast<int>(vocab.vocab_size), vocab.stop_token_ids,
                                 vocab.add_prefix_space);
    c->compiler_ = std::make_unique<xgrammar::GrammarCompiler>(info, kCompileThreads,
                                                               /*cache_enabled=*/false);
  } catch (const std::exception& e) {
    return InvalidArgument("grammar: vocabulary: " + MessageOf(e));
  }
  return c;
}

GrammarCompiler::GrammarCompiler(int64_t vocab_size) : vocab_size_(vocab_size) {}
GrammarCompiler::~GrammarCompiler() = default;

int64_t GrammarCompiler::compilations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compilations_;
}

StatusOr<std::shared_ptr<const TokenConstraint>> GrammarCompiler::Compile(const GrammarSpec& spec) {
  const std::string key = std::string(GrammarKindName(spec.kind)) + '\n' +
                          (spec.kind == GrammarKind::kJsonObject ? "" : spec.source);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  // Compiled outside the lock: a slow schema does not hold up the others (two threads that miss
  // on the same key both compile; the second result replaces nothing).
  std::shared_ptr<const TokenConstraint> made;
  try {
    xgrammar::CompiledGrammar g{xgrammar::NullObj()};
    switch (spec.kind) {
      case GrammarKind::kJsonObject:
        // Not strict: strict mode would also close every nested object to {}.
        g = compiler_->CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false,
                                         std::nullopt, kCompact, /*strict_mode=*/false);
        break;
      case GrammarKind::kJsonSchema:
        g = compiler_->CompileJSONSchema(spec.source, /*any_whitespace=*/false, std::nullopt,
                                         kCompact);
        break;
      case GrammarKind::kRegex:
        g = compiler_->CompileRegex(spec.source);
        break;
      case GrammarKind::kEbnf:
        g = compiler_->CompileGrammar(spec.source, "root");
        break;
    }
    made = std::make_shared<XgrammarConstraint>(std::move(g), vocab_size_);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string(GrammarKindName(spec.kind)) + ": " + MessageOf(e));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++compilations_;
  if (cache_.emplace(key, made).second) {
    order_.push_back(key);
    if (order_.size() > kMaxCachedGrammars) {
      cache_.erase(order_.front());
      order_.pop_front();
    }
  }
  return made;
}

StatusOr<std::unique_ptr<GrammarCompiler>> CompilerForTokenizerFile(
    const std::string& tokenizer_json_path, const tok::Tokenizer& tokenizer, int64_t vocab_size,
    std::vector<int32_t> stop_token_ids) {
  std::ifstream f(tokenizer_json_path, std::ios::binary);
  if (!f) return InvalidArgument("grammar: cannot read " + tokenizer_json_path);
  std::stringstream text;
  text << f.rdbuf();
  return CompilerForTokenizerJson(text.str(), tokenizer_json_path, tokenizer, vocab_size,
                                  std::move(stop_token_ids));
}

StatusOr<std::unique_ptr<GrammarCompiler>> CompilerForTokenizerJson(
    std::string_view tokenizer_json, const std::string& source, const tok::Tokenizer& tokenizer,
    int64_t vocab_size, std::vector<int32_t> stop_token_ids) {
  StatusOr<VocabSpec> v =
      VocabFromTokenizer(tokenizer_json, tokenizer, vocab_size, std::move(stop_token_ids));
  if (!v.ok()) return v.status().WithContext(source);
  return GrammarCompiler::Create(*v);
}

}  // namespace lucid::grammar
