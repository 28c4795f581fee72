// HttpServer over a FakeEngine (no model): routes, SSE, errors, auth, limits, disconnects.
// The tokenizer is a byte-level BPE with 256 ids (id = byte value) built here in memory.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include "server/byte_tokenizer_for_test.h"
#include "server/fake_engine_for_test.h"

namespace lucid::server {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::vector<json> SseEvents(const std::string& body, bool* done) {
  std::vector<json> out;
  *done = false;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string data = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (data == "[DONE]")
      *done = true;
    else
      out.push_back(json::parse(data));
  }
  return out;
}

class HttpServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { std::signal(SIGPIPE, SIG_IGN); }

  void Start(ServerOptions opts = {}, std::chrono::milliseconds delay = 0ms, bool ready = true) {
    opts.host = "127.0.0.1";
    opts.port = 0;
    engine_ = std::make_unique<FakeEngine>(256, 1, delay);
    server_ = std::make_unique<HttpServer>(opts);
    ASSERT_TRUE(server_->Start().ok());
    ServingModel m;
    m.name = "tiny";
    m.context_length = 64;
    m.vocab_size = 256;
    auto tk = tok::Tokenizer::FromJsonString(ByteLevelTokenizerJson());
    ASSERT_TRUE(tk.ok()) << tk.status().ToString();
    m.tokenizer = std::shared_ptr<const tok::Tokenizer>(std::move(*tk));
    auto tmpl = tok::ChatTemplate::Parse(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}");
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
    m.chat_template = std::make_shared<tok::ChatTemplate>(std::move(*tmpl));
    if (parsers_) {
      m.tool_call_format = ToolCallFormat::kGlm45;
      m.reasoning_parser = true;
    }
    server_->AttachEngine(engine_.get(), m,
                          {{"config", {{"port", {{"value", 0}, {"source", "default"}}}}}});
    if (ready) server_->SetPhase(Phase::kReady);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (engine_) engine_->Stop();
  }
  httplib::Client Client() {
    httplib::Client c("127.0.0.1", server_->port());
    // httplib's default connect timeout is 300 ms, which a loaded 2-core CI box can miss.
    c.set_connection_timeout(10, 0);
    c.set_read_timeout(10, 0);
    return c;
  }
  httplib::Result Post(const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {}) {
    return Client().Post(path.c_str(), headers, body, "application/json");
  }
  void ExpectError(const httplib::Result& r, int status, const std::string& param = "*",
                   const std::string& code = "*", bool health_ok = true) {
    ASSERT_TRUE(r) << "no response";
    EXPECT_EQ(r->status, status) << r->body;
    json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r->body;
    ASSERT_TRUE(j.contains("error")) << r->body;
    for (const char* k : {"message", "type", "param", "code"})
      EXPECT_TRUE(j["error"].contains(k)) << k;
    EXPECT_TRUE(j["error"]["message"].is_string());
    const auto str = [](const json& v) {
      return v.is_null() ? std::string() : v.get<std::string>();
    };
    if (param != "*") {
      EXPECT_EQ(str(j["error"]["param"]), param) << r->body;
    }
    if (code != "*") {
      EXPECT_EQ(str(j["error"]["code"]), code) << r->body;
    }
    // The server keeps serving.
    auto h = Client().Get("/health");
    ASSERT_TRUE(h);
    EXPECT_EQ(h->status, health_ok ? 200 : 503);
  }

  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<HttpServer> server_;
  bool parsers_ = false;  // serve with the glm45 tool-call and reasoning parsers
};

TEST_F(HttpServerTest, HealthFollowsThePhase) {
  Start({}, 0ms, /*ready=*/false);
  auto r = Client().Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(json::parse(r->body)["status"], "loading");
  ExpectError(Post("/v1/completions", R"({"prompt": "x"})"), 503, "*", "*", false);
}

