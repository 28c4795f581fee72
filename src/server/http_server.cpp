#include "server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <ctime>
#include <optional>
#include <set>

#include "server/generation_job.h"
#include "server/guarded_server.h"
#include "server/request_parsing.h"
#include "server/server_log.h"

#ifndef LUCID_VERSION
#define LUCID_VERSION "unknown"
#endif

namespace lucid::server {
namespace {

const std::set<std::string> kRoutes = {
    "/health",   "/health_generate", "/v1/models",     "/v1/completions",  "/v1/chat/completions",
    "/generate", "/v1/tokenize",     "/v1/detokenize", "/server_info",     "/get_model_info",
    "/metrics",  "/tokenize",        "/detokenize",    "/get_server_info", "/version",
    "/ping"};

std::string RouteLabel(const std::string& path) {
  if (kRoutes.count(path)) return path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{model}";
  return "other";
}

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kLoading:
      return "loading";
    case Phase::kWarmingUp:
      return "warming_up";
    case Phase::kReady:
      return "ready";
    case Phase::kShuttingDown:
      return "shutting_down";
    case Phase::kFailed:
      return "failed";
  }
  return "unknown";
}

namespace {

ServerOptions WithDefaults(ServerOptions o) {
  if (o.max_connections <= 0) o.max_connections = o.max_concurrent_requests + 16;
  if (o.max_connections_per_client <= 0)
    o.max_connections_per_client = std::max<int64_t>(1, o.max_connections / 2);
  if (o.http_threads <= 0) o.http_threads = static_cast<int>(o.max_connections + 64);
  return o;
}

ConnectionLimits LimitsOf(const ServerOptions& o) {
  ConnectionLimits l;
  l.receive_timeout = o.receive_timeout;
  l.idle_timeout = std::min(o.receive_timeout, l.idle_timeout);
  l.max_connections = o.max_connections;
  l.max_connections_per_client = o.max_connections_per_client;
  return l;
}

// Content-Length, checked before the body is read: "" when acceptable, else the refusal.
std::optional<ApiError> CheckContentLength(const httplib::Request& req, size_t max_body) {
  if (!req.has_header("Content-Length")) return std::nullopt;
  const std::string v = req.get_header_value("Content-Length");
  const bool digits = !v.empty() && v.size() <= 19 &&
                      std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits)
    return BadRequest("Invalid Content-Length header: \"" + v.substr(0, 40) +
                          "\" (expected a non-negative decimal number of bytes).",
                      "", "invalid_content_length");
  if (std::stoull(v) > max_body) return PayloadTooLarge(max_body);
  return std::nullopt;
}

}  // namespace

HttpServer::HttpServer(ServerOptions options) : options_(WithDefaults(std::move(options))) {
  auto guarded = std::make_unique<GuardedServer>(LimitsOf(options_));
  guarded_ = guarded.get();
  http_ = std::move(guarded);
  started_unix_ = static_cast<int64_t>(std::time(nullptr));
}

HttpServer::~HttpServer() { Stop(); }

int64_t HttpServer::open_connections() const {
  return guarded_ != nullptr ? guarded_->open_connections() : 0;
}

std::string HttpServer::url() const {
  return "http://" + options_.host + ":" + std::to_string(bound_port_);
}

void HttpServer::SetPhase(Phase phase, std::string detail) {
  std::lock_guard<std::mutex> lock(mu_);
  // Shutting down and failed are final.
  if (phase_.load() == Phase::kShuttingDown || phase_.load() == Phase::kFailed) return;
  phase_ = phase;
  phase_detail_ = std::move(detail);
}

void HttpServer::AttachEngine(Engine* engine, ServingModel model, nlohmann::json server_info) {
  auto a = std::make_shared<Attached>();
  a->engine = engine;
  a->model = std::move(model);
  a->server_info = std::move(server_info);
  std::lock_guard<std::mutex> lock(mu_);
  attached_ = std::move(a);
}

std::shared_ptr<const HttpServer::Attached> HttpServer::attached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return attached_;
}

