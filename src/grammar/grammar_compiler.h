// GrammarCompiler: structured output's grammars, compiled with xgrammar (third_party/, pinned by
// scripts/setup.sh) against one model's vocabulary and handed to the runtime as TokenConstraints
// (runtime/token_constraint.h).
//
// Kinds: a JSON schema (OpenAI response_format json_schema; tool calls), any JSON object
// (response_format json_object), a regular expression (SGLang "regex") and a GBNF/EBNF grammar
// (SGLang "ebnf", root rule "root"). JSON output is compact: no whitespace outside strings (what
// xgrammar's any_whitespace=false emits, with separators "," and ":"), so a model cannot pad the
// output with spaces forever; values without a schema (json_object, {} in a schema) follow
// xgrammar's any-JSON rules, which put ", " between items.
// Schemas compile in xgrammar's strict mode (additionalProperties / unevaluatedItems false unless
// the schema says otherwise), as vLLM and SGLang do.
// The vocabulary: each token's string from the tokenizer (added special tokens and ids past the
// tokenizer's vocabulary are never allowed), the vocab type (byte-level, byte-fallback, raw) and
// add_prefix_space as xgrammar detects them from tokenizer.json, and the model's EOS ids as the
// stop tokens (allowed exactly when the output is complete).
// Cache: compiled grammars are kept by (kind, source text) up to kMaxCachedGrammars entries (the
// oldest is dropped beyond), so a schema sent again compiles once.
// Thread-safety: Compile may run concurrently from any thread (the server's HTTP threads); the
// returned constraints are immutable and shared.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "runtime/token_constraint.h"

namespace xgrammar {
class GrammarCompiler;
}

namespace lucid::tok {
class Tokenizer;
}

namespace lucid::grammar {

enum class GrammarKind { kJsonObject, kJsonSchema, kRegex, kEbnf };
const char* GrammarKindName(GrammarKind kind);

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJsonObject;
  std::string source;  // the schema's JSON text, the regex or the EBNF; ignored for kJsonObject
};

// The vocabulary as xgrammar needs it.
struct VocabSpec {
  std::vector<std::string> encoded_tokens;  // id -> the token string ("" = never allowed)
  enum class Type { kRaw, kByteFallback, kByteLevel } type = Type::kRaw;
  bool add_prefix_space = false;
  int64_t vocab_size = 0;               // the logits row length (>= encoded_tokens.size())
  std::vector<int32_t> stop_token_ids;  // allowed once the output is complete
};

// Builds the VocabSpec of `tokenizer`, whose tokenizer.json text is `tokenizer_json` (read for the
// vocab type). Errors: InvalidArgument when tokenizer_json is not a JSON object, when
// vocab_size is smaller than the tokenizer's vocabulary, or a stop id is outside it.
StatusOr<VocabSpec> VocabFromTokenizer(std::string_view tokenizer_json,
                                       const tok::Tokenizer& tokenizer, int64_t vocab_size,
                                       std::vector<int32_t> stop_token_ids);

inline constexpr size_t kMaxCachedGrammars = 512;

class GrammarCompiler {
 public:
  // Errors: InvalidArgument for an empty or inconsistent vocabulary (no stop token, ids out of
  // range).
  static StatusOr<std::unique_ptr<GrammarCompiler>> Create(const VocabSpec& vocab);
  ~GrammarCompiler();

  // The constraint for `spec`, from the cache or compiled now. Errors: InvalidArgument naming
  // what is wrong with the schema, regex or grammar (xgrammar's message).
  StatusOr<std::shared_ptr<const TokenConstraint>> Compile(const GrammarSpec& spec);

  int64_t vocab_size() const { return vocab_size_; }
  // Grammars compiled so far (cache misses): for tests of the cache.
  int64_t compilations() const;

 private:
  explicit GrammarCompiler(int64_t vocab_size);

  int64_t vocab_size_;
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
  mutable std::mutex mu_;
  std::list<std::string> order_;  // cache keys, oldest first
  std::unordered_map<std::string, std::shared_ptr<const TokenConstraint>> cache_;
  int64_t compilations_ = 0;
};

// The compiler for a model directory's tokenizer: reads `tokenizer_json_path`, then
// VocabFromTokenizer and GrammarCompiler::Create. Errors name the file.
StatusOr<std::unique_ptr<GrammarCompiler>> CompilerForTokenizerFile(
    const std::string& tokenizer_json_path, const tok::Tokenizer& tokenizer, int64_t vocab_size,
    std::vector<int32_t> stop_token_ids);
// The same over a tokenizer.json text already in memory (a GGUF file's tokenizer, built from its
// metadata by formats/gguf_tokenizer.h); `source` names where it came from in errors.
StatusOr<std::unique_ptr<GrammarCompiler>> CompilerForTokenizerJson(
    std::string_view tokenizer_json, const std::string& source, const tok::Tokenizer& tokenizer,
    int64_t vocab_size, std::vector<int32_t> stop_token_ids);

}  // namespace lucid::grammar
