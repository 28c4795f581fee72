// HttpServer: lucid's HTTP API over an Engine (cpp-httplib). HTTP threads only parse, tokenize,
// enqueue into the engine and wait on per-request channels; they never touch the model.
//
// Routes (docs/SERVING.md has the full reference):
//   GET  /health            503 while loading / warming up / shutting down, 200 once ready
//   GET  /health_generate   runs a one-token generation through the engine
//   GET  /v1/models, /v1/models/{name}
//   POST /v1/completions, /v1/chat/completions   OpenAI schema, SSE when "stream": true
//   POST /generate          SGLang's native schema (text or input_ids, sampling_params, stream)
//   POST /v1/tokenize, /v1/detokenize
//   GET  /server_info       resolved configuration with provenance, model, engine stats
//   GET  /metrics           Prometheus text format (server/server_metrics.h)
// Every error is an OpenAI-style {"error": {message, type, param, code}} body with its status.
// With an api key, every route but /health and /metrics needs "Authorization: Bearer <key>".
// Admission: at most `max_concurrent_requests` generation requests are held at once (the engine
// queues those beyond its max-running-requests); one more is answered 429 at once.
// A streaming client that disconnects has its engine requests aborted (pages freed) at the next
// write: token events, or a keep-alive comment sent every second while nothing else is sent.
// Lifecycle: Start() (listening, phase kLoading) -> AttachEngine() -> SetPhase(kWarmingUp /
// kReady) -> BeginShutdown() (new generation requests get 503) -> WaitIdle() -> Stop().
// Thread-safety: every public method may be called from any thread. The engine passed to
// AttachEngine must outlive Stop().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/status.h"
#include "grammar/grammar_compiler.h"
#include "runtime/engine.h"
#include "server/api_error.h"
#include "server/server_metrics.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace lucid::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;     // 0: any free port (see HttpServer::port())
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 8u << 20;
  int64_t max_concurrent_requests = 256;
  int http_threads = 0;  // 0: max_concurrent_requests + 16
};

// What the routes know about the model being served.
struct ServingModel {
  std::string name;
  int64_t context_length = 0;
  int64_t vocab_size = 0;
  std::shared_ptr<const tok::Tokenizer> tokenizer;         // null: token ids only
  std::shared_ptr<const tok::ChatTemplate> chat_template;  // null: no chat route
  std::string chat_error;  // why there is no chat template (shown in the chat route's 400)
  std::string bos_token, eos_token;  // for the chat template
  std::string model_path;
  // Structured output's grammar compiler over the tokenizer's vocabulary (null: requests that ask
  // for structured output get a 400 saying grammar_error).
  std::shared_ptr<grammar::GrammarCompiler> grammars;
  std::string grammar_error;
};

enum class Phase { kLoading, kWarmingUp, kReady, kShuttingDown };
const char* PhaseName(Phase p);

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (Unavailable naming host:port when it cannot) and serves on a background thread.
  Status Start();
  int port() const { return bound_port_; }
  std::string url() const;

  void SetPhase(Phase phase, std::string detail = "");
  Phase phase() const { return phase_.load(); }
  // The engine (not owned) and the model facts; `server_info` is served by /server_info.
  void AttachEngine(Engine* engine, ServingModel model, nlohmann::json server_info);
  void BeginShutdown() { SetPhase(Phase::kShuttingDown, "shutting down"); }
  // Waits until no generation request is held (or `timeout`); returns how many still are.
  int64_t WaitIdle(std::chrono::milliseconds timeout) const;
  // Stops listening and joins the HTTP threads (in-flight handlers finish first).
  void Stop();

  const ServerMetrics& metrics() const { return metrics_; }
  int64_t in_flight() const { return in_flight_.load(); }

  class InFlightSlot;  // one of the max_concurrent_requests admissions (RAII)

 private:
  struct Attached {
    Engine* engine = nullptr;
    ServingModel model;
    nlohmann::json server_info;
  };
  void InstallRoutes();
  std::shared_ptr<const Attached> attached() const;
  // The attached engine when ready, else fills `res` with 503 and returns null.
  std::shared_ptr<const Attached> ReadyOrReply(httplib::Response& res) const;
  void ReplyError(httplib::Response& res, const ApiError& e) const;
  void ReplyJson(httplib::Response& res, const nlohmann::json& j, int status = 200) const;

  void HandleHealth(httplib::Response& res) const;
  void HandleHealthGenerate(httplib::Response& res);
  void HandleModels(const httplib::Request& req, httplib::Response& res) const;
  void HandleServerInfo(httplib::Response& res) const;
  void HandleMetrics(httplib::Response& res) const;
  void HandleTokenize(const httplib::Request& req, httplib::Response& res) const;
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res) const;
  // /v1/completions, /v1/chat/completions, /generate (http_server_generation.cpp).
  void HandleGeneration(int kind, const httplib::Request& req, httplib::Response& res);

  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int bound_port_ = 0;
  std::atomic<Phase> phase_{Phase::kLoading};
  mutable std::mutex mu_;
  std::string phase_detail_;
  std::shared_ptr<const Attached> attached_;
  std::atomic<int64_t> in_flight_{0};
  ServerMetrics metrics_;
  int64_t started_unix_ = 0;
};

// Runs one short greedy generation (prompt: the BOS id, or 0) through `engine` and waits up to
// `timeout` for it to finish. OK when it finished with "stop" or "length"; the error otherwise.
Status RunTestGeneration(Engine& engine, int32_t prompt_token, int64_t max_tokens,
                         std::chrono::milliseconds timeout);

}  // namespace lucid::server
