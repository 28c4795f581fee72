// ServerMetrics: what `GET /metrics` reports. The HTTP side counts requests by route and status
// and observes latencies; the engine's counters and gauges (EngineStats) are read at scrape time.
//
// Families (all prefixed lucid_):
//   http_requests_total{route,status}            counter  every answered HTTP request
//   prompt_tokens_total, generation_tokens_total counter  from the engine
//   prefix_cache_hit_tokens_total                counter  prompt tokens served from the cache
//   engine_requests_total{outcome}               counter  ok / error / aborted
//   time_to_first_token_seconds                  histogram arrival -> first generated token
//   inter_token_latency_seconds                  histogram between streamed tokens
//   e2e_request_latency_seconds                  histogram arrival -> final event
//   num_requests_running, num_requests_waiting   gauge    from the engine
//   http_requests_in_flight                      gauge    generation requests held by HTTP
//   kv_pages_total / _used / _free / _cached     gauge    from the engine's pool
//   server_ready                                 gauge    1 once warm-up succeeded
// RenderPeerAliases adds the same measurements under the names that dashboards built for vLLM
// (vllm:) and SGLang (sglang:) query, each with a model_name label (docs/SERVING.md maps them).
// Thread-safety: every method is safe to call from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "runtime/engine.h"
#include "server/prometheus.h"

namespace lucid::server {

class ServerMetrics {
 public:
  ServerMetrics();

  void CountRequest(const std::string& route, int status);
  void ObserveTtft(double seconds) { ttft_.Observe(seconds); }
  void ObserveInterToken(double seconds) { itl_.Observe(seconds); }
  void ObserveE2e(double seconds) { e2e_.Observe(seconds); }

  // The exposition text; `stats` is null before the engine exists.
  std::string Render(const EngineStats* stats, int64_t in_flight, bool ready) const;
  // The vllm: and sglang: alias families (appended to Render's text by /metrics).
  std::string RenderPeerAliases(const EngineStats* stats, const std::string& model_name) const;

  // Requests counted for (route, status) so far (tests).
  uint64_t RequestCount(const std::string& route, int status) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  Histogram ttft_, itl_, e2e_;
};

}  // namespace lucid::server
