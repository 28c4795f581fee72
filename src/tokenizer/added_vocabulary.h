// AddedVocabulary: the "added_tokens" of tokenizer.json (special and non-special).
//
// Added tokens are cut out of the input before normalization and pre-tokenization. Tokens with
// normalized=false are matched on the raw text; tokens with normalized=true are matched, by
// their normalized form, on the normalized remainder. Matching is leftmost-longest and
// non-overlapping (HF's Aho-Corasick), then single_word discards a match touching a word
// character, lstrip/rstrip absorb the whitespace on that side.
// Thread-safety: immutable after construction; all methods const and reentrant.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/components.h"

namespace lucid::tok {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  // The content as HF's id_to_token and decode report it: normalized when `normalized` is set.
  std::string decoded;
};

// A slice of the input that is either an added token (id >= 0) or text still to tokenize.
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_origin = false;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) gives the match form of normalized tokens; not retained.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // Splits `text` on non-normalized tokens, normalizes the rest with `normalizer`, then splits
  // that on normalized tokens. Empty text segments are dropped.
  std::vector<Segment> ExtractAndNormalize(std::string_view text,
                                           const Normalizer* normalizer) const;

  const AddedToken* FindById(int32_t id) const;
  const AddedToken* FindByContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over the match forms of one group of tokens.
  struct Trie {
    struct Node {
      std::unordered_map<uint8_t, int> next;
      int token = -1;  // index into tokens_
    };
    std::vector<Node> nodes{Node{}};
    void Insert(std::string_view key, int token);
    // Longest token starting at text[pos]: returns its length, or 0 (and *token unset).
    size_t LongestAt(std::string_view text, size_t pos, int* token) const;
  };
  void Split(const std::string& text, bool at_origin, const Trie& trie,
             std::vector<Segment>* out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, int> by_id_;
  std::unordered_map<std::string, int> by_content_;
  Trie raw_trie_, normalized_trie_;
  bool has_raw_ = false, has_normalized_ = false;
};

}  // namespace lucid::tok
