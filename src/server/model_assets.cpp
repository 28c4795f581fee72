#include "server/model_assets.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "formats/gguf.h"
#include "formats/gguf_tokenizer.h"

namespace lucid::server {
namespace {

namespace fs = std::filesystem;

bool ReadFile(const fs::path& p, std::string* out) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

std::string TokenString(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return "";
}

// The text side of a GGUF file: its tokenizer.* metadata.
StatusOr<ModelAssets> LoadGgufAssets(const std::string& path) {
  ModelAssets a;
  LUCID_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path));
  LUCID_ASSIGN_OR_RETURN(GgufTextAssets text, TextAssetsFromGguf(*file));
  a.bos_token = text.bos_token;
  a.eos_token = text.eos_token;
  if (file->Find("tokenizer.ggml.model")) {
    auto json = TokenizerJsonFromGguf(*file);
    if (!json.ok()) return json.status().WithContext("loading the tokenizer");
    auto t = tok::Tokenizer::FromJsonString(*json);
    if (!t.ok()) return t.status().WithContext(path + ": loading the tokenizer");
    a.tokenizer = std::shared_ptr<const tok::Tokenizer>(std::move(*t));
    a.tokenizer_json = std::move(*json);
  }
  if (!text.chat_template) {
    a.chat_error = path + " has no chat template (tokenizer.chat_template)";
  } else if (!a.tokenizer) {
    a.chat_error = path + " has a chat template but no tokenizer";
  } else {
    auto t = tok::ChatTemplate::Parse(*text.chat_template);
    if (t.ok())
      a.chat_template = std::make_shared<const tok::ChatTemplate>(std::move(*t));
    else
      a.chat_error = "the chat template does not parse: " + t.status().message();
  }
  return a;
}

}  // namespace

StatusOr<ModelAssets> LoadModelAssets(const std::string& model_dir) {
  if (fs::is_regular_file(model_dir)) return LoadGgufAssets(model_dir);
  ModelAssets a;
  const fs::path dir(model_dir);
  if (fs::exists(dir / "tokenizer.json")) {
    auto t = tok::Tokenizer::FromFile((dir / "tokenizer.json").string());
    if (!t.ok()) return t.status().WithContext("loading the tokenizer");
    a.tokenizer = std::shared_ptr<const tok::Tokenizer>(std::move(*t));
    if (!ReadFile(dir / "tokenizer.json", &a.tokenizer_json))
      return InvalidArgument((dir / "tokenizer.json").string() + ": cannot read");
  }
  std::string source, text;
  nlohmann::json cfg;
  if (ReadFile(dir / "tokenizer_config.json", &text)) {
    cfg = nlohmann::json::parse(text, nullptr, false);
    if (cfg.is_discarded() || !cfg.is_object())
      return InvalidArgument((dir / "tokenizer_config.json").string() + ": not a JSON object");
    if (cfg.contains("bos_token")) a.bos_token = TokenString(cfg["bos_token"]);
    if (cfg.contains("eos_token")) a.eos_token = TokenString(cfg["eos_token"]);
  }
  if (ReadFile(dir / "chat_template.jinja", &source)) {
  } else if (cfg.is_object() && cfg.contains("chat_template")) {
    const auto& ct = cfg["chat_template"];
    if (ct.is_string()) source = ct.get<std::string>();
    if (ct.is_array())
      for (const auto& e : ct)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string())
          source = e["template"].get<std::string>();
  }
  if (source.empty()) {
    a.chat_error =
        "the model directory has no chat template (chat_template.jinja or "
        "tokenizer_config.json chat_template)";
  } else if (!a.tokenizer) {
    a.chat_error = "the model directory has a chat template but no tokenizer.json";
  } else {
    auto t = tok::ChatTemplate::Parse(source);
    if (t.ok())
      a.chat_template = std::make_shared<const tok::ChatTemplate>(std::move(*t));
    else
      a.chat_error = "the chat template does not parse: " + t.status().message();
  }
  return a;
}

}  // namespace lucid::server
