// HttpServer: lucid's HTTP API over an Engine (cpp-httplib). HTTP threads only parse, tokenize,
// enqueue into the engine and wait on per-request channels; they never touch the model.
//
// Routes (docs/SERVING.md has the full reference):
//   GET  /health            503 while loading / warming up / shutting down / failed, 200 once
//   ready;
//                           503 "degraded" while most recent requests fail the numerics guard
//                           (server/health_monitor.h)
//   GET  /health_generate   runs a one-token generation through the engine
//   GET  /v1/models, /v1/models/{name}
//   POST /v1/completions, /v1/chat/completions   OpenAI schema, SSE when "stream": true
//   POST /generate          SGLang's native schema (text or input_ids, sampling_params, stream)
//   POST /v1/tokenize, /v1/detokenize (also /tokenize, /detokenize, vLLM's paths)
//   GET  /server_info       resolved configuration with provenance, model, engine stats
//                           (also /get_server_info, SGLang's path)
//   GET  /version           {"version"};  GET|POST /ping: 200 when ready, else 503 (vLLM)
//   GET  /metrics           Prometheus text format (server/server_metrics.h), with vllm: and
//                           sglang: aliases
//   OPTIONS *               CORS preflight (allowed_origins); no authentication
// Unknown request fields: ignored and named in the X-Lucid-Ignored-Fields header (or 400 with
// strict_request_fields).
// Connections: each request must arrive within a receive deadline (408 after), and connections are
// bounded in total and per client (503 "too_many_connections" beyond, except /health and /metrics);
// server/guarded_server.h. A Content-Length that is not a decimal number is refused (400) and one
// over the body limit (413) at once, before any of the body is read.
// Every error is an OpenAI-style {"error": {message, type, param, code}} body with its status.
// With an api key, every route but /health and /metrics needs "Authorization: Bearer <key>".
// Admission: at most `max_concurrent_requests` generation requests are held at once (the engine
// queues those beyond its max-running-requests); one more is answered 429 at once.
// A streaming client that disconnects has its engine requests aborted (pages freed) at the next
// write: token events, or a keep-alive comment sent every second while nothing else is sent.
// A non-streaming client that disconnects is noticed within ~200 ms (its socket is polled while
// the handler waits) and its requests are aborted the same way.
// Lifecycle: Start() (listening, phase kLoading) -> AttachEngine() -> SetPhase(kWarmingUp /
// kReady) -> BeginShutdown() (new generation requests get 503) -> WaitIdle() -> Stop().
// kFailed (the server can no longer serve: a rank of its tensor-parallel group died; the detail
// says why) answers like kShuttingDown, 503 everywhere but /metrics; both are final.
// Thread-safety: every public method may be called from any thread. The engine passed to
// AttachEngine must outlive Stop().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "grammar/grammar_compiler.h"
#include "runtime/engine.h"
#include "server/api_error.h"
#include "server/health_monitor.h"
#include "server/server_metrics.h"
#include "server/tool_call_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace lucid::server {

class GuardedServer;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;     // 0: any free port (see HttpServer::port())
  std::string api_key;  // empty: no authentication
  size_t max_body_bytes = 8u << 20;
  int64_t max_concurrent_requests = 256;
  // Connections (server/guarded_server.h): a request must arrive whole within receive_timeout;
  // at most max_connections are served at once (0: max_concurrent_requests + 16), at most
  // max_connections_per_client from one address (0: half of max_connections); beyond, 503
  // (but /health and /metrics answer).
  std::chrono::milliseconds receive_timeout{10000};
  int64_t max_connections = 0;
  int64_t max_connections_per_client = 0;
  int http_threads = 0;  // 0: max_connections + 64 (refused connections always find a thread)
  // Unknown request fields: false (default) ignores them and names them in the
  // X-Lucid-Ignored-Fields header and the log, as vLLM and SGLang accept them; true answers 400.
  bool strict_request_fields = false;
  // CORS: origins whose browsers may call the API ("*": any); empty: no CORS headers.
  std::vector<std::string> allowed_origins;
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
  // Chat output parsers (--tool-call-parser, --reasoning-parser): tool calls are parsed when a
  // request has tools; nullopt / false: the text is returned as it is.
  std::optional<ToolCallFormat> tool_call_format;
  bool reasoning_parser = false;
  // Structured output's grammar compiler over the tokenizer's vocabulary (null: requests that ask
  // for structured output get a 400 saying grammar_error).
  std::shared_ptr<grammar::GrammarCompiler> grammars;
  std::string grammar_error;
};

enum class Phase { kLoading, kWarmingUp, kReady, kShuttingDown, kFailed };
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
  // Admitted connections open now (/metrics lucid_http_connections_open); 0 before Start.
  int64_t open_connections() const;

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
  void HandlePing(httplib::Response& res) const;
  // Sets the CORS headers of a request from an allowed origin; true for a preflight (OPTIONS).
  bool ApplyCors(const httplib::Request& req, httplib::Response& res) const;
  void HandleMetrics(httplib::Response& res) const;
  void HandleTokenize(const httplib::Request& req, httplib::Response& res) const;
  void HandleDetokenize(const httplib::Request& req, httplib::Response& res) const;
  // /v1/completions, /v1/chat/completions, /generate (http_server_generation.cpp).
  void HandleGeneration(int kind, const httplib::Request& req, httplib::Response& res);

  ServerOptions options_;
  GuardedServer* guarded_ = nullptr;  // what http_ is
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int bound_port_ = 0;
  std::atomic<Phase> phase_{Phase::kLoading};
  mutable std::mutex mu_;
  std::string phase_detail_;
  std::shared_ptr<const Attached> attached_;
  std::atomic<int64_t> in_flight_{0};
  ServerMetrics metrics_;
  mutable HealthMonitor health_;
  int64_t started_unix_ = 0;
};

// Runs one greedy generation of `prompt` (the BOS id, or 0, repeated: a warm-up or a health
// probe) through `engine` and waits up to `timeout` for it to finish. OK when it finished with
// "stop" or "length"; the error otherwise.
Status RunTestGeneration(Engine& engine, std::vector<int32_t> prompt, int64_t max_tokens,
                         std::chrono::milliseconds timeout);

}  // namespace lucid::server