std::shared_ptr<const HttpServer::Attached> HttpServer::ReadyOrReply(httplib::Response& res) const {
  const Phase p = phase_.load();
  auto a = attached();
  if (p == Phase::kReady && a && a->engine) return a;
  std::string detail;
  {
    std::lock_guard<std::mutex> lock(mu_);
    detail = phase_detail_;
  }
  ReplyError(res, Unavailable(std::string("The server is not ready: ") + PhaseName(p) +
                              (detail.empty() ? "" : " (" + detail + ")") + "."));
  return nullptr;
}

void HttpServer::ReplyError(httplib::Response& res, const ApiError& e) const {
  res.status = e.status;
  res.set_content(Dump(e.ToJson()), "application/json");
}

void HttpServer::ReplyJson(httplib::Response& res, const nlohmann::json& j, int status) const {
  res.status = status;
  res.set_content(Dump(j), "application/json");
}

int64_t HttpServer::WaitIdle(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  while (in_flight_.load() > 0 && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return in_flight_.load();
}

Status HttpServer::Start() {
  InstallRoutes();
  const size_t threads = static_cast<size_t>(options_.http_threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(10, 0);
  http_->set_write_timeout(10, 0);
  http_->set_keep_alive_timeout(5);
  if (options_.port == 0) {
    bound_port_ = http_->bind_to_any_port(options_.host);
    if (bound_port_ <= 0)
      return Status(StatusCode::kUnavailable, "cannot listen on " + options_.host + " (any port)");
  } else {
    if (!http_->bind_to_port(options_.host, options_.port))
      return Status(StatusCode::kUnavailable, "cannot listen on " + options_.host + ":" +
                                                  std::to_string(options_.port) +
                                                  " (in use, or not an address of this machine)");
    bound_port_ = options_.port;
  }
  guarded_->RaiseListenBacklog(1024);
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  for (int i = 0; i < 500 && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return OkStatus();
}

void HttpServer::Stop() {
  if (!thread_.joinable()) return;
  http_->stop();
  thread_.join();
}

void HttpServer::InstallRoutes() {
  httplib::Server& s = *http_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool probe = req.path == "/health" || req.path == "/metrics";
    if (std::string refusal = GuardedServer::CurrentRefusal(); !refusal.empty() && !probe) {
      ApiError e = Unavailable(refusal);
      e.code = "too_many_connections";
      ReplyError(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (std::optional<ApiError> e = CheckContentLength(req, options_.max_body_bytes)) {
      GuardedServer::CloseCurrentAfterResponse();  // the body stays unread
      ReplyError(res, *e);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (ApplyCors(req, res)) {  // a preflight: answered here, without authentication
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    if (options_.api_key.empty() || probe || req.path == "/ping" || req.path == "/version")
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) == 0 &&
        ConstantTimeEquals(auth.substr(prefix.size()), options_.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    ReplyError(res, Unauthorized());
    return httplib::Server::HandlerResponse::Handled;
  });
  // Fills a JSON body for errors produced by httplib itself (404 route, 413 body too large, 400
  // malformed HTTP); handlers' own error bodies are kept.
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (GuardedServer::CurrentRequestTimedOut()) {
          std::string why = GuardedServer::CurrentRefusal();
          if (why.empty()) why = GuardedServer::CurrentOverLimit();
          ApiError e = BadRequest("The request did not arrive within the receive deadline (" +
                                      std::to_string(options_.receive_timeout.count()) + " ms).",
                                  "", "request_timeout");
          e.status = 408;
          if (!why.empty()) {
            e = Unavailable(why);
            e.code = "too_many_connections";
          }
          ReplyError(res, e);
        } else if (res.status == 413) {
          ReplyError(res, PayloadTooLarge(options_.max_body_bytes));
        } else if (res.status == 404) {
          ReplyError(res, NotFoundError("Not found: " + req.method + " " + req.path, "not_found"));
        } else {
          ApiError e = BadRequest("The HTTP request could not be handled (status " +
                                  std::to_string(res.status) + ").");
          e.status = res.status;
          ReplyError(res, e);
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  s.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown exception";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        LogError("request handler failed: " + what);
        ReplyError(res, InternalError("Internal error: " + what));
      });
  // Counted before the response is written (httplib's post-routing handler, status final), so a
  // client that has read a response is already counted; the logger runs after the write.
  s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    metrics_.CountRequest(RouteLabel(req.path), res.status);
  });
  s.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    LogDebug(req.method + " " + req.path + " " + std::to_string(res.status));
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) { HandleHealth(res); });
  s.Get("/health_generate",
        [this](const httplib::Request&, httplib::Response& res) { HandleHealthGenerate(res); });
  s.Get("/v1/models",
        [this](const httplib::Request& req, httplib::Response& res) { HandleModels(req, res); });
  s.Get("/v1/models/(.+)",
        [this](const httplib::Request& req, httplib::Response& res) { HandleModels(req, res); });
  for (const char* path : {"/server_info", "/get_server_info"})
    s.Get(path, [this](const httplib::Request&, httplib::Response& res) { HandleServerInfo(res); });
  s.Get("/version", [this](const httplib::Request&, httplib::Response& res) {
    ReplyJson(res, {{"version", LUCID_VERSION}});
  });
  s.Get("/ping", [this](const httplib::Request&, httplib::Response& res) { HandlePing(res); });
  s.Post("/ping", [this](const httplib::Request&, httplib::Response& res) { HandlePing(res); });
  s.Get("/get_model_info", [this](const httplib::Request&, httplib::Response& res) {
    auto a = attached();
    if (!a) return ReplyError(res, Unavailable("The model is still loading."));
    ReplyJson(res, {{"model_path", a->model.model_path}, {"is_generation", true}});
  });
  s.Get("/metrics",
        [this](const httplib::Request&, httplib::Response& res) { HandleMetrics(res); });
  for (const char* path : {"/v1/tokenize", "/tokenize"})
    s.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
      HandleTokenize(req, res);
    });
  for (const char* path : {"/v1/detokenize", "/detokenize"})
    s.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
      HandleDetokenize(req, res);
    });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGeneration(static_cast<int>(ApiKind::kCompletions), req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGeneration(static_cast<int>(ApiKind::kChat), req, res);
  });
  s.Post("/generate", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGeneration(static_cast<int>(ApiKind::kGenerate), req, res);
  });
}

