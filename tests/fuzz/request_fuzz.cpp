// libFuzzer target: HTTP request bodies through the server's request parsing (completions, chat,
// generate; src/server/request_parsing.cpp). Any body: no crash, and every refusal is an
// OpenAI-shaped error with a 4xx status.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "server/request_parsing.h"

namespace {

void CheckError(const std::optional<lucid::server::ApiError>& e) {
  if (!e) return;
  if (e->status < 400 || e->status >= 500 || e->message.empty()) std::abort();
  const nlohmann::json j = e->ToJson();
  if (!j.contains("error") || !j["error"].contains("code")) std::abort();
  (void)j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lucid::server;
  ordered_json body;
  auto e = ParseJsonBody(std::string(reinterpret_cast<const char*>(data), size), &body);
  CheckError(e);
  if (e) return 0;
  ParsedRequest r;
  CheckError(ParseCompletionRequest(body, &r));
  ParsedRequest chat;
  CheckError(ParseChatRequest(body, &chat));
  ParsedRequest gen;
  CheckError(ParseGenerateRequest(body, &gen));
  return 0;
}
