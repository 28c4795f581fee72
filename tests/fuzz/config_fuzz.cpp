// libFuzzer target: config.json and hf_quant_config.json parsing (src/formats). Any input: no
// crash; a refusal is one line; an accepted config has one entry per layer in the derived lists.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "formats/model_config.h"
#include "formats/quant_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto c = lucid::ParseModelConfig(j);
  if (c.ok()) {
    const size_t layers = static_cast<size_t>(c->num_hidden_layers);
    if (c->layer_is_moe.size() != layers || c->layer_runs_indexer.size() != layers) std::abort();
    (void)c->AttentionScale();
  } else if (c.status().message().find('\n') != std::string::npos) {
    std::abort();
  }
  // The same document as hf_quant_config.json, and as a config carrying quantization_config.
  (void)lucid::ParseQuantConfig(&j, nlohmann::json::object());
  (void)lucid::ParseQuantConfig(nullptr, nlohmann::json{{"quantization_config", j}});
  return 0;
}