void HttpServer::HandleHealth(httplib::Response& res) const {
  const Phase p = phase_.load();
  auto a = attached();
  if (p == Phase::kReady && a && a->engine) {
    const HealthVerdict v = health_.Observe(a->engine->Stats(), Clock::now());
    if (!v.degraded) return ReplyJson(res, {{"status", "ready"}});
    nlohmann::json body = Unavailable("The server is degraded: " + v.reason + ".").ToJson();
    body["error"]["code"] = "degraded";
    body["status"] = "degraded";
    return ReplyJson(res, body, 503);
  }
  if (p == Phase::kReady) return ReplyJson(res, {{"status", "ready"}});
  std::string detail;
  {
    std::lock_guard<std::mutex> lock(mu_);
    detail = phase_detail_;
  }
  nlohmann::json body = Unavailable(std::string("The server is ") + PhaseName(p) +
                                    (detail.empty() ? "" : " (" + detail + ")") + ".")
                            .ToJson();
  body["status"] = PhaseName(p);
  ReplyJson(res, body, 503);
}

void HttpServer::HandleHealthGenerate(httplib::Response& res) {
  auto a = ReadyOrReply(res);
  if (!a) return;
  const int32_t bos = a->model.tokenizer && !a->model.bos_token.empty()
                          ? a->model.tokenizer->TokenToId(a->model.bos_token).value_or(0)
                          : 0;
  Status s = RunTestGeneration(*a->engine, {bos}, 1, std::chrono::seconds(60));
  if (!s.ok()) return ReplyError(res, Unavailable("Test generation failed: " + s.ToString()));
  ReplyJson(res, {{"status", "ok"}});
}

void HttpServer::HandlePing(httplib::Response& res) const {
  if (phase_.load() == Phase::kReady) {
    res.status = 200;
    return;
  }
  ReplyError(res, Unavailable(std::string("The server is ") + PhaseName(phase_.load()) + "."));
}

