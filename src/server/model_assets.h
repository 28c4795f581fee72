// ModelAssets: the text side of a model directory, read at start-up for the server.
//
// - tokenizer.json -> Tokenizer (absent: the server takes token ids only; a file that fails to
//   load is an error naming it).
// - Chat template: `chat_template.jinja`, else tokenizer_config.json "chat_template" (a string,
//   or a list of {name, template} where "default" is used). A template that does not parse is
//   not an error for serving: the chat route answers 400 naming the parse error (chat_error).
// - bos_token / eos_token strings from tokenizer_config.json (a string or {"content": ...}).
// A path to a file instead of a directory is read as a GGUF file: the tokenizer, chat template and
// BOS / EOS strings come from its tokenizer.* metadata (formats/gguf_tokenizer.h), and
// tokenizer_json is the tokenizer.json text built from it (so structured output works there too).
// Thread-safety: the loaded objects are immutable and shared.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace lucid::server {

struct ModelAssets {
  std::shared_ptr<const tok::Tokenizer> tokenizer;  // null without tokenizer.json
  // The tokenizer.json text `tokenizer` was built from: the file's, or for a GGUF file the one
  // built from its metadata. The grammar compiler reads the vocabulary type from it.
  std::string tokenizer_json;
  std::shared_ptr<const tok::ChatTemplate> chat_template;  // null without a usable template
  std::string chat_error;  // why there is no chat template ("" when there is one)
  std::string bos_token, eos_token;
};

StatusOr<ModelAssets> LoadModelAssets(const std::string& model_dir);

}  // namespace lucid::server
