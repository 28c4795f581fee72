// The tokenizer and chat template a GGUF file describes in its metadata (`tokenizer.*`), turned
// into the Hugging Face forms the tokenizer module reads: a tokenizer.json text and a Jinja source.
//
// The tokenizer built is the one transformers builds from the same file (its GGUF tokenizer
// conversion, integrations/gguf/gguf_tokenizer_mapping.py, transformers 5.24): checked id for id on
// the tokenizer corpus for SmolLM2 (tools/reference/gguf/tokenizer_goldens.py).
// - `tokenizer.ggml.model` "gpt2": byte-level BPE over `tokens` and `merges`; a token not spelled
//   in the byte-level alphabet is respelled byte by byte (as transformers does). The pre-tokenizer
//   follows `tokenizer.ggml.pre`: the GPT-2 regex for "default", "gpt-2", "gpt2", "smollm" (where
//   transformers, the oracle, keeps GPT-2's regex; llama.cpp itself splits digits one by one for
//   "smollm", which gives the same ids whenever the vocabulary has no multi-digit merges); the
//   Llama-3 split for "llama3", "llama-v3", "llama-bpe", "smaug-bpe", "dbrx", "falcon3"; the Qwen2
//   split for "qwen2", "deepseek-r1-qwen", "megrez". Any other name is refused by name
//   (Unimplemented).
// - Token types: CONTROL (3) tokens spelled in the byte alphabet become special added tokens,
//   USER_DEFINED (4) tokens plain added tokens, both matched whole in text.
// - `tokenizer.ggml.add_bos_token` true makes encode-with-special-tokens prepend the BOS token.
// - "llama" (SentencePiece) and other models are refused by name (Unimplemented).
// Errors name the file and the key (InvalidArgument / NotFound from the metadata getters).
// Thread-safety: pure functions of the (immutable) file.
#pragma once

#include <optional>
#include <string>

#include "core/status.h"
#include "formats/gguf.h"

namespace lucid {

// A tokenizer.json text for the file's tokenizer (see file comment).
StatusOr<std::string> TokenizerJsonFromGguf(const GgufFile& file);

struct GgufTextAssets {
  std::optional<std::string> chat_template;  // tokenizer.chat_template
  std::string bos_token, eos_token;          // token strings of bos/eos_token_id ("" if absent)
};
// The chat template and BOS / EOS strings; errors only for keys of the wrong type or ids past the
// vocabulary.
StatusOr<GgufTextAssets> TextAssetsFromGguf(const GgufFile& file);

}  // namespace lucid
