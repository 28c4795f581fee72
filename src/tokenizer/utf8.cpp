#include "tokenizer/utf8.h"

namespace lucid::tok {

int32_t DecodeUtf8(std::string_view s, size_t pos, size_t* len) {
  const auto b = [&](size_t i) -> uint8_t { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = b(pos);
  if (c < 0x80) {
    *len = 1;
    return c;
  }
  int need;
  uint32_t cp;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    cp = c & 0x0F;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    cp = c & 0x07;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return -1;
  }
  size_t i = pos + 1;
  for (int k = 0; k < need; ++k, ++i) {
    if (i >= s.size()) {
      *len = i - pos;
      return -1;
    }
    const uint8_t d = b(i);
    const uint8_t l = k == 0 ? lo : 0x80, h = k == 0 ? hi : 0xBF;
    if (d < l || d > h) {
      *len = i - pos;
      return -1;
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  *len = i - pos;
  return static_cast<int32_t>(cp);
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t len;
    if (DecodeUtf8(s, i, &len) < 0) return false;
    i += len;
  }
  return true;
}

std::string Utf8Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    if (DecodeUtf8(s, i, &len) < 0) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  // Only the last (up to) 3 bytes can start an incomplete sequence.
  const size_t start = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = start; i < s.size(); ++i) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t len;
    if (DecodeUtf8(s, i, &len) < 0 && i + len == s.size()) {
      // Invalid only because it is truncated? Then it may still complete.
      const int need = c >= 0xF5 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 1;
      if (need > 1 && static_cast<int>(s.size() - i) < need) return i;
    }
  }
  return s.size();
}

size_t CountChars(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    size_t len;
    DecodeUtf8(s, i, &len);
    i += len;
  }
  return n;
}

bool IsUnicodeWhitespace(int32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace lucid::tok
