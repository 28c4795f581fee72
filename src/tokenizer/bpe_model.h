// BpeModel: the "BPE" model of tokenizer.json (byte-level GPT-2 style and SentencePiece style).
//
// Holds the vocabulary (token string <-> id) and the merge table (pair of ids -> rank, merged id).
// Tokenize() applies merges lowest rank first, leftmost first on ties, exactly like HF's
// Word::merge_all, after splitting the word into characters (with byte_fallback to <0xXX> tokens,
// or unk_token, optionally fused, for characters missing from the vocabulary).
// Supported options: merges as "a b" strings or ["a", "b"] pairs, unk_token, fuse_unk,
// byte_fallback, ignore_merges, continuing_subword_prefix, end_of_word_suffix. A non-zero dropout
// is refused (it makes encoding random). Thread-safety: immutable after Parse; Tokenize is const
// and reentrant.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace lucid::tok {

class BpeModel {
 public:
  // Parses the "model" object of tokenizer.json (type must be "BPE").
  static StatusOr<BpeModel> Parse(const nlohmann::json& model);

  // Appends the ids of `word` (one pre-tokenized piece) to *out.
  void Tokenize(std::string_view word, std::vector<int32_t>* out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // nullptr when the id is not in the vocabulary.
  const std::string* IdToToken(int32_t id) const;
  // One more than the largest id in the vocabulary.
  size_t size() const { return id_to_token_.size(); }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  std::optional<int32_t> Find(std::string_view s) const;
  void MergeAll(std::vector<int32_t>* ids) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::optional<std::string> unk_token_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  int32_t byte_ids_[256];  // <0xXX> ids, -1 when absent (byte_fallback only)
};

}  // namespace lucid::tok