TEST_F(HttpServerTest, ModelsServerInfoAndMetrics) {
  Start();
  auto r = Client().Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["max_model_len"], 64);
  r = Client().Get("/v1/models/tiny");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = Client().Get("/v1/models/other");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  r = Client().Get("/server_info");
  ASSERT_TRUE(r);
  j = json::parse(r->body);
  EXPECT_EQ(j["config"]["port"]["source"], "default");
  EXPECT_EQ(j["model"]["context_length"], 64);
  r = Client().Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("lucid_kv_pages_used 0"), std::string::npos);
  EXPECT_NE(r->body.find("lucid_http_requests_total{route=\"/v1/models\",status=\"200\"} 1"),
            std::string::npos);
}

TEST_F(HttpServerTest, CompletionWithIdsTextLogprobsAndUsage) {
  Start();
  auto r = Post("/v1/completions",
                R"({"model": "tiny", "prompt": [5, 6], "max_tokens": 3, "logprobs": 2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "<7><8><9>");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 3u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  // Text prompt: "AB" -> ids 65, 66; n = 2; echo.
  r = Post("/v1/completions", R"({"prompt": "AB", "max_tokens": 2, "n": 2, "echo": true})");
  ASSERT_EQ(r->status, 200) << r->body;
  j = json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["text"], "AB<67><68>");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4);
  // A stop token id ends the choice with "stop".
  r = Post("/v1/completions", R"({"prompt": [5], "max_tokens": 10, "stop_token_ids": [8]})");
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["text"], "<6><7>");
}

TEST_F(HttpServerTest, StreamingCompletionAndChat) {
  Start();
  auto r = Post("/v1/completions", R"({"prompt": [5], "max_tokens": 3, "stream": true,
                                       "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  bool done = false;
  auto ev = SseEvents(r->body, &done);
  EXPECT_TRUE(done);
  std::string text;
  std::string finish;
  for (const auto& e : ev) {
    if (e["choices"].empty()) {
      EXPECT_EQ(e["usage"]["completion_tokens"], 3);
      continue;
    }
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, "<6><7><8>");
  EXPECT_EQ(finish, "length");
  EXPECT_TRUE(ev.back()["choices"].empty());

  r = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
                                       "max_tokens": 2, "stream": true})");
  ASSERT_EQ(r->status, 200) << r->body;
  ev = SseEvents(r->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(ev.back()["choices"][0]["finish_reason"], "length");
  // "assistant:" ends the rendered prompt; ':' is 58, so the fake engine continues from 59.
  std::string content;
  for (const auto& e : ev) content += e["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(content, "<59><60>");
}

TEST_F(HttpServerTest, ChatNonStreamingAndTokenize) {
  Start();
  auto r = Post("/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                            "logprobs": true, "top_logprobs": 1})");
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["content"], "<59>");
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 1u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], std::string("user: hi\nassistant:").size());
  r = Post("/v1/tokenize", R"({"prompt": "AB"})");
  ASSERT_EQ(r->status, 200) << r->body;
  j = json::parse(r->body);
  EXPECT_EQ(j["tokens"], json::array({65, 66}));
  EXPECT_EQ(j["count"], 2);
  r = Post("/v1/detokenize", R"({"tokens": [72, 105]})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["text"], "Hi");
  ExpectError(Post("/v1/detokenize", R"({"tokens": [999]})"), 400, "tokens", "invalid_token_id");
}

TEST_F(HttpServerTest, NativeGenerate) {
  Start();
  auto r = Post("/generate", R"({"input_ids": [5], "sampling_params": {"max_new_tokens": 2}})");
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["output_ids"], json::array({6, 7}));
  EXPECT_EQ(j["text"], "<6><7>");
  EXPECT_EQ(j["meta_info"]["finish_reason"]["type"], "length");
  EXPECT_EQ(j["meta_info"]["prompt_tokens"], 1);
  r = Post("/generate", R"({"text": ["A", "B"], "sampling_params": {"max_new_tokens": 1}})");
  j = json::parse(r->body);
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j[1]["output_ids"], json::array({67}));
  r = Post("/generate",
           R"({"input_ids": [5], "sampling_params": {"max_new_tokens": 3}, "stream": true})");
  bool done = false;
  auto ev = SseEvents(r->body, &done);
  EXPECT_TRUE(done);
  EXPECT_EQ(ev.back()["output_ids"], json::array({6, 7, 8}));  // cumulative, as SGLang
}

