// See gguf_config_common.h.
#include "formats/gguf_config_common.h"

#include <utility>

namespace lucid::gguf_config {

Status AddTokenizerKeys(const GgufFile& f, nlohmann::json& c) {
  if (!c.contains("vocab_size")) {
    LUCID_ASSIGN_OR_RETURN(auto tokens, f.GetStringArray("tokenizer.ggml.tokens"));
    c["vocab_size"] = tokens.size();
  }
  c["tie_word_embeddings"] = f.tensors().count("output.weight") == 0;
  for (auto [key, hf] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                         std::pair{"tokenizer.ggml.eos_token_id", "eos_token_id"}}) {
    if (!f.Find(key)) continue;
    LUCID_ASSIGN_OR_RETURN(uint64_t v, f.GetUint(key));
    c[hf] = v;
  }
  return OkStatus();
}

std::optional<std::string> HfNameFromTables(const std::string& name, const std::regex& pattern,
                                            const std::map<std::string, std::string>& top,
                                            const std::map<std::string, std::string>& layer) {
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return std::nullopt;
  const std::string suffix = "." + m[3].str();
  const auto& table = m[1].matched ? layer : top;
  auto it = table.find(m[2].str());
  if (it == table.end()) return std::nullopt;
  if (!m[1].matched) return it->second + suffix;
  return "model.layers." + m[1].str() + "." + it->second + suffix;
}

}  // namespace lucid::gguf_config
