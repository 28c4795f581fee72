// A test-only server: lucid's real HttpServer over the FakeEngine with a scripted output, so
// that the Python e2e tests can drive tool calls and reasoning through the official openai client
// (a random tiny model cannot be made to write tool-call markup).
// Usage: lucid_scripted_server [--tool-call-parser=NAME] PORT_FILE PIECE... — serves model
// "scripted" on a free loopback port (written to PORT_FILE once listening) with the byte-level
// tokenizer, a one-line chat template, the tool-call parser NAME (default glm47) and the
// reasoning parser; every request's output is the PIECEs, one per step, then "stop". Runs until
// SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

#include "server/byte_tokenizer_for_test.h"
#include "server/fake_engine_for_test.h"
#include "server/http_server.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
}  // namespace

int main(int argc, char** argv) {
  using namespace lucid;
  std::string parser = "glm47";
  constexpr std::string_view kParserFlag = "--tool-call-parser=";
  if (argc > 1 && std::string_view(argv[1]).substr(0, kParserFlag.size()) == kParserFlag) {
    parser = std::string(argv[1] + kParserFlag.size());
    --argc;
    ++argv;
  }
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: lucid_scripted_server [--tool-call-parser=NAME] PORT_FILE "
                 "PIECE...\n");
    return 2;
  }
  if (!server::ToolCallFormatFromName(parser)) {
    std::fprintf(stderr, "lucid_scripted_server: unknown tool-call parser '%s'\n", parser.c_str());
    return 2;
  }
  std::signal(SIGINT, [](int) { g_stop = 1; });
  std::signal(SIGTERM, [](int) { g_stop = 1; });
  std::signal(SIGPIPE, SIG_IGN);
  server::FakeEngine engine(256, 1);
  engine.Script(std::vector<std::string>(argv + 2, argv + argc));
  server::ServerOptions opts;
  opts.port = 0;
  server::HttpServer http(opts);
  if (!http.Start().ok()) return 1;
  server::ServingModel m;
  m.name = "scripted";
  m.context_length = 4096;
  m.vocab_size = 256;
  auto tk = tok::Tokenizer::FromJsonString(server::ByteLevelTokenizerJson());
  auto tmpl = tok::ChatTemplate::Parse(
      "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}assistant:");
  if (!tk.ok() || !tmpl.ok()) return 1;
  m.tokenizer = std::shared_ptr<const tok::Tokenizer>(std::move(*tk));
  m.chat_template = std::make_shared<tok::ChatTemplate>(std::move(*tmpl));
  m.tool_call_format = server::ToolCallFormatFromName(parser);
  m.reasoning_parser = true;
  http.AttachEngine(&engine, m, nlohmann::json::object());
  http.SetPhase(server::Phase::kReady);
  std::ofstream(argv[1]) << http.port() << "\n";
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  http.Stop();
  engine.Stop();
  return 0;
}