TEST_F(HttpServerTest, BadInputsGetTheRightStatusAndBody) {
  ServerOptions o;
  o.max_body_bytes = 4096;
  o.strict_request_fields = true;
  Start(o);
  ExpectError(Post("/v1/completions", "{not json"), 400, "", "invalid_json");
  ExpectError(Post("/v1/completions", R"({"prompt": "x", "max_tokens": "3"})"), 400, "max_tokens",
              "invalid_type");
  ExpectError(Post("/v1/completions", R"({"prompt": "x", "bogus": 1})"), 400, "bogus",
              "unknown_parameter");
  ExpectError(Post("/v1/completions", R"({"prompt": "x", "temperature": -1})"), 400, "temperature");
  ExpectError(Post("/v1/completions", R"({"prompt": "x", "top_p": 0})"), 400, "top_p");
  ExpectError(Post("/v1/completions", R"({"prompt": "x", "top_p": 1.01})"), 400, "top_p");
  ExpectError(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 0})"), 400, "max_tokens");
  ExpectError(Post("/v1/completions", R"({"prompt": "x", "max_tokens": 64})"), 400, "max_tokens",
              "context_length_exceeded");
  ExpectError(Post("/v1/completions", R"({"prompt": ")" + std::string(64, 'a') + R"("})"), 400,
              "prompt", "context_length_exceeded");
  ExpectError(Post("/v1/chat/completions", R"({"messages": []})"), 400, "messages", "empty_array");
  ExpectError(Post("/v1/completions", R"({"model": "gpt-4", "prompt": "x"})"), 404, "",
              "model_not_found");
  ExpectError(Post("/v1/completions", R"({"prompt": [300]})"), 400, "prompt", "invalid_token_id");
  ExpectError(Post("/v1/completions", R"({"prompt": ")" + std::string(5000, 'a') + R"("})"), 413,
              "", "payload_too_large");
  ExpectError(Client().Get("/v1/nothing"), 404, "", "not_found");
  engine_->FailWith("non-finite logits at step 3 (layer 2, moe)");
  ExpectError(Post("/v1/completions", R"({"prompt": "x"})"), 500, "", "internal_error");
  auto r = Post("/v1/completions", R"({"prompt": "x", "stream": true})");
  bool done = false;
  auto ev = SseEvents(r->body, &done);
  ASSERT_FALSE(ev.empty());
  EXPECT_TRUE(ev.back().contains("error"));
  EXPECT_NE(ev.back()["error"]["message"].get<std::string>().find("layer 2"), std::string::npos);
  EXPECT_TRUE(done);
}

