// Tokenizer: a Hugging Face tokenizer.json (BPE family) loaded into memory.
//
// Encode runs HF's pipeline: added-token extraction -> normalizer -> pre-tokenizer -> BPE model ->
// post-processor (only with add_special_tokens). Decode maps ids to token strings and runs the
// decoder. Both match HF `tokenizers` 0.23 id for id and byte for byte on the fixtures in
// tests/fixtures/tokenizers (see tools/reference/tokenizer/).
// Refused at load, by name: models other than BPE, BPE dropout, and any normalizer,
// pre-tokenizer, decoder or post-processor type not implemented in components.h / here.
// "truncation" and "padding" sections are ignored: request length limits belong to the server.
// Thread-safety: immutable after loading; Encode/Decode may run concurrently from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/components.h"

namespace lucid::tok {

class Tokenizer {
 public:
  // Loads tokenizer.json from `path`. Errors name the file and the offending component.
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // Loads from the JSON text of a tokenizer.json.
  static StatusOr<std::unique_ptr<Tokenizer>> FromJsonString(std::string_view json_text);

  // Token ids of `text`, which must be valid UTF-8 (else InvalidArgument). With
  // add_special_tokens, the post-processor's template (e.g. a leading BOS) is applied.
  StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;

  // Text of `ids`. Ids not in the vocabulary are skipped (as HF does); with skip_special_tokens
  // the special added tokens are dropped. Invalid UTF-8 from byte tokens becomes U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string of `id` (added tokens first, then the model), or nullopt.
  std::optional<std::string> IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // One more than the largest id (model or added).
  size_t vocab_size() const;
  const AddedVocabulary& added_vocabulary() const { return added_; }

 private:
  Tokenizer() = default;
  Status Load(const std::string& json_text);

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  std::optional<BpeModel> model_;
  AddedVocabulary added_;
  // TemplateProcessing "single": ids before and after the sequence.
  std::vector<int32_t> post_prefix_, post_suffix_;
};

}  // namespace lucid::tok
