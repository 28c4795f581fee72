// What the GGUF config mappings of both families (gguf_config.cpp, gguf_config_deepseek.cpp)
// share: the tokenizer-derived config keys and the two-table tensor-name lookup.
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>

#include "core/status.h"
#include "formats/gguf.h"

namespace lucid::gguf_config {

// Sets vocab_size from tokenizer.ggml.tokens when `c` has none, tie_word_embeddings (true when the
// file has no `output.weight`), and bos/eos_token_id from tokenizer.ggml.* where stated.
Status AddTokenizerKeys(const GgufFile& f, nlohmann::json& c);

// Maps `name` through `pattern` (groups: 1 the block number, optional; 2 the base name; 3 the
// suffix) and the tables: top-level base names through `top`, per-block ones through `layer` to
// "model.layers.N.<hf>"; the suffix is kept. nullopt when the name or its base is unknown.
std::optional<std::string> HfNameFromTables(const std::string& name, const std::regex& pattern,
                                            const std::map<std::string, std::string>& top,
                                            const std::map<std::string, std::string>& layer);

}  // namespace lucid::gguf_config