TEST_F(HttpServerTest, ApiKey) {
  ServerOptions o;
  o.api_key = "sekret";
  Start(o);
  ExpectError(Client().Get("/v1/models"), 401, "", "invalid_api_key");
  ExpectError(Post("/v1/completions", R"({"prompt": "x"})", {{"Authorization", "Bearer wrong"}}),
              401);
  auto r = Client().Get("/v1/models", {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(Client().Get("/metrics")->status, 200);
}

// Opens a raw connection, sends a streaming request and returns the socket after the first
// bytes of the response arrive.
int OpenStream(int port, const std::string& body) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  if (write(fd, req.data(), req.size()) != ssize_t(req.size())) return -1;
  char buf[256];
  if (read(fd, buf, sizeof buf) <= 0) return -1;
  return fd;
}

TEST_F(HttpServerTest, DisconnectMidStreamAbortsAndFreesPages) {
  Start({}, 20ms);
  const int fd = OpenStream(
      server_->port(), R"({"prompt": [5], "max_tokens": 60, "ignore_eos": true, "stream": true})");
  ASSERT_GE(fd, 0);
  EXPECT_EQ(engine_->Stats().pages_used, 1);
  close(fd);
  for (int i = 0; i < 1000 && engine_->Stats().requests_aborted == 0; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(engine_->Stats().requests_aborted, 1);
  EXPECT_EQ(engine_->Stats().pages_used, 0);
  for (int i = 0; i < 1000 && server_->in_flight() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(HttpServerTest, DisconnectWithoutStreamingAbortsAndFreesPages) {
  Start({}, 100ms);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body = R"({"prompt": [5], "max_tokens": 60, "ignore_eos": true})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, req.data(), req.size()), ssize_t(req.size()));
  // The waits end as soon as their condition holds; their caps only leave room for the sanitizer
  // builds on a loaded machine, where admission alone can take over a second.
  for (int i = 0; i < 2000 && engine_->Stats().pages_used == 0; ++i)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(engine_->Stats().pages_used, 1);
  close(fd);  // 60 tokens at 100 ms each would take 6 s; the abort comes well before
  for (int i = 0; i < 1000 && engine_->Stats().requests_aborted == 0; ++i)
    std::this_thread::sleep_for(10ms);
  EXPECT_EQ(engine_->Stats().requests_aborted, 1);
  EXPECT_EQ(engine_->Stats().pages_used, 0);
  for (int i = 0; i < 1000 && server_->in_flight() > 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(HttpServerTest, UnknownFieldsAreIgnoredAndNamedUnlessStrict) {
  Start();
  auto r = Post("/v1/completions", R"({"prompt": [5], "max_tokens": 1, "foo": 1, "bar": {}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("X-Lucid-Ignored-Fields"), "foo, bar");
  r = Post("/v1/completions", R"({"prompt": [5], "max_tokens": 1})");
  EXPECT_FALSE(r->has_header("X-Lucid-Ignored-Fields"));
  r = Post("/v1/tokenize", R"({"prompt": "A", "extra": true})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->get_header_value("X-Lucid-Ignored-Fields"), "extra");
  server_->Stop();
  engine_->Stop();
  ServerOptions o;
  o.strict_request_fields = true;
  Start(o);
  ExpectError(
      Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "foo": 1})"),
      400, "foo", "unknown_parameter");
  ExpectError(Post("/v1/detokenize", R"({"tokens": [65], "foo": 1})"), 400, "foo",
              "unknown_parameter");
}

TEST_F(HttpServerTest, PeerRoutesAndMetricAliases) {
  Start();
  for (const char* path : {"/get_server_info", "/server_info"}) {
    auto r = Client().Get(path);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << path;
    EXPECT_EQ(json::parse(r->body)["model"]["context_length"], 64) << path;
  }
  auto r = Client().Get("/version");
  ASSERT_EQ(r->status, 200);
  EXPECT_TRUE(json::parse(r->body)["version"].is_string());
  EXPECT_EQ(Client().Get("/ping")->status, 200);
  EXPECT_EQ(Post("/ping", "")->status, 200);
  r = Post("/tokenize", R"({"prompt": "AB"})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["tokens"], json::array({65, 66}));
  r = Post("/detokenize", R"({"tokens": [65, 66]})");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["prompt"], "AB");
  ASSERT_EQ(Post("/v1/completions", R"({"prompt": [5], "max_tokens": 2})")->status, 200);
  r = Client().Get("/metrics");
  ASSERT_EQ(r->status, 200);
  for (const char* line :
       {"vllm:num_requests_running{model_name=\"tiny\"} 0",
        "vllm:generation_tokens_total{model_name=\"tiny\"} 2",
        "sglang:generation_tokens_total{model_name=\"tiny\"} 2",
        "vllm:e2e_request_latency_seconds_count{model_name=\"tiny\"} 1",
        "sglang:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 1",
        "vllm:kv_cache_usage_perc{model_name=\"tiny\"} 0", "lucid_generation_tokens_total 2"})
    EXPECT_NE(r->body.find(line), std::string::npos) << line;
  server_->SetPhase(Phase::kShuttingDown);
  EXPECT_EQ(Client().Get("/ping")->status, 503);
}

TEST_F(HttpServerTest, CorsPreflightAndHeadersForAllowedOrigins) {
  ServerOptions o;
  o.allowed_origins = {"http://ui.example"};
  o.api_key = "k";
  Start(o);
  // The preflight carries no credentials and is answered without them.
  auto r = Client().Options("/v1/chat/completions",
                            {{"Origin", "http://ui.example"},
                             {"Access-Control-Request-Method", "POST"},
                             {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://ui.example");
  EXPECT_NE(r->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
  r = Client().Get("/v1/models", {{"Origin", "http://ui.example"}, {"Authorization", "Bearer k"}});
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://ui.example");
  // Errors carry the header too (the browser can read the 401).
  r = Client().Get("/v1/models", {{"Origin", "http://ui.example"}});
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://ui.example");
  // Another origin: no CORS headers.
  r = Client().Options("/v1/models", {{"Origin", "http://evil.example"}});
  EXPECT_EQ(r->status, 204);
  EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin"));
}

TEST_F(HttpServerTest, VllmExtrasTokenIdsTruncationUsageAndChecks) {
  Start();
  auto r = Post("/v1/completions", R"({"prompt": [3, 4, 5, 6], "max_tokens": 2,
                                       "return_token_ids": true, "truncate_prompt_tokens": 2})");
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["choices"][0]["prompt_token_ids"], json::array({5, 6}));
  EXPECT_EQ(j["choices"][0]["token_ids"], json::array({7, 8}));
  r = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}],
                                       "max_tokens": 1, "return_token_ids": true})");
  ASSERT_EQ(r->status, 200) << r->body;
  j = json::parse(r->body);
  EXPECT_EQ(j["prompt_token_ids"].size(), std::string("user: hi\nassistant:").size());
  EXPECT_EQ(j["choices"][0]["token_ids"], json::array({59}));
  // continuous_usage_stats: every chunk with a choice carries that choice's usage so far.
  r = Post("/v1/completions", R"({"prompt": [5], "max_tokens": 3, "stream": true,
                                  "return_token_ids": true, "stream_options":
                                  {"include_usage": true, "continuous_usage_stats": true}})");
  bool done = false;
  auto ev = SseEvents(r->body, &done);
  int64_t last = 0;
  std::vector<int32_t> ids;
  for (const auto& e : ev) {
    ASSERT_TRUE(e.contains("usage")) << e.dump();
    if (e["choices"].empty()) continue;
    EXPECT_GE(e["usage"]["completion_tokens"].get<int64_t>(), last);
    last = e["usage"]["completion_tokens"];
    EXPECT_EQ(e["usage"]["prompt_tokens"], 1);
    for (int32_t t : e["choices"][0]["token_ids"]) ids.push_back(t);
  }
  EXPECT_EQ(last, 3);
  EXPECT_EQ(ids, (std::vector<int32_t>{6, 7, 8}));
  ExpectError(Post("/v1/completions", R"({"prompt": [5], "logit_bias": {"256": 1}})"), 400,
              "logit_bias", "invalid_token_id");
  ExpectError(Post("/v1/completions", R"({"prompt": [5], "max_tokens": 2, "min_tokens": 3})"), 400,
              "min_tokens", "invalid_value");
  ExpectError(Post("/v1/completions", R"({"prompt": [5], "priority": 2})"), 400, "priority",
              "unsupported_parameter");
}

TEST_F(HttpServerTest, ChatToolCallsAndReasoningFromAScriptedModel) {
  parsers_ = true;
  Start();
  // GLM-5's markup, in pieces that split the markers.
  engine_->Script({"<thi", "nk>Need the weather.</th", "ink>On it.<tool", "_call>get_weather",
                   "<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>",
                   "<arg_value>3</arg_value></tool_call>"});
  const std::string body = R"({"messages": [{"role": "user", "content": "weather?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"},
                                          "days": {"type": "integer"}}}}}]})";
  auto r = Post("/v1/chat/completions", body);
  ASSERT_EQ(r->status, 200) << r->body;
  json j = json::parse(r->body);
  const json& msg = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(msg["reasoning_content"], "Need the weather.");
  EXPECT_EQ(msg["content"], "On it.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json::parse(R"({"city": "Paris", "days": 3})"));
  // Streaming: the same, assembled the way the openai client does.
  r = Post("/v1/chat/completions", body.substr(0, body.size() - 1) + R"(, "stream": true})");
  bool done = false;
  std::string reasoning, content, name, args, finish;
  int arg_deltas = 0;
  for (const auto& e : SseEvents(r->body, &done)) {
    const json& d = e["choices"][0]["delta"];
    reasoning += d.value("reasoning_content", "");
    if (d.contains("content") && d["content"].is_string()) content += d["content"];
    if (d.contains("tool_calls")) {
      EXPECT_EQ(d["tool_calls"][0]["index"], 0);
      const json& f = d["tool_calls"][0]["function"];
      if (f.contains("name")) {
        EXPECT_TRUE(args.empty()) << "the name comes first";
        name += f["name"];
      }
      arg_deltas += !f.value("arguments", "").empty();
      args += f.value("arguments", "");
    }
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_GT(arg_deltas, 1) << "the arguments stream in pieces as the pairs complete";
  EXPECT_EQ(reasoning, "Need the weather.");
  EXPECT_EQ(content, "On it.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(json::parse(args), json::parse(R"({"city": "Paris", "days": 3})"));
  EXPECT_EQ(finish, "tool_calls");
  // tool_choice "none": no calls parsed (as vLLM).
  r = Post("/v1/chat/completions", body.substr(0, body.size() - 1) + R"(, "tool_choice": "none"})");
  ASSERT_EQ(r->status, 200) << r->body;
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  // Without tools the markup stays text (reasoning still split); a malformed call is content.
  engine_->Script(
      {"<think>x</think>", "<tool_call>get_weather<arg_key>city</arg_value>", "</tool_call>"});
  r = Post("/v1/chat/completions", body);
  ASSERT_EQ(r->status, 200) << r->body;
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["message"]["content"],
            "<tool_call>get_weather<arg_key>city</arg_value></tool_call>");
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls"));
  r = Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})");
  j = json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "x");
  EXPECT_EQ(j["choices"][0]["message"]["content"],
            "<tool_call>get_weather<arg_key>city</arg_value></tool_call>");
}

