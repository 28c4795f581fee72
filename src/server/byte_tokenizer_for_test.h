// A byte-level BPE tokenizer.json for tests: 256 ids, id = byte value (GPT-2's byte-to-unicode
// alphabet), no merges, no added tokens; fits the tiny fixture models' 256-token vocabulary.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lucid::server {

inline std::string Utf8ForTest(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

inline std::string ByteLevelTokenizerJson() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<uint32_t> cp(256, 0);
  for (int b : bs) cp[b] = b;
  int n = 0;
  for (int b = 0; b < 256; ++b)
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) cp[b] = 256 + n++;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[Utf8ForTest(cp[b])] = b;
  nlohmann::json tok = {{"version", "1.0"},
                        {"truncation", nullptr},
                        {"padding", nullptr},
                        {"added_tokens", nlohmann::json::array()},
                        {"normalizer", nullptr},
                        {"pre_tokenizer",
                         {{"type", "ByteLevel"},
                          {"add_prefix_space", false},
                          {"trim_offsets", true},
                          {"use_regex", true}}},
                        {"post_processor", nullptr},
                        {"decoder",
                         {{"type", "ByteLevel"},
                          {"add_prefix_space", true},
                          {"trim_offsets", true},
                          {"use_regex", true}}},
                        {"model",
                         {{"type", "BPE"},
                          {"dropout", nullptr},
                          {"unk_token", nullptr},
                          {"continuing_subword_prefix", nullptr},
                          {"end_of_word_suffix", nullptr},
                          {"fuse_unk", false},
                          {"byte_fallback", false},
                          {"ignore_merges", false},
                          {"vocab", vocab},
                          {"merges", nlohmann::json::array()}}}};
  return tok.dump();
}

}  // namespace lucid::server
