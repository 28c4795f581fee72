// UTF-8 helpers shared by the tokenizer, the decoders and the streaming detokenizer.
//
// All functions are pure and thread-safe. Strings are byte strings that may hold invalid UTF-8;
// functions that must interpret them say what they do with invalid bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lucid::tok {

// Decodes the code point at text[pos]. Sets *len to the number of bytes consumed (>= 1). An invalid
// or truncated sequence yields -1 and *len = the length of its maximal invalid subpart (the same
// unit Rust's String::from_utf8_lossy replaces with one U+FFFD).
int32_t DecodeUtf8(std::string_view text, size_t pos, size_t* len);

// Appends the UTF-8 encoding of code point cp (must be a valid scalar value).
void AppendUtf8(std::string* out, uint32_t cp);

// True when text is entirely valid UTF-8.
bool IsValidUtf8(std::string_view text);

// Replaces each maximal invalid subpart with U+FFFD, exactly like Rust's from_utf8_lossy.
std::string Utf8Lossy(std::string_view text);

// Length of the longest prefix of text that does not end inside an incomplete (but so far valid)
// UTF-8 sequence. Invalid bytes count as complete (they will never become valid).
size_t CompleteUtf8Prefix(std::string_view text);

// Number of code points (invalid subparts count one each).
size_t CountChars(std::string_view text);

// Rust char::is_whitespace (Unicode White_Space property).
bool IsUnicodeWhitespace(int32_t cp);

}  // namespace lucid::tok
