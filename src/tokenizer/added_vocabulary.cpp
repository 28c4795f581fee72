#include "tokenizer/added_vocabulary.h"

#include <unicode/uchar.h>

#include "tokenizer/utf8.h"

namespace lucid::tok {
namespace {

// Unicode \w as the Rust regex crate defines it.
bool IsWordChar(int32_t cp) {
  if (cp < 0) return false;
  if (cp < 0x80) return std::isalnum(cp) || cp == '_';
  return u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL) ||
         (U_GET_GC_MASK(cp) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

size_t PrevCharStart(std::string_view s, size_t end) {
  size_t p = end - 1;
  while (p > 0 && (static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
  return p;
}

int32_t LastChar(std::string_view s, size_t end) {
  if (end == 0) return -1;
  size_t len;
  return DecodeUtf8(s, PrevCharStart(s, end), &len);
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view key, int token) {
  int n = 0;
  for (char c : key) {
    const uint8_t b = static_cast<uint8_t>(c);
    auto it = nodes[n].next.find(b);
    if (it == nodes[n].next.end()) {
      nodes.emplace_back();
      it = nodes[n].next.emplace(b, static_cast<int>(nodes.size()) - 1).first;
    }
    n = it->second;
  }
  if (nodes[n].token < 0) nodes[n].token = token;  // first of duplicate patterns wins
}

size_t AddedVocabulary::Trie::LongestAt(std::string_view text, size_t pos, int* token) const {
  size_t best = 0;
  int n = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = nodes[n].next.find(static_cast<uint8_t>(text[i]));
    if (it == nodes[n].next.end()) break;
    n = it->second;
    if (nodes[n].token >= 0) {
      best = i + 1 - pos;
      *token = nodes[n].token;
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (int k = 0; k < static_cast<int>(tokens_.size()); ++k) {
    AddedToken& t = tokens_[k];
    t.decoded = t.content;
    if (t.normalized && normalizer != nullptr) normalizer->Normalize(&t.decoded);
    by_id_[t.id] = k;
    by_content_.emplace(t.content, k);
    if (t.content.empty()) continue;
    if (t.normalized) {
      if (t.decoded.empty()) continue;
      normalized_trie_.Insert(t.decoded, k);
      has_normalized_ = true;
    } else {
      raw_trie_.Insert(t.content, k);
      has_raw_ = true;
    }
  }
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindByContent(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::Split(const std::string& s, bool at_origin, const Trie& trie,
                            std::vector<Segment>* out) const {
  size_t start_offset = 0;
  const auto emit = [&](size_t b, size_t e, int32_t id) {
    if (b == e) return;
    out->push_back({s.substr(b, e - b), id, at_origin && b == 0});
  };
  size_t pos = 0;
  while (pos < s.size()) {
    int k = -1;
    const size_t len = trie.LongestAt(s, pos, &k);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // the next search starts after the match proper (before any rstrip)
    const AddedToken& t = tokens_[k];
    if (t.single_word) {
      size_t clen;
      const bool word_before = IsWordChar(LastChar(s, start));
      const bool word_after = stop < s.size() && IsWordChar(DecodeUtf8(s, stop, &clen));
      if (word_before || word_after) continue;
    }
    if (t.lstrip) {
      size_t b = start;
      while (b > 0) {
        const size_t p = PrevCharStart(s, b);
        size_t clen;
        if (!IsUnicodeWhitespace(DecodeUtf8(s, p, &clen))) break;
        b = p;
      }
      start = std::max(b, start_offset);
    }
    if (t.rstrip) {
      size_t clen;
      while (stop < s.size() && IsUnicodeWhitespace(DecodeUtf8(s, stop, &clen))) stop += clen;
    }
    emit(start_offset, start, -1);
    out->push_back({s.substr(start, stop - start), t.id, at_origin && start == 0});
    start_offset = stop;
  }
  emit(start_offset, s.size(), -1);
}

std::vector<Segment> AddedVocabulary::ExtractAndNormalize(std::string_view text,
                                                          const Normalizer* normalizer) const {
  std::vector<Segment> first;
  const std::string input(text);
  if (has_raw_) {
    Split(input, true, raw_trie_, &first);
  } else if (!input.empty()) {
    first.push_back({input, -1, true});
  }
  std::vector<Segment> out;
  out.reserve(first.size());
  for (auto& seg : first) {
    if (seg.id >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    if (normalizer != nullptr) normalizer->Normalize(&seg.text);
    if (has_normalized_) {
      Split(seg.text, seg.at_origin, normalized_trie_, &out);
    } else if (!seg.text.empty()) {
      out.push_back(std::move(seg));
    }
  }
  return out;
}

}  // namespace lucid::tok