TEST_F(HttpServerTest, TooManyConcurrentRequestsIs429) {
  ServerOptions o;
  o.max_concurrent_requests = 1;
  Start(o, 20ms);
  const int fd = OpenStream(
      server_->port(), R"({"prompt": [5], "max_tokens": 60, "ignore_eos": true, "stream": true})");
  ASSERT_GE(fd, 0);
  ExpectError(Post("/v1/completions", R"({"prompt": [5]})"), 429, "", "rate_limit_exceeded");
  close(fd);
  for (int i = 0; i < 1000 && server_->in_flight() > 0; ++i) std::this_thread::sleep_for(10ms);
  auto r = Post("/v1/completions", R"({"prompt": [5], "max_tokens": 1})");
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, ShutdownFinishesStreamsCleanly) {
  Start({}, 100ms);
  std::string body;
  std::thread client([&] {
    auto r = Post("/v1/completions",
                  R"({"prompt": [5], "max_tokens": 60, "ignore_eos": true, "stream": true})");
    if (r) body = r->body;
  });
  // Capped for the sanitizer builds on a loaded machine; ends as soon as the stream runs.
  for (int i = 0; i < 2000 && engine_->Stats().pages_used == 0; ++i)
    std::this_thread::sleep_for(5ms);
  if (engine_->Stats().pages_used == 0) {
    server_->BeginShutdown();
    client.join();
    FAIL() << "the stream never started";
  }
  server_->BeginShutdown();
  ExpectError(Post("/v1/completions", R"({"prompt": [5]})"), 503, "*", "*", false);
  engine_->Stop();  // fails in-flight requests with "abort"
  client.join();
  bool done = false;
  auto ev = SseEvents(body, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back()["choices"][0]["finish_reason"], "abort");
}

}  // namespace
}  // namespace lucid::server
