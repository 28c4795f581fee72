// IncrementalDetokenizer: turns a stream of generated token ids into text chunks.
//
// Uses the prefix/read-offset method (as in vLLM and TGI): each step decodes the window
// ids[prefix_offset:] and the shorter window ids[prefix_offset:read_offset]; the difference is
// new text. Text is held back while the window's decode ends in U+FFFD (an incomplete UTF-8
// character, or bytes of a token that merges with the next), so every chunk ends on a complete
// character. Decoding a window that starts a few tokens back keeps decoders that look at their
// first token (Strip, Metaspace) consistent. Finish() flushes what is held back, so the
// concatenation of all chunks equals Tokenizer::Decode of all ids (tested on every corpus string of
// every fixture tokenizer).
// Ownership: borrows the Tokenizer, which must outlive this object.
// Thread-safety: one instance per stream, not shared between threads.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lucid::tok {

class IncrementalDetokenizer {
 public:
  // `context` are ids already shown to the user (e.g. the prompt's last few tokens): they are
  // decoded for context (leading-space handling) but never emitted.
  IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens,
                         std::span<const int32_t> context = {});

  // Adds one generated id; returns the text it completes (often empty while bytes are pending).
  std::string Add(int32_t id);
  // Returns any text still held back (a trailing incomplete character decodes to U+FFFD).
  std::string Finish();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
};

}  // namespace lucid::tok