bool HttpServer::ApplyCors(const httplib::Request& req, httplib::Response& res) const {
  const bool preflight = req.method == "OPTIONS";
  const std::string origin = req.get_header_value("Origin");
  const auto& allowed = options_.allowed_origins;
  const bool any = std::find(allowed.begin(), allowed.end(), "*") != allowed.end();
  if (origin.empty() ||
      !(any || std::find(allowed.begin(), allowed.end(), origin) != allowed.end()))
    return preflight;  // no CORS headers: the browser refuses; a preflight still gets its 204
  res.set_header("Access-Control-Allow-Origin", any ? "*" : origin);
  if (!any) res.set_header("Vary", "Origin");
  res.set_header("Access-Control-Expose-Headers", "X-Lucid-Ignored-Fields");
  if (!preflight) return false;
  res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
  const std::string asked = req.get_header_value("Access-Control-Request-Headers");
  res.set_header("Access-Control-Allow-Headers",
                 asked.empty() ? "Authorization, Content-Type" : asked);
  res.set_header("Access-Control-Max-Age", "600");
  return true;
}

void HttpServer::HandleModels(const httplib::Request& req, httplib::Response& res) const {
  auto a = attached();
  if (!a) return ReplyError(res, Unavailable("The model is still loading."));
  nlohmann::json card = {{"id", a->model.name},         {"object", "model"},
                         {"created", started_unix_},    {"owned_by", "lucid"},
                         {"root", a->model.model_path}, {"max_model_len", a->model.context_length}};
  if (req.matches.size() > 1) {
    if (req.matches[1].str() != a->model.name)
      return ReplyError(res,
                        NotFoundError("The model '" + req.matches[1].str() + "' does not exist.",
                                      "model_not_found"));
    return ReplyJson(res, card);
  }
  ReplyJson(res, {{"object", "list"}, {"data", nlohmann::json::array({card})}});
}

void HttpServer::HandleServerInfo(httplib::Response& res) const {
  auto a = attached();
  nlohmann::json j = {
      {"version", LUCID_VERSION}, {"status", PhaseName(phase_.load())}, {"started", started_unix_}};
  if (a) {
    j["model"] = {{"name", a->model.name},
                  {"path", a->model.model_path},
                  {"context_length", a->model.context_length},
                  {"vocab_size", a->model.vocab_size},
                  {"tokenizer", a->model.tokenizer != nullptr},
                  {"chat_template", a->model.chat_template != nullptr}};
    for (auto it = a->server_info.begin(); it != a->server_info.end(); ++it) j[it.key()] = *it;
    if (a->engine) {
      const EngineStats st = a->engine->Stats();
      j["engine_stats"] = {{"running", st.running},
                           {"queued", st.queued},
                           {"pages_total", st.pages_total},
                           {"pages_used", st.pages_used},
                           {"pages_cached", st.pages_cached},
                           {"cpu_team_threads", st.cpu_team_threads},
                           {"cpu_team_lowerings", st.cpu_team_lowerings}};
    }
  }
  ReplyJson(res, j);
}

void HttpServer::HandleMetrics(httplib::Response& res) const {
  auto a = attached();
  EngineStats st;
  const bool have = a && a->engine;
  if (have) st = a->engine->Stats();
  res.status = 200;
  PrometheusWriter conn;
  const HealthVerdict health = have ? health_.Observe(st, Clock::now()) : HealthVerdict{};
  conn.Counter("lucid_request_failures_total", "Engine requests failed, by cause.",
               {{{{"cause", "numerics"}}, double(st.requests_numeric_error)},
                {{{"cause", "other"}}, double(st.requests_error - st.requests_numeric_error)}});
  conn.Gauge("lucid_server_degraded",
             "1 while most recent requests fail the numerics guard (/health answers 503).",
             health.degraded ? 1 : 0);
  conn.Gauge("lucid_http_connections_open", "Admitted HTTP connections open now.",
             double(guarded_->open_connections()));
  conn.Counter("lucid_http_connections_refused_total",
               "Connections beyond the total or per-client limit (answered 503 but for probes).",
               double(guarded_->refused_connections()));
  conn.Counter("lucid_http_request_timeouts_total",
               "Requests that did not arrive whole within the receive deadline (408).",
               double(guarded_->timed_out_requests()));
  res.set_content(
      metrics_.Render(have ? &st : nullptr, in_flight_.load(), phase_.load() == Phase::kReady) +
          metrics_.RenderPeerAliases(have ? &st : nullptr, a ? a->model.name : "") + conn.text(),
      "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace lucid::server
