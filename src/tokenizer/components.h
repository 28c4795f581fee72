// The pipeline stages of a tokenizer.json: normalizers, pre-tokenizers and decoders.
//
// Each stage is parsed from its JSON object by name. A `type` this build does not implement is
// refused with Unimplemented naming it, so a tokenizer is never silently approximated. Semantics
// follow HF `tokenizers` (the reference the goldens come from); comments name the deviations.
// Thread-safety: stages are immutable after parsing; all methods are const and reentrant.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace lucid::tok {

// A slice of the input on its way to the model. `at_origin` is true when the slice starts at
// byte 0 of the original input (Metaspace's prepend_scheme "first" depends on it).
struct Piece {
  std::string text;
  bool at_origin = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string* text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces, in order. Empty sub-pieces are dropped.
  virtual void PreTokenize(std::vector<Piece>* pieces) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // HF decode_chain: maps the token strings to output strings (which are then concatenated).
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
};

// `j` may be null (no stage): the result is then nullptr.
StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j);
StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j);
StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j);

class Regex;
// Parses the {"String": s} / {"Regex": r} pattern objects shared by Replace and Split.
Status ParsePattern(const nlohmann::json& p, std::string* literal,
                    std::shared_ptr<const Regex>* re);

// GPT-2 byte-level alphabet: the printable stand-in for each byte, and the reverse lookup (-1 for
// code points that are not in the alphabet).
const std::string& ByteToUnicode(uint8_t b);
int ByteFromUnicode(int32_t cp);

}  // namespace lucid::tok
